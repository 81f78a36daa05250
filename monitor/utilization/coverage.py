"""Which time ranges of utilization were actually READ, so detectors judge only what was seen.

A GPU-hour with no utilization sample means one of two things: the instance reports no metrics (a
blind spot worth a finding), or gpucost has not read that hour yet (the daemon's first start, or a
restart after downtime, before the backfill reached it). Only the second is "not yet read"; telling
them apart needs a record of what was read. Per polled scope (project) and preset the store keeps
the half-open ranges ``[start, end)`` read successfully (`utilization_coverage`, epoch seconds),
merged so touching or overlapping reads become one range.

Detectors see the result as a mapping project -> covered ranges (`DetectorInputs.utilization_coverage`):
a scope's ranges are the intersection over its presets (an hour is read once every configured preset
read it), and the key `ALL` ("*") holds the intersection over every scope, for projects that are not
polled scopes themselves (a metrics scope shows other projects' metrics). ``None`` instead of a
mapping means "everything was read" (`gpucost analyze`: its files cover the whole window).

    >>> from datetime import UTC, datetime, timedelta
    >>> h = lambda n: datetime(2026, 11, 1, n, tzinfo=UTC)
    >>> merge([(h(3), h(5)), (h(1), h(2)), (h(2), h(3))])
    [(datetime.datetime(2026, 11, 1, 1, 0, tzinfo=datetime.timezone.utc), datetime.datetime(2026, 11, 1, 5, 0, tzinfo=datetime.timezone.utc))]
    >>> hour_covered({"p1": [(h(1), h(5))]}, "p1", h(4)), hour_covered({"p1": [(h(1), h(5))]}, "p1", h(5))
    (True, False)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from monitor.state.store import StateStore

__all__ = [
    "ALL",
    "Coverage",
    "Interval",
    "coverage_start",
    "gaps",
    "hour_covered",
    "hours_covered",
    "intersect",
    "load_coverage",
    "merge",
    "newest_chunk",
    "read_coverage",
    "read_until",
    "record_coverage",
]

Interval = tuple[datetime, datetime]
_T = TypeVar("_T", datetime, int)
#: project -> covered ranges; None: everything covered.
Coverage = Mapping[str, Sequence[Interval]] | None
#: The key whose ranges apply to any project without its own entry.
ALL = "*"
_HOUR = timedelta(hours=1)


def merge(intervals: Iterable[tuple[_T, _T]]) -> list[tuple[_T, _T]]:
    """Sorted, with overlapping or touching ranges joined; empty ranges dropped (of times, or of
    epoch seconds: the utilization hours' change log, `monitor.utilization.mirror`)."""
    out: list[tuple[_T, _T]] = []
    for start, end in sorted(i for i in intervals if i[0] < i[1]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def intersect(a: Sequence[tuple[_T, _T]], b: Sequence[tuple[_T, _T]]) -> list[tuple[_T, _T]]:
    """The ranges covered by both `a` and `b`."""
    out: list[tuple[_T, _T]] = []
    for s1, e1 in merge(a):
        for s2, e2 in merge(b):
            if max(s1, s2) < min(e1, e2):
                out.append((max(s1, s2), min(e1, e2)))
    return merge(out)


def gaps(covered: Sequence[Interval], start: datetime, end: datetime) -> list[Interval]:
    """The parts of ``[start, end)`` outside `covered`, oldest first."""
    out: list[Interval] = []
    cursor = start
    for s, e in merge(covered):
        if e <= cursor:
            continue
        if s >= end:
            break
        if s > cursor:
            out.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < end:
        out.append((cursor, end))
    return out


def _floor(dt: datetime, align: int) -> datetime:
    return datetime.fromtimestamp((int(dt.timestamp()) // align) * align, UTC)


def newest_chunk(
    covered: Sequence[Interval], start: datetime, end: datetime, size: timedelta, align: int
) -> Interval | None:
    """The newest not-yet-read range of ``[start, end)``, at most `size` long, its start on the
    `align`-second grid (never before the gap's start); None when everything was read."""
    missing = gaps(covered, start, end)
    if not missing:
        return None
    lo, hi = missing[-1]
    return max(lo, _floor(hi - size, align)), hi


def _ranges(coverage: Mapping[str, Sequence[Interval]], project: str | None) -> Sequence[Interval]:
    """`project`'s read ranges: its own entry, else the one for every other project (`ALL`)."""
    return coverage.get(project or "", coverage.get(ALL, ()))


def hour_covered(coverage: Coverage, project: str | None, hour: datetime) -> bool:
    """Whether the whole hour starting at `hour` was read for `project` (always, without coverage)."""
    if coverage is None:
        return True
    return any(s <= hour and hour + _HOUR <= e for s, e in _ranges(coverage, project))


def hours_covered(coverage: Coverage) -> Callable[[str | None, datetime], bool]:
    """`hour_covered` over `coverage`, each (project, hour) answered once: its readers ask it of
    every unmonitored node-hour (300,089 at bench scale 48), of a few thousand (project, hour)s."""
    return functools.cache(lambda project, hour: hour_covered(coverage, project, hour))


def read_until(coverage: Coverage, project: str | None) -> datetime | None:
    """How far utilization was read for `project`: the end of its latest read range (None without
    coverage, everything read, or when nothing was)."""
    if coverage is None:
        return None
    return max((e for _, e in _ranges(coverage, project)), default=None)


def coverage_start(coverage: Coverage, project: str | None, before: datetime) -> datetime | None:
    """Where the read range containing the hour before `before` begins ("read back to ..."); None
    when that hour was not read (or there is no coverage record: everything was read)."""
    if coverage is None:
        return None
    last = before - _HOUR
    return next((s for s, e in _ranges(coverage, project) if s <= last and last + _HOUR <= e), None)


# ----------------------------------------------------------------------------------------- store


def _epoch(dt: datetime) -> int:
    return math.floor(dt.timestamp())


def _dt(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def record_coverage(conn: Any, scope: str, preset: str, start: datetime, end: datetime) -> None:
    """Add ``[start, end)`` to what was read for (scope, preset), merged with what it touches.

    Runs inside the caller's transaction, so samples and their coverage are committed together.
    """
    lo, hi = _epoch(start), _epoch(end)
    if hi <= lo:
        return
    touching = conn.execute(
        'SELECT start, "end" FROM utilization_coverage WHERE scope = ? AND preset = ?'
        ' AND start <= ? AND "end" >= ?',
        (scope, preset, hi, lo),
    ).fetchall()
    new_lo = min([lo, *(r[0] for r in touching)])
    new_hi = max([hi, *(r[1] for r in touching)])
    conn.executemany(
        "DELETE FROM utilization_coverage WHERE scope = ? AND preset = ? AND start = ?",
        [(scope, preset, r[0]) for r in touching],
    )
    conn.execute(
        'INSERT INTO utilization_coverage (scope, preset, start, "end") VALUES (?, ?, ?, ?)',
        (scope, preset, new_lo, new_hi),
    )


def read_coverage(store: StateStore, scope: str, preset: str) -> list[Interval]:
    """What was read for (scope, preset), oldest first."""
    with store.transaction() as conn:
        rows = conn.execute(
            'SELECT start, "end" FROM utilization_coverage WHERE scope = ? AND preset = ? ORDER BY start',
            (scope, preset),
        ).fetchall()
    return [(_dt(r[0]), _dt(r[1])) for r in rows]


def load_coverage(
    store: StateStore, pairs: Sequence[tuple[str, str]], *, by_scope: bool = True
) -> dict[str, tuple[Interval, ...]]:
    """Detector coverage for the polled (scope, preset) pairs: per scope (unless `by_scope` is
    False) the ranges every one of its presets read, and under `ALL` those every pair read."""
    per_scope: dict[str, list[Interval] | None] = {}
    everything: list[Interval] | None = None
    for scope, preset in pairs:
        got = read_coverage(store, scope, preset)
        mine = per_scope.get(scope)
        per_scope[scope] = got if mine is None else intersect(mine, got)
        everything = got if everything is None else intersect(everything, got)
    out = {scope: tuple(r or ()) for scope, r in per_scope.items()} if by_scope else {}
    out[ALL] = tuple(everything or ())
    return out
