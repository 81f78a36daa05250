"""A GKE node recreated under its name within an hour, seen by GPU UUID: each VM on its own GPUs.

Auto-repair drains and re-creates a node under its original name ("Node repair process",
https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-repair): a new VM with a new
instance id, so billing has two instance rows in that hour, both of the node's one identity
(cluster, node name; `monitor.gpu_identity`). The new VM's GPUs are other devices with other UUIDs,
and dcgm-exporter (`UUID` label) and the node duty cycle (`accelerator_id`, the NVML UUID per
cAdvisor) key a GPU by its UUID (`monitor.sources.presets`): the node's host-hour has 16 GPUs on an
a3-highgpu-8g. Both rows matched all 16, each was idle by the other VM's GPUs too: with the old VM
hung (idle) for its 20 minutes ($29.33) and the new one busy, the hour showed $40.33 idle and the
finding $128.33 where the bill says $117.33. Now each row is judged on the GPUs that reported while
it ran.

Series are built with `tests.test_gke_identity`'s REST-shaped builders and parsed for real.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest

from monitor.assemble import assemble_inputs, gpu_hours, gpu_node_hours
from monitor.billing_poll import HourlyCost
from monitor.detectors.idle_gpu import IdleGpu
from monitor.detectors.inputs import GpuHour
from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from monitor.utilization import load_util_hours, migrate, replace_window, util_hours
from tests.aggregates import stored
from tests.test_gke_identity import NODES, T0, H, billed, dcgm_sm_active, detector_inputs, k8s_node, parsed

D = Decimal
OLD_IID, NEW_IID = "7000", "7001"
OLD = [f"GPU-0d1e{g}a9e-0f3b-4c1e-9a7d-2b8e6f0d1c3{g}" for g in range(8)]
NEW = [f"GPU-5c1a{g}e71-77aa-4c1e-9a7d-2b8e6f0d1c3{g}" for g in range(8)]
#: (hour, first minute, end minute, the VM's GPUs): the old VM runs to 10:20 of hour 1, the new one
#: reports from 10:25 (booted, exporter up).
SPANS = [(0, 0, 60, OLD), (1, 0, 20, OLD), (1, 25, 60, NEW), (2, 0, 60, NEW), (3, 0, 60, NEW)]


def _rows() -> list[HourlyCost]:
    """The bill: $88 an hour; in hour 1 the old VM 20 minutes ($29.333333), the new one 35."""
    rows = [billed(0, iid=OLD_IID), billed(1, iid=OLD_IID, gross=29_333_333, gpu_hours=8 * 20 / 60)]
    rows += [billed(1, iid=NEW_IID, gross=51_333_333, gpu_hours=8 * 35 / 60)]
    return rows + [billed(h, iid=NEW_IID) for h in (2, 3)]


def _dcgm(uuid: str, g: int, hour: int, pct: float) -> dict:
    return dcgm_sm_active(NODES[0], g, uuid, hour, pct / 100)  # SM activity is a 0-1 ratio


def _duty_cycle(uuid: str, g: int, hour: int, pct: float) -> dict:
    return k8s_node(NODES[0], uuid, hour, pct)


def _series(make: Callable[[str, int, int, float], dict], idle_old: int, idle_new: int) -> list[dict]:
    """`idle_old` of the old VM's GPUs and `idle_new` of the new one's at 0%, the others at 90%,
    each series cut to its VM's span of the hour."""
    out = []
    for hour, lo, hi, uuids in SPANS:
        idle = idle_old if uuids is OLD else idle_new
        for g, uuid in enumerate(uuids):
            ts = make(uuid, g, hour, 0.0 if g < idle else 90.0)
            ts["points"] = [p for p in ts["points"] if lo <= int(p["interval"]["startTime"][14:16]) < hi]
            out.append(ts)
    return out


SIGNALS = [_dcgm, _duty_cycle]
# (idle GPUs of the old VM, of the new VM) -> hour 1's idle dollars (old row, new row): each VM's idle
# GPUs' share of its own cost (micros: effective * idle // 8). Before, both rows saw all 16 GPUs.
CASES = [
    ((8, 0), (D("29.333333"), D(0))),  # the review's hour: $40.33 before
    ((0, 8), (D(0), D("51.333333"))),  # before: $40.33
    ((2, 5), (D("7.333333"), D("32.083333"))),  # before: 7/16 of each, $35.291666
    ((8, 8), (D("29.333333"), D("51.333333"))),  # the same dollars before, but 16 GPUs a row
]


def _hour_1(hours: list[GpuHour]) -> list[tuple]:
    return sorted((h.instance_id, h.gpus, h.idle_cost) for h in hours if h.hour == T0 + H and not h.estimated)


NOW = T0 + 20 * 24 * H  # no provisional hour: nothing estimated


@pytest.fixture(scope="module")
def bill() -> Iterator[AggregateStore]:
    """The bill in an aggregate store, read back by the daemon's queries."""
    store = stored(_rows())
    yield store
    store.close()


@pytest.mark.parametrize("make", SIGNALS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize(("idle", "truth"), CASES, ids=lambda c: str(c))
def test_each_instance_of_the_recreated_node_is_judged_on_its_own_gpus(bill, make, idle, truth) -> None:
    """Each row of hour 1 sees its VM's 8 GPUs, and its idle dollars are its own VM's; the hours'
    idle dollars add up to the bill's."""
    nodes = gpu_node_hours(bill, T0, T0 + 4 * H, NOW)
    got = gpu_hours(nodes, util_hours(parsed(_series(make, *idle))), 10.0, None, T0 + 4 * H)
    assert _hour_1(got) == [(OLD_IID, 8, truth[0]), (NEW_IID, 8, truth[1])]
    old, new = (D(88) * n / 8 for n in idle)  # hour 0 is the old VM's, hours 2 and 3 the new one's
    assert sum((h.idle_cost for h in got), D(0)) == old + sum(truth) + 2 * new


@pytest.mark.parametrize("defer", [False, True], ids=["daemon", "analyze"])
def test_stored_samples_give_the_same_split_to_the_daemon_and_to_analyze(bill, defer) -> None:
    """The samples stored and read back (`utilization_hours` keeps each GPU-hour's first and last
    start), joined as the daemon (`assemble_inputs`) and `analyze` (`defer`: the hours its detectors
    judge) join them."""
    samples = parsed(_series(_dcgm, 2, 5))
    store = SQLiteStore(":memory:")
    try:
        migrate(store)
        replace_window(store, "ml-prod", "gke", T0, T0 + 4 * H, samples, now=T0 + 4 * H)
        assert load_util_hours(store, T0, T0 + 4 * H).rows() == util_hours(samples)
        inputs = assemble_inputs(
            store, T0, T0 + 4 * H, NOW, aggregates=bill, provisional_days=3, idle_threshold_pct=10.0,
            prices=None, defer=defer,
        )  # fmt: skip
        got = list(inputs.gpu_hours)
    finally:
        store.close()
    assert _hour_1(got) == [(OLD_IID, 8, D("7.333333")), (NEW_IID, 8, D("32.083333"))]


@pytest.mark.parametrize("make", SIGNALS, ids=lambda f: f.__name__.strip("_"))
def test_the_hung_node_repaired_is_idle_for_what_its_old_vm_cost(bill, make) -> None:
    """The review's figure: the old VM hung (idle) until repaired, the new one busy. The finding is
    $88 + $29.33 = $117.33 for two idle hours (it was $128.33: half the new VM's 35 minutes too)."""
    nodes = gpu_node_hours(bill, T0, T0 + 4 * H, NOW)
    joined = gpu_hours(nodes, util_hours(parsed(_series(make, 8, 0))), 10.0, None, T0 + 4 * H)
    (f,) = IdleGpu().evaluate(detector_inputs(joined, 4), T0 + 4 * H)
    assert (f.impact_usd, f.evidence["idle_hours"]) == (D("117.333333"), 2)


def test_an_estimated_hour_of_the_recreated_node_prices_the_gpus_attached() -> None:
    """Hour 1 before its billing lands: estimated from the 16 GPUs that reported. It was priced for
    16 ($176, $88 of it idle with the old VM hung) where the bill will say about $80.67 for the two
    VMs' 55 minutes (helper 70). Now the 8 GPUs attached, each GPU seen a share of them: $88, the 8
    idle ones half of it (which of the two VMs ran longer only the bill will tell)."""
    from tests.test_detectors_common import FakePrices

    prices = FakePrices(table={("H100 80GB", "on_demand"): D(11)})
    store = stored([billed(0, iid=OLD_IID)])
    try:
        nodes = gpu_node_hours(store, T0, T0 + 2 * H, T0 + H)
        util = util_hours(parsed(_series(_dcgm, 8, 0)[:24]))  # hour 0 billed, hour 1 not yet
        got = gpu_hours(nodes, util, 10.0, prices, T0 + 2 * H, T0 + H)
    finally:
        store.close()
    (est,) = [h for h in got if h.estimated]
    assert (est.hour, est.gpus, est.gpu_cost) == (T0 + H, 8, D(88))
    assert (est.idle_gpu_hours, est.idle_cost) == (4, D(44))
