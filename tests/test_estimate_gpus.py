"""How many GPUs, and how much of the hour, an estimated GPU hour prices (`monitor.assemble`).

Hours utilization covers but billing has not reached yet are priced from the price book, so idle
GPUs are flagged within hours; billing replaces the estimates when it lands. An estimate counts the
GPUs its node's billed hours count (`monitor.gpus.node_gpu_hours`), and prices whole hours: the
samples of an hour cannot tell a VM that ran part of it from an agent that reported part of it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal as D

from monitor.assemble import gpu_hours, gpu_node_hours, judged_gpu_hours
from monitor.gpus import GpuCostHour
from monitor.utilization import GpuSample, util_hours
from monitor.utilization.hourly import UtilHours
from tests.aggregates import stored
from tests.test_analyze import T0, H, hourly
from tests.test_detectors_common import FakePrices

#: An N1 VM's GPUs are attached apart from its machine type, which does not say how many.
N1 = "n1-standard-16"
T4 = FakePrices(table={("T4", "on_demand"): D("0.35"), ("T4", "spot"): D("0.14")})
H100 = FakePrices(table={("H100 80GB", "on_demand"): D(11)})
_5MIN = timedelta(minutes=5)


def _t4_hour(hour: int, gpu_hours: str, micros: int) -> GpuCostHour:
    return GpuCostHour(
        hour=T0 + hour * H,
        project="ml",
        zone="us-central1-a",
        region="us-central1",
        instance="train-0",
        instance_id="111",
        cluster=None,
        machine_type=N1,
        gpu_model="T4",
        pricing_model="on_demand",
        gpu_hours=D(gpu_hours),
        cost_micros=micros,
    )


def _samples(hour: int, minutes: range, gpus: int, pct: float) -> list[GpuSample]:
    """300 s samples of `gpus` GPUs of VM 111 in the windows starting at `minutes` of `hour`."""
    host = ("ml", "us-central1-a", "111", "train-0", None, None)
    starts = [T0 + hour * H + timedelta(minutes=m) for m in minutes]
    return [
        GpuSample(*host, str(g), "NVIDIA Tesla T4", t, t + _5MIN, pct, "gpu_utilization", None)
        for g in range(gpus)
        for t in starts
    ]


_WHOLE = range(0, 60, 5)
_TO_20 = range(0, 20, 5)  # a VM stopped at :20


def test_an_estimate_counts_the_gpus_its_nodes_billed_hours_count_not_its_latest_partial_hour() -> None:
    """4 T4 on an N1 VM, stopped at 2:20 (its latest billed hour: 1.33 GPU-hours, which rounds to
    1 GPU), started again at 4:00 with 2 of its GPUs reporting. The estimates read the GPUs from
    that partial hour's own GPU-hours: 2 GPUs (those seen), $0.70 an hour where the bill will say
    4, $1.40; the billed hours, by `node_gpu_hours`, say 4 (helper 71)."""
    billed = [_t4_hour(0, "4", 1_400_000), _t4_hour(1, "4", 1_400_000), _t4_hour(2, "1.333333", 466_667)]
    utils = [s for h in (0, 1) for s in _samples(h, _WHOLE, 4, 90.0)] + _samples(2, _TO_20, 4, 90.0)
    utils += [s for h in (4, 5) for s in _samples(h, _WHOLE, 2, 2.0)]
    got = gpu_hours(billed, util_hours(utils), 10.0, T4, T0 + 6 * H, T0 + 3 * H)
    assert [(g.hour - T0) // H for g in got if g.estimated] == [4, 5]
    assert {g.gpus for g in got} == {4}  # billed and estimated alike
    assert [(g.gpu_cost, g.gpu_hours, g.idle_cost, g.idle_gpu_hours) for g in got if g.estimated] == [
        (D("1.40"), D(4), D("0.70"), D(2))
    ] * 2


def test_the_judged_hours_count_the_estimates_gpus_as_every_hour_does() -> None:
    """The same VM on Spot, billed 30-39 (stopped at 39:20), running again from 42 with 2 GPUs
    reporting: `analyze` reads it from the first provisional hour on (36), and its estimates
    count 4 GPUs both ways."""
    keys = {"sku_description": "Nvidia Tesla T4 GPU running in Americas", "machine_type": N1}
    rows = [hourly(h, gross=560_000, pricing_model="spot", gpu_hours=4.0) for h in range(30, 39)]
    rows += [hourly(39, gross=186_667, pricing_model="spot", gpu_hours=1.333333)]
    store = stored([replace(r, keys={**r.keys, **keys}) for r in rows])
    utils = [s for h in range(30, 39) for s in _samples(h, _WHOLE, 4, 90.0)] + _samples(39, _TO_20, 4, 90.0)
    util = UtilHours.of(util_hours(utils + [s for h in range(42, 48) for s in _samples(h, _WHOLE, 2, 90.0)]))
    end, since = T0 + 48 * H, T0 + 36 * H
    judged = judged_gpu_hours(store, util, T0, end, since, 10.0, T4)[0].rows()
    every = gpu_hours(gpu_node_hours(store, T0, end, since), util, 10.0, T4, end, since)
    estimated = [h for h in every if h.estimated]
    assert [h for h in judged if h.estimated] == estimated
    assert {(h.gpus, h.gpu_cost) for h in estimated} == {(4, D("0.56"))} and {h.gpus for h in every} == {4}


def _h100_estimates(utils: list[GpuSample]) -> dict[int, D]:
    """Hours 0-1 of VM 111 (8 H100) billed at $88, the rest estimated: estimated hour -> cost."""
    a3 = {"machine_type": "a3-highgpu-8g", "gpu_model": "H100 80GB"}
    billed = [replace(_t4_hour(h, "8", 88_000_000), **a3) for h in (0, 1)]
    got = gpu_hours(billed, util_hours(utils), 10.0, H100, T0 + 6 * H, T0)
    return {(g.hour - T0) // H: g.gpu_cost for g in got if g.estimated}


def test_an_hour_the_samples_cover_in_part_is_priced_whole() -> None:
    """Not fixed, on purpose (helper 71). 8 idle H100 whose samples stop at 4:20: a VM stopped
    then bills 8 x 20/60 GPU-hours ($29.33), but an agent that stopped reporting at 4:20 on a VM
    that ran on gives the same samples, and that hour bills whole ($88). A `UtilHour` carries a
    count of samples alone, so its first or last hour cannot be told from a lossy one either: the
    hour is priced whole ($58.67 over for the stopped VM until its billing lands). So is an hour
    whose samples have a gap in the middle (the agent hiccupped at 3:20-3:40), which bills whole."""
    full = [
        s for h in range(4) for s in _samples(h, _WHOLE, 8, 0.0) if not (h == 3 and 20 <= s.start.minute < 40)
    ]
    assert _h100_estimates(full + _samples(4, _TO_20, 8, 0.0)) == {2: D(88), 3: D(88), 4: D(88)}
    # a VM started at 5:40 (or whose agent came up then): its first hour, whole too
    assert _h100_estimates(_samples(5, range(40, 60, 5), 8, 0.0)) == {5: D(88)}


def test_the_judged_hours_read_whole_a_node_whose_estimates_count_from_a_partial_hour() -> None:
    """A Spot N1 VM billed 8 T4 in hours 0-1, 4 from 2, stopped at 4:20, running again from 40 with
    2 GPUs reporting. Its estimates count its GPUs from its latest billed hour, partial, so from
    the node's most GPU-hours in an hour (`node_gpu_hours`): 8 read every hour, but the judged read
    (every hour from the first provisional one, each node's latest and the hour before it) held 4
    at most ($0.56 an hour where every hour gives $1.12). Such a node is read whole."""
    keys = {"sku_description": "Nvidia Tesla T4 GPU running in Americas", "machine_type": N1}
    rows = [hourly(h, gross=1_120_000, pricing_model="spot", gpu_hours=8.0) for h in (0, 1)]
    rows += [hourly(h, gross=560_000, pricing_model="spot", gpu_hours=4.0) for h in (2, 3)]
    rows += [hourly(4, gross=186_667, pricing_model="spot", gpu_hours=1.333333)]
    store = stored([replace(r, keys={**r.keys, **keys}) for r in rows])
    utils = [s for h in (0, 1) for s in _samples(h, _WHOLE, 8, 90.0)]
    utils += [s for h in (2, 3) for s in _samples(h, _WHOLE, 4, 90.0)] + _samples(4, _TO_20, 4, 90.0)
    util = UtilHours.of(util_hours(utils + [s for h in range(40, 48) for s in _samples(h, _WHOLE, 2, 90.0)]))
    end, since = T0 + 48 * H, T0 + 36 * H
    judged = judged_gpu_hours(store, util, T0, end, since, 10.0, T4)[0].rows()
    every = gpu_hours(gpu_node_hours(store, T0, end, since), util, 10.0, T4, end, since)
    assert [h for h in judged if h.estimated] == [h for h in every if h.estimated] != []
    assert {(h.gpus, h.gpu_cost) for h in judged if h.estimated} == {(8, D("1.12"))}


def test_an_n1_vm_with_one_gpu_counts_one() -> None:
    """One T4 on an N1 VM (its machine type does not say its GPUs), idle: billed 1.0 GPU-hour an
    hour. Counted from the GPU-hours by adding 0.5 and rounding half to even, it read as 2 GPUs:
    half of its $0.35 idle, and its estimated hour priced for 2 ($0.70; helper 75)."""
    billed = [_t4_hour(h, "1", 350_000) for h in (0, 1)]
    utils = [s for h in (0, 1, 2) for s in _samples(h, _WHOLE, 1, 0.0)]
    got = gpu_hours(billed, util_hours(utils), 10.0, T4, T0 + 3 * H, T0 + 2 * H)
    assert [(g.estimated, g.gpus, g.gpu_cost, g.idle_cost) for g in got] == [
        (False, 1, D("0.35"), D("0.35")),
        (False, 1, D("0.35"), D("0.35")),
        (True, 1, D("0.35"), D("0.35")),
    ]
