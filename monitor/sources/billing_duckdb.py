"""`DuckDBBillingSource`: the queries of `queries/`, transpiled by sqlglot, on the embedded table.

The same BigQuery SQL the BigQuery source runs, with the same attribution CASE spliced in, so the
two engines agree row for row. The connection comes from `monitor.sources.duckdb_conn.
open_billing_db` (session time zone UTC, table created from the schema).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb

from monitor.attribution.compile import query_params, render_query
from monitor.attribution.rules import Rule
from monitor.errors import ConfigError, PermanentSourceError
from monitor.schema import TABLE_NAME
from monitor.sources.base import ARROW_BATCH_ROWS, QueryResult
from monitor.sources.duckdb_conn import first_line
from monitor.timeutil import aware_utc

__all__ = ["DuckDBBillingSource"]


class DuckDBBillingSource:
    """Runs named queries on a DuckDB connection holding the export table.

    `rules` is the ordered attribution (config overrides first, see `compile_rules`); None means
    the built-in rules. Parameters the query does not use are dropped, missing ones are an error.
    """

    engine = "duckdb"

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        *,
        rules: Sequence[Rule] | None = None,
        table: str = TABLE_NAME,
    ):
        self.conn = conn
        self.rules = None if rules is None else tuple(rules)
        self.table = table

    def sql(self, name: str) -> str:
        """The DuckDB SQL `run(name, ...)` executes (for `--explain`-style debugging and tests)."""
        return render_query(name, "duckdb", table=self.table, rules=self.rules)

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult:
        wanted = query_params(name)
        missing = sorted(wanted - params.keys())
        if missing:
            raise ConfigError(f"query {name!r} needs parameter(s) {', '.join('@' + m for m in missing)}")
        bound = {k: _bind(v) for k, v in params.items() if k in wanted}
        sql = self.sql(name)
        began = time.monotonic()
        try:
            if arrow:
                reader = _stream(self.conn.sql(sql, params=bound).to_arrow_reader(ARROW_BATCH_ROWS), name)
                return QueryResult(name=name, rows=[], seconds=time.monotonic() - began, table=reader)
            cursor = self.conn.execute(sql, bound)
            columns = [d[0] for d in cursor.description]
            stamps = [i for i, d in enumerate(cursor.description) if str(d[1]).startswith("TIMESTAMP")]
            rows = [dict(zip(columns, _values(r, stamps), strict=True)) for r in cursor.fetchall()]
        except duckdb.Error as e:
            raise _failed(name, e) from e
        return QueryResult(name=name, rows=rows, seconds=time.monotonic() - began)

    def dry_run(self, name: str, params: dict[str, Any]) -> int | None:
        """DuckDB has no bytes-billed figure; scanning the local file is free."""
        return None


def _stream(reader: Any, name: str) -> Any:
    """`reader`, with a DuckDB error while it streams raised as the error of the query it is."""
    import pyarrow as pa

    def batches() -> Iterator[Any]:
        try:
            yield from reader
        except duckdb.Error as e:
            raise _failed(name, e) from e

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _failed(name: str, e: duckdb.Error) -> PermanentSourceError:
    """A DuckDB error as the error of the query it came from, run or streamed."""
    return PermanentSourceError(f"DuckDB query {name!r} failed: {first_line(e)}")


def _bind(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime parameter {value!r}: pass timezone-aware UTC")
        return value.astimezone(UTC)
    if isinstance(value, tuple):
        return list(value)
    return value


def _values(row: tuple[Any, ...], stamps: list[int]) -> tuple[Any, ...] | list[Any]:
    """The row with its timestamp columns (`stamps`) as aware UTC datetimes, whatever the session
    zone; the other cells as DuckDB gave them (converting only those keeps 500k rows cheap)."""
    if not stamps:
        return row
    out = list(row)
    for i in stamps:
        v = out[i]
        if isinstance(v, datetime):
            out[i] = aware_utc(v)
    return out
