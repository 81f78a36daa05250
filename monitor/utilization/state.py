"""The "utilization" component of the state store: watermarks and the samples of each window.

Per polled scope (project) and preset the store keeps the end of the last window read successfully
(`utilization_windows`), every range read (`utilization_coverage`, `monitor.utilization.coverage`)
and the samples read; re-reading a window replaces its samples, so late
points replace earlier ones and nothing is ever doubled.

Samples are stored narrow, because a fleet has hundreds of thousands of them: each distinct GPU
identity (scope, preset, host, GPU, signal and labels) is one row of `utilization_series`, and each
sample one row of `utilization_points` (series number, integer epoch seconds, value), clustered by
series then start: a series' window is one range, read back already in time order. The `utilization_samples` view shows them the old, wide way with
RFC 3339 times, for people and ad-hoc queries.

Migration 2 replaced the wide table of ISO-string rows: the old rows and watermarks are dropped (the
store is a cache of the source), so the next poll reads its full initial window again.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from monitor.sources.presets import Signal
from monitor.state.store import StateStore
from monitor.timeutil import parse_timestamp
from monitor.utilization.coverage import record_coverage
from monitor.utilization.hourly import (
    UtilHours,
    container_hours,
    ident_of,
    order_key,
    reduce_samples,
)
from monitor.utilization.records import BUSY_EPSILON_PCT, FetchResult, GpuSample, SampleDraft, freeze
from monitor.utilization.select import host_keys, merge, resolve_duty_cycles

__all__ = [
    "COMPONENT",
    "gpus_of_series",
    "load_samples",
    "load_util_hours",
    "log_change",
    "migrate",
    "read_watermark",
    "reduce_several",
    "replace_window",
    "replace_windows",
]

COMPONENT = "utilization"

_V1 = """
CREATE TABLE utilization_windows (
  scope TEXT NOT NULL, preset TEXT NOT NULL, polled_until TEXT NOT NULL, updated_at TEXT NOT NULL,
  PRIMARY KEY (scope, preset));
CREATE TABLE utilization_samples (
  scope TEXT NOT NULL, preset TEXT NOT NULL, project TEXT NOT NULL, host TEXT NOT NULL,
  zone TEXT, instance_id TEXT, instance_name TEXT, cluster TEXT, node_name TEXT,
  gpu TEXT NOT NULL, model TEXT, start TEXT NOT NULL, "end" TEXT NOT NULL,
  utilization_pct REAL NOT NULL, signal TEXT NOT NULL, memory_used_bytes REAL,
  PRIMARY KEY (scope, preset, project, host, gpu, signal, start));
CREATE INDEX utilization_samples_start ON utilization_samples (start)
"""
_V2 = """
DROP TABLE utilization_samples;
DELETE FROM utilization_windows;
CREATE TABLE utilization_series (
  id INTEGER PRIMARY KEY, scope TEXT NOT NULL, preset TEXT NOT NULL, project TEXT NOT NULL,
  host TEXT NOT NULL, gpu TEXT NOT NULL, signal TEXT NOT NULL, zone TEXT, instance_id TEXT,
  instance_name TEXT, cluster TEXT, node_name TEXT, model TEXT);
CREATE INDEX utilization_series_scope ON utilization_series (scope, preset);
CREATE TABLE utilization_points (
  start INTEGER NOT NULL, series INTEGER NOT NULL, "end" INTEGER NOT NULL,
  utilization_pct REAL NOT NULL, memory_used_bytes REAL,
  PRIMARY KEY (series, start)) WITHOUT ROWID;
CREATE VIEW utilization_samples AS
  SELECT s.scope, s.preset, s.project, s.host, s.zone, s.instance_id, s.instance_name, s.cluster,
    s.node_name, s.gpu, s.model, strftime('%Y-%m-%dT%H:%M:%SZ', p.start, 'unixepoch') AS start,
    strftime('%Y-%m-%dT%H:%M:%SZ', p."end", 'unixepoch') AS "end", p.utilization_pct, s.signal,
    p.memory_used_bytes
  FROM utilization_points p JOIN utilization_series s ON s.id = p.series
"""
#: What was read, per (scope, preset): see `monitor.utilization.coverage`. Stores written before it
#: have no record of their reads, so they start with none and the backfill reads the window again.
_V3 = """
CREATE TABLE utilization_coverage (
  scope TEXT NOT NULL, preset TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
  PRIMARY KEY (scope, preset, start))
"""
#: A series' points reduced per hour of their start, what `monitor.utilization.hourly.UtilHour`
#: holds (points, sum of utilization, memory held, whether a window held memory while idle, the
#: first and last start), as `utilization_hours` columns: the one definition the migrations, every
#: rebuild and reads of part of an hour use. Its idle test bakes in `BUSY_EPSILON_PCT`: changing
#: that constant needs a migration that rebuilds `utilization_hours`.
_HOUR_COLUMNS = "series, hour, points, pct_sum, memory_max, idle_held, first_start, last_start"
_PER_HOUR = (
    "series, start - start % 3600, COUNT(*), SUM(utilization_pct), MAX(memory_used_bytes),"
    f" MAX(CASE WHEN memory_used_bytes <> 0 AND utilization_pct < {BUSY_EPSILON_PCT!r} THEN 1 ELSE 0 END),"
    " MIN(start), MAX(start)"
)
_BY_HOUR = " GROUP BY series, start - start % 3600"
#: `_PER_HOUR` kept for every series and hour by every write (`replace_window`, retention) for the
#: hours it touches, so a read of weeks sums hours rather than twelve 5-minute points each; filled
#: from the stored points on migration. (As first written, without the last start: `_V5`.)
_V4 = f"""
CREATE TABLE utilization_hours (
  series INTEGER NOT NULL, hour INTEGER NOT NULL, points INTEGER NOT NULL, pct_sum REAL NOT NULL,
  memory_max REAL, idle_held INTEGER NOT NULL, first_start INTEGER NOT NULL,
  PRIMARY KEY (series, hour)) WITHOUT ROWID;
INSERT INTO utilization_hours (series, hour, points, pct_sum, memory_max, idle_held, first_start)
  SELECT series, start - start % 3600, COUNT(*), SUM(utilization_pct), MAX(memory_used_bytes),
  MAX(CASE WHEN memory_used_bytes <> 0 AND utilization_pct < {BUSY_EPSILON_PCT!r} THEN 1 ELSE 0 END), MIN(start)
  FROM utilization_points GROUP BY series, start - start % 3600
"""
#: The last start of each series-hour too: the GPU join tells the GPUs of a GKE node recreated
#: under its name within an hour apart by when they reported (`monitor.gpus`). Rebuilt from the
#: stored points, as `_V4` filled it.
_V5 = f"""
DROP TABLE utilization_hours;
CREATE TABLE utilization_hours (
  series INTEGER NOT NULL, hour INTEGER NOT NULL, points INTEGER NOT NULL, pct_sum REAL NOT NULL,
  memory_max REAL, idle_held INTEGER NOT NULL, first_start INTEGER NOT NULL, last_start INTEGER NOT NULL,
  PRIMARY KEY (series, hour)) WITHOUT ROWID;
INSERT INTO utilization_hours ({_HOUR_COLUMNS}) SELECT {_PER_HOUR} FROM utilization_points{_BY_HOUR}
"""
#: Every rewrite of `utilization_hours`, as the whole hours [lo, hi) it rewrote (`rebuild_hours`,
#: and retention's cut): what the aggregate store's copy of the hours reads to catch up
#: (`monitor.utilization.mirror`). The row `seq = 0` holds the store's token in `lo`, written on the
#: copy's first read, so a copy made of another state store is never taken for this one's.
_V6 = "CREATE TABLE utilization_changes (seq INTEGER PRIMARY KEY, lo INTEGER NOT NULL, hi INTEGER NOT NULL)"
_MIGRATIONS = (_V1, _V2, _V3, _V4, _V5, _V6)
#: How many changes are kept: a copy further behind is made again whole (about four days of a
#: daemon that polls 15 scopes and presets once a minute, a change each).
KEPT_CHANGES = 100_000

# (project, host, gpu, signal) then the labels: one `utilization_series` row within a scope+preset.
_SERIES_COLS = ("project", "host", "gpu", "signal", "zone", "instance_id", "instance_name", "cluster")
_SERIES_COLS += ("node_name", "model")
_IN_SCOPE = "SELECT id FROM utilization_series WHERE scope = ? AND preset = ?"


def _epoch(dt: datetime) -> int:
    """Whole epoch seconds (sub-second parts are dropped, as the old ISO text did)."""
    return math.floor(dt.timestamp())


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def migrate(store: StateStore) -> None:
    store.migrate(COMPONENT, _MIGRATIONS)


def read_watermark(store: StateStore, scope: str, preset: str) -> datetime | None:
    """End of the last window read successfully for (scope, preset); None before the first poll."""
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT polled_until FROM utilization_windows WHERE scope = ? AND preset = ?", (scope, preset)
        ).fetchone()
    return parse_timestamp(row[0]) if row else None


def _series_ids(conn: Any, scope: str, preset: str) -> dict[tuple, int]:
    cols = ", ".join(_SERIES_COLS)
    rows = conn.execute(
        f"SELECT {cols}, id FROM utilization_series WHERE scope = ? AND preset = ?", (scope, preset)
    ).fetchall()
    return {tuple(r[:-1]): r[-1] for r in rows}


def _new_series(conn: Any, scope: str, preset: str, ident: tuple) -> int:
    cols = ", ".join(("scope", "preset", *_SERIES_COLS))
    marks = ", ".join("?" * (2 + len(_SERIES_COLS)))
    cur = conn.execute(f"INSERT INTO utilization_series ({cols}) VALUES ({marks})", (scope, preset, *ident))
    return int(cur.lastrowid)


def replace_window(
    store: StateStore,
    scope: str,
    preset: str,
    start: datetime,
    end: datetime,
    samples: Iterable[GpuSample],
    *,
    now: datetime,
    watermark: bool = True,
) -> int:
    """Atomically swap the samples of ``[start, end)``, record the range as read (coverage) and,
    unless `watermark` is False (a backfill of older hours), move the watermark to `end`.

    Within (scope, preset) a sample is identified by (project, host, gpu, signal, start): of two
    given with the same identity the later one is kept, and one given outside the window replaces
    the stored sample it identifies. Returns the number of samples given.
    """
    lo, hi = _epoch(start), _epoch(end)
    given = 0
    with store.transaction() as conn:
        ids = _series_ids(conn, scope, preset)
        rows: dict[tuple[tuple, int], tuple] = {}
        epochs: dict[datetime, int] = {}  # samples share their window boundaries
        for s in samples:
            given += 1
            ident = (s.project, s.host, s.gpu, s.signal, s.zone, s.instance_id, s.instance_name)
            ident += (s.cluster, s.node_name, s.model)
            sid = ids.get(ident)
            if sid is None:
                sid = ids[ident] = _new_series(conn, scope, preset, ident)
            t0, t1 = epochs.get(s.start), epochs.get(s.end)
            if t0 is None:
                t0 = epochs[s.start] = _epoch(s.start)
            if t1 is None:
                t1 = epochs[s.end] = _epoch(s.end)
            rows[(ident[:4], t0)] = (t0, sid, t1, s.utilization_pct, s.memory_used_bytes)
        conn.execute(
            f"DELETE FROM utilization_points WHERE start >= ? AND start < ? AND series IN ({_IN_SCOPE})",
            (lo, hi, scope, preset),
        )
        _drop_outside(conn, scope, preset, [k for k in rows if not lo <= k[1] < hi])
        conn.executemany(
            'INSERT OR REPLACE INTO utilization_points (start, series, "end", utilization_pct,'
            " memory_used_bytes) VALUES (?, ?, ?, ?, ?)",
            sorted(rows.values(), key=itemgetter(1, 0)),  # in key order: appends, not page splits
        )
        touched = {(lo - lo % 3600, hi + -hi % 3600)}  # the window's whole hours
        touched |= {(t - t % 3600, t - t % 3600 + 3600) for _, t in rows if not lo <= t < hi}
        for a, b in sorted(touched):
            rebuild_hours(conn, a, b, (scope, preset))
        record_coverage(conn, scope, preset, start, end)
        if not watermark:
            return given
        conn.execute(
            "INSERT INTO utilization_windows (scope, preset, polled_until, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (scope, preset) DO UPDATE SET polled_until = excluded.polled_until,"
            " updated_at = excluded.updated_at",
            (scope, preset, _iso(end), _iso(now)),
        )
    return given


def replace_windows(
    store: StateStore,
    scope: str,
    preset: str,
    pieces: Iterable[tuple[datetime, datetime, FetchResult]],
    *,
    now: datetime,
    until: datetime | None = None,
) -> tuple[int, dict[str, int]]:
    """`replace_window` for each (start, end, result) of a read in pieces, in turn
    (`FileUtilizationSource.fetch_pieces`): a piece is stored, and let go, before the next is read,
    so a read holds one piece's samples. `until`: no window reaches past it (samples given after it
    replace what they identify, as `replace_window` does). Returns the samples given and the
    points skipped, summed over the pieces."""
    count, skips = 0, Counter[str]()
    for start, end, result in pieces:
        stop = end if until is None else min(end, until)
        replace_window(store, scope, preset, start, stop, result.samples, now=now)
        count += len(result.samples)
        skips.update(result.skipped)
        del result  # before the next piece is read
    return count, dict(skips)


_HOURS_OF = (
    f"INSERT INTO utilization_hours ({_HOUR_COLUMNS}) SELECT {_PER_HOUR} FROM utilization_points"
    " WHERE start >= ? AND start < ?{scope}" + _BY_HOUR
)


def rebuild_hours(conn: Any, lo: int, hi: int, scope: tuple[str, str] | None = None) -> None:
    """Reduce the points of the whole hours [lo, hi) (epoch seconds, hour-aligned) into
    `utilization_hours` again, for the series of one (scope, preset) or all: inside the caller's
    transaction, after it changed those points."""
    if lo % 3600 or hi % 3600:
        raise ValueError(f"rebuild_hours: [{lo}, {hi}) is not whole hours")
    where, params = (f" AND series IN ({_IN_SCOPE})", scope) if scope is not None else ("", ())
    conn.execute(f"DELETE FROM utilization_hours WHERE hour >= ? AND hour < ?{where}", (lo, hi, *params))
    conn.execute(_HOURS_OF.format(scope=where), (lo, hi, *params))
    log_change(conn, lo, hi)


def log_change(conn: Any, lo: int, hi: int) -> None:
    """Record that `utilization_hours` of [lo, hi) were rewritten (inside the writer's transaction),
    and forget the changes older than the last `KEPT_CHANGES`."""
    seq = conn.execute("INSERT INTO utilization_changes (lo, hi) VALUES (?, ?)", (lo, hi)).lastrowid
    if seq is not None and seq % 1000 == 0:  # now and then: one more statement per write is enough
        conn.execute("DELETE FROM utilization_changes WHERE seq > 0 AND seq <= ?", (seq - KEPT_CHANGES,))


def _drop_outside(conn: Any, scope: str, preset: str, keys: list[tuple[tuple, int]]) -> None:
    """Delete the stored samples that samples given outside the window replace (any labels)."""
    sql = (
        f"DELETE FROM utilization_points WHERE start = ? AND series IN ({_IN_SCOPE}"
        " AND project = ? AND host = ? AND gpu = ? AND signal = ?)"
    )
    conn.executemany(sql, [(t, scope, preset, *base) for base, t in keys])


_LABELS = (
    "SELECT id, project, zone, instance_id, instance_name, cluster, node_name, gpu, model, signal"
    " FROM utilization_series ORDER BY id"
)
_POINTS = (
    'SELECT start, "end", utilization_pct, memory_used_bytes FROM utilization_points'
    " WHERE series = ? AND start >= ? AND start < ?"
)
# `_PER_HOUR` of the points in a window that cuts hours: each series' points are one primary-key
# range, so this reads the window's points and returns one row per series-hour.
_HOURS = (
    f"SELECT {_PER_HOUR} FROM utilization_series s JOIN utilization_points p ON p.series = s.id"
    " WHERE start >= ? AND start < ?" + _BY_HOUR
)
# The kept hours of a window of whole hours.
_STORED_HOURS = f"SELECT {_HOUR_COLUMNS} FROM utilization_hours WHERE hour >= ? AND hour < ? ORDER BY series, hour"


def load_samples(store: StateStore, start: datetime, end: datetime) -> list[GpuSample]:
    """Stored samples starting in ``[start, end)``, one per GPU and window (best signal across presets).

    Sorted by (project, host, gpu, start), as `select_signals` orders them.
    """
    with store.transaction() as conn:
        cur = conn.cursor()
        cur.row_factory = None
        labels = cur.execute(_LABELS).fetchall()
        lo, hi = _epoch(start), _epoch(end)
        rows = {r[0]: got for r in labels if (got := cur.execute(_POINTS, (r[0], lo, hi)).fetchall())}
    return _samples({r[0]: r[1:] for r in labels if r[0] in rows}, rows)


def load_util_hours(store: StateStore, start: datetime, end: datetime) -> UtilHours:
    """Stored utilization per GPU and hour for hours starting in ``[start, end)``, as columns: what
    `monitor.utilization.hourly.util_hours(load_samples(...))` gives (`.rows()` are those
    `UtilHour`s), with the samples kept in the store's engine wherever that is exact.

    A GPU stored as one series (the usual case) is reduced by the store's GROUP BY. A GPU seen
    through several (two presets, or a GKE node's node and container duty cycles) needs one sample
    per window by signal precedence first, so its samples are read and reduced in Python.
    """
    lo, hi = _epoch(start), _epoch(end)
    with store.transaction() as conn:
        cur = conn.cursor()
        cur.row_factory = None
        labels = {r[0]: tuple(r[1:]) for r in cur.execute(_LABELS).fetchall()}
        if lo % 3600 == 0 and hi % 3600 == 0:  # whole hours: kept reduced by every write
            agg = cur.execute(_STORED_HOURS, (lo, hi)).fetchall()
        else:
            agg = cur.execute(_HOURS, (lo, hi)).fetchall()
        key, shared = gpus_of_series(labels, sorted({r[0] for r in agg}))
        rows = {sid: cur.execute(_POINTS, (sid, lo, hi)).fetchall() for sid in shared}
    single = [r for r in agg if r[0] not in rows]
    containers = {sid for sid in {r[0] for r in single} if labels[sid][8] == Signal.CONTAINER_DUTY_CYCLE}
    # only container series can have container hours: the others stay out
    container_rows = [(sid, hour) for sid, hour, *_ in single if sid in containers]
    container, keyed = reduce_several(labels, rows, container_rows, key)
    return _in_order(keyed, single, labels, key, container)


def reduce_several(
    labels: dict[int, tuple],
    points: dict[int, list[tuple]],
    container_rows: Iterable[tuple[int, int]],
    key: Callable[[tuple], tuple[str, str, str]],
) -> tuple[set, list[tuple[tuple, tuple]]]:
    """The GPUs seen through several series, reduced from their `points` (per series, as `_POINTS`
    reads them) by signal precedence, and the (project, host, hour)s with container duty cycles:
    those of the series of one GPU (`container_rows`, (series, hour) of the container series) and
    of these. Returns (those host-hours, each reduced hour as (`order_key`, `UtilHours` row)).
    What `load_util_hours` and the aggregate store's copy (`monitor.utilization.mirror.join_tables`)
    both build: their hours must be the same."""
    merged = _samples({sid: labels[sid] for sid in points}, points)
    resolved, _ = resolve_duty_cycles(merged)
    container = container_hours(
        [(labels[sid][:8], labels[sid][8], _when(hour)) for sid, hour in container_rows]
        + [(ident_of(s), s.signal, s.start) for s in merged],
        key,
    )
    order = order_key(key)
    return container, [(order(item), UtilHours.astuple(item[0])) for item in reduce_samples(resolved, container, key)]


def gpus_of_series(
    labels: dict[int, tuple], present: list[int]
) -> tuple[Callable[[tuple], tuple[str, str, str]], list[int]]:
    """The GPU key of the `present` series (`host_keys`, by their `_LABELS`) and, sorted, the
    series of a GPU seen through several: those whose samples are read and reduced in Python."""
    key = host_keys(labels[sid][:8] for sid in present)
    by_gpu: dict[tuple, list[int]] = {}
    for sid in present:
        by_gpu.setdefault(key(labels[sid][:8]), []).append(sid)
    return key, sorted(sid for sids in by_gpu.values() if len(sids) > 1 for sid in sids)


def _in_order(
    keyed: list[tuple[tuple, tuple]],
    single: list[tuple],
    labels: dict[int, tuple],
    key: Callable[[tuple], tuple[str, str, str]],
    container: set,
) -> UtilHours:
    """The hours of GPUs seen through several series (`keyed`: (order key, row), reduced in Python)
    and of GPUs seen through one (`single`: the store's rows of `_HOUR_COLUMNS`; `labels` and `key`
    of their series, `gpus_of_series`), as columns in `order_key`'s order: by GPU key, then hour,
    then first window start.

    A GPU of one series has one row an hour, so its rows are a block already in order once sorted
    by hour: the blocks are put in GPU-key order and their columns built a block at a time. Building
    a tuple and a sort key per GPU-hour and sorting them all was 0.13 s of 0.21 s for the soak's 14
    days (35,818 GPU-hours)."""
    runs: dict[int, list[tuple]] = {}
    for r in single:
        run = runs.get(r[0])
        if run is None:
            run = runs[r[0]] = []
        run.append(r)
    # per series once, not per hour: its identity, signal and GPU key (`order_key`'s first part)
    series = {sid: (labels[sid][:8], labels[sid][8], key(labels[sid][:8])) for sid in runs}
    blocks: dict[tuple, list[tuple[tuple, tuple]]] = {}
    for item in keyed:
        blocks.setdefault(item[0][0], []).append(item)
    # no GPU key is both: a single series is a GPU key's only series (`load_util_hours`' `by_gpu`)
    order = sorted([(k, None) for k in blocks] + [(series[sid][2], sid) for sid in runs], key=itemgetter(0))
    cols: dict[str, list] = {name: [] for name in UtilHours.names}
    ident_cols = [cols[n] for n in UtilHours.names[:8]]
    (hour_c, signal_c, n_c, total_c, mem_c, idle_c, held_c, first_c, last_c) = (
        cols[n] for n in UtilHours.names[8:]
    )
    starts: dict[int, int] = {}  # a few window starts an hour, shared: two ints a GPU-hour else
    for gpu_key, sid in order:
        if sid is None:  # a GPU of several series: its rows as reduced, in order
            for _, row in sorted(blocks[gpu_key], key=itemgetter(0)):  # stable
                for col, value in zip(cols.values(), row, strict=True):
                    col.append(value)
            continue
        run = runs[sid]
        run.sort(key=itemgetter(1))  # by hour (the whole-hours read comes sorted already)
        ident, signal, _ = series[sid]
        m = len(run)
        for col, value in zip(ident_cols, ident, strict=True):
            col.extend([value] * m)
        whens = [_when(r[1]) for r in run]
        hour_c.extend(whens)
        signal_c.extend([signal] * m)
        n_c.extend([r[2] for r in run])
        total_c.extend([r[3] for r in run])
        mem_c.extend([r[4] for r in run])
        idle_c.extend([bool(r[5]) for r in run])
        if container:
            p, h = gpu_key[0], gpu_key[1]
            held_c.extend([(p, h, w) in container for w in whens])
        else:
            held_c.extend([False] * m)
        first_c.extend([starts.setdefault(r[6], r[6]) for r in run])
        last_c.extend([starts.setdefault(r[7], r[7]) for r in run])
    return UtilHours(cols)


@functools.lru_cache(maxsize=65536)
def _when(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _samples(labels: dict[int, tuple], rows: dict[int, list[tuple]]) -> list[GpuSample]:
    """Each series' rows (start, end, pct, memory) as samples, through the signal selection.

    A GPU seen through one series (the usual case) needs no selection: its rows come back from the
    primary key already in time order.
    """
    key = host_keys(lab[:8] for lab in labels.values())
    by_gpu: dict[tuple[str, str, str], list[int]] = {}
    for sid, lab in labels.items():
        by_gpu.setdefault(key(lab[:8]), []).append(sid)
    times = {t for got in rows.values() for r in got for t in r[:2]}
    when = {t: datetime.fromtimestamp(t, UTC) for t in times}

    def build(sid: int) -> list[GpuSample]:
        ident, signal = labels[sid][:8], labels[sid][8]
        return freeze(
            [SampleDraft(*ident, when[t0], when[t1], pct, signal, mem) for t0, t1, pct, mem in rows[sid]]
        )

    out: list[GpuSample] = []
    for gpu in sorted(by_gpu):
        sids = by_gpu[gpu]
        if len(sids) == 1:
            out += build(sids[0])
        else:  # ties go to the series stored first
            out += merge([(s.start.timestamp(), sid, s) for sid in sids for s in build(sid)])
    return out
