"""Utilization hours copied into the aggregate store, where the GPU join reads them.

The state store (SQLite / PostgreSQL) keeps the samples and their hours (`utilization_hours`): the
record, which cannot be read again from Cloud Monitoring past its retention. A detection run read
the 14-day window's hours from it into Python and turned them back into Arrow tables for the join:
345,680 GPU-hours at bench scale 48, 1.6-2.1 s, where the same tables come out of DuckDB in 0.2 s
(docs/performance.md, 2026-12-06, eighteenth session).

So the aggregate store holds a copy (`util_hours`), brought up to date before it is read (`sync`):
every rewrite of `utilization_hours` logs the whole hours it rewrote (`utilization_changes`,
`monitor.utilization.state.log_change`), and the copy re-reads the hours of the changes after the
last it took, a day at a time, then moves its mark. A copy without a mark, made of another state
store (the token differs), or further behind than the changes kept, is made again whole. The copy is
a cache: deleting the aggregate store loses nothing.

`join_tables` gives what `monitor.gpus.util_tables(load_util_hours(...))` gives, the same rows in
the same order: the hours of a GPU seen through one series straight from the copy, those of a GPU
seen through several (two presets, a GKE node's node and container duty cycles) reduced from their
points in Python, as `load_util_hours` reduces them. `util_hours` gives `load_util_hours(...)`
itself, or only the hours of some hosts that its caller names (the estimates: the hours billing
does not cover).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from monitor.gpus import Hosts, arrow_table
from monitor.sources.presets import Signal
from monitor.state.analytics import AggregateStore, registered
from monitor.state.store import StateStore
from monitor.utilization.coverage import intersect, merge
from monitor.utilization.hourly import UtilHours
from monitor.utilization.state import _LABELS, _POINTS, _epoch, _in_order, gpus_of_series, reduce_several
from monitor.utilization.state import migrate as migrate_state

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COMPONENT", "Select", "join_tables", "sync", "util_hours", "whole_hours"]

COMPONENT = "utilization_copy"
_MIGRATIONS = (
    """
    CREATE TABLE util_hours (
      series BIGINT NOT NULL, hour BIGINT NOT NULL, points BIGINT NOT NULL, pct_sum DOUBLE NOT NULL,
      memory_max DOUBLE, idle_held BIGINT NOT NULL, first_start BIGINT NOT NULL, last_start BIGINT NOT NULL
    );
    CREATE TABLE util_copy (id INTEGER PRIMARY KEY CHECK (id = 1), token BIGINT NOT NULL, seq BIGINT NOT NULL)
    """,
)
_COLUMNS = ("series", "hour", "points", "pct_sum", "memory_max", "idle_held", "first_start", "last_start")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM utilization_hours"


def _token(conn: Any) -> int:
    """The state store's token (`utilization_changes` row 0), written on first ask."""
    row = conn.execute("SELECT lo FROM utilization_changes WHERE seq = 0").fetchone()
    if row is not None:
        return int(row[0])
    token = secrets.randbits(62)
    conn.execute("INSERT INTO utilization_changes (seq, lo, hi) VALUES (0, ?, 0)", (token,))
    return token


def sync(store: StateStore, aggregates: AggregateStore) -> int:
    """Bring the aggregate store's copy of the utilization hours up to the state store's; returns
    the hours copied. A day of hours at a time (a whole copy of 14 days at bench scale 48 is 1.6 M
    of them), each day in a transaction of each store; the mark moves last. A sync stopped on the
    way leaves the mark where it was, so the next one copies the same hours again; changes
    committed while it copies are after the mark it keeps, so the next one reads them too."""
    migrate_state(store)
    aggregates.migrate(COMPONENT, _MIGRATIONS)
    with aggregates.exclusive():  # two syncs interleaved could leave a range deleted under a mark past it
        return _sync(store, aggregates)


def _sync(store: StateStore, aggregates: AggregateStore) -> int:
    with aggregates.read() as conn:
        mark = conn.execute("SELECT token, seq FROM util_copy").fetchone()
    with store.transaction() as conn:
        token = _token(conn)
        last, oldest = conn.execute(
            "SELECT MAX(seq), MIN(seq) FROM utilization_changes WHERE seq > 0"
        ).fetchone()
        last = int(last or 0)
        whole = (
            mark is None
            or mark[0] != token
            or mark[1] > last
            or (oldest is not None and oldest > mark[1] + 1)
        )
        if not whole and mark[1] == last:
            return 0
        first, final = conn.execute("SELECT MIN(hour), MAX(hour) FROM utilization_hours").fetchone()
        if whole:
            ranges = None
        else:
            changed = conn.execute(
                "SELECT lo, hi FROM utilization_changes WHERE seq > ?", (mark[1],)
            ).fetchall()
            ranges = merge((int(lo), int(hi)) for lo, hi in changed)
    with aggregates.transaction() as dconn:  # the hours the state store may no longer have
        if ranges is None:
            dconn.execute("DELETE FROM util_hours")
        for lo, hi in ranges or ():
            dconn.execute("DELETE FROM util_hours WHERE hour >= ? AND hour < ?", (lo, hi))
    span = [] if first is None else [(int(first), int(final) + 3600)]  # where it has hours
    copied = 0
    for lo, hi in _days(span if ranges is None else intersect(ranges, span)):
        with store.transaction() as conn:
            rows = conn.execute(f"{_SELECT} WHERE hour >= ? AND hour < ?", (lo, hi)).fetchall()
        with aggregates.transaction() as dconn:
            dconn.execute("DELETE FROM util_hours WHERE hour >= ? AND hour < ?", (lo, hi))
            if rows:
                _insert(dconn, rows)
        copied += len(rows)
    with aggregates.transaction() as dconn:
        dconn.execute(
            "INSERT INTO util_copy VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET token = excluded.token,"
            " seq = excluded.seq",
            (token, last),
        )
    return copied


_DAY = 86_400


def _days(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """`ranges` cut at UTC midnights: what one step of a sync copies."""
    out = []
    for lo, hi in ranges:
        while lo < hi:
            cut = min(hi, lo - lo % _DAY + _DAY)
            out.append((lo, cut))
            lo = cut
    return out


def _insert(conn: Any, rows: list[tuple]) -> None:
    import pyarrow as pa

    i, f = pa.int64(), pa.float64()
    types = (i, i, i, f, f, i, i, i)  # `_COLUMNS`'
    table = pa.table(
        [pa.array(list(map(itemgetter(n), rows)), t) for n, t in enumerate(types)], names=list(_COLUMNS)
    )
    with registered(conn, {"util_copied": table}):
        conn.execute("INSERT INTO util_hours SELECT * FROM util_copied")


def whole_hours(*times: datetime) -> bool:
    """Whether every one of `times` starts a UTC hour: `join_tables` reads whole hours (a time zone
    of a half-hour offset cuts them)."""
    return all(t.timestamp() % 3600 == 0 for t in times)


def join_tables(
    store: StateStore, aggregates: AggregateStore, start: datetime, end: datetime
) -> dict[str, pa.Table]:
    """`monitor.gpus.util_tables(load_util_hours(store, start, end))`, the utilization hours read
    from the aggregate store's copy (`sync` first). `start` and `end` are whole hours."""
    import pyarrow as pa

    if not whole_hours(start, end):
        raise ValueError(f"join_tables: [{start}, {end}) is not whole hours")
    lo, hi = _epoch(start), _epoch(end)
    labels, key, single, container, keyed = _series(store, aggregates, lo, hi)
    blocks: dict[tuple, list[tuple[tuple, tuple]]] = {}
    for k, row in keyed:
        blocks.setdefault(k[0], []).append((k, row))
    # the blocks in GPU-key order (`_in_order`), the hosts numbered as `util_tables` numbers them
    ordered = sorted(
        [(k, None) for k in blocks] + [(key(labels[sid][:8]), sid) for sid in single], key=itemgetter(0)
    )
    hosts = Hosts()
    per_series: list[tuple] = []  # series, host, gpu, rank, block, project, host key
    several: list[tuple] = []  # the reduced rows of GPUs of several series, with their block and place
    for block, (gpu_key, sid) in enumerate(ordered):
        if sid is not None:
            lab = labels[sid]
            per_series.append(
                (sid, hosts.number(lab[:6]), lab[6], Signal.rank(lab[8]), block, gpu_key[0], gpu_key[1])
            )
            continue
        for place, (_, row) in enumerate(sorted(blocks[gpu_key], key=itemgetter(0))):
            several.append(
                (hosts.number(row[:6]), row[6], _epoch(row[8]), row[10], row[11], row[12], Signal.rank(row[9]),
                 bool(row[14]), row[15], row[16], block, place)
            )  # fmt: skip
    names = ("sid", "gpu", "hour", "samples", "pct_sum", "memory_max", "rank", "container", "first", "last")
    i, f, s, b = pa.int64(), pa.float64(), pa.string(), pa.bool_()
    types = (i, s, i, i, f, f, i, b, i, i)
    tables = {
        "util_series": arrow_table(
            ("series", "sid", "gpu", "rank", "block", "p", "h"), per_series, (i, i, s, i, i, s, s)
        ),
        "util_several": arrow_table((*names, "block", "place"), several, (*types, i, i)),
        "util_container": arrow_table(
            ("p", "h", "hour"), [(p, h, _epoch(w)) for p, h, w in container], (s, s, i)
        ),
    }
    sql = f"""
        SELECT m.sid, m.gpu, u.hour, u.points AS samples, u.pct_sum, u.memory_max, m.rank,
               c.hour IS NOT NULL AS container, u.first_start AS first, u.last_start AS last,
               m.block, u.hour AS place
        FROM util_hours AS u
        JOIN util_series AS m ON m.series = u.series
        LEFT JOIN util_container AS c ON c.p = m.p AND c.h = m.h AND c.hour = u.hour
        WHERE u.hour >= {lo} AND u.hour < {hi}
        UNION ALL SELECT * FROM util_several
        ORDER BY block, place"""
    with aggregates.read() as conn, registered(conn, tables):
        hours = conn.sql(sql).to_arrow_table().select(list(names))
    return {
        "gpu_hosts": hosts.table(),
        "gpu_util_hours": hours.cast(pa.schema([(n, t) for n, t in zip(names, types, strict=True)])),
    }


#: Which hours to read of some hosts (`util_hours`' `select`): given every host the hours show, for
#: some of them the hours (epoch seconds) to read; the others' are read whole.
Select = Callable[[Collection[tuple]], Mapping[tuple, Collection[int]]]


def util_hours(
    store: StateStore,
    aggregates: AggregateStore,
    start: datetime,
    end: datetime,
    select: Select | None = None,
) -> UtilHours:
    """`monitor.utilization.state.load_util_hours(store, start, end)`, the hours read from the copy
    (`sync` first). `start` and `end` are whole hours.

    `select`, given every host the hours show (the values of project, zone, instance_id,
    instance_name, cluster and node_name), may name the hours to read of some hosts: the other
    hours of their GPUs seen through one series are then left out, as if never stored. The
    estimates read only the hours billing does not cover (`monitor.assemble._unbilled`): at bench
    scale 48 their three provisional days held 345,680 GPU-hours, all but a few billed, which
    took 0.7-1.0 s to read from the state store into Python. The hours of GPUs seen through
    several series are reduced from their points, as `load_util_hours` reduces them, and kept
    whole."""
    import pyarrow as pa

    if not whole_hours(start, end):
        raise ValueError(f"util_hours: [{start}, {end}) is not whole hours")
    lo, hi = _epoch(start), _epoch(end)
    labels, key, single, container, keyed = _series(store, aggregates, lo, hi)
    keep = select({labels[sid][:6] for sid in single} | {row[:6] for _, row in keyed}) if select else {}
    whole = [(sid,) for sid in single if labels[sid][:6] not in keep]
    wanted = [(sid, t) for sid in single if labels[sid][:6] in keep for t in keep[labels[sid][:6]]]
    columns, i = ", ".join(f"u.{c}" for c in _COLUMNS), pa.int64()
    rows = _read(
        aggregates,
        f"SELECT {columns} FROM util_hours AS u JOIN util_whole USING (series) WHERE u.hour >= $lo AND u.hour < $hi"
        f" UNION ALL SELECT {columns} FROM util_hours AS u JOIN util_wanted USING (series, hour)"
        " WHERE u.hour >= $lo AND u.hour < $hi ORDER BY series, hour",
        {"lo": lo, "hi": hi},
        {"util_whole": arrow_table(("series",), whole, (i,)),
         "util_wanted": arrow_table(("series", "hour"), wanted, (i, i))},
    )  # fmt: skip
    return _in_order(keyed, rows, labels, key, container)


class _Series(NamedTuple):
    """The series of the copy's hours in a range, read as `load_util_hours` reads them: their
    labels (`_LABELS`), their GPU key, the series of GPUs seen through one alone, the host-hours
    with container duty cycles, and the hours of GPUs seen through several, reduced from their
    points in Python (`reduce_several`: order key, `UtilHours` row)."""

    labels: dict[int, tuple]
    key: Callable[[tuple], tuple[str, str, str]]
    single: list[int]
    container: set
    keyed: list[tuple[tuple, tuple]]


def _series(store: StateStore, aggregates: AggregateStore, lo: int, hi: int) -> _Series:
    """`_Series` of the copy's hours in [lo, hi), for `join_tables` and `util_hours`."""
    present = [r[0] for r in _read(
        aggregates, "SELECT DISTINCT series FROM util_hours WHERE hour >= $lo AND hour < $hi ORDER BY 1",
        {"lo": lo, "hi": hi},
    )]  # fmt: skip
    with store.transaction() as conn:
        cur = conn.cursor()
        cur.row_factory = None
        labels = {r[0]: tuple(r[1:]) for r in cur.execute(_LABELS).fetchall()}
        key, shared = gpus_of_series(labels, present)
        points = {sid: cur.execute(_POINTS, (sid, lo, hi)).fetchall() for sid in shared}
    single = [sid for sid in present if sid not in points]
    containers = [sid for sid in single if labels[sid][8] == Signal.CONTAINER_DUTY_CYCLE]
    container_rows = _read(
        aggregates,
        "SELECT series, hour FROM util_hours WHERE hour >= $lo AND hour < $hi AND list_contains($sids, series)",
        {"lo": lo, "hi": hi, "sids": containers},
    ) if containers else []  # fmt: skip
    container, keyed = reduce_several(labels, points, container_rows, key)
    return _Series(labels, key, single, container, keyed)


def _read(
    aggregates: AggregateStore,
    sql: str,
    params: Mapping[str, Any],
    tables: Mapping[str, pa.Table] | None = None,
) -> list[tuple]:
    """`sql`'s rows from the aggregate store, with `tables` registered beside the copy."""
    with aggregates.read() as conn, registered(conn, tables or {}):
        return conn.execute(sql, dict(params)).fetchall()
