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

__all__ = [
    "MAX_GAP_HOURS",
    "MAX_PARTITION_QUERIES",
    "MAX_RANGES",
    "QUERY_COST_ROWS",
    "appended",
    "gap_worth_reading",
    "hour_ranges",
]

_HOUR = timedelta(hours=1)
#: More changed partitions than this (a first poll, a long downtime): one span, one query.
MAX_PARTITION_QUERIES = 6
#: At most this many hourly.sql runs per poll: the closest ranges are merged beyond it.
MAX_RANGES = 8
#: What one more hourly.sql run costs DuckDB before it reads a row, in export rows it could have
#: aggregated instead. Binding and optimizing the query's attribution CASEs take about 55 ms, the
#: same for an empty range (DuckDB 2.0.1 profile, 2026-12-06: binding 14 ms, optimizer 50 ms, of
#: which common-subexpression elimination 29 ms), while aggregating costs 8.5 us an export row at
#: bench scale 5 and 15 us on the demo fleet: 4,000-7,000 rows. The demo's polls ran 7 queries
#: each, six of them for one late hour apiece, and spent 51 s of the soak's 176 s in them (12 s
#: as one query a poll).
QUERY_COST_ROWS = 4_000
#: Never more than a day of unchanged hours re-read to save a query, however small the fleet, so a
#: late correction for an old hour still costs that hour alone.
MAX_GAP_HOURS = 24


def appended(stored: tuple | None, seen: tuple | None) -> bool:
    """Whether a partition only grew since its stored mark, so its new rows are `export_time > mark`.

    Marks are `billing_poll._mark` tuples: (partition, max export time, row count, min hour, max hour).
    """
    if stored is None or seen is None:
        return False
    return seen[1] >= stored[1] and seen[2] >= stored[2]


def gap_worth_reading(rows: int, hours: int) -> int:
    """The longest gap of unchanged hours between two changed ones that is cheaper to re-aggregate
    than to skip with a query of its own (`QUERY_COST_ROWS`), on an export holding about `rows`
    rows over `hours` usage hours; at most `MAX_GAP_HOURS`.

    >>> gap_worth_reading(48_000, 316)  # the demo fleet: 152 rows an hour
    24
    >>> gap_worth_reading(174_567, 240)  # bench scale 5: 727 rows an hour
    5
    >>> gap_worth_reading(5_000_000, 720)  # 5 M rows a month: every gap costs more than a query
    0
    """
    if hours <= 0 or rows <= 0:
        return MAX_GAP_HOURS
    return min(MAX_GAP_HOURS, QUERY_COST_ROWS * hours // rows)


def hour_ranges(
    hours: Iterable[datetime], max_ranges: int = MAX_RANGES, join_gap: int = 0
) -> tuple[tuple[datetime, datetime], ...]:
    """Hours as few `[start, end)` ranges: consecutive hours joined, and those with at most
    `join_gap` hours between them (`gap_worth_reading`), then the ranges with the smallest gaps
    between them merged until at most `max_ranges` remain (a merged range re-aggregates a few
    unchanged hours, which is correct, only more work).

    >>> from datetime import UTC
    >>> h = [datetime(2026, 11, 1, x, tzinfo=UTC) for x in (3, 4, 9)]
    >>> [(a.hour, b.hour) for a, b in hour_ranges(h)]
    [(3, 5), (9, 10)]
    >>> [(a.hour, b.hour) for a, b in hour_ranges(h, max_ranges=1)]
    [(3, 10)]
    >>> [(a.hour, b.hour) for a, b in hour_ranges(h, join_gap=4)]
    [(3, 10)]
    """
    out: list[list[datetime]] = []
    for h in sorted(set(hours)):
        if out and out[-1][1] + join_gap * _HOUR >= h:
            out[-1][1] = h + _HOUR
        else:
            out.append([h, h + _HOUR])
    while len(out) > max(1, max_ranges):
        i = min(range(len(out) - 1), key=lambda k: out[k + 1][0] - out[k][1])
        out[i : i + 2] = [[out[i][0], out[i + 1][1]]]
    return tuple((a, b) for a, b in out)
