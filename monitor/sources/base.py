"""Protocols the core depends on; the engines (BigQuery, DuckDB) implement them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

__all__ = ["ARROW_BATCH_ROWS", "BillingSource", "MeteredSource", "QueryResult"]

#: Rows per Arrow batch where a DuckDB query's result streams out of the engine (the hourly query's,
#: into the poll's spool files): bounded memory, few enough batches to cost nothing.
ARROW_BATCH_ROWS = 100_000


@dataclass(frozen=True)
class QueryResult:
    """Aggregated rows of one `queries/<name>.sql` run, with what the run cost.

    `rows` are dicts keyed by the query's output column names (already aggregated by the engine:
    never raw export rows). `bytes_processed` is BigQuery's billed figure (None on DuckDB);
    `rows_scanned` is the engine's count of input rows where it reports one (None otherwise).
    Asked for Arrow (`run(..., arrow=True)`), the result is `table` (a `pyarrow.Table` with the
    query's columns, or a `pyarrow.RecordBatchReader` of them, to read before the source's next
    query: DuckDB streams) and `rows` is empty: the rows go on to the aggregate store without
    becoming Python objects.
    """

    name: str
    rows: list[dict[str, Any]]
    bytes_processed: int | None = None
    rows_scanned: int | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    table: Any = None  # pyarrow.Table or RecordBatchReader when run with arrow=True


class BillingSource(Protocol):
    """Runs a named query from `queries/` with `@parameters` on one engine."""

    engine: str  # "duckdb" | "bigquery"

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult: ...

    def dry_run(self, name: str, params: dict[str, Any]) -> int | None:
        """Bytes the query would process (BigQuery dry run), None where the engine cannot tell."""
        ...


class MeteredSource:
    """A `BillingSource` that records what it ran: each query's parameters and result, without its
    Arrow table (a first poll's aggregates, 1.3 GB at bench scale 48, were kept to the end of a run
    for a count). `gpucost analyze`'s `stats` and `make bench` read `runs`; everything else is the
    inner source's."""

    def __init__(self, inner: BillingSource):
        self.inner = inner
        self.engine = inner.engine
        self.runs: list[tuple[dict[str, Any], QueryResult]] = []

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult:
        result = self.inner.run(name, params, arrow=arrow)
        self.runs.append((dict(params), replace(result, table=None)))
        return result

    def dry_run(self, name: str, params: dict[str, Any]) -> int | None:
        return self.inner.dry_run(name, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
