"""Assemble what detectors see from the state store: cost hours, GPU hours, live estimates.

Billing aggregates (micros, from the engine) become `CostHour`s in USD; the GPU rows among them are
joined with stored utilization (`monitor.gpus`) into `GpuHour`s. For hours utilization already covers
but billing does not yet (the export lags hours to days), GPU cost is *estimated* from the instance's
GPU model and count and the price book, so an idle 8 x H100 VM is flagged within hours, not when the
invoice data lands. Estimated hours carry `estimated=True` and disappear once billed rows arrive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from monitor.billing_poll import HourlyCost, hourly_costs, provisional_since
from monitor.detectors.inputs import BudgetSpec, CostHour, DetectorInputs, GpuHour, PriceLookup
from monitor.gpu_models import normalize_gpu_model, parse_sku_description, region_of
from monitor.gpus import GpuCostHour, JoinedHour, join_gpu_hours
from monitor.model import micros_to_decimal
from monitor.state.store import StateStore
from monitor.utilization import GpuSample, load_samples

__all__ = ["assemble_inputs", "cost_hours", "gpu_cost_hours", "gpu_hours"]

_HOUR = timedelta(hours=1)
_MICROS = Decimal(1_000_000)


def _d(value: float | None) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


def cost_hours(rows: Iterable[HourlyCost]) -> list[CostHour]:
    out = []
    for r in rows:
        k = r.keys
        out.append(
            CostHour(
                hour=r.usage_hour,
                project=k.get("project_id"),
                subcategory=r.subcategory,
                cost=r.gross,
                credits=r.credits,
                region=k.get("region"),
                zone=k.get("zone"),
                service=k.get("service_description"),
                sku_id=k.get("sku_id"),
                sku=k.get("sku_description"),
                pricing_model=k.get("pricing_model"),
                instance=k.get("resource_name"),
                instance_id=k.get("instance_id"),
                cluster=k.get("cluster"),
                labels=r.labels,
                usage_pricing_units=_d(r.usage_amount),
                pricing_unit=k.get("pricing_unit"),
                provisional=r.provisional,
            )
        )
    return out


def gpu_cost_hours(rows: Iterable[HourlyCost]) -> list[GpuCostHour]:
    """GPU spend per instance-hour: the `compute.gpu` aggregates, summed over SKUs and corrections."""
    acc: dict[tuple, dict] = {}
    for r in rows:
        if r.subcategory != "compute.gpu":
            continue
        k = r.keys
        key = (r.usage_hour, k.get("project_id"), k.get("zone"), k.get("resource_name"), k.get("instance_id"))
        a = acc.setdefault(
            key,
            {"gpu_hours": Decimal(0), "cost": 0, "credits": 0, "row": r, "provisional": r.provisional},
        )
        a["gpu_hours"] += _d(r.usage_amount)
        a["cost"] += r.gross_micros
        a["credits"] += r.credit_micros
    out = []
    for (hour, project, zone, name, iid), a in acc.items():
        r: HourlyCost = a["row"]
        sku = parse_sku_description(r.keys.get("sku_description") or "")
        out.append(
            GpuCostHour(
                hour=hour,
                project=project,
                zone=zone,
                region=r.keys.get("region"),
                instance=name,
                instance_id=iid,
                cluster=r.keys.get("cluster"),
                machine_type=r.keys.get("machine_type"),
                gpu_model=str(sku.model) if sku.model else None,
                pricing_model=r.keys.get("pricing_model"),
                gpu_hours=a["gpu_hours"],
                cost_micros=a["cost"],
                credits_micros=a["credits"],
                provisional=a["provisional"],
                labels=r.labels,
            )
        )
    return out


def _gpu_hour(j: JoinedHour) -> GpuHour:
    c = j.cost
    return GpuHour(
        hour=c.hour,
        project=c.project,
        instance=c.instance,
        gpu_model=c.gpu_model,
        gpus=j.gpus,
        gpu_hours=c.gpu_hours,
        gpu_cost=micros_to_decimal(c.cost_micros),
        mean_utilization_pct=j.mean_utilization_pct,
        idle_gpu_hours=j.idle_gpu_hours,
        idle_cost=micros_to_decimal(j.idle_cost_micros),
        zone=c.zone,
        region=c.region,
        instance_id=c.instance_id,
        cluster=c.cluster,
        machine_type=c.machine_type,
        memory_held=j.memory_held,
        pricing_model=c.pricing_model,
        labels=dict(c.labels),
    )


def _cost_keys(c: GpuCostHour) -> list[str]:
    """Every identity a billed instance-hour answers to: numeric id and (project, zone, name)."""
    keys = [c.instance_id] if c.instance_id else []
    if c.instance:
        keys.append(f"{c.project}/{c.zone}/{c.instance}")
    return keys


def _sample_keys(s: GpuSample) -> list[str]:
    keys = [s.instance_id] if s.instance_id else []
    for name in (s.instance_name, s.node_name):
        if name:
            keys.append(f"{s.project}/{s.zone}/{name}")
    return keys


def _estimates(
    costs: Sequence[GpuCostHour],
    samples: Sequence[GpuSample],
    prices: PriceLookup | None,
    threshold: float,
    end: datetime,
    provisional_from: datetime | None = None,
) -> list[GpuHour]:
    """GPU hours utilization covers but billing does not (yet), priced from the price book.

    Only whole hours before `end` and, when given, at or after `provisional_from`: older hours are
    settled billing, and an hour with utilization but no GPU row there is not ours to invent (an
    instance billed to another account, say). An hour is "billed" when any identity of the
    instance (id, or project/zone/name) has a GPU row in it, so a billing row without an id never
    gets a second, estimated copy; hours missing between billed ones (rows landing out of order)
    are estimated too.
    """
    if prices is None or not samples:
        return []
    latest: dict[str, GpuCostHour] = {}
    billed: set[tuple[str, datetime]] = set()
    for c in costs:
        for key in _cost_keys(c):
            billed.add((key, c.hour))
            if key not in latest or c.hour > latest[key].hour:
                latest[key] = c
    by_hour: dict[tuple[str, datetime], list[GpuSample]] = defaultdict(list)
    aliases: dict[str, list[str]] = {}
    for s in samples:
        hour = s.start.replace(minute=0, second=0, microsecond=0)
        if hour + _HOUR > end or (provisional_from is not None and hour < provisional_from):
            continue
        keys = _sample_keys(s)
        if keys:
            by_hour[(keys[0], hour)].append(s)
            aliases.setdefault(keys[0], keys)
    out = []
    for (key, hour), group in sorted(by_hour.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        keys = aliases[key]
        if any((k, hour) in billed for k in keys):
            continue  # billed: never estimate over real rows
        known = next((latest[k] for k in keys if k in latest), None)
        out.extend(_estimate_hour(hour, group, known, prices, threshold))
    return out


def _estimate_hour(
    hour: datetime,
    group: list[GpuSample],
    known: GpuCostHour | None,
    prices: PriceLookup,
    threshold: float,
) -> list[GpuHour]:
    """One estimated instance-hour: GPU model and pricing from its latest billed hour when there is
    one, else from the Monitoring `model` label at on-demand prices."""
    first, k = group[0], known
    model = (k.gpu_model if k else None) or normalize_gpu_model(first.model or "")
    region = (k.region if k else None) or region_of(first.zone or "")
    pricing = (k.pricing_model if k else None) or "on_demand"
    term = {"committed": "on_demand", "reserved": "on_demand"}.get(pricing, pricing)
    unit = prices.gpu_hourly(str(model), region, term) if model else None
    if unit is None:
        return []
    per_gpu: dict[str, list[float]] = defaultdict(list)
    for s in group:
        per_gpu[s.gpu].append(s.utilization_pct)
    gpus = len(per_gpu)
    means = [sum(v) / len(v) for v in per_gpu.values()]
    idle = sum(1 for m in means if m < threshold)
    cost = (unit * gpus).quantize(Decimal("0.000001"))
    return [
        GpuHour(
            hour=hour,
            project=(k.project if k else first.project),
            instance=(k.instance if k else first.instance_name or first.node_name),
            gpu_model=str(model),
            gpus=gpus,
            gpu_hours=Decimal(gpus),
            gpu_cost=cost,
            mean_utilization_pct=sum(means) / gpus,
            idle_gpu_hours=Decimal(idle),
            idle_cost=(cost * idle / gpus).quantize(Decimal("0.000001")),
            zone=(k.zone if k else first.zone),
            region=region,
            instance_id=(k.instance_id if k else first.instance_id),
            cluster=(k.cluster if k else first.cluster),
            machine_type=(k.machine_type if k else None),
            memory_held=any(getattr(s, "idle_but_allocated", False) for s in group),
            pricing_model=pricing,
            estimated=True,
            labels=dict(k.labels) if k else {},
        )
    ]


def gpu_hours(
    rows: Sequence[HourlyCost],
    samples: Sequence[GpuSample],
    threshold: float,
    prices: PriceLookup | None,
    end: datetime,
    provisional_from: datetime | None = None,
) -> list[GpuHour]:
    """Billed GPU hours joined with utilization, plus estimated ones (see `_estimates`)."""
    costs = gpu_cost_hours(rows)
    billed = [_gpu_hour(j) for j in join_gpu_hours(costs, samples, threshold)]
    return billed + _estimates(costs, samples, prices, threshold, end, provisional_from)


def assemble_inputs(
    store: StateStore,
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    provisional_days: int,
    idle_threshold_pct: float,
    prices: PriceLookup | None,
    budgets: Sequence[BudgetSpec] = (),
    rows: Sequence[HourlyCost] | None = None,
) -> DetectorInputs:
    """Detector inputs for [start, end) from the store. `rows`: the hourly aggregates of that range
    when the caller already read them (`hourly_costs` with the same `now` / `provisional_days`)."""
    if rows is None:
        rows = hourly_costs(store, start, end, now=now, provisional_days=provisional_days)
    samples = load_samples(store, start, end)
    since = provisional_since(now, provisional_days)
    return DetectorInputs(
        window_start=start,
        window_end=end,
        provisional_from=since,
        hourly=cost_hours(rows),
        gpu_hours=gpu_hours(rows, samples, idle_threshold_pct, prices, end, since),
        prices=prices,
        budgets=tuple(budgets),
    )
