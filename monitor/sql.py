"""The SQL of `queries/*.sql`: BigQuery Standard SQL, rendered for BigQuery or DuckDB.

Queries are written once, in BigQuery's dialect, against the table `billing_export` and with named
`@parameters`. The only thing ever substituted is that table name, replaced in the parsed syntax
tree (never by string formatting) with the validated name from config. For the embedded engine the
same tree is transpiled to DuckDB by sqlglot.

Two engine-local rewrites keep DuckDB fast. On the export's nested columns, BigQuery's idiom for
reading a label or summing credits, a scalar subquery over `UNNEST(array) AS x` with one aggregate
(`MAX`, `MIN`, `SUM`, `STRING_AGG ... ORDER BY`) and an optional WHERE, is correlated, and DuckDB
runs each one as a join against the whole table: on 507k export rows the attribution query spent 36
of its 41 s there (measured, 2 cores). For DuckDB the same subquery becomes the list functions that
compute it element-wise in one pass (`LIST_FILTER`, `LIST_TRANSFORM`, `LIST_MAX`, ...), with the same
result, NULL for no element included ("List Functions", https://duckdb.org/docs/sql/functions/list).
Anything that does not match the idiom exactly is left as written. A second rewrite runs the
attribution rules once per distinct SKU instead of once per row (`classify_distinct_skus`).
"""

from __future__ import annotations

import functools
from importlib import resources

import sqlglot
from sqlglot import exp

from monitor.errors import ConfigError
from monitor.schema import TABLE_NAME

__all__ = [
    "RULE_INPUTS",
    "bigquery_numeric",
    "classify_distinct_skus",
    "for_bigquery",
    "for_duckdb",
    "load_query",
    "query_names",
    "vectorize_unnest_aggregates",
]


def query_names() -> list[str]:
    """Every query shipped in the `queries` package, without the `.sql` suffix."""
    return sorted(
        p.name.removesuffix(".sql") for p in resources.files("queries").iterdir() if p.name.endswith(".sql")
    )


@functools.cache
def load_query(name: str) -> str:
    try:
        return (resources.files("queries") / f"{name}.sql").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"unknown query {name!r}; shipped queries: {', '.join(query_names())}") from None


@functools.cache
def _parsed(name: str) -> exp.Expression:
    return sqlglot.parse_one(load_query(name), read="bigquery")


def _with_table(tree: exp.Expression, table: str, dialect: str) -> exp.Expression:
    parts = table.split(".")
    if len(parts) == 3:
        target = exp.table_(parts[2], db=parts[1], catalog=parts[0], quoted=True)
    else:
        target = exp.to_table(table, dialect=dialect)

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.name == TABLE_NAME and not node.args.get("db"):
            new = target.copy()
            if node.alias:
                new.set("alias", node.args["alias"].copy())
            return new
        return node

    return tree.copy().transform(swap)


def for_bigquery(name: str, table: str) -> str:
    """The query for BigQuery, reading `table` (`project.dataset.table`, validated by config)."""
    tree = _with_table(_parsed(name), table, "bigquery")
    return tree.sql(dialect="bigquery", pretty=True)


@functools.cache
def for_duckdb(name: str, table: str = TABLE_NAME, *, vectorize: bool = True) -> str:
    """The same query transpiled to DuckDB; `@param` becomes `$param`. `vectorize=False` keeps the
    query as written, without DuckDB's rewrites (the tests compare both forms)."""
    tree = _parsed(name) if table == TABLE_NAME else _with_table(_parsed(name), table, "duckdb")
    if vectorize:
        tree = classify_distinct_skus(vectorize_unnest_aggregates(plain_regexp_extract(tree)))
    return bigquery_numeric(tree).sql(dialect="duckdb", pretty=True)


def bigquery_numeric(tree: exp.Expression) -> exp.Expression:
    """BigQuery's NUMERIC (and its alias DECIMAL) written without a precision is DECIMAL(38, 9)
    (https://cloud.google.com/bigquery/docs/reference/standard-sql/data-types#decimal_types): said
    so for DuckDB, whose bare DECIMAL is DECIMAL(18, 3), as sqlglot would write it.

    A cast of a FLOAT64 to it is exact in BigQuery; DuckDB scales the double by 10^9 in floating
    point first, which loses digits above about 10^7 (123456789012 bytes came out as
    123456789011.999997952). So the whole part and the fraction are cast apart: the whole part
    through HUGEINT (exact below 2^53), the fraction (exact in a double) alone."""

    def decimal() -> exp.DataType:
        return exp.DataType.build("DECIMAL(38, 9)", dialect="duckdb")

    def bare(node: exp.Expression) -> bool:
        return (
            isinstance(node, exp.DataType) and node.this == exp.DataType.Type.DECIMAL and not node.expressions
        )

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Cast) and bare(node.to):
            x = node.this
            hugeint = exp.DataType.build("HUGEINT", dialect="duckdb")
            whole = exp.Cast(this=exp.Cast(this=exp.func("TRUNC", x.copy()), to=hugeint), to=decimal())
            part = exp.Cast(this=exp.Sub(this=x.copy(), expression=exp.func("TRUNC", x.copy())), to=decimal())
            return exp.Paren(this=exp.Add(this=whole, expression=part))
        if bare(node):
            return decimal()
        return node

    return tree.transform(fix)


#: What `GPUCOST_RULE()` reads (`monitor.attribution.compile`): a row's rule is a function of these.
RULE_INPUTS = (
    "service_id",
    "service_description",
    "sku_id",
    "sku_description",
    "cost_type",
    "transaction_type",
)

_PER_SKU = f"""
SELECT e.*, k.rule
FROM export_rows AS e
JOIN (
  SELECT s.*, GPUCOST_RULE() AS rule
  FROM (SELECT DISTINCT {", ".join(RULE_INPUTS)} FROM export_rows) AS s
) AS k
ON {" AND ".join(f"e.{c} IS NOT DISTINCT FROM k.{c}" for c in RULE_INPUTS)}
"""


def classify_distinct_skus(tree: exp.Expression) -> exp.Expression:
    """Every `SELECT e.*, GPUCOST_RULE() AS rule FROM export_rows AS e` as the rule of each distinct
    (service, SKU, cost type, transaction type) joined back to the rows (NULL-safe, so every row
    finds its own): the rules' CASE of RE2 matches runs a few hundred times instead of once per row,
    which was half of the attribution query (2.1 to 1.1 s on 521k export rows, measured). DuckDB
    only: BigQuery would scan the table twice for the two reads of `export_rows`, and bills bytes."""

    swapped = False

    def swap(node: exp.Expression) -> exp.Expression:
        nonlocal swapped
        if isinstance(node, exp.Select) and _rules_each_row(node):
            swapped = True
            return sqlglot.parse_one(_PER_SKU, read="bigquery")
        return node

    tree = tree.transform(swap)
    if swapped:
        # Read twice now, `export_rows` would be materialized whole, every export row with all its
        # columns (2.8 GB spilled at 7.4 M rows, bench scale 48), when the distinct read needs the
        # six rule inputs: inlined, the hourly query took 15.1 s instead of 24.2 s there.
        for cte in tree.find_all(exp.CTE):
            if cte.alias == "export_rows":
                cte.set("materialized", False)
    return tree


def plain_regexp_extract(tree: exp.Expression) -> exp.Expression:
    """Every `NULLIF(REGEXP_EXTRACT(s, re), '')` as DuckDB's own `regexp_extract(s, re, 1)` under
    the same NULLIF. sqlglot writes BigQuery's NULL-when-no-match as the first of all the matches
    (`REGEXP_EXTRACT_ALL(...)[1]`); DuckDB's function gives '' instead, which the NULLIF turns
    into NULL, so the two agree on every string. The instance id of every export row: 13.5 s to
    11.3 s of the hourly query at bench scale 48 (7.4 M rows)."""

    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Nullif):
            return node
        inner, empty = node.this, node.expression
        if not (isinstance(inner, exp.RegexpExtract) and isinstance(empty, exp.Literal) and empty.this == ""):
            return node
        if any(inner.args.get(k) is not None for k in ("position", "occurrence", "parameters")):
            return node
        group = inner.args.get("group") or exp.Literal.number(1)
        pattern = inner.expression
        if isinstance(pattern, exp.RawString):
            pattern = exp.Literal.string(pattern.this)
        plain = _fn("REGEXP_EXTRACT", inner.this.copy(), pattern.copy(), group.copy())
        return exp.Nullif(this=plain, expression=empty.copy())

    return tree.transform(swap)


def _rules_each_row(sel: exp.Select) -> bool:
    """`sel` is exactly `SELECT e.*, GPUCOST_RULE() AS rule FROM export_rows AS e`."""
    if any(
        sel.args.get(k) for k in ("joins", "where", "group", "having", "order", "limit", "distinct", "with")
    ):
        return False
    source = sel.args.get("from_") or sel.args.get("from")
    table = source.this if source is not None else None
    if not (isinstance(table, exp.Table) and table.name == "export_rows" and table.alias == "e"):
        return False
    star, rule = sel.expressions if len(sel.expressions) == 2 else (None, None)
    return (
        isinstance(star, exp.Column)
        and isinstance(star.this, exp.Star)
        and star.table == "e"
        and isinstance(rule, exp.Alias)
        and rule.alias == "rule"
        and isinstance(rule.this, exp.Anonymous)
        and rule.this.name.upper() == "GPUCOST_RULE"
    )


_LIST_AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Max: "LIST_MAX",
    exp.Min: "LIST_MIN",
    exp.Sum: "LIST_SUM",
}


def _fn(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _lambda(var: str, body: exp.Expression) -> exp.Lambda:
    return exp.Lambda(this=body.copy(), expressions=[exp.to_identifier(var)])


def _unnest_aggregate(node: exp.Subquery) -> exp.Expression | None:
    """The list-function form of `(SELECT AGG(f(x)) FROM UNNEST(arr) AS x [WHERE p(x)])`, or None
    when `node` is anything else."""
    sel = node.this
    if not isinstance(sel, exp.Select) or len(sel.expressions) != 1 or node.alias:
        return None
    if any(sel.args.get(k) for k in ("joins", "group", "having", "order", "limit", "distinct", "with")):
        return None
    source = sel.args.get("from_") or sel.args.get("from")
    unnest = source.this if source is not None else None
    if not isinstance(unnest, exp.Unnest) or unnest.args.get("offset") or len(unnest.expressions) != 1:
        return None
    alias = unnest.args.get("alias")
    columns = alias.columns if alias is not None else []
    if len(columns) != 1 or (alias is not None and alias.this):
        return None
    var, items = columns[0].name, unnest.expressions[0]
    where = sel.args.get("where")
    kept = _fn("LIST_FILTER", items.copy(), _lambda(var, where.this)) if where is not None else items.copy()
    agg = sel.expressions[0]
    if type(agg) in _LIST_AGGREGATES:
        return _fn(_LIST_AGGREGATES[type(agg)], _fn("LIST_TRANSFORM", kept, _lambda(var, agg.this)))
    if isinstance(agg, exp.GroupConcat) and isinstance(agg.this, exp.Order):
        order = agg.this.expressions
        if len(order) != 1 or order[0].args.get("desc"):
            return None
        pair = exp.Struct(
            expressions=[
                exp.PropertyEQ(this=exp.to_identifier("k"), expression=order[0].this.copy()),
                exp.PropertyEQ(this=exp.to_identifier("v"), expression=agg.this.this.copy()),
            ]
        )
        ordered = _fn(
            "LIST_SORT", _fn("LIST_TRANSFORM", kept, _lambda(var, pair)), exp.Literal.string("ASC"),
            exp.Literal.string("NULLS FIRST"),
        )  # fmt: skip
        values = _fn("LIST_FILTER", _fn("LIST_TRANSFORM", ordered, _lambda("p", exp.column("v", "p"))),
                     _lambda("s", exp.Not(this=exp.Is(this=exp.column("s"), expression=exp.Null()))))  # fmt: skip
        separator = agg.args.get("separator") or exp.Literal.string(",")
        joined = _fn("ARRAY_TO_STRING", values.copy(), separator.copy())
        empty = exp.EQ(this=_fn("LEN", values), expression=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=joined)  # STRING_AGG of nothing
    return None


def vectorize_unnest_aggregates(tree: exp.Expression) -> exp.Expression:
    """Every scalar `(SELECT AGG(..) FROM UNNEST(arr) AS x [WHERE ..])` as DuckDB list functions."""

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Subquery):
            return _unnest_aggregate(node) or node
        return node

    return tree.transform(swap)
