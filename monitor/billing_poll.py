"""Incremental polling of the billing export: late and corrected rows replace, never append.

Each poll (`poll_billing`) reads only the load watermark of every partition in scope
(`queries/partitions.sql`: MAX(export_time), row count and usage hours per `_PARTITIONTIME` day),
compares it with the watermarks stored by the previous poll, lists the usage hours the new rows of
each changed partition touch (`queries/changed_hours.sql`, `monitor.billing_changes`), and
re-aggregates (`queries/hourly.sql`) just those hours: a late correction for an old hour costs that
hour. On DuckDB a gap of unchanged hours between them is read with them where that costs less than a
query of its own (`billing_changes.gap_worth_reading`, never more than a day). The results travel
as Arrow tables into the aggregate store (`monitor.state.analytics`, DuckDB), never as Python rows.
The stored hourly aggregates for those hours are deleted and rewritten, and the new watermarks
recorded, in one transaction of that store: a crash leaves the
old aggregates and old watermarks, so the next poll simply redoes the work. A poll with no new
loads runs the watermark query and nothing else, so its cost does not grow with the table's age.

Scope: the last `billing.lookback_days` of usage, and early in a month (the first `lookback_days`
days) the whole previous invoice month too, which Google keeps correcting until it closes. Until
the store holds the current invoice month from where it must be read (`month.read_start`: a first
poll in the middle of a month, or one after the aggregate file was lost), a poll reaches back there
once (`billing_poll.covered_from` records how far back the stored aggregates go): the month to date
of the digest and the budget forecasts must not start at the lookback. After the daemon was down
longer than a day, a poll reaches back to the scope of the last one before it: rows loaded
meanwhile for hours that have since left the lookback would be read by no poll.
Usage days within the last `billing.provisional_days` are provisional: their cost can still change.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from monitor import month
from monitor.billing_changes import (
    MAX_PARTITION_QUERIES,
    MAX_RANGES,
    appended,
    gap_worth_reading,
    hour_ranges,
)
from monitor.config import BillingConfig
from monitor.jobs.identity import parse_labels
from monitor.model import CATEGORY_SQL, Scope, category_of, micros_to_decimal
from monitor.sources.base import BillingSource
from monitor.state.analytics import AggregateStore, registered
from monitor.state.store import StateStore
from monitor.timeutil import floor_day, floor_hour, naive_utc, to_iso

if TYPE_CHECKING:
    import pyarrow as pa

    from monitor.progress import Progress

__all__ = [
    "COMPONENT",
    "COST_ORDER",
    "HOURLY_COLUMNS",
    "STORED_JOB_COLUMNS",
    "HourlyCost",
    "JobSums",
    "NodeHours",
    "PollReport",
    "ResourceHourNet",
    "aggregate_summary",
    "currencies",
    "hourly_costs",
    "last_poll",
    "latest_export",
    "migrate",
    "net_by_hour",
    "net_by_resource_hour",
    "open_stored_costs",
    "over_gpu_node_hours",
    "poll_billing",
    "poll_scope",
    "provisional_since",
    "prune",
    "retire_state_tables",
    "rows_by_hour",
    "stored_gpu_node_hours",
    "stored_job_columns",
    "stored_job_sums",
    "write_rows",
]

log = logging.getLogger("gpucost.billing_poll")

COMPONENT = "billing"
_T = TypeVar("_T")
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_KEYS = (
    "usage_hour",
    "invoice_month",
    "project_id",
    "region",
    "zone",
    "resource_name",
    "instance_id",
    "machine_type",
    "cluster",
    "node_pool",
    "namespace",
    "user_labels",
    "service_id",
    "service_description",
    "sku_id",
    "sku_description",
    "subcategory",
    "pricing_model",
    "cost_type",
    "currency",
    "pricing_unit",
)
_MONEY = ("gross_micros", "cud_micros", "sud_micros", "other_credit_micros", "credit_micros", "net_micros")
#: Columns of `hourly.sql` kept in `billing_hourly`, in order.
HOURLY_COLUMNS: tuple[str, ...] = (*_KEYS, "row_count", "usage_amount", *_MONEY)
_KEY_NAMES = tuple(k for k in _KEYS if k not in ("usage_hour", "subcategory"))
# Every reader lists an hour's rows in this order (every key: DuckDB sorts are not stable), so the rows
# of an hour come in the same order in every run; hours are read as fixed-width text (parsed once per
# distinct hour: `_parse_ts`).
_ORDER = f"subcategory, {', '.join(_KEY_NAMES)}"
_HOUR_TEXT = "strftime(usage_hour, '%Y-%m-%dT%H:%M:%S.%fZ')"


def _hours_sql(columns: Sequence[str]) -> str:
    """The stored rows of [?, ?): the hour as text, then `columns`, in the readers' order."""
    return (
        f"SELECT {_HOUR_TEXT}, {', '.join(columns)} FROM billing_hourly"
        f" WHERE usage_hour >= ? AND usage_hour < ? ORDER BY usage_hour, {_ORDER}"
    )


_READ = _hours_sql(("subcategory", *_MONEY, "row_count", "usage_amount", *_KEY_NAMES))
# GPU spend per node-hour (what `monitor.gpus` joins), summed in the engine. A node-hour's descriptive
# keys are those of its first row in the readers' order. Most node-hours are one row, taken as they are:
# only their keys are grouped, to find the others (`many`). Only the node-hours of several rows
# (GKE namespaces, corrections) are numbered in the readers' order (a window over those rows alone,
# found by a semi join that matches NULL keys as GROUP BY does); their first row gives the keys, and
# their usage amounts, label sets and per-namespace gross come as lists in that order, so Python sums
# and merges them exactly as it would row by row (lists cost most in the conversion to Python).
# Numbering every GPU row sorted 1.2 M node-hours x 13 keys: 14 s of a 45-day detection at bench
# scale 48 (7.4 M export rows), spilling past the store's memory limit.
_NODE_KEYS = ("usage_hour", "project_id", "zone", "resource_name", "instance_id")
_NODE = ", ".join(_NODE_KEYS)
_FIRST = (
    "invoice_month",
    "region",
    "machine_type",
    "cluster",
    "node_pool",
    "sku_description",
    "pricing_model",
)
_OWN = (("usage_amount", "usage"), ("user_labels", "labels"), ("namespace", "namespace"))
_LISTS = (("usage_amount", "usages"), ("user_labels", "label_sets"), ("namespace", "namespaces"),
          ("gross_micros", "grosses"))  # fmt: skip
# Sums back to BIGINT (DuckDB sums BIGINT to HUGEINT, which crosses into Python as Decimal, slowly).
_SUMS = (("gross", "gross"), ("credit", "credits"), ("cud", "cud"), ("sud", "sud"))
_SUMMED = ", ".join(f"CAST(SUM({m}_micros) AS BIGINT) AS {n}" for m, n in _SUMS)
_OUT = (
    "usage_hour AS hour, project_id AS project, zone, resource_name AS instance, instance_id, "
    + ", ".join(c for c in _FIRST if c != "invoice_month")
    + ", " + ", ".join(n for _, n in _SUMS) + ", " + ", ".join(n for _, n in _OWN)
)  # fmt: skip
_MATCH = " AND ".join(f"gpu.{k} IS NOT DISTINCT FROM many.{k}" for k in _NODE_KEYS)
#: Where `stored_gpu_node_hours` puts its filter on the node-hours (nothing when there is none).
_WHERE = "/* node-hours filter */"
_NODE_HOURS_CTES = f"""
WITH gpu AS NOT MATERIALIZED (
  SELECT * FROM billing_hourly WHERE usage_hour >= ? AND usage_hour < ? AND subcategory = 'compute.gpu'
), many AS (
  SELECT {_NODE} FROM gpu GROUP BY {_NODE} HAVING count(*) > 1
), single AS (
  SELECT {_NODE}, {", ".join(_FIRST)}, {", ".join(f"{c} AS {n}" for c, n in _OWN)},
    {", ".join(f"{m}_micros AS {n}" for m, n in _SUMS)}
  FROM gpu ANTI JOIN many ON {_MATCH}
), numbered AS (
  SELECT *, row_number() OVER (PARTITION BY {_NODE} ORDER BY {_ORDER}) AS n
  FROM gpu SEMI JOIN many ON {_MATCH}
), several AS (
  SELECT {_NODE},
    {", ".join(f"first({c} ORDER BY n) AS {c}" for c in _FIRST)},
    {", ".join(f"first({c} ORDER BY n) AS {n}" for c, n in _OWN)}, {_SUMMED},
    {", ".join(f"list({c} ORDER BY n) AS {n}" for c, n in _LISTS)}
  FROM numbered GROUP BY {_NODE}
), node_hours AS (
  SELECT {_OUT}, invoice_month, {", ".join(f"NULL AS {n}" for _, n in _LISTS)} FROM single
  UNION ALL BY NAME
  SELECT {_OUT}, invoice_month, {", ".join(n for _, n in _LISTS)} FROM several
)"""
_GPU_NODE_HOURS = f"""{_NODE_HOURS_CTES}
SELECT * EXCLUDE (invoice_month) FROM node_hours AS n{_WHERE}
ORDER BY hour, invoice_month, project, region, zone, instance, instance_id
"""


_MONEY_TYPES = {m: "BIGINT NOT NULL" for m in _MONEY}
#: The stored type of each `HOURLY_COLUMNS` column (`hourly.sql`'s output, money as integer micros).
_TYPES: dict[str, str] = (
    {k: "VARCHAR" for k in _KEYS}
    | {"usage_hour": "TIMESTAMP NOT NULL", "subcategory": "VARCHAR NOT NULL"}
    | {"row_count": "BIGINT NOT NULL", "usage_amount": "DOUBLE"}
    | _MONEY_TYPES
)

# In the aggregate store (`monitor.state.analytics`): usage hours as UTC TIMESTAMPs, money as BIGINT
# micros; the partition watermarks and the last poll in the same database, so one transaction
# replaces aggregates and moves watermarks together.
_MIGRATIONS = (
    """
    CREATE TABLE billing_partitions (
      partition_time VARCHAR PRIMARY KEY,
      max_export_time VARCHAR NOT NULL,
      row_count BIGINT NOT NULL,
      min_usage_hour VARCHAR,
      max_usage_hour VARCHAR,
      polled_at VARCHAR NOT NULL
    );
    CREATE TABLE billing_hourly (
      """
    + ",\n      ".join([f"{c} {_TYPES[c]}" for c in HOURLY_COLUMNS] + ["polled_at TIMESTAMP NOT NULL"])
    + """
    );
    CREATE TABLE billing_poll (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      polled_at VARCHAR NOT NULL,
      provisional_days INTEGER NOT NULL,
      scope_start VARCHAR NOT NULL
    )
    """,
    # How far back the stored aggregates go (the earliest scope start of the polls that filled
    # them). Stores from before it have none: their next poll reads the invoice month once.
    "ALTER TABLE billing_poll ADD COLUMN covered_from VARCHAR",
)

# Before the aggregate store, these tables lived in the state store: they are a cache of the export,
# so they are dropped there and the first poll rebuilds them in the aggregate store.
_RETIRED = (
    "DROP TABLE IF EXISTS billing_hourly; DROP TABLE IF EXISTS billing_partitions; DROP TABLE IF EXISTS billing_poll",
)


@dataclass(frozen=True)
class PollReport:
    """What one poll looked at, what it found changed and what it cost."""

    now: datetime
    scope_start: datetime
    scope_end: datetime
    partitions_seen: int
    partitions_changed: tuple[datetime, ...]
    windows: tuple[tuple[datetime, datetime], ...]
    hourly_rows_written: int
    queries: tuple[str, ...]
    bytes_processed: int | None
    provisional_since: datetime
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": to_iso(self.now),
            "scope": [to_iso(self.scope_start), to_iso(self.scope_end)],
            "partitions_seen": self.partitions_seen,
            "partitions_changed": [to_iso(p) for p in self.partitions_changed],
            "windows": [[to_iso(a), to_iso(b)] for a, b in self.windows],
            "hourly_rows_written": self.hourly_rows_written,
            "queries": list(self.queries),
            "bytes_processed": self.bytes_processed,
            "provisional_since": to_iso(self.provisional_since),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class HourlyCost:
    """One stored hourly aggregate (money in integer micros), as detectors read it."""

    usage_hour: datetime
    subcategory: str
    gross_micros: int
    cud_micros: int
    sud_micros: int
    other_credit_micros: int
    credit_micros: int
    net_micros: int
    row_count: int
    provisional: bool
    keys: Mapping[str, str | None] = field(default_factory=dict)
    usage_amount: float | None = None

    @property
    def category(self) -> str:
        return category_of(self.subcategory)

    @property
    def gross(self) -> Decimal:
        return micros_to_decimal(self.gross_micros)

    @property
    def credits(self) -> Decimal:
        return micros_to_decimal(self.credit_micros)

    @property
    def net(self) -> Decimal:
        return micros_to_decimal(self.net_micros)

    @property
    def labels(self) -> dict[str, str]:
        """The configured user labels of the row (`billing.labels`), parsed from `k=v,k=v`."""
        return parse_labels(self.keys.get("user_labels"))

    @property
    def scope(self) -> Scope:
        k = self.keys
        return Scope(
            project=k.get("project_id"),
            zone=k.get("zone"),
            region=k.get("region"),
            instance=k.get("resource_name"),
            instance_id=k.get("instance_id"),
            cluster=k.get("cluster"),
            labels=self.labels,
        )


def provisional_since(now: datetime, provisional_days: int) -> datetime:
    """Start of the first provisional usage day: today and the `provisional_days - 1` before it.

    >>> provisional_since(datetime(2026, 11, 10, 12, tzinfo=UTC), 3).isoformat()
    '2026-11-08T00:00:00+00:00'
    """
    return floor_day(now) - timedelta(days=provisional_days - 1)


def poll_scope(now: datetime, lookback_days: int) -> tuple[datetime, datetime]:
    """Usage range a poll covers: `lookback_days` back, plus the previous month early in a month."""
    today = floor_day(now)
    start = today - timedelta(days=lookback_days)
    if now.astimezone(UTC).day <= lookback_days:
        first = today.replace(day=1)
        start = min(start, (first - _DAY).replace(day=1))
    return start, today + _DAY


def migrate(store: AggregateStore) -> None:
    """Create or upgrade the billing tables in the aggregate store."""
    store.migrate(COMPONENT, list(_MIGRATIONS))


def retire_state_tables(store: StateStore) -> None:
    """Drop the billing tables a state store kept before the aggregate store existed (once)."""
    store.migrate("billing_retired", list(_RETIRED))


@contextmanager
def _reading(store: AggregateStore) -> Iterator[Any]:
    """A connection to read the billing tables, created if need be, in one open of the file."""
    with store.session(), store.read() as conn:
        migrate(store)
        yield conn


def last_poll(store: AggregateStore) -> datetime | None:
    """When billing was last polled (None before the first poll)."""
    with _reading(store):
        return _coverage(store)[1]


def latest_export(store: AggregateStore) -> datetime | None:
    """The export's latest load the polls have seen (the largest `MAX(export_time)` of a stored
    partition), None before any: how fresh the export is (`alerts.export_stale`)."""
    with _reading(store) as conn:
        row = conn.execute("SELECT max(max_export_time) FROM billing_partitions").fetchone()
    return _ts(row[0]) if row and row[0] else None


def prune(store: AggregateStore, cut: datetime) -> dict[str, int]:
    """Delete aggregates of usage hours, and watermarks of partitions, before `cut` (retention)."""
    migrate(store)
    with store.transaction() as conn:
        hourly = conn.execute("DELETE FROM billing_hourly WHERE usage_hour < ?", (naive_utc(cut),)).fetchone()
        marks = conn.execute(
            "DELETE FROM billing_partitions WHERE partition_time < ?", (_iso(cut),)
        ).fetchone()
        # the aggregates now go back to `cut` at most
        conn.execute(
            "UPDATE billing_poll SET covered_from = ? WHERE covered_from < ?", (_iso(cut), _iso(cut))
        )
    return {"billing_hourly": int(hourly[0]), "billing_partitions": int(marks[0])}


def poll_billing(
    source: BillingSource,
    store: AggregateStore,
    cfg: BillingConfig,
    now: datetime,
    *,
    label_keys: Sequence[str] | None = None,
    private: bool = False,
    progress: Progress | None = None,
) -> PollReport:
    """One incremental poll; see the module docstring. `now` is injected (aware UTC).

    `progress` hears which query the poll is in (`monitor.progress`): a first poll, or one after
    downtime, reads weeks of export, minutes of queries on BigQuery at scale.

    `label_keys`: the label keys the aggregates keep (`Config.stored_label_keys`: `[billing] labels`
    plus the keys naming a job); None keeps `cfg.labels` alone.

    `private`: no other job or process opens `store` (`gpucost analyze`'s scratch store). Then each
    hourly result streams from the source into the store inside the poll's one transaction; for a
    shared store it is spooled to Parquet first, so the store is not held while the source's queries
    run (they may take minutes on BigQuery). Streamed, `analyze` took a median 3.21 s against 3.37 s
    at bench scale 5 (six runs each) and 18.0 s against 18.9 s at 4.9 M export rows (three each),
    at 20-90 MB more peak memory (2026-12-06, alternated)."""
    began = time.monotonic()
    stage = progress.describe if progress is not None else (lambda _label: None)
    stage("partitions")
    scope_start, scope_end = poll_scope(now, cfg.lookback_days)
    partition_end = scope_end + _DAY
    window = {"usage_start": scope_start, "usage_end": scope_end, "partition_end": partition_end}
    queries, bytes_total = ["partitions"], 0
    marks = source.run("partitions", window)
    bytes_total = _add(bytes_total, marks.bytes_processed)
    # `held`: one open of the file for an idle poll (read the marks, record the poll); `spool`: the
    # results' files until they are in the store
    with ExitStack() as held, ExitStack() as spool:
        held.enter_context(store.session())
        migrate(store)
        covered, last = _coverage(store)
        wanted = [scope_start]
        month_start = month.read_start(month.current_month(now))
        if covered is None or covered > month_start:
            wanted.append(month_start)  # the store lacks the invoice month's start: read it, once
        if last is not None and now - last > _DAY:
            # down longer than a day: rows loaded meanwhile may be for hours the last poll covered
            wanted.append(poll_scope(last, cfg.lookback_days)[0])
        if min(wanted) < scope_start:
            held.close()
            scope_start = min(wanted)
            window = {"usage_start": scope_start, "usage_end": scope_end, "partition_end": partition_end}
            marks = source.run("partitions", window)
            queries.append("partitions")
            bytes_total = _add(bytes_total, marks.bytes_processed)
            held.enter_context(store.session())
        covered = scope_start if covered is None else min(covered, scope_start)
        seen = {_ts(r["partition_time"]): r for r in marks.rows}
        stored = _stored_marks(store, floor_day(scope_start) - _DAY)
        changed = sorted(p for p in seen.keys() | stored.keys() if _mark(seen.get(p)) != _mark(stored.get(p)))

        windows: tuple[tuple[datetime, datetime], ...] = ()
        spooled: list[Path] = []  # the aggregates, never Python rows nor a whole result in memory
        if changed:
            held.close()  # the source's queries may take minutes: the file is not held meanwhile
            stage(f"changed hours of {len(changed)} partition{'s' if len(changed) != 1 else ''}")
            hours, bytes_hours, asked = _changed_hours(source, changed, seen, stored, window)
            queries += ["changed_hours"] * asked
            bytes_total = _add(bytes_total, bytes_hours)
            if hours is None:  # a rewrite, a first poll: the whole span of the changed partitions
                span = _hull([seen.get(p) for p in changed] + [stored.get(p) for p in changed])
                windows = (span,) if span is not None else ()
            elif source.engine == "bigquery":  # billed for the partitions each range scans (its
                windows = hour_ranges(hours, 1)  # day - 1 to now), whatever its hours: one range
            else:  # a query costs a few thousand rows' work before it reads any: cheap gaps are read
                windows = hour_ranges(hours, MAX_RANGES, _cheap_gap(seen.values()))
            windows = tuple(
                (max(lo, scope_start), min(hi, scope_end))
                for lo, hi in windows
                if lo < scope_end and hi > scope_start
            )

        def hourly(lo: datetime, hi: datetime) -> Any:
            nonlocal bytes_total
            params = {"usage_start": lo, "usage_end": hi, "partition_end": partition_end}
            stage(f"hourly {lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M}")
            keys = list(cfg.labels if label_keys is None else label_keys)
            result = source.run("hourly", params | {"label_keys": keys}, arrow=True)
            queries.append("hourly")
            bytes_total = _add(bytes_total, result.bytes_processed)
            return result.table

        if not private:
            for lo, hi in windows:
                if not spooled:  # beside a file store, as its own spill files; removed after the poll
                    near = store.path.parent if store.path is not None else None
                    directory = Path(
                        spool.enter_context(tempfile.TemporaryDirectory(prefix="gpucost-poll-", dir=near))
                    )
                spooled.append(_spool(hourly(lo, hi), directory / f"hourly-{len(spooled)}.parquet"))

        stage("storing")
        with store.transaction() as conn:
            for lo, hi in windows:
                conn.execute(
                    "DELETE FROM billing_hourly WHERE usage_hour >= ? AND usage_hour < ?",
                    (naive_utc(lo), naive_utc(hi)),
                )
            if private:  # each result read as it streams, before the source's next query
                written = sum(_insert_hourly(conn, [hourly(lo, hi)], now) for lo, hi in windows)
            else:
                written = _insert_hourly(conn, spooled, now)
            _write_marks(conn, changed, seen, now)
            conn.execute(
                "INSERT INTO billing_poll (id, polled_at, provisional_days, scope_start, covered_from)"
                " VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET polled_at = excluded.polled_at,"
                " provisional_days = excluded.provisional_days, scope_start = excluded.scope_start,"
                " covered_from = excluded.covered_from",
                (_iso(now), cfg.provisional_days, _iso(scope_start), _iso(covered)),
            )
    return PollReport(
        now=now,
        scope_start=scope_start,
        scope_end=scope_end,
        partitions_seen=len(seen),
        partitions_changed=tuple(changed),
        windows=windows,
        hourly_rows_written=written,
        queries=tuple(queries),
        bytes_processed=bytes_total if _reports_bytes(marks.bytes_processed) else None,
        provisional_since=provisional_since(now, cfg.provisional_days),
        seconds=time.monotonic() - began,
    )


def hourly_costs(
    store: AggregateStore,
    start: datetime,
    end: datetime,
    *,
    now: datetime | None = None,
    provisional_days: int | None = None,
) -> list[HourlyCost]:
    """Stored hourly aggregates with `start <= usage_hour < end`, provisional hours marked.

    Provisional is judged against `now` / `provisional_days` when given, else against the last
    poll's; before any poll nothing is stored and the list is empty.
    """
    with _reading(store) as conn:
        poll = conn.execute("SELECT polled_at, provisional_days FROM billing_poll WHERE id = 1").fetchone()
        raw = conn.execute(_READ, (naive_utc(start), naive_utc(end))).fetchall()
    if poll is None and now is None:
        return []
    ref = now if now is not None else _ts(poll[0])
    days = provisional_days if provisional_days is not None else (poll[1] if poll else 3)
    since = provisional_since(ref, days)
    return [_hourly(r, since) for r in raw]


#: What the jobs engine reads of a stored aggregate after its hour (`alerts.digest_jobs.stored_rows`).
STORED_JOB_COLUMNS = (
    "user_labels",
    "project_id",
    "zone",
    "cluster",
    "resource_name",
    "instance_id",
    "subcategory",
    "gross_micros",
    "credit_micros",
    "usage_amount",
)


def stored_job_columns(store: AggregateStore, start: datetime, end: datetime) -> list[tuple]:
    """The stored aggregates of [start, end) as (usage hour, *`STORED_JOB_COLUMNS`) tuples in the
    readers' order: the rows `hourly_costs` gives, with only what the jobs engine reads of them (no
    `HourlyCost` and keys dict per row: the digest reads a day of them every day)."""
    with _reading(store) as conn:
        raw = conn.execute(_hours_sql(STORED_JOB_COLUMNS), (naive_utc(start), naive_utc(end))).fetchall()
    return [(_parse_ts(r[0]), *r[1:]) for r in raw]


class JobSums(NamedTuple):
    """What a chart of spend per job and hour needs of the stored aggregates (`stored_job_sums`),
    summed in the engine: label sets raw (the stored `user_labels`), money in integer micros, net =
    gross + credits (as `stored_job_columns` gives it).

    - `money`: (hour, labels, gross, net) of the rows other than cluster fees, per hour and label set;
    - `fees`: (hour, labels, project, cluster, gross, net) of each cluster-fee row: a fee with no job
      is shared row by row (`monitor.jobs.build.split_fee`), and a share of a sum is not the sum of
      the rows' shares to the micro;
    - `nodes`: (hour, labels, project, cluster, node, gross) of the compute rows on named cluster
      nodes, per node-hour and label set, in the order of their first stored row in the readers'
      order: the node-hour shares that split a fee are Decimal quotients summed in that order.
    """

    money: list[tuple[datetime, str | None, int, int]]
    fees: list[tuple[datetime, str | None, str | None, str | None, int, int]]
    nodes: list[tuple[datetime, str | None, str | None, str | None, str | None, int]]


def stored_job_sums(store: AggregateStore, start: datetime, end: datetime, fee: str) -> JobSums:
    """The `JobSums` of the stored aggregates of [start, end); `fee`: the subcategory of cluster
    fees (`monitor.jobs.build.CLUSTER_FEE`). The digest charts two weeks of spend per job every day:
    at bench scale 48 that was 710,207 rows into Python, now one sum per hour and label set, the
    fee rows and one sum per cluster node-hour and label set."""
    window = "usage_hour >= $start AND usage_hour < $end"
    money = (
        f"SELECT {_HOUR_TEXT}, user_labels, CAST(SUM(gross_micros) AS BIGINT),"
        " CAST(SUM(gross_micros + credit_micros) AS BIGINT) FROM billing_hourly"
        f" WHERE {window} AND subcategory <> $fee GROUP BY usage_hour, user_labels"
    )
    fees = (
        f"SELECT {_HOUR_TEXT}, user_labels, project_id, cluster, gross_micros, gross_micros + credit_micros"
        f" FROM billing_hourly WHERE {window} AND subcategory = $fee"
    )
    # `cluster <> ''` is false for NULL too: the jobs engine's test is the value's truth
    nodes = (
        f"SELECT {_HOUR_TEXT}, user_labels, project_id, cluster, resource_name, CAST(SUM(gross_micros) AS BIGINT)"
        f" FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY usage_hour, {_ORDER}) AS rn FROM billing_hourly"
        f" WHERE {window} AND cluster <> '' AND resource_name <> '' AND starts_with(subcategory, 'compute.'))"
        " GROUP BY usage_hour, user_labels, project_id, cluster, resource_name ORDER BY MIN(rn)"
    )
    params = {"start": naive_utc(start), "end": naive_utc(end)}
    with _reading(store) as conn:
        raw = [
            conn.execute(money, params | {"fee": fee}).fetchall(),
            conn.execute(fees, params | {"fee": fee}).fetchall(),
            conn.execute(nodes, params).fetchall(),
        ]
    money_rows, fee_rows, node_rows = ([(_parse_ts(r[0]), *r[1:]) for r in rows] for rows in raw)
    return JobSums(money_rows, fee_rows, node_rows)


def net_by_hour(
    store: AggregateStore, start: datetime, end: datetime
) -> list[tuple[datetime, str, str | None, str | None, Decimal]]:
    """Net cost per (usage hour, category, project, invoice month) of the stored aggregates with
    `start <= usage_hour < end`, summed in the engine to the micro: the digest's days, projects and
    month to date come from these few thousand sums, not from two weeks of rows."""
    sql = (
        f"SELECT {_HOUR_TEXT}, {CATEGORY_SQL}, project_id, invoice_month, CAST(SUM(net_micros) AS BIGINT)"
        " FROM billing_hourly WHERE usage_hour >= ? AND usage_hour < ? GROUP BY ALL"
    )
    with _reading(store) as conn:
        raw = conn.execute(sql, (naive_utc(start), naive_utc(end))).fetchall()
    return [(_parse_ts(h), cat, project, inv, micros_to_decimal(net)) for h, cat, project, inv, net in raw]


def rows_by_hour(store: AggregateStore, start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """How many aggregates are stored per usage hour of [start, end), in hour order: what a reader
    that takes a window a few hours at a time cuts it by (`monitor.digest_data`)."""
    sql = (
        f"SELECT {_HOUR_TEXT}, COUNT(*) FROM billing_hourly WHERE usage_hour >= ? AND usage_hour < ?"
        " GROUP BY 1 ORDER BY 1"
    )
    with _reading(store) as conn:
        raw = conn.execute(sql, (naive_utc(start), naive_utc(end))).fetchall()
    return [(_parse_ts(h), n) for h, n in raw]


class ResourceHourNet(NamedTuple):
    """Net cost of one (usage hour, project, resource, SKU, subcategory, cost type): `net_by_resource_hour`."""

    hour: datetime
    category: str
    project: str | None
    resource: str | None
    sku_id: str | None
    subcategory: str
    cost_type: str | None
    net: Decimal
    rows: int = 0  # export rows summed: several resources' where the grain keeps no resource


def net_by_resource_hour(store: AggregateStore, start: datetime, end: datetime) -> list[ResourceHourNet]:
    """Net cost per (usage hour, project, resource, SKU, subcategory, cost type) of the stored
    aggregates with `start <= usage_hour < end`, summed in the engine to the micro: what the digest
    compares one day with the day before on (`monitor.digest_data._match_key`), without a
    `HourlyCost` and its keys dict per stored row (two days at bench scale 48: 101,592 rows, 216 MB)."""
    sql = (
        f"SELECT {_HOUR_TEXT}, {CATEGORY_SQL}, project_id, resource_name, sku_id, subcategory, cost_type,"
        " CAST(SUM(net_micros) AS BIGINT), CAST(SUM(row_count) AS BIGINT) FROM billing_hourly"
        " WHERE usage_hour >= ? AND usage_hour < ?"
        " GROUP BY ALL ORDER BY 1, subcategory, project_id, resource_name, sku_id, cost_type"
    )
    with _reading(store) as conn:
        raw = conn.execute(sql, (naive_utc(start), naive_utc(end))).fetchall()
    return [
        ResourceHourNet(_parse_ts(h), *keys, micros_to_decimal(net), int(rows or 0))
        for h, *keys, net, rows in raw
    ]


def month_net_by_category(
    store: AggregateStore, start: datetime, end: datetime, invoice: str
) -> dict[str, Decimal]:
    """Net cost per category of the stored aggregates with `start <= usage_hour < end` that count in
    the invoice month `invoice` (`monitor.month.row_month`), summed in the engine to the micro."""
    if end <= start:
        return {}
    cond, params = month.row_month_sql(invoice, hour="usage_hour")
    sql = (
        f"SELECT {CATEGORY_SQL}, CAST(SUM(net_micros) AS BIGINT) FROM billing_hourly"
        f" WHERE usage_hour >= ? AND usage_hour < ? AND {cond} GROUP BY 1 ORDER BY 1"
    )
    with _reading(store) as conn:
        rows = conn.execute(sql, [naive_utc(start), naive_utc(end), *params]).fetchall()
    return {category: micros_to_decimal(net) for category, net in rows}


#: Stored columns -> their names in the detectors' engine (`monitor.detectors.costs.columns()`).
_COST_NAMES = {
    "usage_hour": "hour", "project_id": "project", "subcategory": "subcategory", "gross_micros": "cost",
    "credit_micros": "credits", "region": "region", "zone": "zone", "service_description": "service",
    "sku_id": "sku_id", "sku_description": "sku", "pricing_model": "pricing_model", "resource_name": "instance",
    "instance_id": "instance_id", "cluster": "cluster", "invoice_month": "invoice_month", "user_labels": "labels",
    "usage_amount": "usage", "pricing_unit": "unit", "machine_type": "machine_type", "node_pool": "node_pool",
    "namespace": "namespace", "service_id": "service_id", "cost_type": "cost_type", "currency": "currency",
}  # fmt: skip
#: The readers' order (`_ORDER`) in the engine's names: what `Costs.rows` sorts by, so the rows are
#: loaded as they come, without a sort of the whole window (the costs engine has every key).
COST_ORDER: tuple[str, ...] = tuple(_COST_NAMES[c] for c in ("usage_hour", "subcategory", *_KEY_NAMES))
# The stored aggregates as `columns()`, unsorted; `i` (a list's order, for `Costs.from_rows`) is null.
_COST_TABLE = (
    "SELECT CAST(NULL AS BIGINT) AS i, "
    + ", ".join(f"{c} AS {n}" for c, n in _COST_NAMES.items())
    + ", usage_hour >= {since} AS provisional FROM billing_hourly WHERE usage_hour >= {start} AND usage_hour < {end}"
)


def _timestamp(dt: datetime) -> str:
    """A TIMESTAMP literal (a view takes no parameters)."""
    return f"TIMESTAMP '{naive_utc(dt).isoformat(sep=' ')}'"


def open_stored_costs(
    store: AggregateStore,
    start: datetime,
    end: datetime,
    since: datetime,
    over: Callable[[Any, str], _T],
) -> _T:
    """`over(conn, select)` (`monitor.detectors.costs.Costs.over`, say): `select` reads the stored
    aggregates with `start <= usage_hour < end` as `monitor.detectors.costs.columns()` (hours from
    `since` on provisional; in no order: sort by `COST_ORDER`) on `conn`, a connection to the store
    of its own that `over`'s result keeps and closes (it is closed here if `over` fails). The rows stay
    where they are: never a Python object per row, nor a copy of the window."""
    migrate(store)
    select = _COST_TABLE.format(since=_timestamp(since), start=_timestamp(start), end=_timestamp(end))
    conn = store.connect()
    try:
        return over(conn, select)
    except BaseException:
        conn.close()
        raise


def aggregate_summary(store: AggregateStore) -> tuple[int, datetime | None, datetime | None]:
    """How many hourly aggregates the store holds, when billing was last polled and how far back the
    aggregates go (`gpucost check`: a month to date is whole when they reach its read start)."""
    with _reading(store) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM billing_hourly").fetchone()[0]
        covered, last = _coverage(store)
        return int(rows), last, covered


def currencies(store: AggregateStore, start: datetime, end: datetime) -> set[str]:
    """The export currencies of the aggregates in [start, end) (their amounts are stored in USD)."""
    with _reading(store) as conn:
        sql = "SELECT DISTINCT currency FROM billing_hourly WHERE usage_hour >= ? AND usage_hour < ?"
        return {r[0] for r in conn.execute(sql, (naive_utc(start), naive_utc(end))).fetchall() if r[0]}


@dataclass(frozen=True)
class NodeHours:
    """Which GPU node-hours `stored_gpu_node_hours` reads: any that is at or after `since`, is of
    `pricing_model`, is of one of `nodes` (an Arrow table of node-hour columns naming nodes), is
    its node's latest or the hour before it, a node being the values of the `latest_of` columns
    (an estimate is priced from the latest, whose GPU count the hour before may show: a full hour
    when it bills the same, `monitor.gpus.node_gpu_hours`), or (`on_demand_part`) has an
    on-demand part: on demand, or committed with CUD credits short of its gross (what
    `monitor.detectors.inputs.GpuHour.on_demand_share` counts). Nothing set: none."""

    since: datetime | None = None
    pricing_model: str | None = None
    nodes: pa.Table | None = None
    latest_of: tuple[str, ...] = ()
    on_demand_part: bool = False

    def where(self) -> tuple[str, list[Any], dict[str, pa.Table]]:
        """The WHERE clause over `node_hours AS n`, its parameters and the tables it reads."""
        terms: list[str] = []
        params: list[Any] = []
        tables: dict[str, pa.Table] = {}
        if self.since is not None:
            terms.append("n.hour >= ?")
            params.append(naive_utc(self.since))
        if self.pricing_model is not None:
            terms.append("n.pricing_model = ?")
            params.append(self.pricing_model)
        if self.on_demand_part:
            terms.append(
                "(n.pricing_model = 'on_demand'"
                " OR (n.pricing_model = 'committed' AND n.cud <> 0 AND n.gross > abs(n.cud)))"
            )
        if self.nodes is not None:
            same = " AND ".join(f"k.{c} IS NOT DISTINCT FROM n.{c}" for c in self.nodes.column_names)
            terms.append(f"EXISTS (SELECT 1 FROM gpu_nodes_read AS k WHERE {same})")
            tables["gpu_nodes_read"] = self.nodes
        if self.latest_of:
            same = " AND ".join(f"o.{c} IS NOT DISTINCT FROM n.{c}" for c in self.latest_of)
            terms.append(
                f"n.hour >= (SELECT max(o.hour) FROM node_hours AS o WHERE {same}) - INTERVAL 1 HOUR"
            )
        return f" WHERE {' OR '.join(terms) or 'false'}", params, tables


def stored_gpu_node_hours(
    store: AggregateStore, start: datetime, end: datetime, *, only: NodeHours | None = None
) -> pa.Table:
    """GPU spend per node-hour in [start, end) (`_GPU_NODE_HOURS`) as an Arrow table: hour (a UTC
    TIMESTAMP without zone), project, zone, instance, instance id, the first row's region, machine type, cluster, node
    pool, SKU and pricing model, gross, credits, CUD and SUD micros, the first row's usage amount,
    label set and namespace, then, for a node-hour of several rows, each row's usage amounts, label
    sets, namespaces and gross (else null); ordered as the node-hours first appear in the readers'
    order. `only`: those node-hours alone, the same rows in the same order as filtering the whole
    result (the order is total: a node has one node-hour an hour)."""
    where, params, tables = only.where() if only is not None else ("", [], {})
    with _reading(store) as conn, registered(conn, tables):
        sql = _GPU_NODE_HOURS.replace(_WHERE, where)
        return conn.sql(sql, params=[naive_utc(start), naive_utc(end), *params]).to_arrow_table()


def over_gpu_node_hours(
    store: AggregateStore,
    start: datetime,
    end: datetime,
    sql: str,
    tables: Mapping[str, pa.Table] | None = None,
) -> list[tuple]:
    """The rows of `sql` over the GPU node-hours of [start, end) (named `node_hours` in it, with the
    node-hours' columns and `invoice_month`), Arrow `tables` registered for it: for work on them that
    belongs where they are stored, so that only its result crosses into Python."""
    with _reading(store) as conn, registered(conn, tables or {}):
        full = f"{_NODE_HOURS_CTES}\nSELECT * FROM ({sql})"
        return conn.execute(full, [naive_utc(start), naive_utc(end)]).fetchall()


def _changed_hours(
    source: BillingSource,
    changed: list[datetime],
    seen: dict[datetime, Mapping[str, Any]],
    stored: dict[datetime, Mapping[str, Any]],
    window: Mapping[str, datetime],
) -> tuple[set[datetime] | None, int, int]:
    """The usage hours the changed partitions' new rows touch (`monitor.billing_changes`), with the
    bytes and the queries it took; None when only the whole span will do (a first poll, a rewrite,
    too many, or rows the watermark cannot find).

    A partition's new rows are found as those exported after its stored watermark. Rows exported
    before it (an embedded table fed files out of their export order: BigQuery's loads only move
    forward) would be missed, and their hours never aggregated: what the query finds is counted
    against what the partition gained, and a partition short of it is re-aggregated whole. Both
    counts take every row of the partition, whatever its usage time; the hours kept are those in
    the scope."""
    if not stored or len(changed) > MAX_PARTITION_QUERIES:
        return None, 0, 0
    marks = {p: (_mark(stored.get(p)), _mark(seen.get(p))) for p in changed}
    if any(new is None or (old is not None and not appended(old, new)) for old, new in marks.values()):
        return None, 0, 0
    hours: set[datetime] = set()
    scanned = asked = 0
    for p, (old, new) in marks.items():
        since = _ts(old[1]) if old is not None else _EPOCH  # a new partition: every row is new
        result = source.run("changed_hours", {"partition_time": p, "since_export": since})
        scanned, asked = _add(scanned, result.bytes_processed), asked + 1
        gained = new[2] - (old[2] if old is not None else 0)
        if sum(int(r["row_count"]) for r in result.rows) != gained:
            log.info(
                "billing rows loaded behind a partition's watermark: the whole span is read",
                extra={"partition": _iso(p)},
            )
            return None, scanned, asked
        found = [_ts(r["usage_hour"]) for r in result.rows]
        hours |= {h for h in found if window["usage_start"] <= h < window["usage_end"]}
        if older := sorted(h for h in found if h < window["usage_start"]):
            _tell_older(older, p, window["usage_start"])
    return hours, scanned, asked


def _tell_older(older: list[datetime], partition: datetime, scope_start: datetime) -> None:
    """New rows for usage before the poll's scope (rows that landed later than the lookback, or a
    correction made weeks after the usage, which Google invoices in the month it is made) are not
    read: re-aggregating an hour means reading every partition loaded since it, which on BigQuery
    can cost more than the poll's byte cap on a large export. The partition's watermark moves past
    them, so no later poll reads them either, however long its lookback. Said, so a month to date
    that misses them is not silently taken for the invoice's."""
    log.warning(
        "billing rows loaded now are for usage before the poll's lookback (late rows or corrections);"
        " they are not read, and month to date and baselines over those hours miss them"
        " (gpucost analyze over those days reads them)",
        extra={
            "partition": _iso(partition),
            "hours": len(older),
            "earliest": _iso(older[0]),
            "lookback_from": _iso(scope_start),
        },
    )


def _hourly(r: tuple, since: datetime) -> HourlyCost:
    """A row of `_READ`: hour, subcategory, the `_MONEY` columns, row count, usage, then the keys."""
    hour = _ts(r[0])
    gross, cud, sud, other, credit, net = r[2:8]
    return HourlyCost(
        usage_hour=hour,
        subcategory=r[1],
        gross_micros=gross,
        cud_micros=cud,
        sud_micros=sud,
        other_credit_micros=other,
        credit_micros=credit,
        net_micros=net,
        row_count=r[8],
        provisional=hour >= since,
        keys=dict(zip(_KEY_NAMES, r[10:], strict=True)),
        usage_amount=r[9],
    )


def write_rows(store: AggregateStore, rows: Sequence[Mapping[str, Any]], now: datetime) -> int:
    """Store `hourly.sql`-shaped dict rows (tests and tools that build aggregates by hand; the poll
    itself moves Arrow tables). `usage_hour` may be an aware datetime or ISO text."""
    import pyarrow as pa

    types = {
        "VARCHAR": pa.string(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
    }
    schema = pa.schema([(c, types[_TYPES[c].split()[0]]) for c in HOURLY_COLUMNS])
    cells = [{c: _ts(r[c]) if c == "usage_hour" else r.get(c) for c in HOURLY_COLUMNS} for r in rows]
    migrate(store)
    with store.transaction() as conn:
        return _insert_hourly(conn, [pa.Table.from_pylist(cells, schema=schema)], now)


def _watched(data: Any, failed: list[BaseException]) -> Any:
    """`data` (an `hourly.sql` result) as the store reads it, any error the source raises while it
    streams kept in `failed`: read by the store's engine, it would come out as that engine's own
    aborted transaction."""
    import pyarrow as pa

    if not isinstance(data, pa.RecordBatchReader):
        return data

    def batches() -> Iterator[Any]:
        try:
            yield from data
        except BaseException as e:
            failed.append(e)
            raise

    return pa.RecordBatchReader.from_batches(data.schema, batches())


def _spool(data: Any, path: Path) -> Path:
    """An `hourly.sql` result (an Arrow table or a stream of batches, as the engine returns it)
    written batch by batch to the Parquet file `path`, so it never sits whole in memory: a first
    poll of the bench's scale-48 export returns 3.1 M aggregates, 1.3 GB as an Arrow table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = data.to_reader() if isinstance(data, pa.Table) else data
    with pq.ParquetWriter(path, reader.schema) as out:
        for batch in reader:
            out.write_batch(batch)
    return path


def _insert_hourly(
    conn: Any, results: Sequence[Path | pa.Table | pa.RecordBatchReader | None], now: datetime
) -> int:
    """Append `hourly.sql` results (Arrow tables or record batch readers as the source returns them,
    or Parquet files of them: `_spool`) inside the engine: each column cast to its stored type
    (BigQuery's INT64 / DuckDB's DECIMAL sums to BIGINT, the UTC TIMESTAMP to a plain one). Returns
    the rows written. A reader that fails as the engine reads it raises the source's error
    (`_watched`)."""
    import pyarrow as pa

    cols = ", ".join((*HOURLY_COLUMNS, "polled_at"))
    select = ", ".join(f"CAST({c} AS {_TYPES[c].removesuffix(' NOT NULL')})" for c in HOURLY_COLUMNS)

    def insert(source: str, *params: Any) -> int:
        sql = f"INSERT INTO billing_hourly ({cols}) SELECT {select}, ? FROM {source}"
        return int(conn.execute(sql, [naive_utc(now), *params]).fetchone()[0])

    written = 0
    for result in results:
        if result is None or (isinstance(result, pa.Table) and result.num_rows == 0):
            continue  # nothing to write (a reader's rows are known once it is read)
        if isinstance(result, Path):
            written += insert("read_parquet(?)", str(result))
            continue
        failed: list[BaseException] = []
        try:
            with registered(conn, {"hourly_result": _watched(result, failed)}):
                written += insert("hourly_result")
        except Exception:
            if failed:  # the source's error, not the aborted transaction it left the store in
                raise failed[0] from None
            raise
    return written


def _write_marks(conn: Any, changed: list[datetime], seen: dict[datetime, dict], now: datetime) -> None:
    for p in changed:
        row = seen.get(p)
        if row is None:  # the partition vanished (table rewritten): forget it
            conn.execute("DELETE FROM billing_partitions WHERE partition_time = ?", (_iso(p),))
            continue
        conn.execute(
            "INSERT INTO billing_partitions (partition_time, max_export_time, row_count, min_usage_hour,"
            " max_usage_hour, polled_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (partition_time) DO UPDATE"
            " SET max_export_time = excluded.max_export_time, row_count = excluded.row_count,"
            " min_usage_hour = excluded.min_usage_hour, max_usage_hour = excluded.max_usage_hour,"
            " polled_at = excluded.polled_at",
            (*_mark(row), _iso(now)),
        )


_MARK_COLUMNS = ("partition_time", "max_export_time", "row_count", "min_usage_hour", "max_usage_hour")


def _coverage(store: AggregateStore) -> tuple[datetime | None, datetime | None]:
    """How far back the stored aggregates go (None: a store from before it was kept), and when the
    last poll was (None: no poll yet)."""
    with store.read() as conn:
        row = conn.execute("SELECT covered_from, polled_at FROM billing_poll WHERE id = 1").fetchone()
    if row is None:
        return None, None
    return (_ts(row[0]) if row[0] is not None else None), _ts(row[1])


def _stored_marks(store: AggregateStore, since: datetime) -> dict[datetime, dict[str, Any]]:
    with store.read() as conn:
        rows = conn.execute(
            f"SELECT {', '.join(_MARK_COLUMNS)} FROM billing_partitions WHERE partition_time >= ?",
            (_iso(since),),
        ).fetchall()
    return {_ts(r[0]): dict(zip(_MARK_COLUMNS, r, strict=True)) for r in rows}


def _mark(row: Mapping[str, Any] | None) -> tuple | None:
    """A partition's watermark in the stored (string) form, comparable across polls."""
    if row is None:
        return None
    return (
        _iso(_ts(row["partition_time"])),
        _iso(_ts(row["max_export_time"])),
        int(row["row_count"]),
        _iso(_ts(row["min_usage_hour"])) if row["min_usage_hour"] else None,
        _iso(_ts(row["max_usage_hour"])) if row["max_usage_hour"] else None,
    )


def _cheap_gap(marks: Iterable[Mapping[str, Any]]) -> int:
    """`gap_worth_reading` for the export's density in the partitions the poll sees: their rows
    over the usage hours they span."""
    marks = list(marks)
    span = _hull(marks)
    if span is None:
        return 0
    return gap_worth_reading(sum(int(r["row_count"]) for r in marks), (span[1] - span[0]) // _HOUR)


def _hull(rows: list[Mapping[str, Any] | None]) -> tuple[datetime, datetime] | None:
    """The usage hours covered by these partitions: [earliest hour, latest hour + 1h)."""
    lows = [_ts(r["min_usage_hour"]) for r in rows if r and r["min_usage_hour"]]
    highs = [_ts(r["max_usage_hour"]) for r in rows if r and r["max_usage_hour"]]
    if not lows or not highs:
        return None
    return floor_hour(min(lows)), floor_hour(max(highs)) + _HOUR


def _ts(v: datetime | str) -> datetime:
    if isinstance(v, datetime):
        return v.astimezone(UTC) if v.tzinfo else v.replace(tzinfo=UTC)
    return _parse_ts(v)


@functools.lru_cache(maxsize=65536)
def _parse_ts(v: str) -> datetime:
    """Stored times are hours, a few thousand distinct over millions of rows: parse each once."""
    return datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(UTC)


@functools.lru_cache(maxsize=65536)
def _iso(dt: datetime) -> str:
    """Fixed-width UTC text (microseconds always present) so stored times sort as strings."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _add(total: int, part: int | None) -> int:
    return total + (part or 0)


def _reports_bytes(first: int | None) -> bool:
    return first is not None
