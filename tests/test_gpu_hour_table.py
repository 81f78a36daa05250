"""The daemon's detection holds the window's GPU hours as a table (`TableGpuHours` over a
`GpuHourTable`): the GPU detectors read its columns (`idle_gpu` builds a `GpuHour` for each hour
of the nodes it judges alone), and every `GpuHour` is built only for a reader of them all.
Every GPU detector finds on the table exactly what it finds on the same hours as a list, on seed
7's first 4 days polled by the daemon (its forgotten 8x A100, its steady fleet, its estimated
hours)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.detectors import build_detectors
from monitor.detectors.idle_gpu import instance_key
from monitor.detectors.inputs import DetectorInputs, GpuHourTable, TableGpuHours

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=4, hours=9)
GPU_DETECTORS = ("idle_gpu", "unmonitored_gpu", "spot_opportunity", "commitment_opportunity")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_digest_jobs import polled_daemon

    deps = polled_daemon(tmp_path_factory, "gpu-table", seed=7, days=4, now=NOW)
    yield deps
    deps.store.close()


@pytest.fixture(scope="module")
def held(daemon: Any) -> DetectorInputs:
    from tests.test_digest_jobs import assembled

    inputs = assembled(daemon, NOW, provisional_days=2)
    yield inputs
    inputs.hourly.close()


def _table(inputs: DetectorInputs) -> GpuHourTable:
    assert isinstance(inputs.gpu_hours, TableGpuHours)
    return inputs.gpu_hours.table


def test_the_daemon_holds_its_gpu_hours_as_a_table(held: DetectorInputs) -> None:
    assert isinstance(held.gpu_hours, TableGpuHours)
    table = _table(held)
    assert isinstance(table, GpuHourTable) and len(table) > 1000
    assert any(table["estimated"]), "no estimated hour: the fixture no longer covers them"


def test_every_gpu_detector_finds_on_the_table_what_it_finds_on_the_list(held: DetectorInputs) -> None:
    hours = TableGpuHours(_table(held))  # none built yet: the fixture's may have been
    on_table, as_list = replace(held, gpu_hours=hours), replace(held, gpu_hours=_table(held).rows())
    # a commitment over the 4 days' steady fleet (7 days by default)
    detectors = [
        d for d in build_detectors({"commitment_opportunity": {"min_days": 1}}) if d.name in GPU_DETECTORS
    ]
    assert sorted(d.name for d in detectors) == sorted(GPU_DETECTORS)
    found: dict[str, int] = {}
    for det in detectors:
        found_on_table = [f.to_dict() for f in det.evaluate(on_table, NOW)]
        assert found_on_table == [f.to_dict() for f in det.evaluate(as_list, NOW)], det.name
        found[det.name] = len(found_on_table)
    # not vacuous: each of them finds something here (seed 7: the forgotten A100s, commitments...)
    assert all(found.values()), found
    assert hours._all is None  # and none of them built every GPU hour


def test_idle_gpu_reads_every_hour_of_an_idle_node_and_unmonitored_gpu_the_columns(
    held: DetectorInputs,
) -> None:
    every = _table(held).rows()
    idle = {instance_key(h) for h in every if h.idle_gpu_hours > 0}
    hours = TableGpuHours(_table(held))
    of_idle = hours.idle_node_table()
    assert of_idle.rows() == [h for h in every if instance_key(h) in idle]
    assert idle and len(of_idle) < len(every) / 2
    assert hours._all is None  # picked from the columns, no `GpuHour` built for the others
    assert hours.unmonitored_table() is hours.table  # `unmonitored_gpu` reads the columns


def test_idle_gpu_builds_hours_only_for_the_nodes_it_judges(
    held: DetectorInputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`idle_gpu` picks its nodes from the columns: a `GpuHour` for each hour of an idle node in
    the window, none for the others (its evidence lists a judged node's hours)."""
    table = _table(held)
    inputs = replace(held, gpu_hours=TableGpuHours(table))
    every = table.rows()
    idle = {instance_key(h) for h in every if h.idle_gpu_hours > 0 and h.hour >= held.window_start}
    judged = [h for h in every if instance_key(h) in idle and held.window_start <= h.hour < NOW]
    built: list[int] = []
    rows = GpuHourTable.rows

    def counted(self: GpuHourTable, picked: Any = None) -> list[Any]:
        out = rows(self, picked)
        built.append(len(out))
        return out

    monkeypatch.setattr(GpuHourTable, "rows", counted)
    (det,) = [d for d in build_detectors({}) if d.name == "idle_gpu"]
    assert det.evaluate(inputs, NOW)  # seed 7's forgotten A100s
    assert sum(built) == len(judged) and 0 < len(judged) < len(every) / 2


def test_estimated_hours_are_read_without_building_the_others(held: DetectorInputs) -> None:
    hours = TableGpuHours(_table(held))
    inputs = replace(held, gpu_hours=hours)
    assert inputs.estimated_gpu_hours() == [h for h in _table(held).rows() if h.estimated]
    assert hours._all is None  # nothing built them all
    assert replace(held, gpu_hours=list(hours)).estimated_gpu_hours() == inputs.estimated_gpu_hours()


def test_between_keeps_the_hours_of_a_range_in_order_and_of_takes_either_form(held: DetectorInputs) -> None:
    table = _table(held)
    every = table.rows()
    start, end = T0 + timedelta(days=1), T0 + timedelta(days=2, hours=5)
    assert table.between(start, end).rows() == [h for h in every if start <= h.hour < end]
    assert 0 < len(table.between(start, end)) < len(table)
    assert GpuHourTable.of(table) is table
    assert GpuHourTable.of(iter(every[:3])).rows() == every[:3]
