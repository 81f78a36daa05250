"""`spot_opportunity`: on-demand GPU hours of restartable work, priced at Spot (per whole VM when the
machine type's prices are known, else per GPU; see `monitor.detectors.opportunities` for what both
opportunity detectors share)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from pydantic import Field, field_validator

from monitor.config import Regex
from monitor.detectors.base import ONE_HOUR, Detector, fmt_usd, iso, money, register
from monitor.detectors.inputs import DetectorInputs, PriceLookup
from monitor.detectors.opportunities import (
    OnDemandHours,
    OpportunityConfig,
    capped_severity,
    machine_hours,
    machine_price_source,
    machine_prices,
    on_demand_hours,
    price_source,
)
from monitor.model import Finding, Scope, counted, fingerprint

__all__ = ["SpotOpportunity", "SpotOpportunityConfig"]


class SpotOpportunityConfig(OpportunityConfig):
    """`restartable_labels`: "key=value" labels marking restartable work. `name_regex`: instance names
    of restartable work. `max_job_hours`: if > 0, instances whose every run is at most this long
    count as restartable too."""

    restartable_labels: tuple[str, ...] = ("restartable=true", "spot-ok=true")
    name_regex: Regex | None = r"(?i)(^|[-_])(eval|sweep|hpo|batch)([-_0-9]|$)"
    max_job_hours: int = Field(default=0, ge=0)

    @field_validator("restartable_labels")
    @classmethod
    def _kv(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            if "=" not in item:
                raise ValueError(f'expected "key=value", got "{item}"')
        return v

@register("spot_opportunity")
class SpotOpportunity(Detector):
    Config = SpotOpportunityConfig
    config: SpotOpportunityConfig
    advice = True

    def _reason(self, hours: OnDemandHours, rows: Sequence[int]) -> str | None:
        """Why the VM of `rows` (row numbers of `hours`, by hour) looks restartable, or None."""
        of = hours["labels"]
        distinct = {id(of[i]): of[i] for i in rows}.values()  # a VM's hours share label sets
        labels = {f"{k}={v}" for each in distinct for k, v in each.items()}
        if hit := sorted(labels & set(self.config.restartable_labels)):
            return f"label {hit[0]}"
        name = hours["instance"][rows[0]] or ""
        if self.config.name_regex and re.search(self.config.name_regex, name):
            return "name pattern"
        if self.config.max_job_hours > 0:
            longest, run = 0, 0
            prev: datetime | None = None
            for hour in map(hours["hour"].__getitem__, rows):
                run = run + 1 if prev is not None and hour - prev == ONE_HOUR else 1
                longest, prev = max(longest, run), hour
            if longest <= self.config.max_job_hours:
                return f"short jobs (longest {longest} h)"
        return None

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        if inputs.prices is None:
            return []
        hours = on_demand_hours(inputs, now)
        per_instance: dict[tuple[str | None, str], list[int]] = defaultdict(list)
        for i, node in enumerate(hours["node"]):
            per_instance[node].append(i)
        pools = _Pools(hours, inputs.prices)
        by_hour = hours["hour"].__getitem__
        by_project: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(per_instance, key=str):
            rows = sorted(per_instance[key], key=by_hour)
            if (reason := self._reason(hours, rows)) is not None and (
                e := _spot_line(hours, rows, reason, inputs, pools)
            ):
                by_project[key[0]].append(e)
        return [
            f
            for p in sorted(by_project, key=str)
            if (f := self._finding(p, by_project[p], inputs, now)) is not None
        ]

    def _finding(
        self, project: str | None, lines: list[dict[str, Any]], inputs: DetectorInputs, now: datetime
    ) -> Finding | None:
        impact = sum((Decimal(str(e["savings_usd"])) for e in lines), Decimal(0))
        if not self.keep(impact):
            return None
        lines.sort(key=lambda e: -e["savings_usd"])
        names = ", ".join(str(e["instance"]) for e in lines[:5])
        scope = Scope(project=project)
        gpu_hours = sum(e["gpu_hours"] for e in lines)
        source = "; ".join(dict.fromkeys(n for e in lines for n in str(e["price_source"]).split("; ")))
        machines = sorted({str(e["machine_type"]) for e in lines if e["priced_per"] == "machine"})
        per_vm = f" (priced per whole VM for {', '.join(machines)})" if machines else ""
        return Finding(
            kind=self.name,
            severity=capped_severity(self, impact),
            title=f"Run restartable GPU work in {project} on Spot: save {fmt_usd(impact)}",
            summary=(
                f"{counted(len(lines), 'on-demand GPU instance')} in {project} ({names}) "
                f"{'looks' if len(lines) == 1 else 'look'} restartable and used "
                f"{gpu_hours:,.0f} GPU-hours; Spot prices{per_vm} would have saved {fmt_usd(impact)} in this window. "
                f"Prices: {source}."
            ),
            impact_usd=impact,
            window_start=inputs.window_start,
            window_end=min(inputs.window_end, now),
            scope=scope,
            evidence={"instances": lines, "savings_usd": money(impact), "price_source": source},
            recommendation=(
                "Run these jobs on Spot VMs (provisioning model SPOT, or a Spot node pool on GKE) with "
                "checkpointing so a preemption costs minutes, not the run."
            ),
            fingerprint=fingerprint(self.name, scope),
        )


class _PoolOf(NamedTuple):
    """What sets a row's pool (`_Pools.key`)."""

    project: str | None
    region: str | None
    machine_type: str | None
    gpu_model: str | None
    gpus: int

    @classmethod
    def at(cls, hours: OnDemandHours, i: int) -> _PoolOf:
        c = hours.columns
        return cls(c["project"][i], c["region"][i], c["machine_type"][i], c["gpu_model"][i], c["gpus"][i])


class _Pools:
    """The on-demand part of each hour of a pool of usage one commitment covers (a project's GPUs
    of a model in a region, or its VMs of a machine type priced whole), which a VM moved to Spot
    frees no more than it takes from.

    A resource commitment applies to the aggregate usage of its resources in a region and is billed
    whether or not it is used (https://cloud.google.com/compute/docs/instances/signing-up-committed-use-discounts),
    and its credit is spread over the usage rows (`GpuHour.on_demand_share`): the part of a VM an
    hour's credit covered is not the VM's to save. Moved to Spot, the whole VM pays Spot prices and
    its on-demand price is saved only as far as the pool's usage left on demand reaches: the rest of
    the commitment then covers hours that were on demand, or nothing. A lone a3-highgpu-8g half
    covered (10 h) was advised onto Spot for $189.40 ($88.49 - $50.61 on its 5 uncovered hours), where
    its Spot hours cost $506.10 for $442.45 of on-demand hours saved, $63.65 more; beside an uncovered
    VM of its type, moving it saves its 10 whole hours ($378.80), not 5. Where no commitment covers
    any of a pool, every hour is on demand and a VM moved saves each of its hours, as before."""

    def __init__(self, hours: OnDemandHours, prices: PriceLookup | None) -> None:
        self.left: dict[tuple, dict[datetime, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        self._whole: dict[tuple[str | None, str | None], bool] = {}
        keys: dict[tuple, tuple] = {}  # per (project, region, machine type, GPU model, any GPUs)
        c = hours.columns
        for project, region, machine, model, gpus, hour, od, od_machine in zip(
            c["project"], c["region"], c["machine_type"], c["gpu_model"], c["gpus"], c["hour"],
            c["on_demand_gpu_hours"], c["on_demand_machine_hours"], strict=True,
        ):  # fmt: skip
            at = (project, region, machine, model, gpus > 0)
            key = keys.get(at)
            if key is None:
                key = keys[at] = self.key(_PoolOf(project, region, machine, model, gpus), prices)
            self.left[key][hour] += od_machine if key[0] == "machine" else od

    def key(self, r: _PoolOf, prices: PriceLookup | None) -> tuple:
        """The pool of `r`: its VMs of a machine type where `_spot_line` prices it whole, else its GPUs."""
        at = (r.machine_type, r.region)
        if at not in self._whole:
            found = prices is not None and machine_prices(
                prices, r.machine_type, r.region, ("on_demand", "spot")
            )
            self._whole[at] = bool(found) and bool(r.machine_type)
        if self._whole[at] and r.gpus > 0:
            return ("machine", r.project, r.region, r.machine_type)
        return ("gpu", r.project, r.region, r.gpu_model)

    def take(
        self, key: tuple, hours: Sequence[tuple[datetime, Decimal]]
    ) -> tuple[Decimal, dict[datetime, Decimal]]:
        """The on-demand hours of `key`'s pool a VM of `hours` (hour, size) would free, by hour."""
        taken: dict[datetime, Decimal] = defaultdict(Decimal)
        pool = self.left.get(key, {})
        for hour, size in hours:
            taken[hour] += min(size, max(Decimal(0), pool.get(hour, Decimal(0)) - taken[hour]))
        return sum(taken.values(), Decimal(0)), taken

    def spend(self, key: tuple, taken: dict[datetime, Decimal]) -> None:
        """A VM advised onto Spot: what it frees is not another's to free."""
        for hour, part in taken.items():
            self.left[key][hour] -= part


def _saved(
    pools: _Pools, key: tuple, hours: Sequence[tuple[datetime, Decimal]], od: Decimal, spot: Decimal
) -> tuple[Decimal, Decimal, Decimal] | None:
    """(hours moved, of them freed on demand, saving) of moving a VM of `hours` to Spot (`_Pools`);
    None when Spot would cost more. Freed whole: its hours x (on-demand - Spot), as before."""
    moved = sum((size for _, size in hours), Decimal(0))
    freed, taken = pools.take(key, hours)
    saving = moved * (od - spot) - (moved - freed) * od
    if saving <= 0:
        return None
    pools.spend(key, taken)
    return moved, freed, saving


def _spot_line(
    hours: OnDemandHours, rows: Sequence[int], reason: str, inputs: DetectorInputs, pools: _Pools
) -> dict[str, Any] | None:
    """The Spot saving of the VM of `rows` (row numbers of `hours`, by hour), or None."""
    assert inputs.prices is not None
    c = hours.columns
    r0 = _PoolOf.at(hours, rows[0])
    whole = machine_prices(inputs.prices, r0.machine_type, r0.region, ("on_demand", "spot"))
    if whole is not None and r0.gpus > 0 and r0.machine_type:
        return _machine_spot_line(hours, rows, reason, inputs.prices, whole, pools)
    od = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "on_demand")
    spot = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "spot")
    if od is None or spot is None or spot >= od:
        return None
    key = pools.key(r0, inputs.prices)
    if (found := _saved(pools, key, [(c["hour"][i], c["gpu_hours"][i]) for i in rows], od, spot)) is None:
        return None
    gpu_hours, freed, saving = found
    return {
        **_vm(hours, rows, reason),
        "gpu_hours": float(gpu_hours),
        "first_hour": iso(c["hour"][rows[0]]),
        "last_hour": iso(c["hour"][rows[-1]]),
        "priced_per": "gpu",
        "on_demand_usd_per_gpu_hour": money(od),
        "spot_usd_per_gpu_hour": money(spot),
        "savings_usd": money(saving),
        **({"committed_gpu_hours_left": float(gpu_hours - freed)} if freed < gpu_hours else {}),
        "price_source": price_source(inputs.prices, r0.gpu_model or "", r0.region, ("on_demand", "spot")),
    }


def _vm(hours: OnDemandHours, rows: Sequence[int], reason: str) -> dict[str, Any]:
    """The evidence line's VM: its first row's names, and why it looks restartable."""
    c, i = hours.columns, rows[0]
    return {
        "instance": c["instance"][i] or c["instance_id"][i],
        "instance_id": c["instance_id"][i],
        "zone": c["zone"][i],
        "gpu_model": c["gpu_model"][i],
        "reason": reason,
    }


def _machine_spot_line(
    hours: OnDemandHours,
    rows: Sequence[int],
    reason: str,
    prices: PriceLookup,
    whole: dict[str, Decimal],
    pools: _Pools,
) -> dict[str, Any] | None:
    """A VM's Spot saving priced per whole machine: its machine-hours x (on-demand - Spot), less
    the on-demand price of those a commitment covered that nothing else on demand takes (`_Pools`)."""
    c = hours.columns
    r0 = _PoolOf.at(hours, rows[0])
    od, spot = whole["on_demand"], whole["spot"]
    if spot >= od:
        return None
    key = pools.key(r0, prices)
    ran = [(c["hour"][i], machine_hours(c["gpu_hours"][i], c["gpus"][i])) for i in rows]
    if (found := _saved(pools, key, ran, od, spot)) is None:
        return None
    moved, freed, saving = found
    return {
        **_vm(hours, rows, reason),
        "gpu_hours": float(sum((c["gpu_hours"][i] for i in rows), Decimal(0))),
        "first_hour": iso(c["hour"][rows[0]]),
        "last_hour": iso(c["hour"][rows[-1]]),
        "priced_per": "machine",
        "machine_type": r0.machine_type,
        "machine_hours": float(moved),
        "on_demand_usd_per_machine_hour": money(od),
        "spot_usd_per_machine_hour": money(spot),
        "savings_usd": money(saving),
        **({"committed_machine_hours_left": float(moved - freed)} if freed < moved else {}),
        "price_source": machine_price_source(prices, r0.machine_type or "", r0.region, ("on_demand", "spot")),
    }
