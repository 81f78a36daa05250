"""`commitment_opportunity` and `spot_opportunity`: on-demand GPU hours that could have cost less.

Both only speak when the prices are known (`inputs.prices` answers for the GPU model and region):
a savings figure from a guessed price would not be worth trusting. Every finding says where its
prices came from (Cloud Billing Catalog API and when it was fetched, or the bundled snapshot and its
date), in the summary and in `evidence["price_source"]`, because a snapshot's Spot price can be
months old.

- commitment: the GPU count that ran on demand in (almost) every hour of the window, per project,
  region and GPU model (the `steady_percentile` of the hourly counts, so a short restart does not
  hide a steady fleet), priced at on-demand minus the commitment price, for the window and per year.
- spot: on-demand GPU hours of restartable work (a `restartable_labels` label, a name matching
  `name_regex`, or, if `max_job_hours` is set, instances whose runs are all that short), priced at
  on-demand minus Spot.

Opportunities are advice, not losses (`Detector.advice`): nothing leaked, a cheaper way to buy the same
GPU hours exists. So they never alert by default: severity is capped at `max_severity` ("info" unless
configured), below the alert threshold; a team that wants savings alerts sets `max_severity = "warning"`
(then `warning_usd` / `critical_usd` apply).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator

from monitor.config import Regex
from monitor.detectors.base import ONE_HOUR, Detector, DetectorConfig, fmt_usd, iso, money, q6, register
from monitor.detectors.idle_gpu import instance_key
from monitor.detectors.inputs import DetectorInputs, GpuHour, PriceLookup
from monitor.model import Finding, Scope, Severity, fingerprint

__all__ = [
    "CommitmentOpportunity",
    "CommitmentOpportunityConfig",
    "SpotOpportunity",
    "SpotOpportunityConfig",
    "price_source",
]

_YEAR_HOURS = 8760


class _OpportunityConfig(DetectorConfig):
    min_impact_usd: Decimal = Field(default=Decimal(50), ge=0)
    warning_usd: Decimal = Field(default=Decimal(1000), ge=0)
    critical_usd: Decimal = Field(default=Decimal(100000), ge=0)
    max_severity: Literal["info", "warning", "critical"] = "info"


class CommitmentOpportunityConfig(_OpportunityConfig):
    """`term`: the commitment priced ("commit_1y" or "commit_3y"). `steady_percentile`: the hourly
    on-demand GPU count reached in all but this percent of hours counts as steady. `min_days`: the
    window must be at least this long to call anything steady."""

    term: Literal["commit_1y", "commit_3y"] = "commit_1y"
    steady_percentile: float = Field(default=10, ge=0, le=50)
    min_days: int = Field(default=7, ge=1)


class SpotOpportunityConfig(_OpportunityConfig):
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


def _on_demand(inputs: DetectorInputs, now: datetime) -> list[GpuHour]:
    end = min(inputs.window_end, now)
    return [
        r
        for r in inputs.gpu_hours
        if r.pricing_model == "on_demand" and r.gpu_model and inputs.window_start <= r.hour < end
    ]


def price_source(prices: PriceLookup, model: str, region: str | None, kinds: Sequence[str]) -> str:
    """Where the prices of `kinds` came from, one line ("; "-joined when they differ). A lookup that
    does not report provenance (no `gpu_price_source`) says so rather than guessing."""
    report = getattr(prices, "gpu_price_source", None)
    found = [report(model, region, k) if report is not None else None for k in kinds]
    names = list(dict.fromkeys(f or "price source not reported" for f in found))
    return "; ".join(names)


def _capped(det: Detector, impact: Decimal) -> Severity:
    cap = Severity(det.config.max_severity)
    return min(det.severity(impact), cap, key=lambda s: s.rank)


def _percentile(values: Sequence[Decimal], pct: float) -> Decimal:
    """Nearest-rank percentile (a value that was actually observed)."""
    s = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(s)))
    return s[rank - 1]


@register("commitment_opportunity")
class CommitmentOpportunity(Detector):
    Config = CommitmentOpportunityConfig
    config: CommitmentOpportunityConfig
    advice = True

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        end = min(inputs.window_end, now)
        hours = int((end - inputs.window_start).total_seconds() // 3600)
        if inputs.prices is None or hours < self.config.min_days * 24:
            return []
        groups: dict[tuple[str | None, str | None, str], dict[datetime, Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        for r in _on_demand(inputs, now):
            groups[(r.project, r.region, r.gpu_model)][r.hour] += r.gpu_hours
        grid = [inputs.window_start + i * ONE_HOUR for i in range(hours)]
        findings = []
        for key in sorted(groups, key=str):
            counts = [groups[key].get(h, Decimal(0)) for h in grid]
            steady = int(_percentile(counts, self.config.steady_percentile))
            if steady >= 1 and (f := self._finding(key, steady, counts, inputs, hours)) is not None:
                findings.append(f)
        return findings

    def _finding(
        self,
        key: tuple[str | None, str | None, str],
        steady: int,
        counts: Sequence[Decimal],
        inputs: DetectorInputs,
        hours: int,
    ) -> Finding | None:
        project, region, model = key
        assert inputs.prices is not None
        od = inputs.prices.gpu_hourly(model, region, "on_demand")
        price = inputs.prices.gpu_hourly(model, region, self.config.term)
        if od is None or price is None or price >= od:
            return None
        impact = q6(steady * hours * (od - price))
        if not self.keep(impact):
            return None
        terms = {
            t: p
            for t in ("commit_1y", "commit_3y")
            if (p := inputs.prices.gpu_hourly(model, region, t)) is not None
        }
        scope = Scope(project=project, region=region)
        years = "1-year" if self.config.term == "commit_1y" else "3-year"
        source = price_source(inputs.prices, model, region, ("on_demand", self.config.term))
        return Finding(
            kind=self.name,
            severity=_capped(self, impact),
            title=f"Commit {steady}× {model} in {region} ({project}): save {fmt_usd(impact)} per {hours // 24} days",
            summary=(
                f"{project} ran at least {steady} {model} GPUs on demand in {region} in "
                f"{100 - self.config.steady_percentile:g}% of the {hours} hours analysed. A {years} "
                f"commitment at {fmt_usd(price)}/GPU-h instead of {fmt_usd(od)} would have saved "
                f"{fmt_usd(impact)} in this window, about {fmt_usd(steady * _YEAR_HOURS * (od - price))} a year. "
                f"Prices: {source}."
            ),
            impact_usd=impact,
            window_start=inputs.window_start,
            window_end=inputs.window_start + hours * ONE_HOUR,
            scope=scope,
            evidence={
                "gpu_model": model,
                "steady_gpus": steady,
                "steady_percentile": self.config.steady_percentile,
                "hours": hours,
                "hours_at_or_above_steady": sum(1 for c in counts if c >= steady),
                "max_gpus": float(max(counts)),
                "mean_gpus": float(round(sum(counts, Decimal(0)) / len(counts), 3)),
                "on_demand_usd_per_gpu_hour": money(od),
                "term": self.config.term,
                "term_usd_per_gpu_hour": {t: money(p) for t, p in terms.items()},
                "savings_usd": money(impact),
                "savings_per_year_usd": {
                    t: money(steady * _YEAR_HOURS * (od - p)) for t, p in terms.items() if p < od
                },
                "price_source": source,
            },
            recommendation=(
                f"Buy a {years} resource commitment for {steady} {model} GPUs in {region} (with a "
                "matching reservation) for the steady part of this fleet; keep bursts on demand or Spot."
            ),
            fingerprint=fingerprint(self.name, scope, model),
        )


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
        for r in _on_demand(inputs, now):
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
        return Finding(
            kind=self.name,
            severity=_capped(self, impact),
            title=f"Run restartable GPU work in {project} on Spot: save {fmt_usd(impact)}",
            summary=(
                f"{len(lines)} on-demand GPU instance(s) in {project} ({names}) look restartable and used "
                f"{gpu_hours:,.0f} GPU-hours; Spot prices would have saved {fmt_usd(impact)} in this window. "
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
    od = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "on_demand")
    spot = inputs.prices.gpu_hourly(r0.gpu_model or "", r0.region, "spot")
    if od is None or spot is None or spot >= od:
        return None
    gpu_hours = sum((r.gpu_hours for r in rows), Decimal(0))
    return {
        "instance": r0.instance or r0.instance_id,
        "instance_id": r0.instance_id,
        "zone": r0.zone,
        "gpu_model": r0.gpu_model,
        "reason": reason,
        "gpu_hours": float(gpu_hours),
        "first_hour": iso(rows[0].hour),
        "last_hour": iso(rows[-1].hour),
        "on_demand_usd_per_gpu_hour": money(od),
        "spot_usd_per_gpu_hour": money(spot),
        "savings_usd": money(gpu_hours * (od - spot)),
        "price_source": price_source(inputs.prices, r0.gpu_model or "", r0.region, ("on_demand", "spot")),
    }
