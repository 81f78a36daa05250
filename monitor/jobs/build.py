"""Per-job records: the engine's job aggregates (`queries/jobs.sql`) and the joined GPU hours.

Pure: no I/O, no clock. Money comes from `jobs.sql` in integer micros and stays exact until
`JobsReport.to_dict` rounds it, so the jobs (the unlabelled rest as `job: None`) add up to the
export's total to the micro, and their cent figures to the cent (`cents_summing_to`).

What is decided here, with why:

- Cluster fees (`orchestration.gke` rows of no job) are shared by node-hours: every node of the
  cluster that billed compute in the hour is one node-hour, split between the jobs on it in
  proportion to their compute cost there (GKE cost allocation splits a node's rows per workload);
  the unlabelled share stays with `job: None`. Split to the micro (`split_exact`).
- GPU-hours, utilization, idle GPU-hours and idle dollars are the idle-GPU path's own figures: the
  GPU hours `monitor.assemble.gpu_hour_table` joined, read as its columns (same identity, threshold
  and effective price as the `idle_gpu` detector and `gpucost gpus`). A node-hour shared by jobs is
  split in proportion to each job's GPU usage on it, like `monitor.gpu_rollups` splits one per
  namespace.
- Estimated hours (utilization, no billing yet) belong to the job of the node's latest billed GPU
  hour; they are reported beside the billed figures (`estimated_*`), never inside `cost_usd`, so
  jobs still add up to the export.
- First / last hour are those of the job's compute rows (a bucket bills every hour whether the job
  runs or not); a job without compute rows uses all its rows. `running`: its last hour, estimated
  ones included, ends within `running_within` of the window's end.
- Counterfactuals: one zone saves its inter-zone egress (net); Spot saves, on its on-demand GPU
  hours, on-demand minus Spot list price per whole VM when the price book prices the machine type,
  else per GPU (as `spot_opportunity`; `spot_price_source` names the prices). CPU-only VMs are not
  repriced.
- `cost_per_busy_gpu_hour`: the job's whole net cost over its busy GPU-hours: what one useful
  GPU-hour of the job cost, hidden costs included.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from monitor.detectors.inputs import GpuHour, GpuHourTable, PriceLookup
from monitor.detectors.opportunities import (
    machine_hours,
    machine_price_source,
    machine_prices,
    price_source,
    unused_in,
)
from monitor.gpu_identity import billed_identity
from monitor.gpu_rollups import GpuUsage, split_exact
from monitor.jobs.identity import job_of, parse_labels
from monitor.model import cents_adding_up, micros_to_decimal, move_cents
from monitor.timeutil import to_iso

__all__ = [
    "JOB_COLUMNS",
    "JobColumns",
    "JobHour",
    "JobRecord",
    "JobSpend",
    "NodeBilling",
    "build_jobs",
    "cents_summing_to",
    "estimated_last_hours",
    "job_columns",
    "job_spend",
    "node_hour_shares",
    "paired_cents",
    "split_fee",
]

_HOUR = timedelta(hours=1)
_ONE = Decimal(1)
_CENT = Decimal("0.01")
CLUSTER_FEE = "orchestration.gke"
INTER_ZONE = "network.inter_zone"


@dataclass
class JobHour:
    """One usage hour of a job (`gpucost jobs --job NAME`); money exact."""

    hour: datetime
    cost: Decimal = Decimal(0)
    net_cost: Decimal = Decimal(0)
    gpu_hours: Decimal = Decimal(0)
    busy_gpu_hours: Decimal = Decimal(0)
    idle_cost: Decimal = Decimal(0)
    estimated_cost: Decimal = Decimal(0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hour": _iso(self.hour),
            "cost_usd": _cents(self.cost),
            "net_cost_usd": _cents(self.net_cost),
            "gpu_hours": _hours(self.gpu_hours),
            "busy_gpu_hours": _hours(self.busy_gpu_hours),
            "idle_cost_usd": _cents(self.idle_cost),
            "estimated_cost_usd": _cents(self.estimated_cost),
        }


@dataclass(frozen=True)
class JobRecord:
    """One job over the window (`job` None: every dollar no job label reaches)."""

    job: str | None
    labels: Mapping[str, tuple[str, ...]]
    projects: tuple[str, ...]
    zones: tuple[str, ...]
    instances: tuple[str, ...]
    #: every GPU model of the job, most GPU-hours first (seed 11's notebook: two A100 VMs and an L4)
    gpu_models: tuple[str, ...]
    gpus: int
    first_hour: datetime | None
    last_hour: datetime | None
    running: bool
    gpu: GpuUsage
    gross_micros: int
    net_micros: int
    by_subcategory: Mapping[str, int]
    net_by_subcategory: Mapping[str, int]
    single_zone_savings: Decimal
    spot_savings: Decimal | None
    spot_price_source: str | None
    estimated_gpu: GpuUsage
    hours: tuple[JobHour, ...] = ()

    @property
    def gpu_model(self) -> str | None:
        """The models as one name ("A100 40GB + L4"), None for a job without GPUs."""
        return " + ".join(self.gpu_models) or None

    @property
    def cost(self) -> Decimal:
        return micros_to_decimal(self.gross_micros)

    @property
    def net_cost(self) -> Decimal:
        return micros_to_decimal(self.net_micros)

    @property
    def estimated(self) -> bool:
        return self.estimated_gpu.gpu_hours > 0

    @property
    def busy_gpu_hours(self) -> Decimal:
        return self.gpu.monitored_gpu_hours - self.gpu.idle_gpu_hours

    @property
    def cost_per_busy_gpu_hour(self) -> Decimal | None:
        busy = self.busy_gpu_hours
        return self.net_cost / busy if busy > 0 else None

    def to_dict(self, *, cost: Decimal | None = None, net_cost: Decimal | None = None) -> dict[str, Any]:
        """The `gpucost jobs` JSON of this job; `cost` / `net_cost`: cent figures when the caller
        rounded them so that the jobs sum to the total (`paired_cents`)."""
        per_busy = self.cost_per_busy_gpu_hour
        return {
            "job": self.job,
            "labels": {k: list(v) for k, v in self.labels.items()},
            "projects": list(self.projects),
            "zones": list(self.zones),
            "instances": list(self.instances),
            "gpu_model": self.gpu_model,
            "gpus": self.gpus,
            "first_hour": _iso(self.first_hour),
            "last_hour": _iso(self.last_hour),
            "running": self.running,
            "gpu_hours": _hours(self.gpu.gpu_hours),
            "busy_gpu_hours": _hours(self.busy_gpu_hours),
            "mean_utilization_pct": self.gpu.mean_utilization_pct,
            "cost_usd": float(cost if cost is not None else _q(self.cost)),
            "net_cost_usd": float(net_cost if net_cost is not None else _q(self.net_cost)),
            "by_subcategory": _parts(self.by_subcategory, cost if cost is not None else _q(self.cost)),
            "net_by_subcategory": _parts(
                self.net_by_subcategory, net_cost if net_cost is not None else _q(self.net_cost)
            ),
            "idle_gpu_hours": _hours(self.gpu.idle_gpu_hours),
            "idle_cost_usd": _cents(self.gpu.idle_cost),
            "unmonitored_cost_usd": _cents(self.gpu.unmonitored_cost),
            "cost_per_busy_gpu_hour_usd": _cents(per_busy) if per_busy is not None else None,
            "single_zone_savings_usd": _cents(self.single_zone_savings),
            "spot_savings_usd": _cents(self.spot_savings) if self.spot_savings is not None else None,
            "spot_price_source": self.spot_price_source,
            "estimated": self.estimated,
            "estimated_gpu_hours": _hours(self.estimated_gpu.gpu_hours),
            "estimated_cost_usd": _cents(self.estimated_gpu.gpu_cost),
            "estimated_idle_cost_usd": _cents(self.estimated_gpu.idle_cost),
        }


@dataclass
class _Acc:
    """What one job gathers while the rows stream past (mutable; `_record` freezes it). Money per
    hour is summed in integer micros (`hour_gross`, `hour_net`) and turned into the `JobHour`s'
    Decimals once, at `_record`: exact either way, and a Decimal per row is what made this slow."""

    raw_labels: set[str | None] = field(default_factory=set)
    projects: set[str] = field(default_factory=set)
    zones: set[str] = field(default_factory=set)
    instances: set[str] = field(default_factory=set)
    gross: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    net: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    compute_hours: set[datetime] = field(default_factory=set)
    any_hours: set[datetime] = field(default_factory=set)
    hours: dict[datetime, JobHour] = field(default_factory=dict)
    hour_gross: dict[datetime, int] = field(default_factory=lambda: defaultdict(int))
    hour_net: dict[datetime, int] = field(default_factory=lambda: defaultdict(int))
    gpu: GpuUsage = field(default_factory=GpuUsage)
    estimated: GpuUsage = field(default_factory=GpuUsage)
    estimated_hours: set[datetime] = field(default_factory=set)
    models: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    gpus_by_hour: dict[datetime, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    #: the job's on-demand GPU hours (row numbers of the build's `GpuHourTable`), each with the
    #: job's part of it
    on_demand: list[tuple[int, Decimal]] = field(default_factory=list)

    def hour(self, h: datetime) -> JobHour:
        if h not in self.hours:
            self.hours[h] = JobHour(h)
        return self.hours[h]

    def money(self, hour: datetime, sub: str, gross: int, net: int) -> None:
        self.gross[sub] += gross
        self.net[sub] += net
        if hour not in self.hours:
            self.hours[hour] = JobHour(hour)
        self.hour_gross[hour] += gross
        self.hour_net[hour] += net

    def job_hours(self) -> tuple[JobHour, ...]:
        """The hours, in order, their money set from the micros summed."""
        for h, jh in self.hours.items():
            if h in self.hour_gross:
                jh.cost = micros_to_decimal(self.hour_gross[h])
                jh.net_cost = micros_to_decimal(self.hour_net[h])
        return tuple(self.hours[h] for h in sorted(self.hours))

    def job_labels(self, keys: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The values of the job label keys seen on the job's own rows (each distinct string parsed once)."""
        found: dict[str, set[str]] = defaultdict(set)
        for raw in self.raw_labels:
            lab = parse_labels(raw)
            for k in keys:
                if k in lab:
                    found[k].add(lab[k])
        return {k: tuple(sorted(v)) for k, v in sorted(found.items())}


#: The columns of `queries/jobs.sql` the engine reads.
JOB_COLUMNS = (
    "usage_hour", "job_labels", "project_id", "zone", "cluster", "resource_name", "instance_id", "subcategory",
    "usage_amount", "gross_micros", "net_micros",
)  # fmt: skip

#: `jobs.sql`'s rows as the engine reads them: one list per `JOB_COLUMNS` name, in the rows' order.
JobColumns = dict[str, list[Any]]


def job_columns(rows: Sequence[Mapping[str, Any]]) -> JobColumns:
    """Rows (mappings: the engine's own, the digest's from stored aggregates) as `JobColumns`."""
    return {name: [r[name] for r in rows] for name in JOB_COLUMNS}


def _take(c: JobColumns, keep: Sequence[int]) -> JobColumns:
    return {name: [column[i] for i in keep] for name, column in c.items()}


def _acc(acc: dict[str | None, _Acc], job: str | None) -> _Acc:
    a = acc.get(job)
    if a is None:
        a = acc[job] = _Acc()
    return a


def _jobs_of(c: JobColumns, keys: Sequence[str]) -> list[str | None]:
    """Each row's job (`job_of` of its job labels), each distinct label string looked at once."""
    seen: dict[str | None, str | None] = {}
    out = []
    for raw in c["job_labels"]:
        if raw not in seen:
            seen[raw] = job_of(parse_labels(raw), keys)
        out.append(seen[raw])
    return out


def _node_key(ident: tuple, seen: dict[tuple, str]) -> str:
    """The node of a (project, zone, instance, instance id, cluster) (`billed_identity`, which
    `row_identity` is of a GPU hour), each node computed once (`seen`)."""
    key = seen.get(ident)
    if key is None:
        key = seen[ident] = billed_identity(*ident).key
    return key


def _node_keys(c: JobColumns) -> list[str | None]:
    """Each `compute.gpu` row's node (`_node_key`), None for other rows."""
    seen: dict[tuple, str] = {}
    places = zip(c["project_id"], c["zone"], c["resource_name"], c["instance_id"], c["cluster"], strict=True)
    return [
        _node_key(ident, seen) if sub == "compute.gpu" else None
        for sub, ident in zip(c["subcategory"], places, strict=True)
    ]


def _gpu_key(h: GpuHour, seen: dict[tuple, str]) -> str:
    """A GPU hour's node (`_node_key`)."""
    return _node_key((h.project, h.zone, h.instance, h.instance_id, h.cluster), seen)


def _gpu_keys(hours: GpuHourTable) -> list[str]:
    """`_gpu_key` of each hour of a table: the table's own node identities (`GpuHourTable.node_keys`,
    made once per table and shared with the Spot counterfactual's `node_numbers`), project apart."""
    return [key for _, key in hours.node_keys()]


def _on_node(cluster: str | None, resource: str | None, sub: str) -> bool:
    """A compute row on a named cluster node: its node-hour shares the cluster's fee of its hour."""
    return bool(cluster and resource and sub.startswith("compute."))


def _fee_shares(c: JobColumns, jobs: Sequence[str | None]) -> dict[tuple, dict]:
    """Node-hours per job, per (project, cluster, hour): each node's hour split by compute cost."""
    per_node: dict[tuple, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    for project, cluster, hour, resource, sub, gross, job in zip(
        c["project_id"], c["cluster"], c["usage_hour"], c["resource_name"], c["subcategory"], c["gross_micros"], jobs,
        strict=True,
    ):  # fmt: skip
        if _on_node(cluster, resource, sub):
            per_node[(project, cluster, hour, resource)][job] += gross
    return node_hour_shares(per_node)


def node_hour_shares(
    per_node: Mapping[tuple, Mapping[str | None, int]],
) -> dict[tuple, dict[str | None, Decimal]]:
    """Node-hours per job, per (project, cluster, hour), from each cluster node-hour's compute micros
    per job (`per_node`: (project, cluster, hour, node) -> job -> micros). The shares are Decimal
    quotients summed in `per_node`'s order, and the jobs' order splits a fee's last micros: the
    order of the rows that first name them."""
    shares: dict[tuple, dict[str | None, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for (project, cluster, hour, _node), by_job in per_node.items():
        total = sum(by_job.values())
        for job, micros in by_job.items():
            share = Decimal(micros) / total if total > 0 else _ONE / len(by_job)
            shares[(project, cluster, hour)][job] += share
    return shares


def split_fee(
    gross: int, net: int, weights: Mapping[str | None, Decimal]
) -> list[tuple[str | None, int, int]]:
    """A cluster fee row's gross and net micros split between jobs by `weights` (`node_hour_shares`),
    to the micro, in the weights' order."""
    keys = list(weights)
    w = [weights[k] for k in keys]
    gross_parts = split_exact(Decimal(gross), w, _ONE)
    net_parts = split_exact(Decimal(net), w, _ONE)
    return [(k, int(g), int(n)) for k, g, n in zip(keys, gross_parts, net_parts, strict=True)]


def _add_rows(acc: dict[str | None, _Acc], c: JobColumns, jobs: Sequence[str | None]) -> None:
    """Money, labels and places of every row into its job (`jobs`: each row's); cluster fees
    shared by node-hours."""
    shares = _fee_shares(c, jobs)
    for sub, hour, project, cluster, row_gross, row_net, raw, zone, resource, job in zip(
        c["subcategory"], c["usage_hour"], c["project_id"], c["cluster"], c["gross_micros"], c["net_micros"],
        c["job_labels"], c["zone"], c["resource_name"], jobs,
        strict=True,
    ):  # fmt: skip
        weights = shares.get((project, cluster, hour)) if job is None and sub == CLUSTER_FEE else None
        row_gross, row_net = int(row_gross), int(row_net)
        parts = split_fee(row_gross, row_net, weights) if weights else [(job, row_gross, row_net)]
        for part_job, gross, net in parts:
            a = _acc(acc, part_job)
            a.money(hour, sub, gross, net)
            a.any_hours.add(hour)
            if project:
                a.projects.add(project)
        a = _acc(acc, job)
        a.raw_labels.add(raw)
        if zone:
            a.zones.add(zone)
        if sub.startswith("compute."):
            a.compute_hours.add(hour)
            if resource:
                a.instances.add(resource)


_Usage = dict[tuple[str, datetime], dict[str | None, Decimal]]
_Latest = dict[str, tuple[datetime, Decimal, str | None]]


def _gpu_usage(
    c: JobColumns, jobs: Sequence[str | None], nodes: Sequence[str | None]
) -> tuple[_Usage, _Latest]:
    """Each job's GPU usage per (node, hour), which splits that node-hour, and each node's latest
    billed GPU row (hour, usage, job): the job its estimated hours belong to."""
    usage: _Usage = defaultdict(lambda: defaultdict(Decimal))
    latest: _Latest = {}
    for hour, used, job, key in zip(c["usage_hour"], c["usage_amount"], jobs, nodes, strict=True):
        if key is None:
            continue
        amount = Decimal(str(used or 0))
        usage[(key, hour)][job] += amount
        cur = latest.get(key)
        if cur is None or (hour, amount) > cur[:2]:
            latest[key] = (hour, amount, job)
    return usage, latest


def _add_gpu(
    acc: dict[str | None, _Acc],
    c: JobColumns,
    jobs: Sequence[str | None],
    nodes: Sequence[str | None],
    hours: GpuHourTable,
) -> None:
    """Each joined GPU node-hour into its jobs, split by their GPU usage on the node that hour
    (`nodes`: each row's node, `_node_keys`), read from the table's columns: no `GpuHour` is built
    per node-hour of the window (382,163 of them at bench scale 48: 1.8 s under cProfile, within
    the noise of the command's 66-69 s end to end)."""
    usage, latest = _gpu_usage(c, jobs, nodes)
    g = hours.columns
    for i, (key, hour, estimated, util, gpu_hours, gpu_cost, idle_hours, idle_cost, gpus, model, pricing) in enumerate(
        zip(
            _gpu_keys(hours), g["hour"], g["estimated"], g["mean_utilization_pct"], g["gpu_hours"], g["gpu_cost"],
            g["idle_gpu_hours"], g["idle_cost"], g["gpus"], g["gpu_model"], g["pricing_model"],
            strict=True,
        )
    ):  # fmt: skip
        if estimated:
            job = latest[key][2] if key in latest else None
            a = _acc(acc, job)
            a.estimated.add_values(True, util, gpu_hours, gpu_cost, idle_hours, idle_cost)
            a.estimated_hours.add(hour)
            a.hour(hour).estimated_cost += gpu_cost
            continue
        weights = usage.get((key, hour)) or {None: _ONE}
        names, w = list(weights), list(weights.values())
        parts = zip(
            split_exact(gpu_hours, w),
            split_exact(gpu_cost, w),
            split_exact(idle_hours, w),
            split_exact(idle_cost, w),
            strict=True,
        )
        total_w = sum(w, Decimal(0))
        for job, (gh, gc, igh, ic) in zip(names, parts, strict=True):
            a = _acc(acc, job)
            a.gpu.add_values(False, util, gh, gc, igh, ic)
            frac = weights[job] / total_w if total_w > 0 else _ONE / len(names)
            a.gpus_by_hour[hour] += gpus * frac
            if model:
                a.models[model] += gh
            jh = a.hour(hour)
            jh.gpu_hours += gh
            jh.idle_cost += ic
            if util is not None:
                jh.busy_gpu_hours += gh - igh
            if pricing == "on_demand" and model:
                a.on_demand.append((i, frac))


#: A node's GPU billing as the engine sums it: (project, zone, instance, instance id, cluster), the
#: job of one of its label sets (None: unlabelled), and that label set's last billed hour there.
NodeBilling = tuple[tuple[str | None, ...], str | None, datetime]


def estimated_last_hours(billed: Iterable[NodeBilling], gpu_hours: Iterable[GpuHour]) -> dict[str, datetime]:
    """Each job's latest estimated GPU hour as `build_jobs` gives it one (`_add_gpu`: an estimated
    hour is the job's of its node's latest billed GPU row), from per-(node, label set) sums rather
    than the rows, so that whether a job still runs can be asked before any record is built.

    A lower bound, never more: a node whose latest billed hour is several jobs' (or a job's and the
    unlabelled rest's) gives its estimated hours to no job here, because which one the engine picks
    turns on that hour's usage amounts. So a job found still running here is running in its record.
    """
    latest: dict[str, tuple[datetime, set[str | None]]] = {}
    seen: dict[tuple, str] = {}
    for ident, job, last in billed:
        key = _node_key(tuple(ident), seen)
        cur = latest.get(key)
        if cur is None or last > cur[0]:
            latest[key] = (last, {job})
        elif last == cur[0]:
            cur[1].add(job)
    out: dict[str, datetime] = {}
    for h in gpu_hours:
        if not h.estimated:
            continue
        hit = latest.get(_gpu_key(h, seen))
        if hit is None or len(hit[1]) != 1:
            continue
        (job,) = hit[1]
        if job is not None and (job not in out or h.hour > out[job]):
            out[job] = h.hour
    return out


#: A price quote for `_spot`: (per whole machine?, on-demand, Spot, where the prices came from).
_Quote = tuple[bool, Decimal | None, Decimal | None, str]


def _quote(
    machine_type: str | None, region: str | None, model: str | None, gpus: int, prices: PriceLookup
) -> _Quote:
    kinds = ("on_demand", "spot")
    whole = machine_prices(prices, machine_type, region, kinds)
    if whole is not None and gpus > 0 and machine_type:
        return (
            True,
            whole["on_demand"],
            whole["spot"],
            machine_price_source(prices, machine_type, region, kinds),
        )
    od = prices.gpu_hourly(model or "", region, "on_demand")
    spot = prices.gpu_hourly(model or "", region, "spot")
    return False, od, spot, price_source(prices, model or "", region, kinds)


def _spot(
    hours: GpuHourTable,
    parts: Sequence[tuple[int, Decimal]],
    prices: PriceLookup | None,
    quotes: dict[tuple, _Quote],
) -> tuple[Decimal | None, str | None]:
    """On-demand minus Spot list price over the job's on-demand GPU hours (`parts`: row numbers of
    `hours` and the job's part of each; see the module docstring). `quotes`: the prices of each
    (machine type, region, GPU model) looked up once per build (a price book is fixed for the call)."""
    if prices is None:
        return None, None
    import numpy as np

    total, sources = Decimal(0), []
    rows = np.fromiter((i for i, _ in parts), np.int64, len(parts))
    unused = unused_in(hours, rows)  # per node: a VM to delete, as `spot_opportunity` leaves it
    ids = hours.node_numbers()[0]
    c = hours.columns
    for i, frac in parts:
        if unused[ids[i]]:
            continue
        machine_type, region, model, gpus = (
            c["machine_type"][i],
            c["region"][i],
            c["gpu_model"][i],
            c["gpus"][i],
        )
        q = (machine_type, region, model, gpus > 0)
        if q not in quotes:
            quotes[q] = _quote(machine_type, region, model, gpus, prices)
        per_machine, od, spot, src = quotes[q]
        if od is None or spot is None or spot >= od:
            continue
        gpu_hours = c["gpu_hours"][i]
        total += (machine_hours(gpu_hours, gpus) * frac if per_machine else gpu_hours * frac) * (od - spot)
        sources.append(src)
    return total, ("; ".join(dict.fromkeys(sources)) or None)


def _record(
    job: str | None,
    a: _Acc,
    keys: Sequence[str],
    window_end: datetime,
    within: timedelta,
    prices: PriceLookup | None,
    quotes: dict[tuple, _Quote],
    gpu_hours: GpuHourTable,
) -> JobRecord:
    hours = sorted(a.compute_hours or a.any_hours)
    last = max([*hours[-1:], *a.estimated_hours], default=None)
    spot, source = _spot(gpu_hours, a.on_demand, prices, quotes)
    # every model, most GPU-hours first: seed 11's notebook (two A100 VMs and an L4) read "3× A100
    # 40GB" with one model named
    models = tuple(sorted(a.models, key=lambda m: (-a.models[m], m)))
    gpus = max((int(v.to_integral_value(ROUND_HALF_EVEN)) for v in a.gpus_by_hour.values()), default=0)
    return JobRecord(
        job=job,
        labels=a.job_labels(keys),
        projects=tuple(sorted(a.projects)),
        zones=tuple(sorted(a.zones)),
        instances=tuple(sorted(a.instances)),
        gpu_models=models,
        gpus=gpus,
        first_hour=hours[0] if hours else None,
        last_hour=last,
        running=last is not None and last + _HOUR >= window_end - within,
        gpu=a.gpu,
        gross_micros=sum(a.gross.values()),
        net_micros=sum(a.net.values()),
        by_subcategory=dict(sorted(a.gross.items(), key=lambda kv: (-kv[1], kv[0]))),
        net_by_subcategory=dict(sorted(a.net.items(), key=lambda kv: (-kv[1], kv[0]))),
        single_zone_savings=micros_to_decimal(a.net.get(INTER_ZONE, 0)),
        spot_savings=spot,
        spot_price_source=source,
        estimated_gpu=a.estimated,
        hours=a.job_hours(),
    )


def _only(
    c: JobColumns,
    jobs: Sequence[str | None],
    nodes: Sequence[str | None],
    gpu_hours: GpuHourTable,
    only: AbstractSet[str],
) -> tuple[list[int], GpuHourTable]:
    """The rows (indices, in order) and GPU hours that decide the records of the jobs `only`: their
    own rows; at the (project, cluster, hour)s of their cluster nodes, every cluster node's compute
    row and the cluster fees (the node-hour shares); on their GPU nodes, every GPU row (the usage
    split of each node-hour, and whose job the node's estimated hours are) and every GPU hour.
    Complete for those keys and in the original order, so their splits come out to the micro."""
    places = list(zip(c["project_id"], c["cluster"], c["usage_hour"], strict=True))
    on_node = [
        _on_node(cl, res, sub)
        for cl, res, sub in zip(c["cluster"], c["resource_name"], c["subcategory"], strict=True)
    ]
    fee_keys = {k for k, j, fee in zip(places, jobs, on_node, strict=True) if j in only and fee}
    gpu_nodes = {n for j, n in zip(jobs, nodes, strict=True) if j in only and n is not None}
    keep = [
        i
        for i, (k, sub, fee, j, n) in enumerate(
            zip(places, c["subcategory"], on_node, jobs, nodes, strict=True)
        )
        if j in only
        or (n is not None and n in gpu_nodes)
        or (fee_keys and k in fee_keys and (sub == CLUSTER_FEE or fee))
    ]
    return keep, gpu_hours.take(i for i, key in enumerate(_gpu_keys(gpu_hours)) if key in gpu_nodes)


def build_jobs(
    rows: Sequence[Mapping[str, Any]] | JobColumns,
    gpu_hours: Sequence[GpuHour] | GpuHourTable,
    *,
    keys: Sequence[str],
    window_end: datetime,
    running_within: timedelta = timedelta(hours=6),
    prices: PriceLookup | None = None,
    only: Collection[str] | None = None,
) -> list[JobRecord]:
    """Every job of the window, largest cost first, `job: None` (the unlabelled rest) last.

    `rows`: `queries/jobs.sql` output for the window, as rows or as its columns (`JobColumns`: what
    `gpucost jobs` reads from the engine: 836,707 rows at bench scale 48, and 1.65 M before the
    query summed what it reads as money alone, which as dicts held 3.2 GB);
    `gpu_hours`: the window's joined GPU hours
    (`Analysis.gpu_hours`, billed and estimated), as a table or `GpuHour`s; `keys`:
    `JobsConfig.label_keys()`. `only`: just the records of these jobs (named), the same to the micro
    as in the full list, computed from the rows that decide them (`_only`): what the finished-job
    check needs, at a fraction of the cost.
    """
    c = rows if isinstance(rows, dict) else job_columns(rows)
    table = GpuHourTable.of(gpu_hours)
    jobs = _jobs_of(c, keys)
    nodes = _node_keys(c)
    wanted = set(only) if only is not None else None
    if wanted is not None:
        keep, table = _only(c, jobs, nodes, table, wanted)
        c = _take(c, keep)
        jobs = [jobs[i] for i in keep]
        nodes = [nodes[i] for i in keep]
    acc: dict[str | None, _Acc] = {}
    _add_rows(acc, c, jobs)
    _add_gpu(acc, c, jobs, nodes, table)
    quotes: dict[tuple, _Quote] = {}
    out = [
        _record(job, a, keys, window_end, running_within, prices, quotes, table)
        for job, a in acc.items()
        if wanted is None or job in wanted
    ]
    return sorted(out, key=_by_cost)


def _by_cost(job: JobRecord | JobSpend) -> tuple[bool, int, str]:
    """The order of jobs: by gross cost, largest first, then by name; the spend without a job last."""
    return (job.job is None, -job.gross_micros, job.job or "")


@dataclass(frozen=True)
class JobSpend:
    """One job's spend by hour (`job_spend`): its `JobHour`s carry `cost` and `net_cost` only (the
    GPU fields stay zero); `gross_micros` orders the jobs as `build_jobs` does."""

    job: str | None
    gross_micros: int
    hours: tuple[JobHour, ...]


def job_spend(
    money: Iterable[tuple[datetime, str | None, int, int]],
    fees: Iterable[tuple[datetime, str | None, str | None, str | None, int, int]],
    nodes: Iterable[tuple[datetime, str | None, str | None, str | None, str | None, int]],
) -> list[JobSpend]:
    """What a chart of spend per job and hour needs of `build_jobs`, from sums the engine made
    (`monitor.billing_poll.JobSums`, each label set replaced by its job): the same jobs in the same
    order, each with the same money per hour to the micro (cluster fees shared alike: row by row,
    with the node-hour shares of their hour), without the GPU figures and the rest of a `JobRecord`.

    GPU hours add no money, and none of the hours: a billed GPU hour is its node's GPU rows, whose
    jobs already have that hour (the digest joins billed hours only). Estimated hours, which
    `build_jobs` gives the job of the node's latest GPU row, are not here."""
    per_node: dict[tuple, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    for hour, job, project, cluster, node, gross in nodes:
        per_node[(project, cluster, hour, node)][job] += gross
    shares = node_hour_shares(per_node)
    gross_of: dict[str | None, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    net_of: dict[str | None, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    parts: Iterable[tuple[str | None, int, int]]
    for hour, job, gross, net in money:
        gross_of[job][hour] += gross
        net_of[job][hour] += net
    for hour, job, project, cluster, gross, net in fees:
        weights = shares.get((project, cluster, hour)) if job is None else None
        if job not in gross_of:  # the fee's own job has a record even when its money is shared out
            gross_of[job] = defaultdict(int)
        parts = split_fee(gross, net, weights) if weights else [(job, gross, net)]
        for part_job, part_gross, part_net in parts:
            gross_of[part_job][hour] += part_gross
            net_of[part_job][hour] += part_net
    out = [
        JobSpend(
            job,
            sum(by_hour.values()),
            tuple(
                JobHour(h, cost=micros_to_decimal(by_hour[h]), net_cost=micros_to_decimal(net_of[job][h]))
                for h in sorted(by_hour)
            ),
        )
        for job, by_hour in gross_of.items()
    ]
    return sorted(out, key=_by_cost)


def cents_summing_to(values: Sequence[Decimal]) -> list[Decimal]:
    """Each value to the cent such that the cents add up to the rounded sum of the values exactly
    (cumulative rounding: no value moves by a cent or more).

    >>> cents_summing_to([Decimal("0.004"), Decimal("0.004"), Decimal("0.004")])
    [Decimal('0.00'), Decimal('0.01'), Decimal('0.00')]
    """
    out, running, shown = [], Decimal(0), Decimal(0)
    for v in values:
        running += v
        target = _q(running)
        out.append(target - shown)
        shown = target
    return out


def paired_cents(costs: Sequence[Decimal], nets: Sequence[Decimal]) -> tuple[list[Decimal], list[Decimal]]:
    """Each job's cost and net to the cent, each column summing to its rounded total
    (`cents_summing_to`), and a job without credits (net == cost) showing one figure in both: rounded
    column by column, seed 7's batch-infer showed cost 31,764.26 and net 31,764.27. The cents that
    moves are given, a cent at a time, to the jobs with credits whose exact nets are furthest from
    their cents that way.

    >>> costs, nets = [Decimal("0.006"), Decimal("0.006")], [Decimal("0.002"), Decimal("0.006")]
    >>> cents_summing_to(nets)  # the second job, without credits, would show a net above its cost
    [Decimal('0.00'), Decimal('0.01')]
    >>> paired_cents(costs, nets)
    ([Decimal('0.01'), Decimal('0.00')], [Decimal('0.01'), Decimal('0.00')])
    """
    cost_cents, net_cents = cents_summing_to(costs), cents_summing_to(nets)
    free = [i for i, (c, n) in enumerate(zip(costs, nets, strict=True)) if c == n]
    drift = sum((net_cents[i] - cost_cents[i] for i in free), Decimal(0))
    for i in free:
        net_cents[i] = cost_cents[i]
    shown = dict(enumerate(net_cents))
    move_cents(shown, dict(enumerate(nets)), drift, [i for i in range(len(nets)) if nets[i] != costs[i]])
    return cost_cents, [shown[i] for i in range(len(nets))]


def _parts(micros: Mapping[str, int], total: Decimal) -> dict[str, float]:
    """A job's subcategories to the cent, adding up to its `total` as shown (seed 11's detector-train
    listed parts $0.02 off its cost_usd)."""
    exact = {k: micros_to_decimal(v) for k, v in micros.items()}
    return {k: float(v) for k, v in cents_adding_up(exact, total).items()}


def _q(v: Decimal) -> Decimal:
    return v.quantize(_CENT, rounding=ROUND_HALF_EVEN)


def _cents(v: Decimal) -> float:
    return float(_q(v))


def _hours(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.001")))


def _iso(v: datetime | None) -> str | None:
    return to_iso(v) if v is not None else None
