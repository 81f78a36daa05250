"""Utilization x GPU spend, per instance and hour: what idle GPUs cost.

The join runs in an in-memory DuckDB over already-aggregated inputs (GPU cost per instance-hour from
the billing engine, utilization samples at the alignment grain), so the same code serves BigQuery and
the embedded engine. Join key: the numeric instance id (billing `resource.global_name` tail =
Monitoring `instance_id`); fallback (project, zone, instance name); GKE nodes by node name.

A GPU-hour is idle when that GPU's mean utilization over the hour is below the threshold; the idle
dollars of an instance-hour are its GPU cost times idle GPUs / GPUs. Instance-hours with GPU spend but
no utilization are *unmonitored*, never assumed busy or idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import duckdb
import pandas as pd

__all__ = ["GpuCostHour", "JoinedHour", "join_gpu_hours"]

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
    """GPUs attached, from GPU-hours billed in a (full) hour; at least one."""
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
