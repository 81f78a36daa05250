"""`analyze` reads the GPU hours its detectors judge, not every GPU node-hour of the window
(`monitor.assemble.judged_gpu_hours`): every on-demand, unmonitored and estimated hour, every hour
of an instance with an idle GPU-hour, in the order of the whole, and the same findings.

The store is filled by hand (`tests.aggregates.stored`: the SQL the daemon runs reads it back), the
utilization from samples, as `tests/test_estimate_unpriced.py` does; the end-to-end test runs
`analyze_once` on a simulated fleet both ways.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.analysis import analyze_once
from monitor.assemble import gpu_hours, gpu_node_hours, judged_gpu_hours
from monitor.config import Config
from monitor.detectors.idle_gpu import IdleGpu, instance_key
from monitor.detectors.inputs import DetectorInputs, GpuHour, GpuHourTable, JudgedGpuHours
from monitor.detectors.unmonitored_gpu import UnmonitoredGpu
from monitor.simulate import write_fleet
from monitor.utilization import util_hours
from monitor.utilization.hourly import UtilHours
from tests.aggregates import stored
from tests.shared_fleets import PARQUET
from tests.test_analyze import T0, H, hourly, samples
from tests.test_detectors_common import FakePrices, gpu

NO_PRICES = FakePrices(table={})
END = T0 + 48 * H
SINCE = T0 + 36 * H  # the first provisional hour


def _util(spans: Sequence[tuple[range, float, str, str]]) -> UtilHours:
    """Samples of (hours, utilization %, instance id, name) spans, as the store's hours."""
    return UtilHours.of(
        util_hours(
            [s for hours, pct, iid, name in spans for h in hours for s in samples(h, pct, iid=iid, name=name)]
        )
    )


def _both(billed: list, util: UtilHours) -> tuple[list[GpuHour], list[GpuHour], int]:
    """(judged hours, every hour, rows read for the judged ones) of the same store. The detectors
    find in the judged hours as `analyze` holds them (`JudgedGpuHours`, every hour never built)
    what they find in every hour."""
    store = stored(billed)
    table, fetched = judged_gpu_hours(store, util, T0, END, SINCE, 10.0, NO_PRICES)
    every = gpu_hours(gpu_node_hours(store, T0, END, SINCE), util, 10.0, NO_PRICES, END, SINCE)
    held = JudgedGpuHours(table, _never, fetched)
    assert _findings(held) == _findings(every)
    assert held.estimated() == [h for h in every if h.estimated]
    return table.rows(), every, fetched


def _never() -> list[GpuHour]:
    raise AssertionError("every GPU hour was built")


def _in_order(part: Sequence[GpuHour], whole: Sequence[GpuHour]) -> bool:
    """`part` is `whole` with some hours left out, in the same order."""
    it = iter(whole)
    return all(any(h == w for w in it) for h in part)


def _findings(hours: Sequence[GpuHour]) -> list[dict[str, Any]]:
    inputs = DetectorInputs(window_start=T0, window_end=END, provisional_from=SINCE, gpu_hours=hours)
    return [f.to_dict() for det in (IdleGpu(), UnmonitoredGpu()) for f in det.evaluate(inputs, END)]


def test_a_busy_spot_node_is_read_from_the_first_provisional_hour_on() -> None:
    billed = [hourly(h, pricing_model="spot") for h in range(40)]  # billing 8 h behind
    judged, every, fetched = _both(billed, _util([(range(48), 90.0, "111", "train-0")]))
    assert [(h.hour - T0) // H for h in judged if not h.estimated] == [36, 37, 38, 39]
    assert [h for h in judged if h.estimated] == [h for h in every if h.estimated] and len(every) == 48
    assert _in_order(judged, every) and fetched == 2 + 4  # the node, its judgement, four hours
    assert _findings(judged) == _findings(every) == []


def test_an_unmonitored_node_and_an_on_demand_one_are_read_whole() -> None:
    billed = [hourly(h, pricing_model="spot", instance="dark-0", iid="222") for h in range(40)]
    billed += [hourly(h, instance="train-0", iid="111") for h in range(40)]  # on demand
    judged, every, fetched = _both(billed, _util([(range(48), 90.0, "111", "train-0")]))
    assert fetched == 2 * 2 + 40 + 40  # judged unmonitored at once: no second read
    assert [h for h in judged if not h.monitored] == [h for h in every if not h.monitored] != []
    assert [h for h in judged if h.pricing_model == "on_demand"] == [
        h for h in every if h.pricing_model == "on_demand"
    ]
    assert _in_order(judged, every) and len(judged) == len(every)  # nothing else was left
    assert _findings(judged) == _findings(every) != []  # the unmonitored spot VM


def test_an_instance_idle_only_in_its_estimated_hours_is_read_again_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The judging sees billed node-hours only: hours 40-47 are idle but not billed yet, so their
    estimates show the instance idle after its node was read from hour 36 on; it is read again,
    whole, for `idle_gpu` (whose run and history read every hour of the instance)."""
    billed = [hourly(h, pricing_model="spot") for h in range(40)]
    util = _util([(range(40), 90.0, "111", "train-0"), (range(40, 48), 0.0, "111", "train-0")])
    with caplog.at_level(logging.DEBUG, logger="gpucost.assemble"):
        judged, every, fetched = _both(billed, util)
    assert any(r.getMessage() == "GPU hours read again" for r in caplog.records)
    assert judged == every and fetched == 2 + 4 + 40
    assert any(h.estimated and h.idle_gpu_hours > 0 for h in judged)
    assert _findings(judged) == _findings(every) != []


def test_an_idle_billed_hour_reads_every_node_of_its_instance() -> None:
    billed = [hourly(h, pricing_model="spot") for h in range(40)]
    util = _util([(range(10), 0.0, "111", "train-0"), (range(10, 48), 90.0, "111", "train-0")])
    judged, every, fetched = _both(billed, util)
    key = instance_key(every[0])
    assert [h for h in judged if instance_key(h) == key] == [h for h in every if instance_key(h) == key]
    assert fetched == 2 + 40  # judged idle at once: no second read
    assert _findings(judged) == _findings(every) != []


def test_an_estimate_is_priced_from_its_nodes_latest_billed_hour_before_the_provisional_ones() -> None:
    """Billing stopped at hour 29 (no price in the book): hours 36-47 are estimated at the node's
    billed rate, read from its latest node-hour, which is older than the first provisional hour, and
    the hour before it, which shows it full (its own GPU-hours count its GPUs)."""
    billed = [hourly(h, pricing_model="spot") for h in range(30)]
    judged, every, _ = _both(billed, _util([(range(48), 90.0, "111", "train-0")]))
    assert [h for h in judged if h.estimated] == [h for h in every if h.estimated] != []
    assert [(h.hour - T0) // H for h in judged if not h.estimated] == [28, 29]


def test_a_node_moved_to_another_zone_is_read_with_the_idle_one_of_its_instance() -> None:
    """One VM (instance id 111) billed in two zones: idle in the first, busy in the second; `idle_gpu`
    reads the instance's hours in both, so both nodes are read whole."""
    first = [hourly(h, pricing_model="spot") for h in range(20)]
    second = [
        replace(r, keys={**r.keys, "zone": "us-central1-b"})
        for r in (hourly(h, pricing_model="spot") for h in range(20, 40))
    ]
    util = _util([(range(20), 0.0, "111", "train-0"), (range(20, 48), 90.0, "111", "train-0")])
    judged, every, fetched = _both(first + second, util)
    assert fetched == 2 * 2 + 20 + 20  # the instance read whole at once: no second read
    assert {h.zone for h in every} == {"us-central1-a", "us-central1-b"}
    assert [h for h in judged if not h.estimated] == [h for h in every if not h.estimated]
    assert _findings(judged) == _findings(every) != []


# -- end to end --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_analyze_with_utilization_reads_fewer_gpu_hours_and_finds_the_same(tmp_path: Path) -> None:
    write_fleet(tmp_path, seed=11, days=4, formats=PARQUET)
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    now = datetime.fromisoformat(truth["window"]["end"].replace("Z", "+00:00"))
    files = {
        "billing_paths": [tmp_path / "billing" / "export.parquet"],
        "utilization_paths": [tmp_path / "utilization"],
    }
    every = analyze_once(Config(), now=now, with_budgets=False, keep_gpu_hours=True, **files)
    lean = analyze_once(Config(), now=now, with_budgets=False, keep_gpu_hours=False, **files)
    assert {"idle_gpu", "unmonitored_gpu"} <= {f.kind for f in every.findings}
    assert [f.to_dict() for f in lean.findings] == [f.to_dict() for f in every.findings]
    assert [a.to_dict() for a in lean.attribution] == [a.to_dict() for a in every.attribution]
    assert lean.stats.rows_fetched < every.stats.rows_fetched


def test_every_hour_is_built_only_for_a_reader_of_them_all() -> None:
    """A job budget or a finished job's message reads every hour: only then are they all joined."""
    hours = [gpu(0), gpu(1, pricing_model="spot")]
    built: list[int] = []
    whole = GpuHourTable.from_rows(hours)
    lazy = JudgedGpuHours(GpuHourTable.from_rows(hours[:1]), lambda: built.append(1) or whole, fetched=3)
    assert lazy.on_demand_table().rows() == hours[:1]
    # gpu(0) is busy
    assert lazy.idle_node_table().rows() == lazy.estimated() == [] and built == []
    assert list(lazy) == hours and len(lazy) == 2 and lazy[1] == hours[1]
    assert lazy.whole_table() is whole  # a reader of a few columns of them all (a job budget)
    assert built == [1] and lazy.fetched == 3 + 2  # built once, its billed hours counted
