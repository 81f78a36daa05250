"""GPU hours no utilization overlaps are built only as far as the detectors read them
(`monitor.detectors.inputs.UnmonitoredGpuHours`): a billing-only `gpucost analyze` reads the on-demand
node-hours its opportunity detectors price, not every GPU node-hour of the window, and its figures
are the ones reading them all gives.

Detector-level tests use the shared builders (`tests.test_detectors_common`) and the bundled price
snapshot; the end-to-end ones a simulated fleet through `analyze_once` and the CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.analysis import analyze_once
from monitor.cli import main
from monitor.config import Config
from monitor.detectors.commitment_opportunity import CommitmentOpportunity
from monitor.detectors.idle_gpu import IdleGpu
from monitor.detectors.inputs import GpuHour, GpuHourTable, TableGpuHours, UnmonitoredGpuHours
from monitor.detectors.spot_opportunity import SpotOpportunity
from monitor.simulate import write_fleet
from monitor.sources.pricing import SnapshotPriceSource
from tests.shared_fleets import PARQUET
from tests.test_detectors_common import gpu, inputs

DETECTORS = (SpotOpportunity, CommitmentOpportunity, IdleGpu)
NOW = datetime(2026, 11, 3, 9, tzinfo=UTC)


def _fleet_hours() -> list[GpuHour]:
    """14 days of a steady on-demand a3 fleet (commitment advice), a restartable on-demand sweep
    (Spot advice), and Spot and committed VMs neither detector prices: unmonitored, as billing alone
    gives them, interleaved hour by hour as the engine orders them."""
    rows = []
    for h in range(14 * 24):
        rows += [gpu(h, f"train-{i}", util=None) for i in range(3)]
        rows.append(gpu(h, "sweep-lr-3", util=None, gpus=1, machine_type=None))
        rows.append(gpu(h, "spot-pool-0", util=None, pricing_model="spot"))
        rows.append(gpu(h, "reserved-0", util=None, pricing_model="committed"))
    return rows


class _Built:
    """The `build` of an `UnmonitoredGpuHours`: the hours of each pricing model asked, recorded."""

    def __init__(self, rows: Sequence[GpuHour]) -> None:
        self.rows, self.asked = list(rows), []

    def __call__(self, pricing: str | None) -> GpuHourTable:
        self.asked.append(pricing)
        return GpuHourTable.from_rows([r for r in self.rows if pricing is None or r.pricing_model == pricing])


def _findings(gpu_hours: Any) -> list[dict[str, Any]]:
    base = inputs(prices=SnapshotPriceSource().price_book(datetime(2026, 12, 2, tzinfo=UTC)))
    inp = replace(base, gpu_hours=gpu_hours)
    return [f.to_dict() for det in DETECTORS for f in det().evaluate(inp, inp.window_end)]


def test_the_detectors_read_only_the_on_demand_hours_and_find_what_all_the_hours_give() -> None:
    rows = _fleet_hours()
    built = _Built(rows)
    lazy = UnmonitoredGpuHours(built)
    every = _findings(rows)
    assert {f["kind"] for f in every} == {"spot_opportunity", "commitment_opportunity"}
    assert _findings(lazy) == every
    assert built.asked == ["on_demand"]  # asked once, for both opportunity detectors
    on_demand = sum(r.pricing_model == "on_demand" for r in rows)
    assert lazy.fetched == on_demand < len(rows)


def test_idle_gpu_builds_no_hour_when_none_can_be_monitored() -> None:
    built = _Built(_fleet_hours())
    inp = replace(inputs(), gpu_hours=UnmonitoredGpuHours(built))
    assert not inp.gpu_monitored and IdleGpu().evaluate(inp, inp.window_end) == []
    assert built.asked == []
    assert inputs(gpu_hours=[gpu(0, util=None)]).gpu_monitored  # a list is never judged in advance


def test_once_every_hour_is_built_the_on_demand_ones_come_from_them() -> None:
    rows = _fleet_hours()
    built = _Built(rows)
    lazy = UnmonitoredGpuHours(built)
    assert len(lazy) == len(rows) and list(lazy) == rows and lazy[3] == rows[3]
    assert lazy.on_demand_table().rows() == [r for r in rows if r.pricing_model == "on_demand"]
    assert built.asked == [None] and lazy.fetched == len(rows)


# -- end to end: billing alone, through the aggregate store ---------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, seed=3, days=9, formats=PARQUET)  # an 8-day window: `commitment_opportunity` needs 7
    return out


def _analysis(fleet: Path, *, keep: bool) -> Any:
    truth = json.loads((fleet / "ground_truth.json").read_text())
    now = datetime.fromisoformat(truth["window"]["end"].replace("Z", "+00:00"))
    paths, start = [fleet / "billing" / "export.parquet"], now - timedelta(days=8)
    return analyze_once(
        Config(), now=now, start=start, end=now, billing_paths=paths, with_budgets=False, keep_gpu_hours=keep
    )


@pytest.mark.slow
def test_billing_only_analyze_fetches_the_on_demand_node_hours_and_finds_the_same(fleet: Path) -> None:
    every, lean = _analysis(fleet, keep=True), _analysis(fleet, keep=False)
    kinds = {f.kind for f in every.findings}
    assert {"spot_opportunity", "commitment_opportunity"} <= kinds, kinds
    assert [f.to_dict() for f in lean.findings] == [f.to_dict() for f in every.findings]
    assert [a.to_dict() for a in lean.attribution] == [a.to_dict() for a in every.attribution]
    assert len(lean.gpu_hours) == 0 and len(every.gpu_hours)
    skipped = sum(1 for p in every.gpu_hours["pricing_model"] if p != "on_demand")
    assert skipped > 0, "the fleet bills Spot or committed GPUs"
    assert every.stats.rows_fetched - lean.stats.rows_fetched == skipped


@pytest.mark.slow
def test_the_analyze_command_reports_the_lean_fetch(fleet: Path) -> None:
    buf, export = io.StringIO(), str(fleet / "billing" / "export.parquet")
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", "--billing", export, "--format", "json"]) == 0
    every = _analysis(fleet, keep=True)
    stats = json.loads(buf.getvalue())["stats"]
    assert stats["rows_fetched"] < every.stats.rows_fetched


# -- the store: deferred only where asked, the same hours either way -----------------------------------


@pytest.fixture(scope="module")
def billed_only(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A daemon's stores after a billing poll and no utilization poll (a first start, say)."""
    from tests.test_digest_jobs import polled_daemon

    deps = polled_daemon(tmp_path_factory, "billed-only", seed=7, days=2, now=NOW, utilization=False)
    yield deps
    deps.store.close()


def _assembled(deps: Any, *, defer: bool) -> Any:
    from tests.test_digest_jobs import assembled

    return assembled(deps, NOW, defer=defer, provisional_days=1)


def test_the_daemon_reads_its_gpu_hours_with_its_costs_and_analyze_defers_them(billed_only: Any) -> None:
    read = _assembled(billed_only, defer=False)
    # every hour, held as a table (a poll may commit mid-detection)
    assert isinstance(read.gpu_hours, TableGpuHours) and read.gpu_monitored
    deferred = _assembled(billed_only, defer=True)
    assert isinstance(deferred.gpu_hours, UnmonitoredGpuHours) and not deferred.gpu_monitored
    on_demand = [g for g in read.gpu_hours if g.pricing_model == "on_demand"]
    assert 0 < len(on_demand) < len(read.gpu_hours)
    assert deferred.on_demand_gpu_table().rows() == on_demand  # from the store alone: the same, in order
    assert list(deferred.gpu_hours) == list(read.gpu_hours)
    assert deferred.gpu_hours.fetched == len(on_demand) + len(read.gpu_hours)
