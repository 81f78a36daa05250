"""The file source's parse cache stays bounded over a long run (found by tests/test_soak.py).

The daemon polls day files every few minutes, re-reading its last days: those must stay cache hits.
Days that left its window are never read again: before the fix every file ever parsed stayed in
memory, a day of parsed series more per simulated day.
"""

from __future__ import annotations

from datetime import timedelta

from monitor.sources.utilization_files import FileUtilizationSource
from tests.test_utilization_files import T0, point, series, write

DAY = timedelta(days=1)


def test_a_sliding_read_keeps_only_its_own_days_parsed(tmp_path) -> None:
    days = 20
    for d in range(days):
        t = T0 + d * DAY
        write(tmp_path / f"{t.date().isoformat()}.json", {"timeSeries": [series(points=[point(t, 5.0)])]})
    src = FileUtilizationSource([tmp_path])
    for d in range(3, days):  # the daemon's poll: the last 3 days up to now
        end = T0 + d * DAY
        assert len(src.fetch(end - 3 * DAY, end).samples) == 3
        assert len(src._cache) <= 5  # this read's files (a day before its start to its end)
    assert src.parsed_files == days  # and each file was parsed once: the re-reads were hits
