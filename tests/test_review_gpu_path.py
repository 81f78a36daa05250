"""Review of the GPU path (helper 76): a GKE node on N1 with attached GPUs recreated within an hour."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal as D

from monitor.assemble import gpu_hours
from monitor.gpus import GpuCostHour, GpuNodeHours
from monitor.utilization import GpuSample, util_hours
from tests.test_analyze import T0, H
from tests.test_detectors_common import FakePrices

T4 = FakePrices(table={("T4", "on_demand"): D("0.35")})
NODE = "gke-t4-train-t4-pool-1a2b3c4d-x9k2"
_5MIN = timedelta(minutes=5)


def _billed(hour: int) -> GpuCostHour:
    """A GKE node on n1-standard-16 with 4 T4 attached (the machine type does not say them)."""
    return GpuCostHour(
        hour=T0 + hour * H, project="ml", zone="us-central1-a", region="us-central1", instance=NODE,
        instance_id="7000", cluster="t4-train", machine_type="n1-standard-16", gpu_model="T4",
        pricing_model="on_demand", gpu_hours=D(4), cost_micros=1_400_000,
    )  # fmt: skip


def _samples(hour: int, minutes: range, uuids: list[str], pct: float) -> list[GpuSample]:
    starts = [T0 + hour * H + timedelta(minutes=m) for m in minutes]
    host = ("ml", "us-central1-a", None, None, "t4-train", NODE)
    return [
        GpuSample(*host, u, "NVIDIA Tesla T4", t, t + _5MIN, pct, "node_duty_cycle", None)
        for u in uuids
        for t in starts
    ]


OLD = [f"GPU-0ld{g}" for g in range(4)]
NEW = [f"GPU-new{g}" for g in range(4)]


def test_an_estimated_hour_of_a_recreated_n1_node_prices_the_gpus_attached() -> None:
    """Hour 1 of a GKE node on N1 with 4 T4, recreated at :20 (auto-repair), before its billing
    lands: 8 UUIDs report, 4 at a time. It was priced for 8 T4 ($2.80, $1.40 of it idle with the old
    VM's 4 idle), the a3 rule of 17bb084 capping only machine types that name their GPUs; now the 4
    attached ($1.40), each GPU seen an eighth of it ($0.70 idle), as on an a3-highgpu-8g."""
    nodes = GpuNodeHours.from_rows([_billed(0)])
    samples = _samples(0, range(0, 60, 5), OLD, 90.0)
    samples += _samples(1, range(0, 20, 5), OLD, 0.0) + _samples(1, range(25, 60, 5), NEW, 90.0)
    got = gpu_hours(nodes, util_hours(samples), 10.0, T4, T0 + 2 * H, T0 + H)
    (est,) = [h for h in got if h.estimated]
    assert (est.hour, est.gpus, est.gpu_cost) == (T0 + H, 4, D("1.40"))
    assert (est.idle_gpu_hours, est.idle_cost) == (2, D("0.70"))


def test_an_estimated_hour_of_a_vm_given_more_gpus_prices_the_new_count() -> None:
    """The count is the GPUs reporting at once, not the billed count alone: an N1 VM stopped at
    :20 and started again with 8 T4 (new UUIDs) is priced for 8 until its billing lands."""
    nodes = GpuNodeHours.from_rows([_billed(0)])
    samples = _samples(0, range(0, 60, 5), OLD, 90.0)
    more = [f"GPU-more{g}" for g in range(8)]
    samples += _samples(1, range(0, 20, 5), OLD, 90.0) + _samples(1, range(25, 60, 5), more, 90.0)
    got = gpu_hours(nodes, util_hours(samples), 10.0, T4, T0 + 2 * H, T0 + H)
    (est,) = [h for h in got if h.estimated]
    assert (est.gpus, est.gpu_cost, est.idle_cost) == (8, D("2.80"), D(0))
