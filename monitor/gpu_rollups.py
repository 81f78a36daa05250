"""GPU usage per node and rolled up, for `gpucost gpus` and `gpucost analyze`.

`summarize_instances` sums joined GPU hours (`monitor.gpus`) per node identity; `rollups` sums nodes
per project, cluster, node pool, namespace (GKE cost allocation) or label: GPU-hours, utilization,
GPU cost, idle dollars, unmonitored dollars and the effective price of a *busy* GPU-hour. Money is
exact `Decimal`; a node's namespace shares are split to the micro-dollar (`split_exact`) so that
rollups add up to the node totals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from monitor.detectors.inputs import GpuHourTable

__all__ = [
    "GpuRollup",
    "GpuUsage",
    "InstanceGpus",
    "RollupBy",
    "default_rollups",
    "keep_billed",
    "rollups",
    "split_exact",
    "summarize_instances",
]

_Q6 = Decimal("0.000001")
_T = TypeVar("_T")


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
    #: the part of `gpu_cost` from hours not billed yet, priced from the price list (estimates)
    estimated_cost: Decimal = Decimal(0)

    def add_values(
        self,
        estimated: bool,
        mean_utilization_pct: float | None,
        gpu_hours: Decimal,
        gpu_cost: Decimal,
        idle_gpu_hours: Decimal,
        idle_cost: Decimal,
    ) -> None:
        """Add an hour's figures, or a share of them (a namespace's, a job's), from its values: its
        readers read a table's columns, and build no `GpuHour` to add one."""
        self.gpu_hours += gpu_hours
        self.gpu_cost += gpu_cost
        if estimated:
            self.estimated = True
            self.estimated_cost += gpu_cost
        if mean_utilization_pct is None:
            self.unmonitored_cost += gpu_cost
            return
        self.idle_gpu_hours += idle_gpu_hours
        self.idle_cost += idle_cost
        self.monitored_gpu_hours += gpu_hours
        self.monitored_cost += gpu_cost
        self.util_weighted += Decimal(str(mean_utilization_pct)) * gpu_hours

    def merge(self, other: GpuUsage) -> None:
        for f in ("gpu_hours", "gpu_cost", "idle_gpu_hours", "idle_cost", "unmonitored_cost"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for f in ("monitored_gpu_hours", "monitored_cost", "util_weighted", "estimated_cost"):
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
            "estimated_cost_usd": _cents(self.estimated_cost),
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


def keep_billed(
    slot: dict[datetime, tuple[bool, list[_T]]], hour: datetime, item: _T, estimated: bool
) -> None:
    """File `item` (an hour of one node identity, or its row number) under its `hour` in `slot`
    (hour -> (estimated?, items)): an estimated one only while its hour has none billed (never
    twice during reconciliation), every billed one of the hour.

    One identity can be billed twice in an hour: a GKE node recreated under its name (auto-repair,
    an upgrade) is a new VM with a new instance id (billing keys a node-hour by instance id, its
    utilization by cluster and node name), both paid for their part of the hour. Keeping only one
    dropped the other's dollars: 20 and 35 minutes of an a3-highgpu-8g at $88/h read $29.33 for
    $80.67, and the node's GPU cost no longer added up to the bill.
    """
    kept = slot.get(hour)
    if kept is None or (kept[0] and not estimated):
        slot[hour] = (estimated, [item])
    elif not estimated:
        kept[1].append(item)


def summarize_instances(hours: Iterable[Any] | GpuHourTable) -> list[InstanceGpus]:
    """Per node (`monitor.gpu_identity`), largest idle cost then GPU cost first, from the joined
    GPU hours' columns (`GpuHour`s are read as a table).

    A billed hour wins over an estimated one for the same node-hour, so an hour is never counted
    twice while billing catches up; two billed ones are both counted (`keep_billed`).
    """
    from monitor.detectors.inputs import GpuHourTable  # lazily: the detectors import this module

    table = GpuHourTable.of(hours)
    c = table.columns
    per: dict[tuple[str | None, str], dict[datetime, tuple[bool, list[int]]]] = {}
    for i, (key, hour, estimated) in enumerate(
        zip(table.node_keys(), c["hour"], c["estimated"], strict=True)
    ):
        keep_billed(per.setdefault(key, {}), hour, i, estimated)
    out = []
    for slots in per.values():
        ordered = [i for t in sorted(slots) for i in slots[t][1]]
        usage = GpuUsage()
        labels: dict[str, str] = {}
        for i in ordered:
            usage.add_values(
                c["estimated"][i], c["mean_utilization_pct"][i], c["gpu_hours"][i], c["gpu_cost"][i],
                c["idle_gpu_hours"][i], c["idle_cost"][i],
            )  # fmt: skip
            labels.update(c["labels"][i] or {})
        last = ordered[-1]
        out.append(
            InstanceGpus(
                instance=c["instance"][last],
                instance_id=c["instance_id"][last],
                project=c["project"][last],
                zone=c["zone"][last],
                machine_type=_latest(c["machine_type"], ordered),
                gpu_model=_latest(c["gpu_model"], ordered),
                gpus=max(c["gpus"][i] for i in ordered),
                usage=usage,
                labels=labels,
                cluster=c["cluster"][last],
                node_pool=_latest(c["node_pool"], ordered),
                namespaces=_namespace_usage(c, ordered),
            )
        )
    return sorted(out, key=lambda i: (-i.usage.idle_cost, -i.usage.gpu_cost, str(i.project), str(i.instance)))


def _latest(column: Sequence[Any], rows: Sequence[int]) -> Any:
    """The value of the latest of `rows` that has one (None if none has)."""
    return next((v for i in reversed(rows) if (v := column[i])), None)


def _namespace_usage(c: Mapping[str, Sequence[Any]], rows: Sequence[int]) -> dict[str | None, GpuUsage]:
    """Each hour's figures (`rows` of the columns `c`) split over its namespaces in proportion to
    their gross GPU cost.

    GKE cost allocation splits a node's cost by the namespaces' resource requests
    (https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations); idle GPU-hours and
    idle dollars follow the same shares. Shares are exact: the parts of every figure add up to the
    node's figure to the micro-dollar (`split_exact`).
    """
    out: dict[str | None, GpuUsage] = {}
    if not any(c["namespaces"][i] for i in rows):
        return out
    for i in rows:
        ns: Mapping[str, Decimal] = c["namespaces"][i] or {}
        gpu_cost = c["gpu_cost"][i]
        weights: dict[str | None, Decimal] = {k: v for k, v in ns.items() if v > 0}
        rest = gpu_cost - sum(weights.values(), Decimal(0))
        if rest > 0 or not weights:
            weights[None] = max(rest, Decimal(0)) if weights else Decimal(1)
        keys = list(weights)
        w = [weights[k] for k in keys]
        parts = zip(
            split_exact(c["gpu_hours"][i], w),
            split_exact(gpu_cost, w),
            split_exact(c["idle_gpu_hours"][i], w),
            split_exact(c["idle_cost"][i], w),
            strict=True,
        )
        estimated, util = c["estimated"][i], c["mean_utilization_pct"][i]
        for k, (gh, gc, igh, ic) in zip(keys, parts, strict=True):
            out.setdefault(k, GpuUsage()).add_values(estimated, util, gh, gc, igh, ic)
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
    if len(weights) == 1:  # most node-hours are one job's or one namespace's: the steps below, for one
        w = weights[0] if weights[0] > 0 else Decimal(1)
        part = (total * w / w).quantize(quantum, rounding=ROUND_FLOOR)
        if int(((total - part) / quantum).to_integral_value()) > 0:
            part += quantum
        return [part]
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
