"""`spot_opportunity`: on-demand GPU hours of restartable work, priced at Spot (per whole VM when the
machine type's prices are known, else per GPU; see `monitor.detectors.opportunities` for what both
opportunity detectors share)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import Field, field_validator

from monitor.config import Regex
from monitor.detectors.base import ONE_HOUR, Detector, fmt_usd, iso, money, register
from monitor.detectors.idle_gpu import instance_key
from monitor.detectors.inputs import DetectorInputs, GpuHour, PriceLookup
from monitor.detectors.opportunities import (
    OpportunityConfig,
    capped_severity,
    machine_price_source,
    machine_prices,
    on_demand_hours,
    on_demand_machine_hours,
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

    def _reason(self, rows: Sequence[GpuHour]) -> str | None:
        labels = {f"{k}={v}" for r in rows for k, v in r.labels.items()}
        if hit := sorted(labels & set(self.config.restartable_labels)):
            return f"label {hit[0]}"
        name = rows[0].instance or ""
        if self.config.name_regex and re.search(self.config.name_regex, name):
            return "name pattern"
        if self.config.max_job_hours > 0:
            longest, run = 0, 0
            prev: datetime | None = None
            for r in rows:
                run = run + 1 if prev is not None and r.hour - prev == ONE_HOUR else 1
                longest, prev = max(longest, run), r.hour
            if longest <= self.config.max_job_hours:
                return f"short jobs (longest {longest} h)"
        return None

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        if inputs.prices is None:
            return []
        per_instance: dict[tuple[str | None, str], list[GpuHour]] = defaultdict(list)
        for r in on_demand_hours(inputs, now):
            per_instance[instance_key(r)].append(r)
        by_project: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
        for key in sorted(per_instance, key=str):
            rows = sorted(per_instance[key], key=lambda r: r.hour)
            if (reason := self._reason(rows)) is not None and (e := _spot_line(rows, reason, inputs)):
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


def _spot_line(rows: Sequence[GpuHour], reason: str, inputs: DetectorInputs) -> dict[str, Any] | None:
    assert inputs.prices is not None
    r0 = rows[0]
    whole = machine_prices(inputs.prices, r0.machine_type, r0.region, ("on_demand", "spot"))
    if whole is not None and r0.gpus > 0 and r0.machine_type:
        return _machine_spot_line(rows, reason, inputs.prices, whole)
    od = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "on_demand")
    spot = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "spot")
    if od is None or spot is None or spot >= od:
        return None
    gpu_hours = sum((r.on_demand_gpu_hours for r in rows), Decimal(0))
    return {
        "instance": r0.instance or r0.instance_id,
        "instance_id": r0.instance_id,
        "zone": r0.zone,
        "gpu_model": r0.gpu_model,
        "reason": reason,
        "gpu_hours": float(gpu_hours),
        "first_hour": iso(rows[0].hour),
        "last_hour": iso(rows[-1].hour),
        "priced_per": "gpu",
        "on_demand_usd_per_gpu_hour": money(od),
        "spot_usd_per_gpu_hour": money(spot),
        "savings_usd": money(gpu_hours * (od - spot)),
        "price_source": price_source(inputs.prices, r0.gpu_model or "", r0.region, ("on_demand", "spot")),
    }


def _machine_spot_line(
    rows: Sequence[GpuHour], reason: str, prices: PriceLookup, whole: dict[str, Decimal]
) -> dict[str, Any] | None:
    """A VM's Spot saving priced per whole machine: its machine-hours x (on-demand - Spot)."""
    r0 = rows[0]
    od, spot = whole["on_demand"], whole["spot"]
    if spot >= od:
        return None
    hours = sum((on_demand_machine_hours(r) for r in rows), Decimal(0))
    return {
        "instance": r0.instance or r0.instance_id,
        "instance_id": r0.instance_id,
        "zone": r0.zone,
        "gpu_model": r0.gpu_model,
        "reason": reason,
        "gpu_hours": float(sum((r.on_demand_gpu_hours for r in rows), Decimal(0))),
        "first_hour": iso(rows[0].hour),
        "last_hour": iso(rows[-1].hour),
        "priced_per": "machine",
        "machine_type": r0.machine_type,
        "machine_hours": float(hours),
        "on_demand_usd_per_machine_hour": money(od),
        "spot_usd_per_machine_hour": money(spot),
        "savings_usd": money(hours * (od - spot)),
        "price_source": machine_price_source(prices, r0.machine_type or "", r0.region, ("on_demand", "spot")),
    }
