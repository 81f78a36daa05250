"""Which usage hours a billing poll must re-aggregate: the hours its new rows touch.

The export only appends (late rows and corrections are new rows with a later `export_time`), so a
partition whose watermark moved holds new rows exactly where `export_time` passed the stored
watermark. `queries/changed_hours.sql` lists their usage hours, one cheap query per changed
partition; a late correction for an old hour then costs that hour's re-aggregation, not everything
from it to now. Where the append-only reading does not hold (a partition that shrank or vanished,
a table rewritten) or nothing was stored yet (the first poll), the whole span of the partitions is
re-aggregated, as a rewrite needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

__all__ = ["MAX_PARTITION_QUERIES", "MAX_RANGES", "appended", "hour_ranges"]

_HOUR = timedelta(hours=1)
#: More changed partitions than this (a first poll, a long downtime): one span, one query.
MAX_PARTITION_QUERIES = 6
#: At most this many hourly.sql runs per poll: the closest ranges are merged beyond it.
MAX_RANGES = 8


def appended(stored: tuple | None, seen: tuple | None) -> bool:
    """Whether a partition only grew since its stored mark, so its new rows are `export_time > mark`.

    Marks are `billing_poll._mark` tuples: (partition, max export time, row count, min hour, max hour).
    """
    if stored is None or seen is None:
        return False
    return seen[1] >= stored[1] and seen[2] >= stored[2]


def hour_ranges(hours: Iterable[datetime], max_ranges: int = MAX_RANGES) -> tuple[tuple[datetime, datetime], ...]:
    """Hours as few `[start, end)` ranges: consecutive hours joined, then the ranges with the
    smallest gaps between them merged until at most `max_ranges` remain (a merged range
    re-aggregates a few unchanged hours, which is correct, only more work).

    >>> from datetime import UTC
    >>> h = [datetime(2026, 11, 1, x, tzinfo=UTC) for x in (3, 4, 9)]
    >>> [(a.hour, b.hour) for a, b in hour_ranges(h)]
    [(3, 5), (9, 10)]
    >>> [(a.hour, b.hour) for a, b in hour_ranges(h, max_ranges=1)]
    [(3, 10)]
    """
    out: list[list[datetime]] = []
    for h in sorted(set(hours)):
        if out and out[-1][1] == h:
            out[-1][1] = h + _HOUR
        else:
            out.append([h, h + _HOUR])
    while len(out) > max(1, max_ranges):
        i = min(range(len(out) - 1), key=lambda k: out[k + 1][0] - out[k][1])
        out[i : i + 2] = [[out[i][0], out[i + 1][1]]]
    return tuple((a, b) for a, b in out)
