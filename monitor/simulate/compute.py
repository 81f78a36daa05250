"""VMs and resource commitments: the GPU, Core and Ram rows of every VM-hour.

A VM's hour is a pure function of (seed, VM, hour): whether it ran (Spot VMs get preempted now and
then), for how many seconds, and which credits apply (CUD on committed VMs, SUD on N2).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from functools import cached_property

from monitor.simulate.catalog import (
    GIB,
    MachineType,
    Pricing,
    Region,
    Sku,
    commitment_skus,
    compute_skus,
)
from monitor.simulate.delivery import Delivery
from monitor.simulate.rand import unit
from monitor.simulate.rows import Credit, Place, Project, RowMaker, cost_micros, make_row

__all__ = ["Commitment", "Ctx", "Monitoring", "UtilProfile", "Vm"]

_ALWAYS = 10**7
_HOUR = timedelta(hours=1)
_PREEMPT_BLOCK = 6  # hours a preempted Spot VM stays down (first hour partly run)
_PREEMPT_SHARE = 0.05
_SUD = Credit(
    "Sustained Usage Discount",
    "SUSTAINED_USAGE_DISCOUNT",
    Decimal("0.2"),
    full_name="Sustained Usage Discount",
)
_KIND_WORD = {"gpu": "GPU", "core": "CPU", "ram": "RAM"}


@dataclass(frozen=True)
class Ctx:
    """What every entity needs to render an hour."""

    seed: int
    start: datetime
    delivery: Delivery

    def hour_start(self, h: int) -> datetime:
        return self.start + h * _HOUR  # not timedelta(hours=h): keyword parsing, once per row


class UtilProfile:
    TRAIN = "train"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    IDLE = "idle"


class Monitoring(StrEnum):
    """What reports a VM's GPU utilization to Cloud Monitoring (shapes in `utilization`)."""

    OPS_AGENT = "ops_agent_nvml"  # agent.googleapis.com/gpu/utilization on gce_instance, percent
    DCGM_V1 = "ops_agent_dcgm_v1"  # workload.googleapis.com/dcgm.gpu.profiling.sm_utilization, ratio
    GKE_NODE = "gke_node"  # kubernetes.io/node/accelerator/duty_cycle on k8s_node, percent
    NONE = "none"  # no agent: no series at all


@dataclass(frozen=True)
class Commitment:
    """A 1-year resource commitment: hourly `Commitment v1:` fee rows in its project."""

    name: str
    project: Project
    region: Region
    machine: MachineType
    machines: int
    commitment_id: str

    @property
    def key(self) -> str:
        return f"commitment/{self.project.id}/{self.name}"

    @property
    def path(self) -> str:
        return f"projects/{self.project.number}/regions/{self.region.name}/commitments/{self.commitment_id}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        m, n = self.machine, self.machines
        amounts = {"gpu": n * m.gpus * 3600, "core": n * m.cores * 3600, "ram": n * m.memory_gib * GIB * 3600}
        resource = (self.name, f"//compute.googleapis.com/{self.path}")
        return [
            make_row(
                project=self.project,
                place=Place.regional(self.region),
                sku=sku,
                amount=amounts[kind],
                start=ctx.hour_start(h),
                resource=resource,
                subscription=self.commitment_id,
            )
            for kind, sku in commitment_skus(m, self.region).items()
        ]


@dataclass(frozen=True)
class Vm:
    name: str
    project: Project
    region: Region
    zone: str
    machine: MachineType
    pricing: Pricing
    instance_id: str
    labels: tuple[tuple[str, str], ...] = ()
    first_hour: int = -_ALWAYS  # may start before the window
    last_hour: int = _ALWAYS  # exclusive
    util: str = UtilProfile.TRAIN
    idle: tuple[int, int] | None = None  # hours [a, b) at ~0 % although the VM runs
    monitoring: Monitoring = Monitoring.OPS_AGENT
    commitment: Commitment | None = None
    cluster: str | None = None  # GKE cluster of a node VM
    node_pool: str | None = None
    cluster_location: str | None = None  # the cluster's zone or region (k8s_node `location`)
    correction_hour: int | None = None  # this hour's Core row is corrected days later

    @property
    def monitored(self) -> bool:
        return self.monitoring is not Monitoring.NONE

    @cached_property
    def skus(self) -> dict[str, Sku]:
        return compute_skus(self.machine, self.region, self.pricing)

    @property
    def key(self) -> str:
        return f"vm/{self.project.id}/{self.name}"

    @property
    def global_name(self) -> str:
        return (
            f"//compute.googleapis.com/projects/{self.project.number}/zones/{self.zone}"
            f"/instances/{self.instance_id}"
        )

    @property
    def place(self) -> Place:
        return Place.zonal(self.region, self.zone)

    def seconds(self, seed: int, h: int) -> int:
        """Seconds the VM ran in hour h (0 when stopped or preempted)."""
        if not self.first_hour <= h < self.last_hour:
            return 0
        if self.pricing is not Pricing.SPOT:
            return 3600
        block = h // _PREEMPT_BLOCK
        if unit(seed, "preempt", self.key, block) >= _PREEMPT_SHARE:
            return 3600
        if h % _PREEMPT_BLOCK:
            return 0
        return 600 + int(2400 * unit(seed, "preempt-at", self.key, block))

    def system_labels(self) -> tuple[tuple[str, str], ...]:
        m = self.machine
        return (
            ("compute.googleapis.com/machine_spec", m.name),
            ("compute.googleapis.com/cores", str(m.cores)),
            ("compute.googleapis.com/memory", str(m.memory_gib * 1024)),
        )

    @cached_property
    def _credits(self) -> dict[str, tuple[Credit, ...]]:
        """The credits of each kind's rows, built once per VM (they were built once per row)."""
        if self.commitment is not None:
            c = self.commitment
            return {
                kind: (
                    Credit(
                        f"Committed Usage Discount: {word}",
                        "COMMITTED_USAGE_DISCOUNT",
                        Decimal(1),
                        id=c.path,
                        full_name=f"Committed use discount - 1 year: {c.name} ({word})",
                    ),
                )
                for kind, word in _KIND_WORD.items()
            }
        if self.machine.family == "N2" and self.pricing is Pricing.ON_DEMAND:
            return dict.fromkeys(_KIND_WORD, (_SUD,))
        return dict.fromkeys(_KIND_WORD, ())

    @cached_property
    def _makers(self) -> dict[str, RowMaker]:
        """Per kind: its rows differ from hour to hour only in amount and time."""
        resource = (self.name, self.global_name)
        return {
            kind: RowMaker(
                project=self.project,
                place=self.place,
                sku=sku,
                labels=self.labels,
                system_labels=self.system_labels(),
                resource=resource,
            )
            for kind, sku in self.skus.items()
        }

    def _row(self, ctx: Ctx, h: int, kind: str, amount: int) -> dict:
        return self._makers[kind].row(amount, ctx.hour_start(h), self._credits[kind])

    def amounts(self, secs: int) -> dict[str, int]:
        m = self.machine
        out = {"core": m.cores * secs, "ram": m.memory_gib * GIB * secs}
        if m.gpus:
            out = {"gpu": m.gpus * secs, **out}
        return out

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        secs = self.seconds(ctx.seed, h)
        if not secs:
            return []
        rows = [self._row(ctx, h, kind, amount) for kind, amount in self.amounts(secs).items()]
        if h == self.correction_hour:
            rows += self._correction(ctx, h, secs)
        return rows

    def _correction(self, ctx: Ctx, h: int, secs: int) -> list[dict]:
        """A usage correction: the Core row was over-reported; negate it and re-bill half."""
        info = {
            "id": f"adj-{self.instance_id[-8:]}-{h}",
            "description": "Correction of over-reported vCPU usage",
            "mode": "COMPLETE_NEGATION_WITH_REMONETIZATION",
            "type": "USAGE_CORRECTION",
        }
        amount = self.machine.cores * secs
        negation = self._row(ctx, h, "core", amount)
        negation["cost"] = negation["cost_at_list"] = -negation["cost"]
        negation["usage"]["amount"] = -negation["usage"]["amount"]
        negation["usage"]["amount_in_pricing_units"] = -negation["usage"]["amount_in_pricing_units"]
        for c in negation["credits"]:
            c["amount"] = -c["amount"]
        corrected = self._row(ctx, h, "core", amount // 2)
        when = ctx.delivery.correction_time(ctx.hour_start(h + 1))
        for row in (negation, corrected):
            row.update(cost_type="adjustment", adjustment_info=dict(info), export_time=when)
        return [negation, corrected]

    def gpu_micros(self, seed: int, h: int) -> int:
        """GPU cost of hour h in micros, as billed (for the ground truth)."""
        secs = self.seconds(seed, h)
        return cost_micros(self.skus["gpu"], self.machine.gpus * secs) if secs and "gpu" in self.skus else 0
