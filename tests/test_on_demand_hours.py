"""The opportunity detectors' table of on-demand GPU hours (`OnDemandHours`) holds, row for row,
what the `GpuHour`s it is built from say: the rows with an on-demand part (`with_on_demand_part`,
whose fast path skips the share's arithmetic for hours without CUD credits), each one's node and
on-demand GPU- and machine-hours, and no row of a node that did no work (`unused_nodes`). The
detectors' figures on that table are pinned elsewhere (`tests/test_detectors_opportunities.py`, the
ground-truth suites); here the table is checked against the `GpuHour` properties it replaces."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal as D

from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.detectors.idle_gpu import FORGOTTEN_MIN_READ_HOURS, instance_key
from monitor.detectors.inputs import GpuHour, GpuHourTable, with_on_demand_part
from monitor.detectors.opportunities import OnDemandHours, on_demand_hours, unused_nodes
from tests.test_detectors_common import at, gpu, inputs

_PRICING = st.sampled_from(["on_demand", "committed", "spot", "reserved", None])


@st.composite
def _hours(draw: st.DrawFn) -> list[GpuHour]:
    """GPU hours of any pricing, with or without CUD credits (up to beyond their gross), at a
    gross of $0 or more, with 0 to 8 GPUs and part-hours, of a known GPU model or not."""
    rows = []
    for i in range(draw(st.integers(0, 24))):
        gpus = draw(st.integers(0, 8))
        gross = draw(st.sampled_from([D(0), D("8.8"), D("88.000001")]))
        cud = -draw(st.sampled_from([D(0), D("0.000001"), D("4.4"), gross, gross + 1]))
        r = gpu(
            i % 6,
            f"vm-{draw(st.integers(0, 2))}",
            gpus=gpus,
            util=draw(st.sampled_from([None, 0.0, 90.0])),
            pricing_model=draw(_PRICING),
            machine_type=draw(st.sampled_from([None, "a3-highgpu-8g"])),
        )
        r = replace(r, gpu_model=draw(st.sampled_from(["H100", None])))
        part = draw(st.sampled_from([D(1), D("0.333333")]))
        rows.append(replace(r, gpu_hours=gpus * part, gpu_cost=gross, gpu_cud=cud, idle_gpu_hours=D(0)))
    return rows


@settings(max_examples=200, deadline=None)
@given(_hours())
@example([replace(gpu(0), gpu_cud=D(0), pricing_model="committed")])  # committed, no credit: covered
@example([replace(gpu(0), gpu_cud=D("-1"), gpu_cost=D(0), pricing_model="on_demand")])  # $0 gross
def test_the_table_holds_what_the_gpu_hours_say(rows: list[GpuHour]) -> None:
    kept = with_on_demand_part(rows)
    assert kept == [r for r in rows if r.on_demand_share > 0]
    start, end = at(1), at(5)  # hours 1 to 4 of the 6
    # the nodes without work are `unused_nodes`' test's: none here, with fewer hours than it needs
    assert not unused_nodes(kept)
    table = OnDemandHours.of(GpuHourTable.from_rows(rows), start, end)
    assert OnDemandHours.of(GpuHourTable.from_rows(kept), start, end).columns == table.columns
    window = [r for r in kept if r.gpu_model and start <= r.hour < end]
    assert len(table) == len(window)
    for i, r in enumerate(window):
        row = table.row(i)
        assert (row.hour, row.node, row.gpus, row.gpu_hours) == (r.hour, instance_key(r), r.gpus, r.gpu_hours)
        assert (row.instance, row.labels) == (r.instance, r.labels)
        assert row.on_demand_gpu_hours == r.on_demand_gpu_hours
        assert row.on_demand_machine_hours == (r.on_demand_gpu_hours / r.gpus if r.gpus else None)


def test_a_node_that_did_no_work_is_left_out_of_the_table() -> None:
    """Idle in every hour read, at least `FORGOTTEN_MIN_READ_HOURS` of them: `idle_gpu`'s, not an
    opportunity. A node busy in one of its hours, or read too few hours, stays."""
    n = FORGOTTEN_MIN_READ_HOURS
    forgotten = [gpu(h, "forgotten", util=0.0, idle=8) for h in range(n)]
    busy_once = [gpu(h, "busy-once", util=0.0, idle=8) for h in range(n)] + [gpu(n, "busy-once")]
    short = [gpu(h, "short", util=0.0, idle=8) for h in range(n - 1)]
    unmonitored = [gpu(h, "dark", util=None) for h in range(n)]
    rows = forgotten + busy_once + short + unmonitored
    assert unused_nodes(rows) == {instance_key(forgotten[0])}
    inp = inputs(gpu_hours=rows)
    table = on_demand_hours(inp, inp.window_end)
    assert set(table["instance"]) == {"busy-once", "short", "dark"}
    assert len(table) == len(rows) - n
