"""The SQL of `queries/*.sql`: BigQuery Standard SQL, rendered for BigQuery or DuckDB.

Queries are written once, in BigQuery's dialect, against the table `billing_export` and with named
`@parameters`. The only thing ever substituted is that table name, replaced in the parsed syntax
tree (never by string formatting) with the validated name from config. For the embedded engine the
same tree is transpiled to DuckDB by sqlglot.
"""

from __future__ import annotations

import functools
from importlib import resources

import sqlglot
from sqlglot import exp

from monitor.errors import ConfigError
from monitor.schema import TABLE_NAME

__all__ = ["for_bigquery", "for_duckdb", "load_query", "query_names"]


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
def for_duckdb(name: str, table: str = TABLE_NAME) -> str:
    """The same query transpiled to DuckDB; `@param` becomes `$param`."""
    tree = _parsed(name) if table == TABLE_NAME else _with_table(_parsed(name), table, "duckdb")
    return tree.sql(dialect="duckdb", pretty=True)
