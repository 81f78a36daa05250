"""The utilization x GPU-spend join: idle dollars, fallback keys, unmonitored spend."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitor.assemble import gpu_hours as gpu_hours_of
from monitor.gpus import GpuCostHour, join_gpu_hours
from monitor.utilization import GpuSample, util_hours

H0 = datetime(2026, 11, 3, 10, tzinfo=UTC)


def Sample(  # a GpuSample with this test's defaults
    project: str,
    zone: str,
    instance_id: str | None,
    instance_name: str | None,
    gpu: str,
    start: datetime,
    utilization_pct: float,
    node_name: str | None = None,
    memory_used_bytes: float | None = None,
    cluster: str | None = None,
    signal: str = "gpu_utilization",
) -> GpuSample:
    return GpuSample(
        project,
        zone,
        instance_id,
        instance_name,
        cluster,
        node_name,
        gpu,
        None,
        start,
        start + timedelta(minutes=5),
        utilization_pct,
        signal,
        memory_used_bytes,
    )


def cost(
    hour: datetime, instance_id: str | None, instance: str = "vm", micros: int = 80_000_000, gpus: int = 8
) -> GpuCostHour:
    return GpuCostHour(
        hour=hour,
        project="p",
        zone="us-central1-a",
        region="us-central1",
        instance=instance,
        instance_id=instance_id,
        cluster=None,
        machine_type="a3-highgpu-8g",
        gpu_model="H100 80GB",
        pricing_model="on_demand",
        gpu_hours=Decimal(gpus),
        cost_micros=micros,
    )


def samples(
    instance_id: str | None, hour: datetime, utils: list[float], name: str = "vm", mem: float | None = None
) -> list[Sample]:
    out = []
    for g, u in enumerate(utils):
        for m in range(0, 60, 5):  # 300 s alignment
            out.append(
                Sample(
                    "p",
                    "us-central1-a",
                    instance_id,
                    name,
                    str(g),
                    hour + timedelta(minutes=m),
                    u,
                    memory_used_bytes=mem,
                )
            )
    return out


def test_idle_dollars_are_the_cost_share_of_idle_gpus() -> None:
    utils = [0.0] * 3 + [90.0] * 5
    (j,) = join_gpu_hours([cost(H0, "111")], util_hours(samples("111", H0, utils)), 10)
    assert j.gpus == 8 and j.idle_gpus == 3
    assert j.idle_gpu_hours == Decimal(3)
    assert j.idle_cost_micros == 30_000_000
    assert abs(j.mean_utilization_pct - (90 * 5 / 8)) < 1e-9


def test_unmonitored_hours_are_neither_busy_nor_idle() -> None:
    (j,) = join_gpu_hours([cost(H0, "222")], util_hours(samples("111", H0, [0.0] * 8)), 10)
    assert not j.monitored and j.mean_utilization_pct is None
    assert j.idle_cost_micros == 0 and j.gpus == 8


def test_fallback_join_by_project_zone_and_name_when_no_instance_id() -> None:
    (j,) = join_gpu_hours(
        [cost(H0, None, instance="trainer-0")], util_hours(samples(None, H0, [5.0] * 8, name="trainer-0")), 10
    )
    assert j.monitored and j.idle_gpus == 8 and j.idle_cost_micros == 80_000_000


def test_other_hours_do_not_leak_into_the_join() -> None:
    next_hour = H0 + timedelta(hours=1)
    got = join_gpu_hours([cost(H0, "111"), cost(next_hour, "111")], util_hours(samples("111", H0, [0.0] * 8)), 10)
    assert [x.monitored for x in got] == [True, False]


def test_memory_held_while_idle_is_flagged() -> None:
    (j,) = join_gpu_hours([cost(H0, "111")], util_hours(samples("111", H0, [0.0] * 8, mem=40e9)), 10)
    assert j.memory_held is True


def test_gke_node_joins_by_cluster_and_node_despite_the_billed_instance_id() -> None:
    node = "gke-h100-train-a3-pool-1a2b3c4d-x9k2"  # gke-<cluster>-<pool>-<8 hex>-<4>
    c = replace(cost(H0, "4242", instance=node), cluster="h100-train", node_pool="a3-pool")
    gke = [
        replace(
            s, instance_id=None, instance_name=None, cluster="h100-train", node_name=node, zone="us-central1"
        )
        for s in samples(None, H0, [0.0] * 8, name=node)
    ]
    (j,) = join_gpu_hours([c], util_hours(gke), 10)
    assert j.monitored and j.idle_gpus == 8
    other = [replace(s, cluster="other") for s in gke]
    (k,) = join_gpu_hours([c], util_hours(other), 10)
    assert not k.monitored


def test_idle_dollars_use_the_effective_price_after_cud_and_sud_credits() -> None:
    c = replace(cost(H0, "111"), cud_micros=-40_000_000, sud_micros=-8_000_000, credits_micros=-50_000_000)
    (j,) = join_gpu_hours([c], util_hours(samples("111", H0, [0.0] * 4 + [90.0] * 4)), 10)
    assert j.idle_cost_micros == 16_000_000  # (80 - 40 - 8) / 2; other credits do not count
    free = replace(cost(H0, "111"), cost_micros=0)  # a $0 reserved GPU: idle hours, no idle dollars
    (z,) = join_gpu_hours([free], util_hours(samples("111", H0, [0.0] * 8)), 10)
    assert z.idle_cost_micros == 0 and z.idle_gpu_hours == 8


@pytest.mark.parametrize(
    ("machine_type", "gpu_hours", "reporting", "gpus", "idle_gpu_hours", "idle_usd"),
    [
        # an a3-highgpu-8g (8 H100s: its machine type) with 5 GPUs reporting, 3 of them idle: 3/8 of
        # $88, not 3/5 ($52.80, 4.8 idle GPU-hours)
        ("a3-highgpu-8g", 8, 5, 8, Decimal(3), Decimal(33)),
        # no machine type (an N1 VM's GPUs are attached apart): the full hour's 8 GPU-hours billed
        (None, 8, 5, 8, Decimal(3), Decimal(33)),
        # never fewer than the GPUs seen (a partial hour of a VM without a machine type: 4 GPU-hours)
        (None, 4, 5, 5, Decimal("2.4"), Decimal("52.8")),
    ],
    ids=["machine_type", "gpu_hours_billed", "gpus_seen"],
)
def test_the_idle_share_divides_by_the_gpus_attached_not_those_reporting(
    machine_type, gpu_hours, reporting, gpus, idle_gpu_hours, idle_usd
) -> None:
    row = replace(cost(H0, "333", micros=88_000_000, gpus=gpu_hours), machine_type=machine_type)
    utils = ([0.0] * 3 + [90.0] * 5)[:reporting]
    (g,) = gpu_hours_of([row], util_hours(samples("333", H0, utils)), 10.0, None, H0 + timedelta(hours=1))
    assert (g.gpus, g.idle_gpu_hours, g.idle_cost) == (gpus, idle_gpu_hours, idle_usd)
    (j,) = join_gpu_hours([row], util_hours(samples("333", H0, utils)), 10)
    assert (j.gpus, j.idle_gpu_hours, j.idle_cost_micros) == (gpus, idle_gpu_hours, int(idle_usd * 1_000_000))


def test_a_partial_hour_of_a_node_without_machine_type_divides_by_its_full_hours_gpus() -> None:
    """An N1 VM's 4 T4 (attached apart from its machine type), started at 10:40: its first hour
    bills 1.33 GPU-hours, which rounded said 1 GPU, and the 2 that report (both idle) were then
    the whole node: all its partial hour idle, where half of it is (helper 63's review). The node's
    full hours say 4."""
    first = replace(cost(H0, "444", micros=466_667, gpus=1), gpu_hours=Decimal("1.333333"))
    full = replace(cost(H0 + timedelta(hours=1), "444", micros=1_400_000, gpus=4))
    rows = [replace(r, machine_type="n1-standard-16") for r in (first, full)]
    idle = util_hours(samples("444", H0, [2.0, 2.0]) + samples("444", H0 + timedelta(hours=1), [2.0, 2.0]))
    joined = join_gpu_hours(rows, idle, 10)
    assert [(j.gpus, j.idle_gpu_hours) for j in joined] == [(4, Decimal("0.6666665")), (4, Decimal(2))]
    got = gpu_hours_of(rows, idle, 10.0, None, H0 + timedelta(hours=2))
    assert [(g.gpus, g.idle_gpu_hours) for g in got] == [(4, Decimal("0.6666665")), (4, Decimal(2))]


def test_a_node_resized_keeps_each_hours_own_gpu_count() -> None:
    """An N1 VM with 4 T4 for two hours, all idle, then resized to 8 (stopped, accelerators set,
    started): its 4-GPU hours took the node's most, 8, and read half idle (helper 67's review)."""
    four = [cost(H0 + timedelta(hours=i), "555", micros=1_400_000, gpus=4) for i in range(2)]
    eight = [cost(H0 + timedelta(hours=i), "555", micros=2_800_000, gpus=8) for i in range(2, 4)]
    rows = [replace(r, machine_type="n1-standard-16") for r in four + eight]
    utils = [s for i in range(2) for s in samples("555", H0 + timedelta(hours=i), [2.0] * 4)]
    utils += [s for i in range(2, 4) for s in samples("555", H0 + timedelta(hours=i), [90.0] * 8)]
    joined = join_gpu_hours(rows, util_hours(utils), 10)
    assert [(j.gpus, j.idle_gpu_hours) for j in joined] == [(4, 4), (4, 4), (8, 0), (8, 0)]
    got = gpu_hours_of(rows, util_hours(utils), 10.0, None, H0 + timedelta(hours=4))
    assert [(g.gpus, g.idle_cost) for g in got] == [(4, Decimal("1.4")), (4, Decimal("1.4")), (8, 0), (8, 0)]


@pytest.mark.parametrize(
    ("first_gpu_hours", "first_gpus", "second_gpu_hours", "second_gpus", "expected"),
    [
        # 8 T4 started at 10:30 bill a whole 4.0 in their first hour: a partial hour all the same,
        # read as 4 GPUs, its idle share doubled (helper 69's review)
        (Decimal("4.0"), 4, Decimal(8), 8, [8, 8]),
        # a full 4-GPU hour billed as 3.9999999 beside another: its own count, 4 (a node resized to 8
        # later must not read 8 in it)
        (Decimal("3.9999999"), 4, Decimal("4.0"), 4, [4, 4]),
    ],
    ids=["partial_whole", "full_inexact"],
)
def test_a_full_hour_is_one_a_neighbouring_hour_repeats(
    first_gpu_hours, first_gpus, second_gpu_hours, second_gpus, expected
) -> None:
    first = replace(cost(H0, "888", micros=1_400_000, gpus=first_gpus), gpu_hours=first_gpu_hours)
    second = replace(
        cost(H0 + timedelta(hours=1), "888", micros=2_800_000, gpus=second_gpus), gpu_hours=second_gpu_hours
    )
    later = cost(H0 + timedelta(hours=3), "888", micros=2_800_000, gpus=8)  # resized to 8 after a stop
    rows = [replace(r, machine_type="n1-standard-32") for r in (first, second, later)]
    idle = util_hours([s for h in (0, 1, 3) for s in samples("888", H0 + timedelta(hours=h), [2.0, 2.0])])
    assert [j.gpus for j in join_gpu_hours(rows, idle, 10)] == [*expected, 8]
