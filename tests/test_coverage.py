"""Utilization coverage: ranges read, merged in the store (SQLite and PostgreSQL), and detectors
judging only hours inside them (`unmonitored_gpu`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.config import GoogleConfig, parse_config
from monitor.cycle import Deps, detection_inputs, run_utilization_poll, utilization_since
from monitor.detectors.unmonitored_gpu import UnmonitoredGpu
from monitor.errors import ConfigError
from monitor.metrics import Metrics
from monitor.sources.monitoring import CloudMonitoringSource
from monitor.sources.utilization_files import FileUtilizationSource
from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from monitor.utilization import migrate, read_watermark, replace_window
from monitor.utilization.coverage import (
    ALL,
    coverage_start,
    gaps,
    hour_covered,
    intersect,
    load_coverage,
    merge,
    newest_chunk,
    read_coverage,
)
from monitor.utilization.state import _V1, _V2
from tests.fakes.monitoring_server import FakeMonitoringServer
from tests.test_detectors_common import at, gpu, inputs
from tests.test_state_postgres import _open, pg_server, pg_url  # noqa: F401  (fixtures)
from tests.test_utilization_state import gce

T = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)


def h(n: float) -> datetime:
    return T + n * H


# --- pure interval logic --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "merged"),
    [
        ([], []),
        ([(h(3), h(5)), (h(1), h(2))], [(h(1), h(2)), (h(3), h(5))]),
        ([(h(1), h(2)), (h(2), h(3))], [(h(1), h(3))]),  # touching ranges join
        ([(h(1), h(4)), (h(2), h(3))], [(h(1), h(4))]),  # contained
        ([(h(2), h(2)), (h(1), h(0))], []),  # empty ranges vanish
    ],
)
def test_merge(given, merged) -> None:
    assert merge(given) == merged


def test_gaps_and_intersection() -> None:
    covered = [(h(2), h(4)), (h(6), h(7))]
    assert gaps(covered, h(0), h(10)) == [(h(0), h(2)), (h(4), h(6)), (h(7), h(10))]
    assert gaps(covered, h(2), h(4)) == []
    assert gaps([], h(0), h(1)) == [(h(0), h(1))]
    assert intersect([(h(0), h(5))], [(h(3), h(8)), (h(9), h(10))]) == [(h(3), h(5))]


@pytest.mark.parametrize(
    ("covered", "chunk"),
    [
        ([], (h(-12), h(0))),  # nothing read: the newest 12 h
        ([(h(-6), h(0))], (h(-18), h(-6))),  # the live window read: just before it
        ([(h(-20), h(0))], (h(-24), h(-20))),  # never before the start asked for
        ([(h(-24), h(-10)), (h(-1), h(0))], (h(-10), h(-1))),  # a downtime gap: its newest part
        ([(h(-30), h(0))], None),  # all read
    ],
)
def test_newest_chunk(covered, chunk) -> None:
    assert newest_chunk(covered, h(-24), h(0), timedelta(hours=12), 300) == chunk


def test_an_hour_counts_only_when_wholly_read() -> None:
    cov = {"p1": [(h(1), h(3) + timedelta(minutes=30))], ALL: [(h(2), h(3))]}
    assert [hour_covered(cov, "p1", h(n)) for n in range(5)] == [False, True, True, False, False]
    assert [hour_covered(cov, "other", h(n)) for n in range(4)] == [False, False, True, False]  # "*"
    assert hour_covered(None, "p1", h(0))  # no record: everything was read (analyze)
    assert coverage_start(cov, "p1", h(3)) == h(1) and coverage_start(cov, "p1", h(1)) is None


# --- the store ------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    s = _open(request.param, request, tmp_path)
    yield s
    s.close()


def test_windows_read_are_recorded_and_merged(any_store: Any) -> None:
    store = any_store
    migrate(store)
    replace_window(store, "p1", "nvml", h(-6), h(0), [gce("a", h(-1), 50.0)], now=h(0))  # live
    replace_window(store, "p1", "nvml", h(-18), h(-6), [], now=h(0), watermark=False)  # backfill
    replace_window(store, "p1", "nvml", h(-40), h(-30), [], now=h(0), watermark=False)
    replace_window(store, "p1", "dcgm", h(-3), h(0), [], now=h(0))
    assert read_coverage(store, "p1", "nvml") == [(h(-40), h(-30)), (h(-18), h(0))]
    assert read_watermark(store, "p1", "nvml") == h(0)  # a backfill never moves the watermark
    replace_window(store, "p1", "nvml", h(-31), h(-17), [], now=h(0), watermark=False)  # bridges both
    assert read_coverage(store, "p1", "nvml") == [(h(-40), h(0))]
    cov = load_coverage(store, [("p1", "nvml"), ("p1", "dcgm"), ("p2", "nvml")])
    assert cov["p1"] == ((h(-3), h(0)),)  # every preset of the scope read it
    assert cov["p2"] == () and cov[ALL] == ()  # p2 read nothing: nothing is read everywhere


def test_a_store_from_before_coverage_migrates_with_nothing_read(any_store: Any) -> None:
    store = any_store
    store.migrate("utilization", (_V1, _V2))  # the previous release's schema
    with store.transaction() as conn:
        conn.execute("INSERT INTO utilization_windows VALUES ('p1', 'x', '2026-11-01T10:05:00Z', 'now')")
    migrate(store)
    assert read_watermark(store, "p1", "x") == datetime(2026, 11, 1, 10, 5, tzinfo=UTC)
    assert read_coverage(store, "p1", "x") == []  # unknown: the backfill reads the window again
    replace_window(store, "p1", "x", h(0), h(1), [], now=h(1))
    assert read_coverage(store, "p1", "x") == [(h(0), h(1))]


# --- unmonitored_gpu judges only hours read -------------------------------------------------------


def test_unmonitored_gpu_ignores_billed_hours_whose_utilization_was_not_read() -> None:
    rows = [gpu(n, "busy-vm", util=None) for n in range(24)]  # $88 an hour, no samples in any hour
    everything = inputs(gpu_hours=rows)
    (before,) = UnmonitoredGpu().evaluate(everything, at(24))  # today: all 24 h "unmonitored"
    assert before.impact_usd == 24 * 88 and "coverage_start" not in before.evidence

    not_read = replace(everything, utilization_coverage={"ml-prod": [(at(24), at(30))]})
    assert UnmonitoredGpu().evaluate(not_read, at(30)) == []  # nothing judged yet, nothing flagged

    partly = replace(everything, utilization_coverage={"ml-prod": [(at(20), at(30))]})
    (f,) = UnmonitoredGpu().evaluate(partly, at(30))
    assert f.impact_usd == 4 * 88 and f.evidence["unmonitored_hours"] == 4
    assert f.evidence["coverage_start"] == "2026-11-02T20:00:00Z"
    assert f.evidence["hours_outside_coverage"] == 20
    assert f.evidence["cost_outside_coverage_usd"] == 20 * 88
    assert "not read yet are not judged" in f.summary and "2026-11-02 20:00 UTC" in f.summary


def test_projects_not_polled_use_the_coverage_every_scope_shares() -> None:
    rows = [gpu(n, "vm", util=None, project="elsewhere") for n in range(6)]
    cov = {"ml-prod": [(at(0), at(6))], ALL: [(at(3), at(6))]}
    (f,) = UnmonitoredGpu().evaluate(replace(inputs(gpu_hours=rows), utilization_coverage=cov), at(6))
    assert f.evidence["unmonitored_hours"] == 3 and f.evidence["hours_outside_coverage"] == 3


# --- the daemon's cycle: backfill target, coverage handed to detectors, config knobs ----------------


class _NoPrices:
    def price_book(self, now: datetime) -> None:
        return None


class _NoBudgets:
    def budgets(self) -> list:
        return []


def _deps(cfg: Any, utilization: Any, state: Any) -> Deps:
    return Deps(
        cfg=cfg,
        clock=None,  # type: ignore[arg-type]  (steps get `now` injected)
        store=state,
        aggregates=AggregateStore(None),
        billing=None,  # type: ignore[arg-type]
        utilization=utilization,
        prices=_NoPrices(),
        budgets=_NoBudgets(),
        detectors=[],
        notifier=None,  # type: ignore[arg-type]
        metrics=Metrics.create(),
    )


@pytest.mark.integration
def test_daemon_poll_backfills_the_billing_window_and_detectors_see_what_was_read(tmp_path) -> None:
    now = datetime(2026, 11, 20, 12, 2, tzinfo=UTC)
    end = datetime(2026, 11, 20, 12, tzinfo=UTC)
    with FakeMonitoringServer() as server:
        cfg = parse_config(
            {
                "utilization": {
                    "source": "cloud_monitoring",
                    "projects": ["p1"],
                    "api_endpoint": server.address,
                    "insecure": True,
                }
            }
        )
        assert (cfg.utilization.backfill_chunk_hours, cfg.utilization.backfill_chunks_per_run) == (12, 4)
        src = CloudMonitoringSource(
            cfg.utilization, GoogleConfig(credentials="anonymous"), sleep=lambda s: None
        )
        state = SQLiteStore(tmp_path / "state.sqlite")
        try:
            deps = _deps(cfg, src, state)
            assert utilization_since(cfg, now) == datetime(2026, 11, 6, 13, tzinfo=UTC)  # the 14-day window
            run_utilization_poll(deps, now)
            spans = list(dict.fromkeys((r.interval.start_time, r.interval.end_time) for r in server.requests))
            assert spans == [(end - 6 * H, end)] + [
                (end - (6 + 12 * (i + 1)) * H, end - (6 + 12 * i) * H) for i in range(4)
            ]
            # the poll copied what it stored into the aggregate store, where detection reads it
            with state.transaction() as conn:
                logged = conn.execute("SELECT MAX(seq) FROM utilization_changes").fetchone()[0]
            with deps.aggregates.read() as conn:
                assert conn.execute("SELECT seq FROM util_copy").fetchone()[0] == logged > 0
            cov = detection_inputs(deps, now).utilization_coverage
            assert cov == {"p1": ((end - 54 * H, end),), ALL: ((end - 54 * H, end),)}
        finally:
            state.close()
            src.close()


def test_daemon_file_poll_covers_its_window_and_fills_what_it_never_read(tmp_path) -> None:
    now = datetime(2026, 11, 20, 12, 2, tzinfo=UTC)
    (tmp_path / "empty.json").write_text("[]")  # no samples (a directory without files is an error)
    cfg = parse_config({"utilization": {"files": [str(tmp_path)]}})
    state = SQLiteStore(tmp_path / "state.sqlite")
    try:
        deps = _deps(cfg, FileUtilizationSource([tmp_path]), state)
        run_utilization_poll(deps, now)
        # read to now, not to the end of the current hour, whose rest has no samples yet
        window = (datetime(2026, 11, 6, 13, tzinfo=UTC), now)
        assert detection_inputs(deps, now).utilization_coverage == {ALL: (window,)}
        later = now + timedelta(days=5)  # down for five days: the files' usual 3-day re-read is not enough
        run_utilization_poll(deps, later)
        assert read_coverage(state, "files", "files") == [(window[0], window[1] + timedelta(days=5))]
    finally:
        state.close()


def test_daemon_file_poll_reads_in_pieces_what_one_read_gives(tmp_path) -> None:
    """The first file poll reads its window six hours at a time (one piece's samples in memory, not
    the window's): it stores what one read of the whole window gives, midnight windows included
    (their points are in the next day's file), and counts a file's skipped point once, though the
    pieces' reads share files."""
    from monitor.utilization.state import load_samples
    from tests.test_utilization_files import point, series, write

    now = datetime(2026, 11, 20, 12, 2, tzinfo=UTC)
    day0 = datetime(2026, 11, 18, tzinfo=UTC)
    ends = [day0 + i * timedelta(minutes=5) for i in range(1, 60 * 12)]  # 5-minute points to the 20th, 12:00
    for d in range(3):
        lo, hi = day0 + d * 24 * H, day0 + (d + 1) * 24 * H
        pts = [point(e, 10.0 + i % 50) for i, e in enumerate(ends) if lo <= e < hi]  # by end date
        if d == 1:
            pts[100] = point(ends[400], 150.0)  # out of range: skipped
        write(tmp_path / f"{lo.date().isoformat()}.json", {"timeSeries": [series("1001", pts[::-1])]})
    cfg = parse_config({"utilization": {"files": [str(tmp_path)]}})
    state = SQLiteStore(tmp_path / "state.sqlite")
    try:
        polled = run_utilization_poll(_deps(cfg, FileUtilizationSource([tmp_path]), state), now)
        start, end = datetime(2026, 11, 6, 13, tzinfo=UTC), datetime(2026, 11, 20, 13, tzinfo=UTC)
        whole = FileUtilizationSource([tmp_path]).fetch(start, end)
        stored = load_samples(state, start, end)
    finally:
        state.close()

    def key(s: Any) -> tuple:
        return (s.instance_id, s.gpu, s.start, s.end, s.utilization_pct)

    assert (
        polled
        == {"samples": len(whole.samples), "skipped": {"out_of_range": 1}}
        == {
            "samples": len(stored),
            "skipped": whole.skipped,
        }
    )
    assert [key(s) for s in stored] == [key(s) for s in whole.samples]
    assert {s.start for s in stored} >= {
        day0 + 24 * H - timedelta(minutes=5),
        day0 + 48 * H - timedelta(minutes=5),
    }


def test_a_file_poll_re_stores_only_the_pieces_whose_files_changed(tmp_path) -> None:
    """The daemon re-reads its last three days of files every poll (files grow and are rewritten
    late), but re-stores only the pieces whose files changed since this process stored them, or
    whose range the store no longer records as read: after every poll the store holds what one
    fresh read of the window gives."""
    import sqlite3

    from monitor.utilization.state import load_samples
    from tests.test_utilization_files import point, series, write

    now = datetime(2026, 11, 20, 12, 2, tzinfo=UTC)
    day0 = datetime(2026, 11, 17, tzinfo=UTC)
    ends = [day0 + i * timedelta(minutes=5) for i in range(1, 12 * 84)]  # 5-minute points to the 20th, 12:00

    def write_days(bump: float) -> None:
        for d in range(4):
            lo, hi = day0 + d * 24 * H, day0 + (d + 1) * 24 * H
            pts = [
                point(e, 10.0 + i % 50 + (bump if d == 1 else 0)) for i, e in enumerate(ends) if lo <= e < hi
            ]
            write(tmp_path / f"{lo.date().isoformat()}.json", {"timeSeries": [series("1001", pts[::-1])]})

    def key(s: Any) -> tuple:
        return (s.instance_id, s.gpu, s.start, s.end, s.utilization_pct)

    write_days(0.0)
    cfg = parse_config({"utilization": {"files": [str(tmp_path)]}})
    state = SQLiteStore(tmp_path / "state.sqlite")
    start, end = datetime(2026, 11, 6, 13, tzinfo=UTC), datetime(2026, 11, 20, 16, tzinfo=UTC)
    try:
        deps = _deps(cfg, FileUtilizationSource([tmp_path]), state)
        first = run_utilization_poll(deps, now)["samples"]
        second = run_utilization_poll(deps, now + H)["samples"]  # no file changed
        assert 0 < second < first / 4  # the pieces cut by the window's moving ends, not three days
        whole = FileUtilizationSource([tmp_path]).fetch(start, end).samples
        assert [key(s) for s in load_samples(state, start, end)] == [key(s) for s in whole]

        write_days(5.0)  # the 18th's file rewritten late, every value changed
        third = run_utilization_poll(deps, now + 2 * H)["samples"]
        assert third > second
        whole = FileUtilizationSource([tmp_path]).fetch(start, end).samples
        assert [key(s) for s in load_samples(state, start, end)] == [key(s) for s in whole]

        with sqlite3.connect(tmp_path / "state.sqlite") as raw:  # the store forgot what it read
            raw.execute("DELETE FROM utilization_points")
            raw.execute("DELETE FROM utilization_coverage")
        assert run_utilization_poll(deps, now + 3 * H)["samples"] == len(whole)
        assert [key(s) for s in load_samples(state, start, end)] == [key(s) for s in whole]
    finally:
        state.close()


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"backfill_chunk_hours": 0},
            "utilization.backfill_chunk_hours: Input should be greater than or equal to 1",
        ),
        (
            {"backfill_chunk_hours": 25},
            "utilization.backfill_chunk_hours: Input should be less than or equal to 24",
        ),
        (
            {"backfill_chunks_per_run": -1},
            "utilization.backfill_chunks_per_run: Input should be greater than or equal to 0",
        ),
    ],
)
def test_backfill_knobs_are_validated(over, message) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"utilization": over}, "gpucost.toml")
    assert str(e.value) == f"gpucost.toml: {message}"
