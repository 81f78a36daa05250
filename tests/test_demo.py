"""DemoFeeder: restart-safe (no row loaded twice, the clock resumes) and day files rewritten whole."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path

import pytest

from monitor.config import Config, parse_config
from monitor.demo import DemoFeeder
from monitor.simulate.simulator import DEFAULT_START, FleetSimulator
from monitor.sources.utilization_files import FileUtilizationSource
from monitor.timeutil import floor_hour

DAYS = 2


def demo_config(root: Path) -> Config:
    return parse_config(
        {
            "billing": {"db": str(root / "billing.duckdb")},
            "utilization": {"files": [str(root / "utilization")]},
            "demo": {"enabled": True, "days": DAYS, "hours_per_cycle": 6, "data_dir": str(root)},
        }
    )


def totals(feeder: DemoFeeder) -> tuple:
    """Row count, exact cost in micros, and distinct rows: a row loaded twice changes all three."""
    return feeder.conn.execute(
        "SELECT COUNT(*), SUM(CAST(round(cost * 1e6) AS HUGEINT)), COUNT(DISTINCT (sku.id, resource.name,"
        " usage_start_time, export_time, cost, cost_type)) FROM billing_export"
    ).fetchone()


def run_to_end(feeder: DemoFeeder) -> None:
    while not feeder.clock.exhausted:
        feeder.advance()


def day_file(root: Path, day) -> Path:
    return root / "utilization" / f"{day.date().isoformat()}.json.gz"


def page(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def expected_page(day, until) -> dict:
    sim = FleetSimulator(7, DEFAULT_START, DAYS)
    return {"timeSeries": sim.utilization_series(day, min(day + timedelta(days=1), floor_hour(until)))}


@pytest.fixture
def uninterrupted(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("straight")
    feeder = DemoFeeder(demo_config(root))
    run_to_end(feeder)
    result = totals(feeder), feeder.clock.now()
    feeder.close()
    return result


@pytest.mark.parametrize("clock_record", ["kept", "lost"])
def test_restart_loads_no_row_twice_and_the_clock_resumes(tmp_path, uninterrupted, clock_record):
    cfg = demo_config(tmp_path)
    first = DemoFeeder(cfg)
    start = first.clock.now()
    first.advance()
    _, before_crash, _ = first.advance()
    loaded = totals(first)
    if clock_record == "lost":  # a crash between a load's commit and its clock record
        first.conn.execute("DELETE FROM gpucost_demo_clock")
    first.close()

    second = DemoFeeder(cfg)  # same files: resumes, loads nothing at start
    assert totals(second) == loaded
    resumed = second.clock.now()
    if clock_record == "kept":
        assert resumed == before_crash
    else:  # from the last export_time loaded: a little behind, never before a loaded row
        assert start < resumed < before_crash
    run_to_end(second)
    got = totals(second), second.clock.now()
    second.close()

    want_totals, want_end = uninterrupted
    assert got == (want_totals, want_end)
    assert got[0][0] == got[0][2]  # every row distinct


def test_day_files_are_rewritten_whole_and_match_the_clock(tmp_path):
    feeder = DemoFeeder(demo_config(tmp_path))
    now = feeder.clock.now()
    first_day = DEFAULT_START
    assert page(day_file(tmp_path, first_day)) == expected_page(first_day, now)
    assert not day_file(tmp_path, now).exists()  # nothing of the new day yet

    _, now, _ = feeder.advance()
    assert page(day_file(tmp_path, now)) == expected_page(now.replace(hour=0), now)
    _, now, _ = feeder.advance()  # the partial day grows: one page, rewritten, never appended
    current = page(day_file(tmp_path, now))
    assert current == expected_page(now.replace(hour=0), now)
    assert sorted(p.name for p in (tmp_path / "utilization").iterdir()) == [
        "2026-11-01.json.gz",
        "2026-11-02.json.gz",
    ]
    feeder.close()

    source = FileUtilizationSource([tmp_path / "utilization"])
    samples = source.fetch(DEFAULT_START, now).samples
    assert samples and max(s.end for s in samples) == now and source.fetch(DEFAULT_START, now).skipped == {}


def test_a_restart_rewrites_missing_day_files(tmp_path):
    cfg = demo_config(tmp_path)
    DemoFeeder(cfg).close()
    lost = day_file(tmp_path, DEFAULT_START)
    before = lost.read_bytes()
    lost.unlink()

    feeder = DemoFeeder(cfg)

    assert lost.read_bytes() == before
    feeder.close()


def test_the_demo_shows_a_gke_finding(tmp_path):
    """Once the demo has loaded its history, the hung node of the GKE GPU pool is an idle-GPU finding
    that names its cluster and node pool (issue 10: the demo shows a GKE finding)."""
    from monitor.analysis import Sources, run_analysis
    from monitor.sources.billing_duckdb import DuckDBBillingSource

    days = 6  # the node's job hangs from hour 33 to 75; the demo starts with 5 days loaded
    cfg = parse_config(
        {
            "billing": {"db": str(tmp_path / "billing.duckdb")},
            "utilization": {"files": [str(tmp_path / "utilization")]},
            "demo": {"enabled": True, "days": days, "hours_per_cycle": 6, "data_dir": str(tmp_path)},
        }
    )
    feeder = DemoFeeder(cfg)
    try:
        sources = Sources(
            billing=DuckDBBillingSource(feeder.conn),
            utilization=FileUtilizationSource([tmp_path / "utilization"]),
            prices=None,
        )
        result = run_analysis(sources, cfg, now=feeder.clock.now())
    finally:
        feeder.close()
    hung = feeder.sim.fleet.injected.hung_node
    gke = [f for f in result.findings if f.kind == "idle_gpu" and f.scope.instance == hung.name]
    assert gke, [(f.kind, f.scope) for f in result.findings]
    ev = gke[0].evidence
    assert (ev["cluster"], ev["node_pool"]) == ("llm-train", "h100-pool")
