"""Utilization x GPU spend, per instance and hour: what idle GPUs cost.

The join runs in an in-memory DuckDB over already-aggregated inputs (GPU cost per instance-hour from
the billing engine, utilization samples at the alignment grain), so the same code serves BigQuery and
the embedded engine. Join key: the numeric instance id (billing `resource.global_name` tail =
Monitoring `instance_id`); fallback (project, zone, instance name); GKE nodes by node name.

A GPU-hour is idle when that GPU's mean utilization over the hour is below the threshold; the idle
dollars of an instance-hour are its GPU cost times idle GPUs / GPUs. Instance-hours with GPU spend but
no utilization are *unmonitored*, never assumed busy or idle.

`summarize_instances` / `rollups` sum joined hours per instance and per project or label for
`gpucost gpus`: GPU-hours, utilization, GPU cost, idle dollars, unmonitored dollars and the
effective price of a *busy* GPU-hour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

import duckdb
import pandas as pd

from monitor.gpu_models import gpus_for_machine_type

__all__ = [
    "GpuCostHour",
    "GpuRollup",
    "GpuUsage",
    "InstanceGpus",
    "JoinedHour",
    "join_gpu_hours",
    "rollups",
    "summarize_instances",
]

_MICROS = Decimal(1_000_000)


@dataclass(frozen=True)
class GpuCostHour:
    """GPU spend of one instance in one usage hour (aggregated by the billing engine)."""

    hour: datetime
    project: str | None
    zone: str | None
    region: str | None
    instance: str | None
    instance_id: str | None
    cluster: str | None
    machine_type: str | None
    gpu_model: str | None
    pricing_model: str | None
    gpu_hours: Decimal
    cost_micros: int
    credits_micros: int = 0
    provisional: bool = False
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JoinedHour:
    cost: GpuCostHour
    gpus: int
    mean_utilization_pct: float | None
    idle_gpus: int
    memory_held: bool | None

    @property
    def monitored(self) -> bool:
        return self.mean_utilization_pct is not None

    @property
    def idle_gpu_hours(self) -> Decimal:
        if not self.monitored or self.gpus == 0:
            return Decimal(0)
        return self.cost.gpu_hours * self.idle_gpus / self.gpus

    @property
    def idle_cost_micros(self) -> int:
        if not self.monitored or self.gpus == 0:
            return 0
        return self.cost.cost_micros * self.idle_gpus // self.gpus


_JOIN_SQL = """
WITH per_gpu AS (
    SELECT project, zone, instance_id, instance_name, node_name, gpu,
           date_trunc('hour', start) AS hour,
           AVG(utilization_pct) AS util,
           MAX(memory_used_bytes) AS mem
    FROM samples
    GROUP BY ALL
), per_instance AS (
    SELECT project, zone, instance_id, instance_name, node_name, hour,
           COUNT(*) AS gpus_seen,
           AVG(util) AS mean_util,
           COUNT_IF(util < $threshold) AS idle_gpus,
           BOOL_OR(util < $threshold AND mem > 0) AS memory_held
    FROM per_gpu
    GROUP BY ALL
)
SELECT c.idx, u.gpus_seen, u.mean_util, u.idle_gpus, u.memory_held
FROM costs AS c
LEFT JOIN per_instance AS u
  ON c.hour = u.hour
 AND (
      (c.instance_id IS NOT NULL AND c.instance_id = u.instance_id)
   OR (c.instance_id IS NULL AND c.project = u.project AND c.zone = u.zone
       AND c.instance = COALESCE(u.instance_name, u.node_name))
 )
QUALIFY ROW_NUMBER() OVER (PARTITION BY c.idx ORDER BY u.gpus_seen DESC NULLS LAST) = 1
ORDER BY c.idx
"""


def _gpus_from_usage(c: GpuCostHour) -> int:
    """GPUs attached: from the machine type when billing names it (`a3-highgpu-8g` => 8), else from
    the GPU-hours billed in the hour (exact for a full hour); at least one."""
    known = gpus_for_machine_type(c.machine_type) if c.machine_type else None
    if known is not None:
        return known.count
    return max(1, int((c.gpu_hours + Decimal("0.5")).to_integral_value()))


def join_gpu_hours(
    costs: Sequence[GpuCostHour], samples: Iterable[object], idle_threshold_pct: float
) -> list[JoinedHour]:
    """Join GPU spend to utilization; `samples` are `monitor.utilization.GpuSample`-shaped objects."""
    if not costs:
        return []
    cost_df = pd.DataFrame(
        {
            "idx": range(len(costs)),
            "hour": [c.hour for c in costs],
            "project": [c.project for c in costs],
            "zone": [c.zone for c in costs],
            "instance": [c.instance for c in costs],
            "instance_id": [c.instance_id for c in costs],
        }
    )
    cols = ("project", "zone", "instance_id", "instance_name", "node_name", "gpu", "start")
    rows = [
        (*(getattr(s, k) for k in cols), float(s.utilization_pct), getattr(s, "memory_used_bytes", None))
        for s in samples
    ]
    sample_df = pd.DataFrame(rows, columns=[*cols, "utilization_pct", "memory_used_bytes"])
    sample_df["start"] = pd.to_datetime(sample_df["start"], utc=True)
    sample_df["memory_used_bytes"] = sample_df["memory_used_bytes"].astype("float64")
    for col in ("project", "zone", "instance_id", "instance_name", "node_name", "gpu"):
        sample_df[col] = sample_df[col].astype("object")
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("costs", cost_df)
        con.register("samples", sample_df)
        result = con.execute(_JOIN_SQL, {"threshold": idle_threshold_pct}).fetchall()
    finally:
        con.close()
    out: list[JoinedHour] = []
    for idx, gpus_seen, mean_util, idle_gpus, memory_held in result:
        c = costs[idx]
        if gpus_seen is None:
            out.append(JoinedHour(c, _gpus_from_usage(c), None, 0, None))
        else:
            out.append(JoinedHour(c, int(gpus_seen), float(mean_util), int(idle_gpus), memory_held))
    return out


# ------------------------------------------------------------------------- per instance and rolled up


@dataclass
class GpuUsage:
    """GPU spend and utilization summed over hours (one instance, or a rollup of instances).

    Money is exact `Decimal`; `mean_utilization_pct` is weighted by GPU-hours over the monitored
    hours only; `cost_per_busy_gpu_hour` divides the monitored GPU cost by the busy GPU-hours (what
    a useful GPU-hour really cost), None when nothing was busy.
    """

    gpu_hours: Decimal = Decimal(0)
    gpu_cost: Decimal = Decimal(0)
    idle_gpu_hours: Decimal = Decimal(0)
    idle_cost: Decimal = Decimal(0)
    unmonitored_cost: Decimal = Decimal(0)
    monitored_gpu_hours: Decimal = Decimal(0)
    monitored_cost: Decimal = Decimal(0)
    util_weighted: Decimal = Decimal(0)
    estimated: bool = False

    def add(self, h: GpuHourLike) -> None:
        self.gpu_hours += h.gpu_hours
        self.gpu_cost += h.gpu_cost
        self.estimated = self.estimated or bool(getattr(h, "estimated", False))
        if h.mean_utilization_pct is None:
            self.unmonitored_cost += h.gpu_cost
            return
        self.idle_gpu_hours += h.idle_gpu_hours
        self.idle_cost += h.idle_cost
        self.monitored_gpu_hours += h.gpu_hours
        self.monitored_cost += h.gpu_cost
        self.util_weighted += Decimal(str(h.mean_utilization_pct)) * h.gpu_hours

    def merge(self, other: GpuUsage) -> None:
        for f in ("gpu_hours", "gpu_cost", "idle_gpu_hours", "idle_cost", "unmonitored_cost"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for f in ("monitored_gpu_hours", "monitored_cost", "util_weighted"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.estimated = self.estimated or other.estimated

    @property
    def mean_utilization_pct(self) -> float | None:
        if self.monitored_gpu_hours <= 0:
            return None
        return float(round(self.util_weighted / self.monitored_gpu_hours, 1))

    @property
    def cost_per_busy_gpu_hour(self) -> Decimal | None:
        busy = self.monitored_gpu_hours - self.idle_gpu_hours
        return self.monitored_cost / busy if busy > 0 else None

    def to_dict(self) -> dict[str, Any]:
        per_busy = self.cost_per_busy_gpu_hour
        return {
            "gpu_hours": _hours(self.gpu_hours),
            "mean_utilization_pct": self.mean_utilization_pct,
            "gpu_cost_usd": _cents(self.gpu_cost),
            "idle_gpu_hours": _hours(self.idle_gpu_hours),
            "idle_cost_usd": _cents(self.idle_cost),
            "unmonitored_cost_usd": _cents(self.unmonitored_cost),
            "cost_per_busy_gpu_hour_usd": _cents(per_busy) if per_busy is not None else None,
        }


@dataclass
class InstanceGpus:
    """One instance's GPU figures over the window (the `gpucost gpus` per-instance line)."""

    instance: str | None
    instance_id: str | None
    project: str | None
    zone: str | None
    machine_type: str | None
    gpu_model: str | None
    gpus: int
    usage: GpuUsage
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "instance_id": self.instance_id,
            "project": self.project,
            "zone": self.zone,
            "machine_type": self.machine_type,
            "gpu_model": self.gpu_model,
            "gpus": self.gpus,
            **self.usage.to_dict(),
        }


@dataclass
class GpuRollup:
    """Instances summed per project, or per value of one label (`group` = "label:<key>")."""

    group: str
    key: str | None
    instances: int
    usage: GpuUsage

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "key": self.key, "instances": self.instances, **self.usage.to_dict()}


class GpuHourLike(Protocol):
    """The fields of `monitor.detectors.inputs.GpuHour` this summary reads."""

    hour: datetime
    project: str | None
    instance: str | None
    instance_id: str | None
    zone: str | None
    machine_type: str | None
    gpu_model: str | None
    gpus: int
    gpu_hours: Decimal
    gpu_cost: Decimal
    mean_utilization_pct: float | None
    idle_gpu_hours: Decimal
    idle_cost: Decimal
    labels: Any


def summarize_instances(hours: Iterable[GpuHourLike]) -> list[InstanceGpus]:
    """Per instance (numeric id, else project/zone/name), largest idle cost then GPU cost first.

    A billed hour wins over an estimated one for the same instance-hour, so an hour is never counted
    twice while billing catches up.
    """
    per: dict[tuple, dict[datetime, GpuHourLike]] = {}
    for h in hours:
        key = (h.project, h.instance_id or f"{h.zone}/{h.instance}")
        slot = per.setdefault(key, {})
        cur = slot.get(h.hour)
        if cur is None or (getattr(cur, "estimated", False) and not getattr(h, "estimated", False)):
            slot[h.hour] = h
    out = []
    for rows in per.values():
        ordered = [rows[t] for t in sorted(rows)]
        usage = GpuUsage()
        labels: dict[str, str] = {}
        for h in ordered:
            usage.add(h)
            labels.update(h.labels or {})
        last = ordered[-1]
        out.append(
            InstanceGpus(
                instance=last.instance,
                instance_id=last.instance_id,
                project=last.project,
                zone=last.zone,
                machine_type=next((h.machine_type for h in reversed(ordered) if h.machine_type), None),
                gpu_model=next((h.gpu_model for h in reversed(ordered) if h.gpu_model), None),
                gpus=max(h.gpus for h in ordered),
                usage=usage,
                labels=labels,
            )
        )
    return sorted(out, key=lambda i: (-i.usage.idle_cost, -i.usage.gpu_cost, str(i.project), str(i.instance)))


def rollups(instances: Sequence[InstanceGpus], label_keys: Sequence[str] = ()) -> list[GpuRollup]:
    """Per project, then per value of each label key (instances without the label under None)."""
    out: list[GpuRollup] = []
    groups: list[tuple[str, Callable[[InstanceGpus], str | None]]] = [("project", lambda i: i.project)]
    groups += [(f"label:{k}", lambda i, k=k: i.labels.get(k)) for k in label_keys]
    for name, key_of in groups:
        acc: dict[str | None, GpuRollup] = {}
        for inst in instances:
            k = key_of(inst)
            roll = acc.setdefault(k, GpuRollup(name, k, 0, GpuUsage()))
            roll.instances += 1
            roll.usage.merge(inst.usage)
        out += sorted(acc.values(), key=lambda r: (-r.usage.gpu_cost, str(r.key)))
    return out


def _cents(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.01")))


def _hours(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.001")))
