"""The cost rows of a detection run, kept in the engine: detectors ask for sums, not rows.

A detection run over 45 days of a large fleet holds hundreds of thousands of stored aggregates. Most
detectors only need sums of them (spend per project and day, per project and hour, per category this
month), so `Costs` keeps the rows in DuckDB (a view of the aggregate store's window, a table in
memory for a list of `CostHour`s) and answers `sums(by=...)` with one `GROUP BY`.
`rows(...)` turns only the rows a detector really needs row by row (an idle cluster's fees, a
budget's rows) into `CostHour`s; `select(...)` runs a detector's own query over `costs` (the egress
detectors' sums per workload and sender, `idle_orchestration`'s idle runs), so that only its
answer crosses into Python.

Amounts are integer micros in the engine, so sums are exact: `sums` equals summing each row's
micro-rounded amount (`q6(cost) + q6(credits)`), which is what every detector summed before.

Example::

    >>> from datetime import UTC, datetime
    >>> h = datetime(2026, 11, 2, 10, tzinfo=UTC)
    >>> costs = Costs.from_rows([
    ...     CostHour(hour=h, project="ml", subcategory="compute.gpu", cost=Decimal("29.39")),
    ...     CostHour(hour=h, project="ml", subcategory="compute.cpu", cost=Decimal("1.25")),
    ... ])
    >>> costs.sums(("project", "category"))[("ml", "compute")].cost
    Decimal('30.64')
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import duckdb

from monitor import month
from monitor.detectors.inputs import CostHour
from monitor.model import CATEGORY_SQL, micros_to_decimal
from monitor.scratch import scratch
from monitor.timeutil import from_naive_utc, naive_utc

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Condition", "CostSum", "Costs", "Touching", "as_costs", "billed_until", "columns", "one_of"]

_MICRO = Decimal("0.000001")
_MICROS = Decimal(1_000_000)

#: Keys of a stored aggregate that no `CostHour` carries: kept so that `rows()` can return a streamed
#: window in the readers' order (`monitor.billing_poll.COST_ORDER`) without its having been sorted.
_SORT_ONLY = ("machine_type", "node_pool", "namespace", "service_id", "cost_type", "currency")


@functools.cache
def columns() -> pa.Schema:
    """The engine's columns, in order: `i` is a list's order (`from_rows`: rows come back in it; null
    for the store's rows, which come back in `order`), amounts are micros, `hour` is naive UTC,
    `labels` a label-set key (`Costs.label_sets`); the last ones only sort (`_SORT_ONLY`).
    A function: pyarrow is imported on first use, not by every command that imports the detectors."""
    import pyarrow as pa

    return pa.schema(
        [
            ("i", pa.int64()),
            ("hour", pa.timestamp("us")),
            ("project", pa.string()),
            ("subcategory", pa.string()),
            ("cost", pa.int64()),
            ("credits", pa.int64()),
            ("region", pa.string()),
            ("zone", pa.string()),
            ("service", pa.string()),
            ("sku_id", pa.string()),
            ("sku", pa.string()),
            ("pricing_model", pa.string()),
            ("instance", pa.string()),
            ("instance_id", pa.string()),
            ("cluster", pa.string()),
            ("invoice_month", pa.string()),
            ("labels", pa.string()),
            ("usage", pa.float64()),
            ("unit", pa.string()),
            ("provisional", pa.bool_()),
            *((name, pa.string()) for name in _SORT_ONLY),
        ]
    )


# What `sums(by=...)` can group by: a name -> its SQL (over `costs`) and how a value comes back.
_GROUPS: dict[str, str] = {
    "project": "project",
    "subcategory": "subcategory",
    "category": CATEGORY_SQL,
    "hour": "hour",
    "day": "CAST(hour AS DATE)",
    "cluster": "cluster",
    "instance": "instance",
    "instance_id": "instance_id",
    "zone": "zone",
    "labels": "labels",
    "invoice_month": "invoice_month",
    "compute": "starts_with(subcategory, 'compute.')",
    "pricing_model": "pricing_model",
}


def _to_micros(amount: Decimal) -> int:
    """A `CostHour` amount as micros, rounded as `q6` rounds (what detectors summed per row)."""
    return int(amount.quantize(_MICRO) * _MICROS)


@dataclass(frozen=True, slots=True)
class CostSum:
    """Sums over a group of rows: gross `cost`, `credits` (<= 0), whether any row is provisional,
    the group's first and last hour and its row count."""

    cost: Decimal
    credits: Decimal
    provisional: bool
    first: datetime
    last: datetime
    rows: int

    @property
    def net(self) -> Decimal:
        return self.cost + self.credits


class Costs:
    """A detection run's cost rows in DuckDB as `costs` (`columns()`): a table in memory for a list of
    rows, a view for a window of the aggregate store.

    Build it with `from_rows` (a list of `CostHour`s: tests, tools) or `over` (a query of `columns()`
    on a connection: the aggregate store's window, `monitor.assemble`). Filters shared by `sums` and `rows`:
    `start` / `end` (hours), `categories` / `subcategories` (exact), `exclude` (subcategories),
    `positive` (rows whose gross cost is above zero), `project`, `labels` (label-set keys, see
    `label_sets`), `month` (`YYYYMM`, by `monitor.month.row_month`), `has_zone`, `touching`
    (`Touching`), `condition` (`Condition`, SQL of a detector's own).
    """

    def __init__(
        self,
        table: pa.Table | None,
        label_sets: Mapping[str, Mapping[str, str]] | None = None,
        originals: Sequence[CostHour] | None = None,
        parse_labels: Callable[[str], Mapping[str, str]] | None = None,
        *,
        conn: duckdb.DuckDBPyConnection | None = None,
        order: Sequence[str] = ("i",),
    ):
        """`table` (the rows, loaded on first use) or `conn` (an engine already holding them as
        `costs`, closed by `close`); `order`: the columns `rows()` come back sorted by."""
        self._table: pa.Table | None = table
        self._conn: duckdb.DuckDBPyConnection | None = conn
        self._view = conn is not None  # a view on a store's connection (`over`)
        self._order = ", ".join(order)
        self._rows = table.num_rows if table is not None else _count(conn)
        self._label_sets = dict(label_sets) if label_sets is not None else None
        self._parse = parse_labels
        self._originals = originals
        self._lock = threading.Lock()
        #: Rows (and sums) handed to Python so far: what crossed out of the engine.
        self.fetched = 0

    @classmethod
    def from_rows(cls, rows: Iterable[CostHour]) -> Costs:
        """The engine over `rows`; `rows(...)` returns these very objects, in this order."""
        rows = list(rows)
        keys: dict[tuple[tuple[str, str], ...], str] = {}
        sets: dict[str, Mapping[str, str]] = {}
        label_keys = []
        for r in rows:
            items = tuple(sorted(r.labels.items()))
            key = keys.get(items)
            if key is None:
                key = keys[items] = str(len(keys))
                sets[key] = dict(items)
            label_keys.append(key)
        cols: dict[str, list[Any]] = {
            "i": list(range(len(rows))),
            "hour": [naive_utc(r.hour) for r in rows],
            "project": [r.project for r in rows],
            "subcategory": [r.subcategory for r in rows],
            "cost": [_to_micros(r.cost) for r in rows],
            "credits": [_to_micros(r.credits) for r in rows],
            "region": [r.region for r in rows],
            "zone": [r.zone for r in rows],
            "service": [r.service for r in rows],
            "sku_id": [r.sku_id for r in rows],
            "sku": [r.sku for r in rows],
            "pricing_model": [r.pricing_model for r in rows],
            "instance": [r.instance for r in rows],
            "instance_id": [r.instance_id for r in rows],
            "cluster": [r.cluster for r in rows],
            "invoice_month": [r.invoice_month for r in rows],
            "labels": label_keys,
            "usage": [float(r.usage_pricing_units) for r in rows],
            "unit": [r.pricing_unit for r in rows],
            "provisional": [r.provisional for r in rows],
        } | {name: [None] * len(rows) for name in _SORT_ONLY}
        import pyarrow as pa

        return cls(pa.table(cols, schema=columns()), sets, rows)

    @classmethod
    def over(
        cls,
        conn: duckdb.DuckDBPyConnection,
        select: str,
        parse_labels: Callable[[str], Mapping[str, str]],
        order: Sequence[str] = ("i",),
    ) -> Costs:
        """The engine as a view over `select` (a query of `columns()` in any order, its values
        inlined) on `conn`, which the `Costs` then owns and `close`s; `rows()` come back sorted by
        `order`. Every query of the run reads one snapshot (a read transaction): a billing poll may
        write the store meanwhile. Nothing is copied: loading a 45-day window of the bench's scale-48
        fleet (2.3 M aggregates) into an engine of its own took 3.2 s of a 15 s detection run."""
        conn.execute("SET enable_progress_bar = false")
        conn.execute("BEGIN TRANSACTION")
        conn.execute(f"CREATE TEMP VIEW costs AS SELECT {_casts()} FROM ({select})")
        return cls(None, parse_labels=parse_labels, conn=conn, order=order)

    def __len__(self) -> int:
        return self._rows

    @property
    def order(self) -> str:
        """The readers' order, as an ORDER BY list over `costs` (`rows()` come back in it)."""
        return self._order

    # ------------------------------------------------------------------------------------ queries

    def sums(self, by: Sequence[str], **where: Any) -> dict[tuple, CostSum]:
        """`CostSum` per distinct value of the `by` columns (`_GROUPS`) over the rows `where` selects,
        ordered by those values (None first)."""
        unknown = [b for b in by if b not in _GROUPS]
        if unknown:
            raise ValueError(f"Costs.sums: cannot group by {unknown}; choose from {sorted(_GROUPS)}")
        keys = [_GROUPS[b] for b in by]
        cond, params = _where(**where)
        group = (
            f" GROUP BY {', '.join(keys)} ORDER BY {', '.join(f'{k} NULLS FIRST' for k in keys)}"
            if keys
            else ""
        )
        sql = (
            f"SELECT {''.join(k + ', ' for k in keys)}SUM(cost), SUM(credits), bool_or(provisional),"
            f" MIN(hour), MAX(hour), COUNT(*) FROM costs{cond}{group}"
        )
        out: dict[tuple, CostSum] = {}
        for row in self._query(sql, params):
            n = len(keys)
            if row[n + 5] == 0:  # no row at all (an ungrouped sum over nothing)
                continue
            values = tuple(from_naive_utc(v) if b == "hour" else v for b, v in zip(by, row[:n], strict=True))
            cost, credits, prov, first, last, count = row[n:]
            out[values] = CostSum(
                micros_to_decimal(cost),
                micros_to_decimal(credits),
                bool(prov),
                from_naive_utc(first),
                from_naive_utc(last),
                count,
            )
        return out

    def rows(self, **where: Any) -> list[CostHour]:
        """The rows `where` selects as `CostHour`s, in the readers' order."""
        cond, params = _where(**where)
        if self._originals is not None:
            picked = self._query(f"SELECT i FROM costs{cond} ORDER BY i", params)
            return [self._originals[i] for (i,) in picked]
        names = ", ".join(f for f in columns().names if f != "i" and f not in _SORT_ONLY)
        raw = self._query(f"SELECT {names} FROM costs{cond} ORDER BY {self._order}", params)
        return [
            CostHour(
                hour=from_naive_utc(hour),
                project=project,
                subcategory=sub,
                cost=micros_to_decimal(cost),
                credits=micros_to_decimal(credits),
                region=region,
                zone=zone,
                service=service,
                sku_id=sku_id,
                sku=sku,
                pricing_model=pricing,
                instance=instance,
                instance_id=iid,
                cluster=cluster,
                invoice_month=invoice,
                labels=self.labels_of(labels),
                usage_pricing_units=Decimal(str(usage)) if usage is not None else Decimal(0),
                pricing_unit=unit,
                provisional=prov,
            )
            for (hour, project, sub, cost, credits, region, zone, service, sku_id, sku, pricing, instance,
                 iid, cluster, invoice, labels, usage, unit, prov) in raw
        ]  # fmt: skip

    def select(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """The rows of a detector's own query over `costs` (`columns()`), for work that belongs in the
        engine (a join, runs over hours) so that only its result crosses into Python. `where(...)`
        gives the filters `sums` and `rows` take as SQL."""
        return self._query(sql, params)

    @staticmethod
    def where(**where: Any) -> tuple[str, list[Any]]:
        """`sums` / `rows`' filters as a WHERE clause (with its leading space, or "") and parameters."""
        return _where(**where)

    @property
    def label_sets(self) -> dict[str, Mapping[str, str]]:
        """Each label-set key of the rows -> its labels (rows with the same labels share one dict)."""
        if self._label_sets is None:
            keys = self._query("SELECT DISTINCT labels FROM costs WHERE labels IS NOT NULL", [])
            parse = self._parse or (lambda _raw: {})
            self._label_sets = {k: parse(k) for (k,) in keys}
        return self._label_sets

    def labels_of(self, key: str | None) -> Mapping[str, str]:
        """The labels of a label-set key (as `sums(by=("labels",))` returns it); {} for none."""
        return self.label_sets.get(key, {}) if key is not None else {}

    def labels_where(self, keep: Callable[[Mapping[str, str]], bool]) -> list[str]:
        """The label-set keys whose labels `keep` accepts (for the `labels=` filter)."""
        return sorted(k for k, labels in self.label_sets.items() if keep(labels))

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple]:
        if self._rows == 0:
            return []
        with self._lock:
            conn = self._connect()
            out = conn.execute(sql, list(params)).fetchall()
        self.fetched += len(out)
        return out

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """The engine, made on first use: a run whose detectors ask nothing starts no DuckDB."""
        if self._conn is None:
            self._conn, self._table = _load(self._table), None  # the engine holds the rows now
        return self._conn

    def snapshot(self) -> tuple[duckdb.DuckDBPyConnection, threading.Lock] | None:
        """The connection of an engine that is a view on a store (`over`), in its read transaction,
        and the lock its queries take: what `AggregateStore.pinned` reads the same snapshot through.
        None for an engine of its own (over rows or a table) or once closed."""
        if not self._view or self._conn is None:
            return None
        return self._conn, self._lock

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


#: `columns()`' Arrow types as DuckDB's, for the casts of `_casts`.
_SQL_TYPES = {
    "int64": "BIGINT",
    "timestamp[us]": "TIMESTAMP",
    "string": "VARCHAR",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
}


def _load(rows: pa.Table | None) -> duckdb.DuckDBPyConnection:
    """A new engine in memory with `rows` as its `costs` table, each column cast to `columns()`'s type."""
    if rows is None:
        raise RuntimeError("Costs: the engine was closed")
    conn = scratch()
    conn.register("costs_arrow", rows)
    conn.execute(f"CREATE TEMP TABLE costs AS SELECT {_casts()} FROM costs_arrow")  # the session's own
    conn.unregister("costs_arrow")
    return conn


def _casts() -> str:
    """Each of `columns()` cast to its type (whatever the rows' source typed it as)."""
    return ", ".join(f"CAST({f.name} AS {_SQL_TYPES[str(f.type)]}) AS {f.name}" for f in columns())


def _count(conn: duckdb.DuckDBPyConnection | None) -> int:
    if conn is None:
        raise ValueError("Costs needs a table or an engine")
    # fetched whole: a result left unfinished (fetchone) holds the connection, which the GPU
    # node-hours are read through next (`AggregateStore.pinned`)
    return int(conn.execute("SELECT count(*) FROM costs").fetchall()[0][0])


@dataclass(frozen=True)
class Touching:
    """One OR filter: the rows of some label sets, the rows of some clusters, and the
    `compute.gpu` rows of some instances, by name (None: a row without one) or by id. What a job's
    record can depend on (`alerts.job_message`), so only that crosses into Python."""

    labels: Sequence[str] = ()
    clusters: Sequence[str] = ()
    gpu_instances: Sequence[str | None] = ()
    gpu_instance_ids: Sequence[str] = ()

    def sql(self) -> tuple[str, list[Any]]:
        names = [i for i in self.gpu_instances if i is not None]
        gpu = [
            "list_contains(?::VARCHAR[], instance)",
            "list_contains(?::VARCHAR[], instance_id)",
            *(["instance IS NULL"] if None in self.gpu_instances else []),
        ]
        cond = (
            "(coalesce(list_contains(?::VARCHAR[], labels), false)"
            " OR coalesce(list_contains(?::VARCHAR[], cluster), false)"
            f" OR (subcategory = 'compute.gpu' AND coalesce({' OR '.join(gpu)}, false)))"
        )
        return cond, [list(self.labels), list(self.clusters), names, list(self.gpu_instance_ids)]


@dataclass(frozen=True)
class Condition:
    """A filter of `costs`' columns in SQL, with its `?` parameters: what a detector computed in the
    engine (`select`) and now wants the rows of."""

    cond: str
    params: Sequence[Any] = ()

    def sql(self) -> tuple[str, list[Any]]:
        return f"({self.cond})", list(self.params)


def one_of(exprs: Sequence[str], keys: Sequence[Sequence[Any]]) -> Condition:
    """The rows whose `exprs` (SQL over the query's columns) equal one of `keys`, a None matching a
    NULL: a semi-join on the keys passed as one list per column, so thousands of keys cost one hash
    join, not a chain of ORs."""
    columns = [list(col) for col in zip(*keys, strict=True)] if keys else [[] for _ in exprs]
    listed = ", ".join(f"unnest(?::VARCHAR[]) AS k{i}" for i in range(len(exprs)))
    same = " AND ".join(f"k.k{i} IS NOT DISTINCT FROM {e}" for i, e in enumerate(exprs))
    return Condition(f"EXISTS (SELECT 1 FROM (SELECT {listed}) AS k WHERE {same})", columns)


def _where(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    categories: Sequence[str] | None = None,
    subcategories: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    positive: bool = False,
    project: str | None = None,
    labels: Sequence[str] | None = None,
    month_of: str | None = None,
    has_zone: bool = False,
    touching: Touching | None = None,
    condition: Condition | None = None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (with its leading space, or "") and its parameters."""
    conds: list[str] = []
    params: list[Any] = []
    for raw in (touching, condition):
        if raw is not None:
            cond, more = raw.sql()
            conds.append(cond)
            params += more
    if start is not None:
        conds.append("hour >= ?")
        params.append(naive_utc(start))
    if end is not None:
        conds.append("hour < ?")
        params.append(naive_utc(end))
    if categories is not None:
        conds.append(f"list_contains(?::VARCHAR[], {CATEGORY_SQL})")
        params.append(list(categories))
    if subcategories is not None:
        conds.append("list_contains(?::VARCHAR[], subcategory)")
        params.append(list(subcategories))
    if exclude:
        conds.append("NOT list_contains(?::VARCHAR[], subcategory)")
        params.append(list(exclude))
    if positive:
        conds.append("cost > 0")
    if project is not None:
        conds.append("project = ?")
        params.append(project)
    if labels is not None:
        conds.append("coalesce(list_contains(?::VARCHAR[], labels), false)")
        params.append(list(labels))
    if month_of is not None:
        # `monitor.month.row_month`: the invoice month when the row has one, else the usage month
        cond, more = month.row_month_sql(month_of)
        conds.append(cond)
        params += more
    if has_zone:
        conds.append("coalesce(zone, '') <> ''")
    return (f" WHERE {' AND '.join(conds)}" if conds else ""), params


def as_costs(rows: Costs | Iterable[CostHour]) -> Costs:
    """`rows` as `Costs` (a list of `CostHour`s goes into the engine)."""
    return rows if isinstance(rows, Costs) else Costs.from_rows(rows)


def billed_until(costs: Costs, start: datetime, end: datetime, within: timedelta) -> datetime:
    """Where quiet is measured to (a finished job's message, `job_budget`'s "still running",
    `idle_gpu`'s "still idle"): the end of the latest hour billed in [start, end), not the clock,
    since billing lags usage by hours and by more for some resources than for others (the demo's
    daemon told "Job finished: embeddings" at 12:00 for a VM billed to 04:00 while others were
    billed to 07:00; it ran on, and the message cannot be taken back). When the whole
    export has been silent for more than twice `within` (every job of the fleet stopped, its disks
    too), the clock less that time: the jobs are told then, not never. Nothing billed at all in
    [start, end) is no sign of lag: the clock (`end`)."""
    total = costs.sums((), start=start, end=end).get(())
    if total is None:
        return end
    return min(end, max(total.last + timedelta(hours=1), end - 2 * within))
