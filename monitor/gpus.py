"""Utilization x GPU spend, per GPU node and hour: what idle GPUs cost.

The join runs in an in-memory DuckDB over already-aggregated inputs (GPU cost per node-hour from
the billing engine, utilization per GPU and hour from `monitor.utilization.hourly`), so the same code
serves BigQuery and the embedded engine. Billing rows and GPU-hours are matched by the one node identity of
`monitor.gpu_identity`: (project, instance id) for GCE VMs, (project, zone, name) for billing rows
without an id, (project, cluster, node name) for GKE nodes, whose utilization never carries an id.

A GPU-hour is idle when that GPU's mean utilization over the hour is below the threshold; the idle
dollars of a node-hour are its *effective* GPU cost (gross plus its commitment and sustained-use
credits) times idle GPUs / GPUs, so a GPU already paid for by a commitment (or a $0 reserved one)
shows its idle GPU-hours at what they really cost. Node-hours with GPU spend but no utilization are
*unmonitored*, never assumed busy or idle. The signal precedence (and the GKE node / container duty
cycle pair) was applied when the samples were reduced to hours.

Sums per node and rollups (per project, cluster, node pool, namespace, label) live in
`monitor.gpu_rollups`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

import duckdb

from monitor.gpu_identity import billed_identities, sample_identities
from monitor.gpu_models import gpus_for_machine_type
from monitor.sources.presets import Signal
from monitor.utilization.hourly import UtilHour

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GpuCostHour", "JoinedHour", "join_gpu_hours"]

_MICROS = Decimal(1_000_000)
_Q6 = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class GpuCostHour:
    """GPU spend of one node in one usage hour (aggregated by the billing engine).

    `cost_micros` is gross; `cud_micros` / `sud_micros` (<= 0) the commitment and sustained-use
    credits on it, `credits_micros` all its credits. `namespaces`: gross micros per `k8s-namespace`
    label value (GKE cost allocation splits a node's rows per namespace).
    """

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
    node_pool: str | None = None
    cud_micros: int = 0
    sud_micros: int = 0
    namespaces: dict[str, int] = field(default_factory=dict)

    @property
    def effective_micros(self) -> int:
        """Gross plus commitment and sustained-use credits: what the GPU-hours really cost (>= 0)."""
        return max(0, self.cost_micros + self.cud_micros + self.sud_micros)


@dataclass(frozen=True, slots=True)
class JoinedHour:
    cost: GpuCostHour
    gpus: int
    mean_utilization_pct: float | None
    idle_gpus: int
    memory_held: bool | None
    signal: str | None = None
    container_metrics: bool | None = None

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
        """Idle GPUs' share of the effective GPU cost (after commitment / sustained-use credits)."""
        if not self.monitored or self.gpus == 0:
            return 0
        return self.cost.effective_micros * self.idle_gpus // self.gpus


# GPU-hours are merged per host (`sid`: samples of one node may differ in zone or name labels), then
# matched through the identity keys both sides answer to; of several matching hosts the one with most
# GPUs wins, then the primary key.
_JOIN_SQL = """
WITH per_gpu AS (
    SELECT sid, gpu, hour,
           SUM(pct_sum) / SUM(samples) AS util,
           MAX(memory_max) AS mem,
           MIN(rank) AS rank,
           BOOL_OR(container) AS container
    FROM hours
    GROUP BY ALL
), per_host AS (
    SELECT sid, hour,
           COUNT(*) AS gpus_seen,
           AVG(util) AS mean_util,
           COUNT_IF(util < $threshold) AS idle_gpus,
           BOOL_OR(util < $threshold AND mem > 0) AS memory_held,
           MIN(rank) AS rank,
           BOOL_OR(container) AS container
    FROM per_gpu
    GROUP BY ALL
)
SELECT c.idx, u.gpus_seen, u.mean_util, u.idle_gpus, u.memory_held, u.rank, u.container
FROM costs AS c
LEFT JOIN hosts AS h ON c.key = h.key
LEFT JOIN per_host AS u ON u.sid = h.sid AND u.hour = c.hour
QUALIFY ROW_NUMBER() OVER (
    PARTITION BY c.idx ORDER BY u.gpus_seen DESC NULLS LAST, c.pos, h.pos, u.sid
) = 1
ORDER BY c.idx
"""

_SIGNALS = list(Signal)
_NODE = Signal.NODE_DUTY_CYCLE


def _gpus_from_usage(c: GpuCostHour) -> int:
    """GPUs attached: from the machine type when billing names it (`a3-highgpu-8g` => 8), else from
    the GPU-hours billed in the hour (exact for a full hour); at least one."""
    known = gpus_for_machine_type(c.machine_type) if c.machine_type else None
    if known is not None:
        return known.count
    return max(1, int((c.gpu_hours + Decimal("0.5")).to_integral_value()))


def _frames(costs: Sequence[GpuCostHour], hours: Sequence[UtilHour]) -> tuple[pd.DataFrame, ...]:
    """costs (idx, pos, key, hour), hosts (sid, pos, key) and GPU-hours (sid, gpu, hour, ...).

    pandas is imported here: it costs half a second of start-up to every command that joins nothing."""
    import pandas as pd

    cost_rows: list[tuple[int, int, str | None, datetime]] = []
    for i, c in enumerate(costs):
        ids = billed_identities(c.project, c.zone, c.instance, c.instance_id, c.cluster)
        cost_rows += [(i, pos, n.key, c.hour) for pos, n in enumerate(ids)] or [(i, 0, None, c.hour)]
    cost_df = pd.DataFrame(cost_rows, columns=["idx", "pos", "key", "hour"])
    # a host is its primary identity (samples of one node may differ in zone or name labels); it
    # answers to every alias any of its samples has
    seen: dict[tuple, int] = {}
    primary: dict[str, int] = {}
    aliases: dict[tuple[int, str], int] = {}
    sid_col: list[int] = []
    for h in hours:
        ids = (h.project, h.zone, h.instance_id, h.instance_name, h.cluster, h.node_name)
        sid = seen.get(ids)
        if sid is None:
            keys = [n.key for n in sample_identities(*ids)] or [f"none|{h.project}"]
            sid = seen[ids] = primary.setdefault(keys[0], len(primary))
            for pos, k in enumerate(keys):
                aliases[(sid, k)] = min(pos, aliases.get((sid, k), pos))
        sid_col.append(sid)
    host_df = pd.DataFrame(
        [(sid, pos, k) for (sid, k), pos in aliases.items()], columns=["sid", "pos", "key"]
    )
    hour_df = pd.DataFrame(
        {
            "sid": sid_col,
            "gpu": pd.Series([h.gpu for h in hours], dtype="object"),
            "hour": pd.to_datetime([h.hour for h in hours], utc=True),
            "samples": pd.Series([h.samples for h in hours], dtype="int64"),
            "pct_sum": pd.Series([h.pct_sum for h in hours], dtype="float64"),
            "memory_max": pd.Series([h.memory_max for h in hours], dtype="float64"),
            "rank": pd.Series([Signal.rank(h.signal) for h in hours], dtype="int64"),
            "container": pd.Series([h.container for h in hours], dtype="bool"),
        }
    )
    return cost_df, host_df, hour_df


def join_gpu_hours(
    costs: Sequence[GpuCostHour], hours: Sequence[UtilHour], idle_threshold_pct: float
) -> list[JoinedHour]:
    """Join GPU spend to utilization per GPU and hour (`monitor.utilization.hourly`).

    Each joined hour says which signal it was judged on (the best one seen in the hour) and, for a
    GKE node judged on its node duty cycle, whether it had container metrics at all.
    """
    if not costs:
        return []
    cost_df, host_df, hour_df = _frames(costs, hours)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        # One thread: the per-GPU means are float sums, and a parallel aggregate adds them in a
        # different order each run, so a finding's evidence changed in its last digits between
        # identical runs. The inputs are per GPU-hour, a few thousand rows: one thread is enough.
        con.execute("SET threads = 1")
        con.register("costs", cost_df)
        con.register("hosts", host_df)
        con.register("hours", hour_df)
        result = con.execute(_JOIN_SQL, {"threshold": idle_threshold_pct}).fetchall()
    finally:
        con.close()
    out: list[JoinedHour] = []
    for idx, gpus_seen, mean_util, idle_gpus, memory_held, rank, container in result:
        c = costs[idx]
        if gpus_seen is None:
            out.append(JoinedHour(c, _gpus_from_usage(c), None, 0, None))
            continue
        signal = _SIGNALS[rank].value if rank < len(_SIGNALS) else None
        out.append(
            JoinedHour(
                c,
                int(gpus_seen),
                float(mean_util),
                int(idle_gpus),
                memory_held,
                signal=signal,
                container_metrics=bool(container) if signal == _NODE else None,
            )
        )
    return out
