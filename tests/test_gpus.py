"""The utilization x GPU-spend join: idle dollars, fallback keys, unmonitored spend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from monitor.gpus import GpuCostHour, join_gpu_hours

H0 = datetime(2026, 11, 3, 10, tzinfo=UTC)


@dataclass
class Sample:
    project: str
    zone: str
    instance_id: str | None
    instance_name: str | None
    gpu: str
    start: datetime
    utilization_pct: float
    node_name: str | None = None
    memory_used_bytes: float | None = None


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
    (j,) = join_gpu_hours([cost(H0, "111")], samples("111", H0, utils), 10)
    assert j.gpus == 8 and j.idle_gpus == 3
    assert j.idle_gpu_hours == Decimal(3)
    assert j.idle_cost_micros == 30_000_000
    assert abs(j.mean_utilization_pct - (90 * 5 / 8)) < 1e-9


def test_unmonitored_hours_are_neither_busy_nor_idle() -> None:
    (j,) = join_gpu_hours([cost(H0, "222")], samples("111", H0, [0.0] * 8), 10)
    assert not j.monitored and j.mean_utilization_pct is None
    assert j.idle_cost_micros == 0 and j.gpus == 8


def test_fallback_join_by_project_zone_and_name_when_no_instance_id() -> None:
    (j,) = join_gpu_hours(
        [cost(H0, None, instance="trainer-0")], samples(None, H0, [5.0] * 8, name="trainer-0"), 10
    )
    assert j.monitored and j.idle_gpus == 8 and j.idle_cost_micros == 80_000_000


def test_other_hours_do_not_leak_into_the_join() -> None:
    next_hour = H0 + timedelta(hours=1)
    got = join_gpu_hours([cost(H0, "111"), cost(next_hour, "111")], samples("111", H0, [0.0] * 8), 10)
    assert [x.monitored for x in got] == [True, False]


def test_memory_held_while_idle_is_flagged() -> None:
    (j,) = join_gpu_hours([cost(H0, "111")], samples("111", H0, [0.0] * 8, mem=40e9), 10)
    assert j.memory_held is True
