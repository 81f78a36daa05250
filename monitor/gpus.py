"""Utilization x GPU spend, per GPU node and hour: what idle GPUs cost.

The join runs in an in-memory DuckDB over already-aggregated inputs (GPU cost per node-hour from
the billing engine, utilization samples at the alignment grain), so the same code serves BigQuery and
the embedded engine. Billing rows and samples are matched by the one node identity of
`monitor.gpu_identity`: (project, instance id) for GCE VMs, (project, zone, name) for billing rows
without an id, (project, cluster, node name) for GKE nodes, whose utilization never carries an id.

A GPU-hour is idle when that GPU's mean utilization over the hour is below the threshold; the idle
dollars of a node-hour are its *effective* GPU cost (gross plus its commitment and sustained-use
credits) times idle GPUs / GPUs, so a GPU already paid for by a commitment (or a $0 reserved one)
shows its idle GPU-hours at what they really cost. Node-hours with GPU spend but no utilization are
*unmonitored*, never assumed busy or idle. The signal precedence (and the GKE node / container duty
cycle pair) is applied by `monitor.utilization.resolve_duty_cycles` first.

`summarize_instances` / `rollups` sum joined hours per node and per project, cluster, node pool,
namespace (GKE cost allocation) or label for `gpucost gpus`: GPU-hours, utilization, GPU cost, idle
dollars, unmonitored dollars and the effective price of a *busy* GPU-hour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum
from typing import Any, Protocol

import duckdb
import pandas as pd

from monitor.gpu_identity import billed_identities, row_identity, sample_identities
from monitor.gpu_models import gpus_for_machine_type
from monitor.sources.presets import Signal
from monitor.utilization.select import host_keys, resolve_duty_cycles

__all__ = [
    "GpuCostHour",
    "GpuRollup",
    "GpuUsage",
    "InstanceGpus",
    "JoinedHour",
    "RollupBy",
    "default_rollups",
    "join_gpu_hours",
    "rollups",
    "split_exact",
    "summarize_instances",
]

_MICROS = Decimal(1_000_000)
_Q6 = Decimal("0.000001")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


# Samples are first reduced per host (`sid`) and hour, then matched through the identity keys both
# sides answer to; of several matching hosts the one with most GPUs wins, then the primary key.
_JOIN_SQL = """
WITH per_gpu AS (
    SELECT sid, gpu,
           date_trunc('hour', start) AS hour,
           AVG(utilization_pct) AS util,
           MAX(memory_used_bytes) AS mem,
           MIN(rank) AS rank,
           BOOL_OR(container) AS container
    FROM samples
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


def _rank(signal: str) -> int:
    try:
        return Signal(signal).precedence
    except ValueError:
        return len(_SIGNALS)


def _frames(costs: Sequence[GpuCostHour], samples: Sequence[Any]) -> tuple[pd.DataFrame, ...]:
    """costs (idx, pos, key, hour), hosts (sid, pos, key) and samples (sid, gpu, start, ...)."""
    cost_rows: list[tuple[int, int, str | None, datetime]] = []
    for i, c in enumerate(costs):
        ids = billed_identities(c.project, c.zone, c.instance, c.instance_id, c.cluster)
        cost_rows += [(i, pos, n.key, c.hour) for pos, n in enumerate(ids)] or [(i, 0, None, c.hour)]
    cost_df = pd.DataFrame(cost_rows, columns=["idx", "pos", "key", "hour"])
    resolved, container = resolve_duty_cycles(list(samples))
    # a host is its primary identity (samples of one node may differ in zone or name labels); it
    # answers to every alias any of its samples has
    seen: dict[tuple, int] = {}
    primary: dict[str, int] = {}
    aliases: dict[tuple[int, str], int] = {}
    sid_col: list[int] = []
    for s in resolved:
        ids = (s.project, s.zone, s.instance_id, s.instance_name, s.cluster, s.node_name)
        sid = seen.get(ids)
        if sid is None:
            keys = [n.key for n in sample_identities(*ids)] or [f"none|{s.project}"]
            sid = seen[ids] = primary.setdefault(keys[0], len(primary))
            for pos, k in enumerate(keys):
                aliases[(sid, k)] = min(pos, aliases.get((sid, k), pos))
        sid_col.append(sid)
    host_df = pd.DataFrame(
        [(sid, pos, k) for (sid, k), pos in aliases.items()], columns=["sid", "pos", "key"]
    )
    sample_df = pd.DataFrame(
        {
            "sid": sid_col,
            "gpu": pd.Series([s.gpu for s in resolved], dtype="object"),
            "start": pd.to_datetime([s.start for s in resolved], utc=True),
            "utilization_pct": pd.Series([s.utilization_pct for s in resolved], dtype="float64"),
            "memory_used_bytes": pd.Series([s.memory_used_bytes for s in resolved], dtype="float64"),
            "rank": [_rank(s.signal) for s in resolved],
            "container": pd.Series(_container_flags(resolved, container), dtype="bool"),
        }
    )
    return cost_df, host_df, sample_df


def _container_flags(samples: Sequence[Any], container: set[tuple[str, str, datetime]]) -> list[bool]:
    """Per sample: whether its host reported container duty cycles in its hour (see `resolve_duty_cycles`)."""
    if not container:
        return [False] * len(samples)
    idents = [
        (s.project, s.zone, s.instance_id, s.instance_name, s.cluster, s.node_name, s.gpu, s.model)
        for s in samples
    ]
    host_of = host_keys(idents)
    return [
        (*host_of(i)[:2], s.start.replace(minute=0, second=0, microsecond=0)) in container
        for s, i in zip(samples, idents, strict=True)
    ]


def join_gpu_hours(
    costs: Sequence[GpuCostHour], samples: Iterable[object], idle_threshold_pct: float
) -> list[JoinedHour]:
    """Join GPU spend to utilization; `samples` are `monitor.utilization.GpuSample`s.

    Each joined hour says which signal it was judged on (the best one seen in the hour) and, for a
    GKE node judged on its node duty cycle, whether it had container metrics at all.
    """
    if not costs:
        return []
    cost_df, host_df, sample_df = _frames(costs, list(samples))
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("costs", cost_df)
        con.register("hosts", host_df)
        con.register("samples", sample_df)
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


# ------------------------------------------------------------------------- per instance and rolled up


@dataclass
class GpuUsage:
    """GPU spend and utilization summed over hours (one node, or a rollup of nodes).

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
        self.add_part(h, h.gpu_hours, h.gpu_cost, h.idle_gpu_hours, h.idle_cost)

    def add_part(
        self,
        h: GpuHourLike,
        gpu_hours: Decimal,
        gpu_cost: Decimal,
        idle_gpu_hours: Decimal,
        idle_cost: Decimal,
    ) -> None:
        """Add a share of hour `h` (all of it from `add`; a namespace's share from the rollup)."""
        self.gpu_hours += gpu_hours
        self.gpu_cost += gpu_cost
        self.estimated = self.estimated or bool(getattr(h, "estimated", False))
        if h.mean_utilization_pct is None:
            self.unmonitored_cost += gpu_cost
            return
        self.idle_gpu_hours += idle_gpu_hours
        self.idle_cost += idle_cost
        self.monitored_gpu_hours += gpu_hours
        self.monitored_cost += gpu_cost
        self.util_weighted += Decimal(str(h.mean_utilization_pct)) * gpu_hours

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
    """One node's GPU figures over the window (the `gpucost gpus` per-instance line).

    `namespaces`: the node's usage split per `k8s-namespace` (GKE cost allocation; None = the cost
    no namespace label covers); empty when the node's rows carry no namespace at all.
    """

    instance: str | None
    instance_id: str | None
    project: str | None
    zone: str | None
    machine_type: str | None
    gpu_model: str | None
    gpus: int
    usage: GpuUsage
    labels: dict[str, str] = field(default_factory=dict)
    cluster: str | None = None
    node_pool: str | None = None
    namespaces: dict[str | None, GpuUsage] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "instance_id": self.instance_id,
            "project": self.project,
            "zone": self.zone,
            "cluster": self.cluster,
            "node_pool": self.node_pool,
            "machine_type": self.machine_type,
            "gpu_model": self.gpu_model,
            "gpus": self.gpus,
            **self.usage.to_dict(),
        }


@dataclass
class GpuRollup:
    """Nodes summed per project, cluster, node pool, namespace or label (`group` = "label:<key>").

    `instances` counts the nodes contributing (a node shared by namespaces counts in each).
    """

    group: str
    key: str | None
    instances: int
    usage: GpuUsage

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "key": self.key, "instances": self.instances, **self.usage.to_dict()}


class RollupBy(StrEnum):
    """What `gpucost gpus` can roll nodes up by (labels come from `billing.labels`)."""

    PROJECT = "project"
    CLUSTER = "cluster"
    NODE_POOL = "node_pool"  # keyed "<cluster>/<pool>": pool names repeat across clusters
    NAMESPACE = "namespace"  # GKE cost allocation's `k8s-namespace`, cost split per namespace


class GpuHourLike(Protocol):
    """The fields of `monitor.detectors.inputs.GpuHour` this summary reads."""

    hour: datetime
    project: str | None
    instance: str | None
    instance_id: str | None
    zone: str | None
    cluster: str | None
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
    """Per node (`monitor.gpu_identity`), largest idle cost then GPU cost first.

    A billed hour wins over an estimated one for the same node-hour, so an hour is never counted
    twice while billing catches up.
    """
    per: dict[str, dict[datetime, GpuHourLike]] = {}
    for h in hours:
        slot = per.setdefault(row_identity(h).key, {})
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
                cluster=last.cluster,
                node_pool=next((p for h in reversed(ordered) if (p := getattr(h, "node_pool", None))), None),
                namespaces=_namespace_usage(ordered),
            )
        )
    return sorted(out, key=lambda i: (-i.usage.idle_cost, -i.usage.gpu_cost, str(i.project), str(i.instance)))


def _namespace_usage(hours: Sequence[GpuHourLike]) -> dict[str | None, GpuUsage]:
    """Each hour's figures split over its namespaces in proportion to their gross GPU cost.

    GKE cost allocation splits a node's cost by the namespaces' resource requests
    (https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations); idle GPU-hours and
    idle dollars follow the same shares. Shares are exact: the parts of every figure add up to the
    node's figure to the micro-dollar (`split_exact`).
    """
    out: dict[str | None, GpuUsage] = {}
    if not any(getattr(h, "namespaces", None) for h in hours):
        return out
    for h in hours:
        ns: Mapping[str, Decimal] = getattr(h, "namespaces", None) or {}
        weights: dict[str | None, Decimal] = {k: v for k, v in ns.items() if v > 0}
        rest = h.gpu_cost - sum(weights.values(), Decimal(0))
        if rest > 0 or not weights:
            weights[None] = max(rest, Decimal(0)) if weights else Decimal(1)
        keys = list(weights)
        w = [weights[k] for k in keys]
        parts = zip(
            split_exact(h.gpu_hours, w),
            split_exact(h.gpu_cost, w),
            split_exact(h.idle_gpu_hours, w),
            split_exact(h.idle_cost, w),
            strict=True,
        )
        for k, (gh, gc, igh, ic) in zip(keys, parts, strict=True):
            out.setdefault(k, GpuUsage()).add_part(h, gh, gc, igh, ic)
    return out


def split_exact(total: Decimal, weights: Sequence[Decimal], quantum: Decimal = _Q6) -> list[Decimal]:
    """`total` split in proportion to `weights`, in steps of `quantum`, summing exactly to `total`.

    Largest remainder: each part is rounded down, then the leftover quanta go to the largest
    remainders (ties: first). All-zero weights split evenly.

    >>> split_exact(Decimal("10"), [Decimal(1), Decimal(1), Decimal(1)])
    [Decimal('3.333334'), Decimal('3.333333'), Decimal('3.333333')]
    """
    if not weights:
        return []
    ws = list(weights) if sum(weights, Decimal(0)) > 0 else [Decimal(1)] * len(weights)
    whole = sum(ws, Decimal(0))
    exact = [total * w / whole for w in ws]
    parts = [e.quantize(quantum, rounding=ROUND_FLOOR) for e in exact]
    left = int(((total - sum(parts, Decimal(0))) / quantum).to_integral_value())
    order = sorted(range(len(ws)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += quantum
    return parts


def _node_pool_key(i: InstanceGpus) -> str | None:
    return f"{i.cluster}/{i.node_pool}" if i.node_pool else None


_KEYS: dict[RollupBy, Callable[[InstanceGpus], str | None]] = {
    RollupBy.PROJECT: lambda i: i.project,
    RollupBy.CLUSTER: lambda i: i.cluster,
    RollupBy.NODE_POOL: _node_pool_key,
}


def default_rollups(instances: Sequence[InstanceGpus]) -> tuple[RollupBy, ...]:
    """Project always; cluster and node pool when a GKE node is there; namespace with cost allocation."""
    out = [RollupBy.PROJECT]
    if any(i.node_pool for i in instances):
        out.append(RollupBy.NODE_POOL)
    if any(i.namespaces for i in instances):
        out.append(RollupBy.NAMESPACE)
    return tuple(out)


def rollups(
    instances: Sequence[InstanceGpus],
    label_keys: Sequence[str] = (),
    by: Sequence[RollupBy | str] | None = None,
) -> list[GpuRollup]:
    """Per each `by` group (default `default_rollups`), then per value of each label key.

    Nodes without the grouping value are summed under None, so each group adds up to the nodes'
    total; namespaces split a node's figures (see `_namespace_usage`).
    """
    out: list[GpuRollup] = []
    groups = [RollupBy(b) for b in (default_rollups(instances) if by is None else by)]
    for g in groups:
        out += _by_namespace(instances) if g is RollupBy.NAMESPACE else _rolled(g.value, instances, _KEYS[g])
    for k in label_keys:
        out += _rolled(f"label:{k}", instances, lambda i, k=k: i.labels.get(k))
    return out


def _rolled(
    name: str, instances: Sequence[InstanceGpus], key_of: Callable[[InstanceGpus], str | None]
) -> list[GpuRollup]:
    acc: dict[str | None, GpuRollup] = {}
    for inst in instances:
        k = key_of(inst)
        roll = acc.setdefault(k, GpuRollup(name, k, 0, GpuUsage()))
        roll.instances += 1
        roll.usage.merge(inst.usage)
    return sorted(acc.values(), key=lambda r: (-r.usage.gpu_cost, str(r.key)))


def _by_namespace(instances: Sequence[InstanceGpus]) -> list[GpuRollup]:
    acc: dict[str | None, GpuRollup] = {}
    for inst in instances:
        for k, usage in (inst.namespaces or {None: inst.usage}).items():
            roll = acc.setdefault(k, GpuRollup(RollupBy.NAMESPACE.value, k, 0, GpuUsage()))
            roll.instances += 1
            roll.usage.merge(usage)
    return sorted(acc.values(), key=lambda r: (-r.usage.gpu_cost, str(r.key)))


def _cents(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.01")))


def _hours(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.001")))
