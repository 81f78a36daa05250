"""Attribution rules -> SQL CASE expressions, spliced into the queries' syntax tree.

Queries in `queries/*.sql` contain reviewed slots, written as function calls so that each file
still parses as BigQuery SQL:

- `GPUCOST_RULE()`: the name of the first rule that matches the row (NULL when none does); reads
  the columns `service_id`, `service_description`, `sku_id`, `sku_description`, `cost_type` and
  `transaction_type` of the surrounding SELECT;
- `GPUCOST_SUBCATEGORY(rule)`: that rule's `category.subcategory` (`other` when no rule matched);
- `GPUCOST_SKU_PRICING_MODEL(rule)`: the pricing model the rule implies, or NULL;
- `GPUCOST_CUD_CREDIT(c)` / `GPUCOST_SUD_CREDIT(c)`: whether the credit `c` (an element of the
  export's `credits`, as `UNNEST(credits) AS c` names it) is a committed-use or a sustained-use
  discount: one definition (`CREDIT_KINDS`) for every query that splits credits;
- the fragments of `FRAGMENTS`, one reviewed definition each of what several queries must compute
  alike: `GPUCOST_USD_MICROS(amount)` / `GPUCOST_MICROS(amount)` (an amount as integer micros of
  USD / of the export's currency), `GPUCOST_PRICING_MODEL(rule, cud_micros)` (a row's pricing
  model) and `GPUCOST_USAGE_WINDOW()` (the partition and usage-time filter, `GPUCOST_LOAD_DAYS()`
  its partition part).

`render_query` replaces them with `CASE` expressions built as sqlglot nodes. Rule patterns and
names only ever enter the SQL as string literals (`exp.Literal.string`), which sqlglot escapes for
each dialect, so a rule from config cannot change the query's structure. Patterns are checked with
RE2 (the regex engine of both BigQuery and DuckDB) before any query runs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence

import duckdb
import sqlglot
from sqlglot import exp

from monitor.attribution.rules import BUILTIN_RULES, Rule
from monitor.config import AttributionRule
from monitor.errors import ConfigError
from monitor.schema import TABLE_NAME
from monitor.scratch import scratch
from monitor.sql import RULE_INPUTS, bigquery_numeric, for_bigquery, for_duckdb

__all__ = [
    "SLOTS",
    "classify",
    "compile_rules",
    "config_rules",
    "query_params",
    "render_query",
    "render_sql",
    "rule_case",
]

#: Which credits are a commitment's or sustained use's, by the export's `credits.type` (resource CUDs
#: `COMMITTED_USAGE_DISCOUNT`, legacy spend-based `COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE`, new spend-based
#: `FEE_UTILIZATION_OFFSET`, `SUSTAINED_USAGE_DISCOUNT`: the export schema's credit types, see
#: ../shared/reference/gcp.md); rows of older exports have no `type`, so the credit's name decides.
#: Written over the credit `c` in BigQuery SQL; the slot's argument takes its place.
CREDIT_KINDS = {
    "GPUCOST_CUD_CREDIT": (
        "STARTS_WITH(IFNULL(c.type, ''), 'COMMITTED_USAGE_DISCOUNT') OR c.type = 'FEE_UTILIZATION_OFFSET'"
        " OR (c.type IS NULL AND STARTS_WITH(LOWER(IFNULL(c.name, '')), 'committed'))"
    ),
    "GPUCOST_SUD_CREDIT": (
        "c.type = 'SUSTAINED_USAGE_DISCOUNT' OR (c.type IS NULL AND STARTS_WITH(LOWER(IFNULL(c.name, '')), 'sustained'))"
    ),
}
#: SQL fragments several queries share, as `slot: (parameters, BigQuery SQL)`: a parameter is written
#: as a bare column in the text and the slot's argument takes its place, so `GPUCOST_USD_MICROS(c.amount)`
#: is the first fragment with `amount` replaced by `c.amount`. A fragment may use other slots.
#: - `GPUCOST_USD_MICROS(amount)`: integer micros of USD; the export's amounts are in the billing
#:   account's currency `currency` and `currency_conversion_rate` is that currency per USD (the
#:   export schema, ../shared/reference/gcp.md: "cost / rate = USD"); a NULL or 0 rate (no rate
#:   recorded) counts as 1, so such a row's amount is taken as USD.
#:   Reads `currency_conversion_rate` of the surrounding SELECT.
#: - `GPUCOST_MICROS(amount)`: integer micros in the export's own currency, unconverted (FOCUS
#:   BilledCost is in the billing currency; `report` and `skus` show what the invoice shows).
#: - `GPUCOST_PRICING_MODEL(rule, cud_micros)`: NULL outside `compute.*`; else the model the rule
#:   implies, or `committed` when the row carries CUD credits, else `on_demand`.
#: - `GPUCOST_USAGE_WINDOW()`: rows whose usage starts in [@usage_start, @usage_end), read only from
#:   `GPUCOST_LOAD_DAYS()`, the load days (ingestion-time partitions) that can hold them: from the
#:   day before @usage_start's day up to @partition_end, widened to at least 2 days past @usage_end
#:   (rows load hours to days after their usage), so BigQuery prunes partitions alike for every
#:   query; `GPUCOST_LOAD_DAYS()` alone is what a benchmark counts as the rows a query scans.
FRAGMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "GPUCOST_USD_MICROS": (
        ("amount",),
        "CAST(ROUND(amount / IFNULL(NULLIF(currency_conversion_rate, 0), 1) * 1000000) AS INT64)",
    ),
    "GPUCOST_MICROS": (("amount",), "CAST(ROUND(amount * 1000000) AS INT64)"),
    "GPUCOST_PRICING_MODEL": (
        ("rule", "cud_micros"),
        "CASE WHEN STARTS_WITH(GPUCOST_SUBCATEGORY(rule), 'compute.')"
        " THEN IFNULL(GPUCOST_SKU_PRICING_MODEL(rule), IF(cud_micros <> 0, 'committed', 'on_demand')) END",
    ),
    "GPUCOST_LOAD_DAYS": (
        (),
        "_PARTITIONTIME >= TIMESTAMP_SUB(TIMESTAMP_TRUNC(@usage_start, DAY), INTERVAL 1 DAY)"
        " AND _PARTITIONTIME < GREATEST("
        "@partition_end, TIMESTAMP_ADD(TIMESTAMP_TRUNC(@usage_end, DAY), INTERVAL 3 DAY))",
    ),
    "GPUCOST_USAGE_WINDOW": (
        (),
        "GPUCOST_LOAD_DAYS() AND usage_start_time >= @usage_start AND usage_start_time < @usage_end",
    ),
}
SLOTS = ("GPUCOST_RULE", "GPUCOST_SUBCATEGORY", "GPUCOST_SKU_PRICING_MODEL", *CREDIT_KINDS, *FRAGMENTS)
_DIALECTS = {"bigquery", "duckdb"}


def config_rules(rules: Iterable[AttributionRule]) -> tuple[Rule, ...]:
    """`[attribution] rules` as `Rule`s named `attribution.rules[i]`, validated for RE2."""
    out = []
    for i, r in enumerate(rules):
        name = f"attribution.rules[{i}]"  # validated as the config loaded (a condition at least)
        out.append(
            Rule(
                name=name,
                category=r.category,
                sku_regex=r.sku_regex,
                service=r.service,
                sku_id=r.sku_id,
                pricing_model=r.pricing_model,
            )
        )
    return tuple(out)


def compile_rules(overrides: Iterable[AttributionRule] = ()) -> tuple[Rule, ...]:
    """Config overrides first, then the built-in rules: the order the CASE tests them in."""
    rules = (*config_rules(overrides), *BUILTIN_RULES)
    for rule in rules:
        _check_patterns(rule)
    return rules


def _check_patterns(rule: Rule) -> None:
    for field in ("sku_regex", "service_regex", "transaction_type_regex"):
        pattern = getattr(rule, field)
        if pattern is not None:
            _check_re2(rule.name, field, pattern)


@functools.cache
def _re2() -> tuple[duckdb.DuckDBPyConnection, threading.Lock]:
    """One DuckDB session for every pattern check (a connection each cost 17 ms, 0.7 s a run)."""
    return scratch(), threading.Lock()


@functools.cache
def _check_re2(name: str, field: str, pattern: str) -> None:
    """Compile `pattern` with DuckDB's RE2: Python's `re` accepts look-arounds RE2 rejects."""
    conn, lock = _re2()
    try:
        with lock:
            conn.execute("SELECT regexp_matches('', $1)", [pattern]).fetchall()
    except duckdb.Error as e:
        detail = str(e).strip().splitlines()[0]
        raise ConfigError(
            f"{name}.{field}: {pattern!r} is not valid RE2, the regex dialect of BigQuery and DuckDB "
            f"(no look-arounds or back-references): {detail}"
        ) from None


def _col(name: str) -> exp.Column:
    return exp.column(name)


def _condition(rule: Rule) -> exp.Expression:
    """The rule's conditions ANDed; every constant is a string literal."""
    parts: list[exp.Expression] = []
    if rule.cost_type is not None:
        parts.append(exp.EQ(this=_col("cost_type"), expression=exp.Literal.string(rule.cost_type)))
    if rule.service is not None:
        by_name = exp.EQ(
            this=exp.Lower(this=_col("service_description")),
            expression=exp.Literal.string(rule.service.lower()),
        )
        by_id = exp.EQ(this=_col("service_id"), expression=exp.Literal.string(rule.service))
        parts.append(exp.Paren(this=exp.or_(by_name, by_id)))
    if rule.service_regex is not None:
        parts.append(_regex("service_description", rule.service_regex))
    if rule.sku_id is not None:
        parts.append(exp.EQ(this=_col("sku_id"), expression=exp.Literal.string(rule.sku_id)))
    if rule.sku_regex is not None:
        parts.append(_regex("sku_description", rule.sku_regex))
    if rule.transaction_type_regex is not None:
        parts.append(_regex("transaction_type", rule.transaction_type_regex))
    return exp.and_(*parts)


def _regex(column: str, pattern: str) -> exp.Expression:
    # NULL-safe: a NULL column never matches (a CASE treats NULL as false anyway).
    return exp.RegexpLike(this=_col(column), expression=exp.Literal.string(pattern))


def rule_case(rules: Sequence[Rule]) -> exp.Case:
    """`CASE WHEN <cond> THEN '<rule name>' ... END`: the first matching rule's name, else NULL."""
    case = exp.Case()
    for rule in rules:
        # in place: `when` copies the CASE built so far by default, each rule's copy longer than the
        # last (22 ms for the 39 built-in rules, 4 ms in place, the same SQL)
        case = case.when(_condition(rule), exp.Literal.string(rule.name), copy=False)
    return case


def _lookup(arg: exp.Expression, pairs: dict[str, str | None], default: str | None) -> exp.Expression:
    """`CASE <arg> WHEN 'name' THEN 'value' ... ELSE default END`, skipping pairs equal to default."""
    null = exp.Null()
    case = exp.Case(this=arg.copy())
    wanted = [(k, v) for k, v in pairs.items() if v != default]
    if not wanted:
        return exp.Literal.string(default) if default is not None else null
    for key, value in wanted:
        case = case.when(exp.Literal.string(key), exp.Literal.string(value) if value else null)
    return case.else_(exp.Literal.string(default) if default is not None else null)


def _fill_slots(tree: exp.Expression, rules: tuple[Rule, ...]) -> exp.Expression:
    subcategories = {r.name: r.category for r in rules}
    models = {r.name: (r.pricing_model.value if r.pricing_model else None) for r in rules}
    rule_expr = rule_case(rules)

    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Anonymous) or node.name.upper() not in SLOTS:
            return node
        slot, args = node.name.upper(), node.expressions
        if slot in FRAGMENTS:
            # `transform` does not descend into a replacement: fill the fragment's own slots here.
            return _fragment(slot, args, node.parent).transform(swap)
        if slot in CREDIT_KINDS:
            if len(args) != 1 or not isinstance(args[0], exp.Column | exp.Identifier):  # in a lambda
                raise ConfigError(f"query slot {slot}(credit) takes the UNNEST alias of a credit")
            return _credit_kind(slot, args[0].name)
        if slot == "GPUCOST_RULE":
            if args:
                raise ConfigError(f"query slot {slot}() takes no argument")
            return rule_expr.copy()
        if len(args) != 1:
            raise ConfigError(f"query slot {slot}(rule) takes exactly one argument")
        if slot == "GPUCOST_SUBCATEGORY":
            return _lookup(args[0], subcategories, "other")
        return _lookup(args[0], models, None)

    return tree.transform(swap)


#: Nodes that bind tighter than any operator: spliced in as they are, anything else in parentheses.
#: (sqlglot makes AND / OR `Func`s and `a.b` a `Binary`, hence names first, then no operators.)
_NAMES = (exp.Column, exp.Dot, exp.Identifier)
_ATOMIC = (exp.Func, exp.Literal, exp.Paren, exp.Parameter, exp.Null)


def _atomic(node: exp.Expression) -> exp.Expression:
    if isinstance(node, _NAMES) or (
        isinstance(node, _ATOMIC) and not isinstance(node, exp.Binary | exp.Unary)
    ):
        return node
    return exp.Paren(this=node)


@functools.cache
def _fragment_tree(slot: str) -> exp.Expression:
    return sqlglot.parse_one(FRAGMENTS[slot][1], read="bigquery")


def _fragment(slot: str, args: Sequence[exp.Expression], parent: exp.Expression | None) -> exp.Expression:
    """`FRAGMENTS[slot]` with each parameter replaced by its argument, parenthesized where the
    surroundings could otherwise re-associate it (`WHERE` and `AND` keep a conjunction as it is)."""
    params = FRAGMENTS[slot][0]
    if len(args) != len(params):
        raise ConfigError(
            f"query slot {slot}({', '.join(params)}) takes {len(params)} argument(s), got {len(args)}"
        )
    by_name = dict(zip(params, args, strict=True))

    def bind(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in by_name:
            return _atomic(by_name[node.name].copy())
        return node

    body = _fragment_tree(slot).copy().transform(bind)
    if isinstance(parent, exp.Where) or (isinstance(parent, exp.And) and isinstance(body, exp.And)):
        return body
    return _atomic(body)


@functools.cache
def _credit_predicate(slot: str) -> exp.Expression:
    return sqlglot.parse_one(CREDIT_KINDS[slot], read="bigquery")


def _credit_kind(slot: str, alias: str) -> exp.Expression:
    """`CREDIT_KINDS[slot]` over the credit named `alias`, parenthesized."""

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table == "c":
            return exp.column(node.name, table=alias)
        return node

    return exp.Paren(this=_credit_predicate(slot).copy().transform(rename))


@functools.lru_cache(maxsize=64)
def _render(name: str, dialect: str, table: str, rules: tuple[Rule, ...], vectorize: bool = True) -> str:
    base = (
        for_bigquery(name, table) if dialect == "bigquery" else for_duckdb(name, table, vectorize=vectorize)
    )
    return _filled(base, dialect, rules)


def _filled(sql: str, dialect: str, rules: tuple[Rule, ...]) -> str:
    """`sql`, already in `dialect`, with every slot filled: the last step of every rendering."""
    return _fill_slots(sqlglot.parse_one(sql, read=dialect), rules).sql(dialect=dialect, pretty=True)


def render_sql(sql: str, dialect: str, *, rules: Sequence[Rule] | None = None) -> str:
    """Any BigQuery SQL with slots, for `dialect`, the way `render_query` renders a shipped query
    (minus the table swap and DuckDB's UNNEST rewrite): for tests and benchmarks that must compute
    exactly what the queries compute."""
    if dialect not in _DIALECTS:
        raise ValueError(f"dialect must be one of {sorted(_DIALECTS)}, got {dialect!r}")
    tree = sqlglot.parse_one(sql, read="bigquery")
    base = (bigquery_numeric(tree) if dialect == "duckdb" else tree).sql(dialect=dialect, pretty=True)
    return _filled(base, dialect, tuple(BUILTIN_RULES if rules is None else rules))


def render_query(
    name: str,
    dialect: str,
    *,
    table: str = TABLE_NAME,
    rules: Sequence[Rule] | None = None,
    vectorize: bool = True,
) -> str:
    """The named query for `dialect` ("bigquery" | "duckdb") reading `table`, slots filled.

    `rules` defaults to the built-in rules; pass `compile_rules(cfg.attribution.rules)` to put the
    config overrides first. Both engines get the same tree, so they attribute identically.
    `vectorize` (DuckDB only): `monitor.sql.vectorize_unnest_aggregates`; False only to compare.
    """
    if dialect not in _DIALECTS:
        raise ValueError(f"dialect must be one of {sorted(_DIALECTS)}, got {dialect!r}")
    return _render(name, dialect, table, tuple(BUILTIN_RULES if rules is None else rules), vectorize)


@functools.cache
def query_params(name: str) -> frozenset[str]:
    """The `@parameters` a query uses, so a source passes exactly those (BigQuery and DuckDB both
    reject or mis-bind surplus parameters)."""
    return _parameters(sqlglot.parse_one(for_bigquery(name, "p.d.t"), read="bigquery"))


def _parameters(tree: exp.Expression) -> frozenset[str]:
    """The `@parameters` in `tree` and in the fragments its slots expand to (the rule CASEs have
    none); cheaper than rendering the whole query with its rules."""
    names = {p.name for p in tree.find_all(exp.Parameter)}
    for slot in tree.find_all(exp.Anonymous):
        if slot.name.upper() in FRAGMENTS:
            names |= _parameters(_fragment_tree(slot.name.upper()))
    return frozenset(names)


def classify(
    rules: Sequence[Rule],
    *,
    service_id: str | None = None,
    service: str | None = None,
    sku_id: str | None = None,
    sku: str | None = None,
    cost_type: str = "regular",
    transaction_type: str | None = None,
) -> Rule | None:
    """The first rule matching one SKU, evaluated by DuckDB with the very CASE the queries use.

    For tests and `gpucost skus`-style audits of a single SKU; queries classify in the engine.
    """
    tree = exp.select(rule_case(tuple(rules)).as_("rule")).from_(
        exp.select(
            *(exp.cast(exp.Placeholder(this=k), exp.DataType.build("VARCHAR")).as_(k) for k in RULE_INPUTS)
        ).subquery("t")
    )
    values = {
        "service_id": service_id,
        "service_description": service,
        "sku_id": sku_id,
        "sku_description": sku,
        "cost_type": cost_type,
        "transaction_type": transaction_type,
    }
    with scratch() as conn:
        row = conn.execute(tree.sql(dialect="duckdb"), values).fetchone()
    name = row[0] if row else None
    return next((r for r in rules if r.name == name), None)

