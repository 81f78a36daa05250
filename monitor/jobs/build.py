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
  `GpuHour`s `monitor.assemble.gpu_hours` joined (same identity, threshold and effective price as
  the `idle_gpu` detector and `gpucost gpus`). A node-hour shared by jobs is split in proportion to
  each job's GPU usage on it, like `monitor.gpu_rollups` splits one per namespace.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from monitor.detectors.inputs import GpuHour, PriceLookup
from monitor.detectors.opportunities import machine_hours, machine_price_source, machine_prices, price_source
from monitor.gpu_identity import billed_identity, row_identity
from monitor.gpu_rollups import GpuUsage, split_exact
from monitor.jobs.identity import job_of, parse_labels
from monitor.model import micros_to_decimal
from monitor.timeutil import to_iso

__all__ = ["JobHour", "JobRecord", "build_jobs", "cents_summing_to"]

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
    gpu_model: str | None
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
        rounded them so that the jobs sum to the total (`cents_summing_to`)."""
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
            "by_subcategory": {k: _cents(micros_to_decimal(v)) for k, v in self.by_subcategory.items()},
            "net_by_subcategory": {
                k: _cents(micros_to_decimal(v)) for k, v in self.net_by_subcategory.items()
            },
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
    """What one job gathers while the rows stream past (mutable; `_record` freezes it)."""

    labels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    projects: set[str] = field(default_factory=set)
    zones: set[str] = field(default_factory=set)
    instances: set[str] = field(default_factory=set)
    gross: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    net: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    compute_hours: set[datetime] = field(default_factory=set)
    any_hours: set[datetime] = field(default_factory=set)
    hours: dict[datetime, JobHour] = field(default_factory=dict)
    gpu: GpuUsage = field(default_factory=GpuUsage)
    estimated: GpuUsage = field(default_factory=GpuUsage)
    estimated_hours: set[datetime] = field(default_factory=set)
    models: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    gpus_by_hour: dict[datetime, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    on_demand: list[tuple[GpuHour, Decimal]] = field(default_factory=list)

    def hour(self, h: datetime) -> JobHour:
        if h not in self.hours:
            self.hours[h] = JobHour(h)
        return self.hours[h]

    def money(self, hour: datetime, sub: str, gross: int, net: int) -> None:
        self.gross[sub] += gross
        self.net[sub] += net
        jh = self.hour(hour)
        jh.cost += micros_to_decimal(gross)
        jh.net_cost += micros_to_decimal(net)


def _node_key(r: Mapping[str, Any]) -> str:
    return billed_identity(r["project_id"], r["zone"], r["resource_name"], r["instance_id"], r["cluster"]).key


def _fee_shares(rows: Sequence[Mapping[str, Any]], jobs: Sequence[str | None]) -> dict[tuple, dict]:
    """Node-hours per job, per (project, cluster, hour): each node's hour split by compute cost."""
    per_node: dict[tuple, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    for r, job in zip(rows, jobs, strict=True):
        if r["cluster"] and r["resource_name"] and r["subcategory"].startswith("compute."):
            per_node[(r["project_id"], r["cluster"], r["usage_hour"], r["resource_name"])][job] += r[
                "gross_micros"
            ]
    shares: dict[tuple, dict[str | None, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for (project, cluster, hour, _node), by_job in per_node.items():
        total = sum(by_job.values())
        for job, micros in by_job.items():
            share = Decimal(micros) / total if total > 0 else _ONE / len(by_job)
            shares[(project, cluster, hour)][job] += share
    return shares


def _split_money(
    r: Mapping[str, Any], weights: Mapping[str | None, Decimal]
) -> list[tuple[str | None, int, int]]:
    keys = list(weights)
    w = [weights[k] for k in keys]
    gross = split_exact(Decimal(int(r["gross_micros"])), w, _ONE)
    net = split_exact(Decimal(int(r["net_micros"])), w, _ONE)
    return [(k, int(g), int(n)) for k, g, n in zip(keys, gross, net, strict=True)]


def _add_rows(acc: dict[str | None, _Acc], rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list:
    """Money, labels and places of every row into its job; cluster fees shared by node-hours.
    Returns each row's job (the GPU split needs it)."""
    labels = [parse_labels(r["job_labels"]) for r in rows]
    jobs = [job_of(lab, keys) for lab in labels]
    shares = _fee_shares(rows, jobs)
    for r, lab, job in zip(rows, labels, jobs, strict=True):
        sub, hour = r["subcategory"], r["usage_hour"]
        weights = (
            shares.get((r["project_id"], r["cluster"], hour)) if job is None and sub == CLUSTER_FEE else None
        )
        parts = _split_money(r, weights) if weights else [(job, int(r["gross_micros"]), int(r["net_micros"]))]
        for part_job, gross, net in parts:
            a = acc.setdefault(part_job, _Acc())
            a.money(hour, sub, gross, net)
            a.any_hours.add(hour)
            if r["project_id"]:
                a.projects.add(r["project_id"])
        a = acc.setdefault(job, _Acc())
        for k in keys:
            if k in lab:
                a.labels[k].add(lab[k])
        if r["zone"]:
            a.zones.add(r["zone"])
        if sub.startswith("compute."):
            a.compute_hours.add(hour)
            if r["resource_name"]:
                a.instances.add(r["resource_name"])
    return jobs


def _add_gpu(
    acc: dict[str | None, _Acc],
    rows: Sequence[Mapping[str, Any]],
    jobs: Sequence[str | None],
    gpu_hours: Sequence[GpuHour],
) -> None:
    """Each joined GPU node-hour into its jobs, split by their GPU usage on the node that hour."""
    usage: dict[tuple[str, datetime], dict[str | None, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    latest: dict[str, tuple[datetime, Decimal, str | None]] = {}
    for r, job in zip(rows, jobs, strict=True):
        if r["subcategory"] != "compute.gpu":
            continue
        key, hour = _node_key(r), r["usage_hour"]
        amount = Decimal(str(r["usage_amount"] or 0))
        usage[(key, hour)][job] += amount
        cur = latest.get(key)
        if cur is None or (hour, amount) > cur[:2]:
            latest[key] = (hour, amount, job)
    for h in gpu_hours:
        key = row_identity(h).key
        if h.estimated:
            job = latest[key][2] if key in latest else None
            a = acc.setdefault(job, _Acc())
            a.estimated.add(h)
            a.estimated_hours.add(h.hour)
            a.hour(h.hour).estimated_cost += h.gpu_cost
            continue
        weights = usage.get((key, h.hour)) or {None: _ONE}
        names, w = list(weights), list(weights.values())
        parts = zip(
            split_exact(h.gpu_hours, w),
            split_exact(h.gpu_cost, w),
            split_exact(h.idle_gpu_hours, w),
            split_exact(h.idle_cost, w),
            strict=True,
        )
        total_w = sum(w, Decimal(0))
        for job, (gh, gc, igh, ic) in zip(names, parts, strict=True):
            a = acc.setdefault(job, _Acc())
            a.gpu.add_part(h, gh, gc, igh, ic)
            frac = weights[job] / total_w if total_w > 0 else _ONE / len(names)
            a.gpus_by_hour[h.hour] += h.gpus * frac
            if h.gpu_model:
                a.models[h.gpu_model] += gh
            jh = a.hour(h.hour)
            jh.gpu_hours += gh
            jh.idle_cost += ic
            if h.mean_utilization_pct is not None:
                jh.busy_gpu_hours += gh - igh
            if h.pricing_model == "on_demand" and h.gpu_model:
                a.on_demand.append((h, frac))


def _spot(
    parts: Sequence[tuple[GpuHour, Decimal]], prices: PriceLookup | None
) -> tuple[Decimal | None, str | None]:
    """On-demand minus Spot list price over the job's on-demand GPU hours (see the module docstring)."""
    if prices is None:
        return None, None
    total, sources = Decimal(0), []
    kinds = ("on_demand", "spot")
    for h, frac in parts:
        whole = machine_prices(prices, h.machine_type, h.region, kinds)
        if whole is not None and h.gpus > 0 and h.machine_type:
            od, spot, hours = whole["on_demand"], whole["spot"], machine_hours(h) * frac
            src = machine_price_source(prices, h.machine_type, h.region, kinds)
        else:
            od = prices.gpu_hourly(h.gpu_model or "", h.region, "on_demand")
            spot = prices.gpu_hourly(h.gpu_model or "", h.region, "spot")
            hours, src = h.gpu_hours * frac, price_source(prices, h.gpu_model or "", h.region, kinds)
        if od is None or spot is None or spot >= od:
            continue
        total += hours * (od - spot)
        sources.append(src)
    return total, ("; ".join(dict.fromkeys(sources)) or None)


def _record(
    job: str | None, a: _Acc, window_end: datetime, within: timedelta, prices: PriceLookup | None
) -> JobRecord:
    hours = sorted(a.compute_hours or a.any_hours)
    last = max([*hours[-1:], *a.estimated_hours], default=None)
    spot, source = _spot(a.on_demand, prices)
    model = max(a.models, key=lambda m: (a.models[m], m)) if a.models else None
    gpus = max((int(v.to_integral_value(ROUND_HALF_EVEN)) for v in a.gpus_by_hour.values()), default=0)
    return JobRecord(
        job=job,
        labels={k: tuple(sorted(v)) for k, v in sorted(a.labels.items())},
        projects=tuple(sorted(a.projects)),
        zones=tuple(sorted(a.zones)),
        instances=tuple(sorted(a.instances)),
        gpu_model=model,
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
        hours=tuple(a.hours[h] for h in sorted(a.hours)),
    )


def build_jobs(
    rows: Sequence[Mapping[str, Any]],
    gpu_hours: Sequence[GpuHour],
    *,
    keys: Sequence[str],
    window_end: datetime,
    running_within: timedelta = timedelta(hours=6),
    prices: PriceLookup | None = None,
) -> list[JobRecord]:
    """Every job of the window, largest cost first, `job: None` (the unlabelled rest) last.

    `rows`: `queries/jobs.sql` output for the window; `gpu_hours`: the window's joined GPU hours
    (`Analysis.gpu_hours`, billed and estimated); `keys`: `JobsConfig.label_keys()`.
    """
    acc: dict[str | None, _Acc] = {}
    jobs = _add_rows(acc, rows, keys)
    _add_gpu(acc, rows, jobs, gpu_hours)
    out = [_record(job, a, window_end, running_within, prices) for job, a in acc.items()]
    return sorted(out, key=lambda j: (j.job is None, -j.gross_micros, j.job or ""))


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


def _q(v: Decimal) -> Decimal:
    return v.quantize(_CENT, rounding=ROUND_HALF_EVEN)


def _cents(v: Decimal) -> float:
    return float(_q(v))


def _hours(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.001")))


def _iso(v: datetime | None) -> str | None:
    return to_iso(v) if v is not None else None
