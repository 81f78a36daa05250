"""What running gpucost costs in BigQuery on-demand bytes: per poll, per month, per `analyze` run.

BigQuery on-demand bills the logical size of the columns a query references in the partitions it
scans (https://cloud.google.com/bigquery/docs/estimate-costs , data sizes per type at
https://cloud.google.com/bigquery/docs/storage_overview#data_type_sizes : STRING 2 bytes + UTF-8
length, INT64 / FLOAT64 / TIMESTAMP 8, NUMERIC 16, BOOL 1, STRUCT the sum of its fields, ARRAY the
sum of its elements, NULL 0), at least 10 MB per query and per referenced table, rounded up to the MB
(https://cloud.google.com/bigquery/pricing#on_demand_pricing). The emulator's dry run answers 0 bytes
for every query (tests/test_bigquery_source.py pins it), so the bytes are computed, not observed:

1. the `billing_export` leaf columns each query reads, from its rendered BigQuery SQL (sqlglot);
2. their average logical size per row, measured on a simulated export (`gpucost simulate`);
3. how many partitions (days of loads) each query of a poll scans: `partitions` the lookback scope
   (`poll_scope`) widened as `queries/partitions.sql` does, and, for polls that see new loads, the
   `changed_hours` / `hourly` queries the real `poll_billing` issues when replayed every 30 minutes
   over the simulated export on DuckDB (each query's partition range read from its parameters).

Scaled to a monthly export size: bytes = day-equivalents scanned x (size / 30.44 days) x (query's
bytes per row / full row's bytes per row).
Run: `.venv/bin/python bench/bigquery_cost.py [--sim DIR]` (about 25 s; prints Markdown tables).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from monitor.attribution.compile import render_query
from monitor.billing_poll import poll_billing, poll_scope
from monitor.config import BillingConfig, Config
from monitor.detectors import build_detectors, history_needed
from monitor.month import current_month, read_start
from monitor.schema import EXPORT_SCHEMA, Column
from monitor.sources.base import QueryResult
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import insert_parquet, open_billing_db
from monitor.state.analytics import AggregateStore
from monitor.timeutil import floor_day

__all__ = [
    "MB",
    "PRICE_PER_TIB",
    "billed_bytes",
    "leaf_bytes",
    "referenced_leaves",
    "value_bytes",
]

#: On-demand price per TiB scanned, US multi-region (cloud.google.com/bigquery/pricing).
PRICE_PER_TIB = 6.25
MB = 2**20
TIB = 2**40
MIN_BILLED = 10 * MB
DAYS_PER_MONTH = 365.25 / 12
POLLS_PER_DAY = 48
_FIXED = {"INTEGER": 8, "FLOAT": 8, "TIMESTAMP": 8, "BOOLEAN": 1, "NUMERIC": 16}
_PSEUDO = frozenset({"_PARTITIONTIME", "_PARTITIONDATE"})
_BY_NAME = {c.name: c for c in EXPORT_SCHEMA}
_DAY = timedelta(days=1)


def value_bytes(bq_type: str, value: Any) -> int:
    """BigQuery's logical size of one scalar value (NULL is free).

    >>> value_bytes("STRING", "gpu-a"), value_bytes("STRING", "é"), value_bytes("FLOAT", 1.5)
    (7, 4, 8)
    """
    if value is None:
        return 0
    if bq_type == "STRING":
        return 2 + len(value.encode("utf-8"))
    return _FIXED[bq_type]


def billed_bytes(scanned: float) -> int:
    """On-demand bytes billed for one query over one table: rounded up to the MB, 10 MB minimum."""
    return max(MIN_BILLED, math.ceil(scanned / MB) * MB)


def _leaves(col: Column, prefix: tuple[str, ...] = ()) -> Iterable[tuple[str, ...]]:
    path = (*prefix, col.name)
    if col.type == "RECORD":
        for f in col.fields:
            yield from _leaves(f, path)
    else:
        yield path


def _column_at(path: Sequence[str]) -> Column | None:
    col = _BY_NAME.get(path[0])
    for name in path[1:]:
        if col is None or col.type != "RECORD":
            return None
        col = next((f for f in col.fields if f.name == name), None)
    return col


def _unnest_path(col: exp.Column) -> tuple[str, ...] | None:
    """The array a qualifier like `l` in `l.key` is the UNNEST alias of, in the nearest scope."""
    node: exp.Expression | None = col
    while node is not None:
        if isinstance(node, exp.Select):
            for un in node.find_all(exp.Unnest):
                alias = un.args.get("alias")
                names = [c.name for c in alias.columns] if alias is not None else []
                if col.table in names and un.parent_select is node:
                    arr = un.expressions[0]
                    if isinstance(arr, exp.Column):
                        return tuple(p.name for p in arr.parts)
        node = node.parent
    return None


def referenced_leaves(sql: str, table: str) -> frozenset[tuple[str, ...]]:
    """Leaf columns of the export (paths like ("labels", "key")) the BigQuery `sql` reads from `table`.

    Only SELECTs reading `table` directly count (CTE outputs re-use names of export columns); a
    whole RECORD referenced means all its leaves; an UNNEST alias resolves to its array's leaves.
    """
    tree = sqlglot.parse_one(sql, read="bigquery")
    out: set[tuple[str, ...]] = set()
    for select in tree.find_all(exp.Select):
        src = select.args.get("from_") or select.args.get("from")
        tables = list(src.find_all(exp.Table)) if src is not None else []
        if not any(".".join(p.name for p in t.parts) == table for t in tables):
            continue
        for col in select.find_all(exp.Column):
            if col.name in _PSEUDO or col.name == "*":
                continue
            if isinstance(col.parent, exp.Unnest):
                continue  # the array itself: its referenced fields are counted via the alias
            parts = tuple(p.name for p in col.parts)
            if col.table and _column_at(parts) is None:
                base = _unnest_path(col)
                if base is None:
                    continue
                parts = (*base, col.name)
            target = _column_at(parts)
            if target is None:
                continue  # an alias of this SELECT, not an export column
            out.update(_leaves(target, parts[:-1]))
    return frozenset(out)


def _leaf_array(table: pa.Table, path: Sequence[str]) -> pa.Array:
    arr: Any = table.column(path[0]).combine_chunks()
    for name in path[1:]:
        while pa.types.is_list(arr.type):
            arr = pc.list_flatten(arr)
        arr = pc.struct_field(arr, name)
    while pa.types.is_list(arr.type):
        arr = pc.list_flatten(arr)
    return arr


def leaf_bytes(table: pa.Table, path: Sequence[str]) -> int:
    """Total BigQuery logical bytes of one leaf column over `table` (NULLs and empty arrays free)."""
    col = _column_at(path)
    assert col is not None, path
    arr = _leaf_array(table, path)
    present = len(arr) - arr.null_count
    if col.type == "STRING":
        lengths = pc.sum(pc.binary_length(arr)).as_py() or 0
        return 2 * present + lengths
    return _FIXED[col.type] * present


# ------------------------------------------------------------------------------------ the replay


@dataclass
class _Recorder:
    """A `BillingSource` that runs on DuckDB and notes every query's scanned partition range."""

    inner: DuckDBBillingSource
    calls: list[tuple[str, datetime, datetime, datetime]]
    engine: str = "bigquery"  # replay what the daemon does on BigQuery (one hourly range a poll)

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult:
        if name == "changed_hours":
            lo = tight = params["partition_time"]
            hi = lo + _DAY
        else:  # partitions.sql / hourly.sql: the widened range of their WHERE clause
            tight = floor_day(params["usage_start"])  # rows load on or after their usage day
            lo = tight - _DAY
            hi = max(params["partition_end"], floor_day(params["usage_end"]) + 3 * _DAY)
        self.calls.append((name, lo, hi, tight))
        return self.inner.run(name, params, arrow=arrow)

    def dry_run(self, name: str, params: dict[str, Any]) -> int | None:
        return None


Scan = tuple[str, float, float]


def replay(parquet: Path, first: datetime, last: datetime) -> list[list[Scan]]:
    """Poll every 30 min over the export as it stood then; per poll with new loads, each query's
    name and scan in day-equivalents (rows in its partition range / rows loaded per day), as the
    SQL widens it and without the widening of one day before the usage range."""
    conn = open_billing_db(None)
    insert_parquet(conn, parquet)
    (rows, days) = conn.execute(
        "SELECT COUNT(*), date_diff('second', MIN(export_time), MAX(export_time)) / 86400.0 FROM billing_export"
    ).fetchone()
    per_day = rows / days
    calls: list[tuple[str, datetime, datetime, datetime]] = []
    src = _Recorder(DuckDBBillingSource(conn, table="billing_asof"), calls)
    polls: list[list[Scan]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = AggregateStore(Path(tmp) / "aggregates.duckdb")
        now = first - timedelta(minutes=30)  # a first poll to fill the state; not counted
        while now <= last:
            conn.execute(
                "CREATE OR REPLACE VIEW billing_asof AS SELECT * FROM billing_export WHERE export_time <= "
                f"TIMESTAMPTZ '{now.isoformat()}'"
            )
            calls.clear()
            poll_billing(src, store, BillingConfig(lookback_days=10), now)
            if now >= first and len(calls) > 1:
                polls.append(
                    [(n, _rows_in(conn, lo, hi, now) / per_day, _rows_in(conn, t, hi, now) / per_day)
                     for n, lo, hi, t in calls]
                )  # fmt: skip
            now += timedelta(minutes=30)
        store.close()
    conn.close()
    return polls


def _rows_in(conn: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime, now: datetime) -> int:
    (n,) = conn.execute(
        "SELECT COUNT(*) FROM billing_export WHERE _PARTITIONTIME >= ? AND _PARTITIONTIME < ?"
        " AND export_time <= ?",
        [lo, hi, now],
    ).fetchone()
    return n


# ------------------------------------------------------------------------------------- the model


def partition_days(now: datetime, lookback_days: int, *, first: bool = False) -> float:
    """Day-equivalents `partitions.sql` scans at `now`: full load days from the scope's start less one
    to yesterday, plus today's partition as loaded so far (a fraction of a day). A `first` poll
    reaches back to where the invoice month must be read (`poll_billing`, an empty store)."""
    start, _ = poll_scope(now, lookback_days)
    if first:
        start = min(start, read_start(current_month(now)))
    lo = floor_day(start) - _DAY
    today = floor_day(now)
    return (today - lo).days + (now - today) / _DAY


def mean_partition_days(lookback_days: int, year: int = 2026, *, first: bool = False) -> float:
    """`partition_days` averaged over every half-hour poll of a year (the month's start matters)."""
    t, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    vals = []
    while t < end:
        vals.append(partition_days(t, lookback_days, first=first))
        t += timedelta(minutes=30)
    return statistics.fmean(vals)


def analyze_lookback_days(now: datetime) -> int:
    """The lookback `gpucost analyze --config` polls with (live BigQuery, default 14-day window,
    default detectors' history, the invoice month's read start), as `monitor.analysis` computes it."""
    history = history_needed(build_detectors(Config().detectors))
    start = now - timedelta(days=14)
    data_start = min(start - history, read_start(current_month(now)))
    return max(1, (floor_day(now) - floor_day(data_start)).days + 1)


# ------------------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class Sizes:
    """Per-row logical bytes measured on the simulated export."""

    rows: int
    full_row: float
    per_leaf: dict[tuple[str, ...], float]

    def query_row(self, leaves: Iterable[tuple[str, ...]]) -> float:
        return sum(self.per_leaf[p] for p in leaves)


def measure(parquet: Path) -> Sizes:
    table = pq.read_table(parquet)
    every = [p for c in EXPORT_SCHEMA for p in _leaves(c)]
    per_leaf = {p: leaf_bytes(table, p) / table.num_rows for p in every}
    return Sizes(table.num_rows, sum(per_leaf.values()), per_leaf)


def _gb(n: float) -> str:
    if n >= TIB:
        return f"{n / TIB:.2f} TiB"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / MB:.0f} MiB"


def _size_label(gb: int) -> str:
    return f"{gb // 1000} TB" if gb >= 1000 else f"{gb} GB"


_VARIANTS = ("as is", "one hourly", "one hourly, no day before", "per partition")


def _extras(poll: Sequence[Scan], variant: str) -> list[tuple[str, float]]:
    """A with-load poll's queries after `partitions`, as (name, load-days): as issued; with its
    hourly queries merged into one over their hull (the widest scan), optionally not widened by
    the day before the usage range; or, "per partition", one hourly query per changed partition
    reading that partition only (aggregates stored per load partition and usage hour)."""
    rest = [(n, d) for n, d, _ in poll if n == "changed_hours"]
    hourly = [(d, t) for n, d, t in poll if n == "hourly"]
    if variant == "as is":
        return rest + [("hourly", d) for d, _ in hourly]
    if variant == "per partition":  # aggregates kept per load partition: re-aggregate the changed ones
        return [("hourly", d) for _, d in rest]
    if not hourly:
        return rest
    pick = 0 if variant == "one hourly" else 1
    return [*rest, ("hourly", max(h[pick] for h in hourly))]


def _mean_days(plan: Sequence[Sequence[tuple[str, float]]], name: str) -> float:
    return statistics.fmean(sum(d for n, d in e if n == name) for e in plan)


def _monthly(
    plan: Sequence[Sequence[tuple[str, float]]],
    part: float,
    day_bytes: float,
    row: dict[str, float],
    share: float,
) -> float:
    """Bytes billed a month: polls without loads run `partitions` only, the others add `plan`'s."""
    idle = billed_bytes(part)
    busy = statistics.fmean(idle + sum(billed_bytes(d * day_bytes * row[n]) for n, d in e) for e in plan)
    return DAYS_PER_MONTH * POLLS_PER_DAY * ((1 - share) * idle + share * busy)


def _usd(nbytes: float) -> str:
    return f"${nbytes / TIB * PRICE_PER_TIB:,.2f}"


@dataclass(frozen=True)
class Model:
    """Everything the tables are computed from (bytes per row, load-days scanned, load share)."""

    full_row: float
    row: dict[str, float]
    plans: dict[str, list[list[tuple[str, float]]]]
    load_share: float
    part_days: dict[int, float]
    analyze_days: float

    def day_bytes(self, gb: int) -> float:
        """Rows loaded per day at `gb` GB a month (logical), as a multiplier of bytes per row."""
        return gb * 1e9 / DAYS_PER_MONTH / self.full_row

    def monthly(self, variant: str, gb: int, lookback: int, *, tight: bool = False) -> float:
        part = (self.part_days[lookback] - (1 if tight else 0)) * self.day_bytes(gb) * self.row["partitions"]
        return _monthly(self.plans[variant], part, self.day_bytes(gb), self.row, self.load_share)


def build_model(parquet: Path, lookbacks: Sequence[int]) -> Model:
    """Measure the simulated export, replay the daemon over it, and print what was measured."""
    sizes = measure(parquet)
    table = "p.d.export"
    leaves = {q: referenced_leaves(render_query(q, "bigquery", table=table), table)
              for q in ("partitions", "changed_hours", "hourly")}  # fmt: skip
    row = {q: sizes.query_row(ls) for q, ls in leaves.items()}
    print(f"simulated export: {sizes.rows} rows, full row {sizes.full_row:.0f} B logical (BigQuery sizes)")
    for q, ls in leaves.items():
        cols = ", ".join(sorted(".".join(p) for p in ls))
        print(f"  {q}: {row[q]:.0f} B/row = {row[q] / sizes.full_row:.1%} of a row; reads {cols}")
    top = sorted(leaves["hourly"], key=lambda p: -sizes.per_leaf[p])[:6]
    print("  hourly's largest columns: " + ", ".join(f"{'.'.join(p)} {sizes.per_leaf[p]:.0f} B" for p in top))

    start, end = datetime(2026, 11, 4, tzinfo=UTC), datetime(2026, 11, 15, tzinfo=UTC)  # steady state
    polls = replay(parquet, start, end)
    n_polls = int((end - start) / timedelta(minutes=30)) + 1
    plans = {v: [_extras(p, v) for p in polls] for v in _VARIANTS}
    print(f"replay: {len(polls)} of {n_polls} half-hourly polls saw new loads ({len(polls) / n_polls:.1%});")
    print(f"  per such poll: {statistics.fmean(len(e) for e in plans['as is']):.1f} extra queries; load-days "
          f"scanned per poll by changed_hours {_mean_days(plans['as is'], 'changed_hours'):.2f}, by hourly "
          f"{_mean_days(plans['as is'], 'hourly'):.2f} (one hourly query over the hull: "
          f"{_mean_days(plans['one hourly'], 'hourly'):.2f}; and without the day before: "
          f"{_mean_days(plans['one hourly, no day before'], 'hourly'):.2f}; per changed partition: "
          f"{_mean_days(plans['per partition'], 'hourly'):.2f})")  # fmt: skip

    part_days = {lb: mean_partition_days(lb) for lb in lookbacks}
    print("partitions.sql scans, averaged over a year of polls: "
          + ", ".join(f"lookback {lb}: {d:.1f} load-days" for lb, d in part_days.items()))  # fmt: skip
    a_lb = analyze_lookback_days(datetime(2026, 11, 20, 6, tzinfo=UTC))
    a_days = statistics.fmean(
        partition_days(datetime(2026, m, 15, 6, tzinfo=UTC), a_lb) for m in range(1, 13)
    )
    print(f"analyze --config (live, 14-day window): lookback {a_lb} days, ~{a_days:.1f} load-days per query")
    return Model(sizes.full_row, row, plans, len(polls) / n_polls, part_days, a_days)


def print_cost_table(m: Model, sizes_gb: Sequence[int], lookbacks: Sequence[int]) -> None:
    print()
    print("| export / month | lookback | bytes, poll without load | bytes, poll with load (mean) "
          "| daemon $/month | daemon $/month, one hourly query, no day before "
          "| daemon $/month, per-partition aggregates | analyze daily $/month |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for gb in sizes_gb:
        day = m.day_bytes(gb)
        analyze = DAYS_PER_MONTH * sum(
            billed_bytes(m.analyze_days * day * m.row[q]) for q in ("partitions", "hourly")
        )
        for lb in lookbacks:
            idle = m.part_days[lb] * day * m.row["partitions"]
            busy = statistics.fmean(idle + sum(d * day * m.row[n] for n, d in e) for e in m.plans["as is"])
            cells = [
                _gb(idle),
                _gb(busy),
                _usd(m.monthly("as is", gb, lb)),
                _usd(m.monthly("one hourly, no day before", gb, lb, tight=True)),
                _usd(m.monthly("per partition", gb, lb, tight=True)),
                _usd(analyze),
            ]
            print(f"| {_size_label(gb)} | {lb} d | " + " | ".join(cells) + " |")


def print_cap_table(m: Model, sizes_gb: Sequence[int], lookbacks: Sequence[int]) -> None:
    cap = BillingConfig().maximum_bytes_billed
    worst = max(d for e in m.plans["as is"] for n, d in e if n == "hourly")
    first = mean_partition_days(10, first=True)
    print()
    print(f"Largest single query vs billing.maximum_bytes_billed (default {_gb(cap)}; * = over it, fails):")
    print()
    print("| export / month | hourly, worst poll of the replay | first daemon poll, lookback 10 (hourly) "
          f"| partitions, lookback {max(lookbacks)} | analyze --config (hourly) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for gb in sizes_gb:
        day = m.day_bytes(gb)
        cells = [
            worst * day * m.row["hourly"],
            first * day * m.row["hourly"],
            m.part_days[max(lookbacks)] * day * m.row["partitions"],
            m.analyze_days * day * m.row["hourly"],
        ]
        print(
            f"| {_size_label(gb)} | " + " | ".join(_gb(c) + (" *" if c > cap else "") for c in cells) + " |"
        )


def _simulate(out: Path) -> Path:
    """A 14-day scale-1 fleet, as `gpucost simulate` writes it (about 6 s)."""
    cmd = [sys.executable, "-m", "monitor", "simulate", "--scale", "1", "--days", "14", "--out", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sim", type=Path, help="a `gpucost simulate --days 14` output dir (default: simulate one)"
    )
    ap.add_argument("--sizes-gb", default="10,100,1000,10000", help="monthly export sizes, GB (10^9 B)")
    ap.add_argument("--lookbacks", default="10,30,45")
    args = ap.parse_args(argv)
    sizes_gb = [int(x) for x in args.sizes_gb.split(",")]
    lookbacks = [int(x) for x in args.lookbacks.split(",")]
    with tempfile.TemporaryDirectory(prefix="gpucost-bqcost-") as tmp:
        sim = args.sim or _simulate(Path(tmp))
        model = build_model(sim / "billing" / "export.parquet", lookbacks)
    print_cost_table(model, sizes_gb, lookbacks)
    print_cap_table(model, sizes_gb, lookbacks)
    print(
        f"\n${PRICE_PER_TIB}/TiB on demand, before the 1 TiB/month free tier; 10 MB minimum per query; "
        f"{POLLS_PER_DAY} polls/day, {model.load_share:.0%} of them with new loads."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
