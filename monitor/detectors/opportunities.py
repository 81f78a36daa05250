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

Priced per whole machine when it can be: an accelerator-optimized VM (a3-highgpu-8g, a2-highgpu-1g,
g2-standard-8...) is bought, committed and preempted as a whole, its vCPUs, RAM and Local SSD with
its GPUs, so when the row's `machine_type` is known and the lookup has that type's prices
(`machine_hourly`, optional: the bundled snapshot has them, the Catalog API book and other lookups
do not), the saving is machine-hours x (on-demand - committed or Spot) machine price, and the
commitment counts steady VMs per project, region and machine type instead of GPUs. The evidence
then lists each VM (its committed or Spot machine-hours and its saving) and, for a commitment, the
committed machine-hours no VM used (paid at the committed price in the hours the fleet dipped below
the steady count), so the lines sum exactly to the impact. Otherwise the per-GPU path above applies.

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
    "machine_price_source",
    "machine_prices",
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


def machine_prices(
    prices: PriceLookup, machine_type: str | None, region: str | None, kinds: Sequence[str]
) -> dict[str, Decimal] | None:
    """Whole-machine prices of `kinds` per hour, or None unless the lookup has every one of them
    (`machine_hourly` is optional: a lookup without it prices per GPU)."""
    lookup = getattr(prices, "machine_hourly", None)
    if lookup is None or not machine_type:
        return None
    found = {k: lookup(machine_type, region, k) for k in kinds}
    return None if any(v is None for v in found.values()) else found


def machine_price_source(
    prices: PriceLookup, machine_type: str, region: str | None, kinds: Sequence[str]
) -> str:
    """Like `price_source`, for the whole-machine prices of `machine_type` (`machine_price_source`)."""
    report = getattr(prices, "machine_price_source", None)
    found = [report(machine_type, region, k) if report is not None else None for k in kinds]
    return "; ".join(dict.fromkeys(f or "price source not reported" for f in found))


def _split_by_machine_price(
    rows: Sequence[GpuHour], prices: PriceLookup, kinds: Sequence[str]
) -> tuple[list[GpuHour], list[GpuHour]]:
    """(rows of VMs whose machine type has prices of `kinds` in their region, the other rows)."""
    known: dict[tuple[str | None, str | None], bool] = {}
    machine: list[GpuHour] = []
    per_gpu: list[GpuHour] = []
    for r in rows:
        key = (r.machine_type, r.region)
        if key not in known:
            known[key] = machine_prices(prices, r.machine_type, r.region, kinds) is not None
        (machine if known[key] and r.gpus > 0 else per_gpu).append(r)
    return machine, per_gpu


def _machine_hours(row: GpuHour) -> Decimal:
    """The part of the hour the VM ran: its GPU-hours over its GPUs (1 for a full hour)."""
    return row.gpu_hours / row.gpus


def _committed_hours(
    per_hour: dict[datetime, dict[tuple[str | None, str], Decimal]], grid: Sequence[datetime], steady: int
) -> dict[tuple[str | None, str], Decimal]:
    """Machine-hours each VM would have run on the `steady` committed machines: every hour, the
    commitment covers up to `steady` machine-hours, given to the VMs of that hour in a fixed order
    (by instance key), so the split is reproducible and never exceeds what ran or what was bought."""
    covered: dict[tuple[str | None, str], Decimal] = defaultdict(Decimal)
    for h in grid:
        left = Decimal(steady)
        for ik in sorted(per_hour.get(h, {}), key=str):
            take = min(per_hour[h][ik], left)
            covered[ik] += take
            left -= take
    return covered


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
        by_machine, by_gpu = _split_by_machine_price(
            _on_demand(inputs, now), inputs.prices, ("on_demand", self.config.term)
        )
        groups: dict[tuple[str | None, str | None, str], dict[datetime, Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        for r in by_gpu:
            groups[(r.project, r.region, r.gpu_model or "")][r.hour] += r.gpu_hours
        grid = [inputs.window_start + i * ONE_HOUR for i in range(hours)]
        findings = []
        for key in sorted(groups, key=str):
            counts = [groups[key].get(h, Decimal(0)) for h in grid]
            steady = int(_percentile(counts, self.config.steady_percentile))
            if steady >= 1 and (f := self._finding(key, steady, counts, inputs, hours)) is not None:
                findings.append(f)
        vms: dict[tuple[str | None, str | None, str], list[GpuHour]] = defaultdict(list)
        for r in by_machine:
            vms[(r.project, r.region, r.machine_type or "")].append(r)
        for key in sorted(vms, key=str):
            if (f := self._machine_finding(key, vms[key], grid, inputs)) is not None:
                findings.append(f)
        return findings

    def _machine_finding(
        self,
        key: tuple[str | None, str | None, str],
        rows: Sequence[GpuHour],
        grid: Sequence[datetime],
        inputs: DetectorInputs,
    ) -> Finding | None:
        """One machine type's steady VM count, priced per whole machine (see the module docstring)."""
        _, region, machine = key
        assert inputs.prices is not None
        per_hour: dict[datetime, dict[tuple[str | None, str], Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        first: dict[tuple[str | None, str], GpuHour] = {}
        for r in sorted(rows, key=lambda r: r.hour):
            per_hour[r.hour][instance_key(r)] += _machine_hours(r)
            first.setdefault(instance_key(r), r)
        counts = [sum(per_hour[h].values(), Decimal(0)) if h in per_hour else Decimal(0) for h in grid]
        steady = int(_percentile(counts, self.config.steady_percentile))
        found = machine_prices(inputs.prices, machine, region, ("on_demand", self.config.term))
        if steady < 1 or found is None or found[self.config.term] >= found["on_demand"]:
            return None
        od, price = found["on_demand"], found[self.config.term]
        covered = _committed_hours(per_hour, grid, steady)
        lines = [
            {
                "instance": first[ik].instance or first[ik].instance_id,
                "instance_id": first[ik].instance_id,
                "zone": first[ik].zone,
                "on_demand_machine_hours": float(
                    sum((m.get(ik, Decimal(0)) for m in per_hour.values()), Decimal(0))
                ),
                "committed_machine_hours": float(covered[ik]),
                "savings_usd": money(covered[ik] * (od - price)),
            }
            for ik in sorted(covered, key=str)
            if covered[ik] > 0
        ]
        unused = steady * len(grid) - sum(covered.values(), Decimal(0))
        impact = sum((q6(covered[ik] * (od - price)) for ik in covered), Decimal(0)) - q6(unused * price)
        if not self.keep(impact):
            return None
        return self._machine_report(key, steady, counts, lines, unused, impact, rows[0], inputs, len(grid))

    def _machine_report(
        self,
        key: tuple[str | None, str | None, str],
        steady: int,
        counts: Sequence[Decimal],
        lines: list[dict[str, Any]],
        unused: Decimal,
        impact: Decimal,
        sample: GpuHour,
        inputs: DetectorInputs,
        hours: int,
    ) -> Finding:
        project, region, machine = key
        assert inputs.prices is not None
        terms = machine_prices(inputs.prices, machine, region, ("on_demand", "commit_1y", "commit_3y"))
        terms = terms or machine_prices(inputs.prices, machine, region, ("on_demand", self.config.term)) or {}
        od, price = terms["on_demand"], terms[self.config.term]
        model, gpus = sample.gpu_model, sample.gpus
        scope = Scope(project=project, region=region)
        years = "1-year" if self.config.term == "commit_1y" else "3-year"
        source = machine_price_source(inputs.prices, machine, region, ("on_demand", self.config.term))
        per_term = {t: p for t, p in terms.items() if t != "on_demand"}
        dip = (
            f" (after {fmt_usd(q6(unused * price))} of committed {machine} hours no VM used)"
            if unused > 0
            else ""
        )
        return Finding(
            kind=self.name,
            severity=_capped(self, impact),
            title=f"Commit {steady}× {machine} in {region} ({project}): save {fmt_usd(impact)} per {hours // 24} days",
            summary=(
                f"{project} ran at least {steady} {machine} VMs ({gpus} {model} GPUs each) on demand in "
                f"{region} in {100 - self.config.steady_percentile:g}% of the {hours} hours analysed. "
                f"Priced per whole VM (vCPUs, RAM, GPUs, bundled Local SSD): a {years} commitment at "
                f"{fmt_usd(price)}/h instead of {fmt_usd(od)}/h on demand would have saved "
                f"{fmt_usd(impact)} in this window{dip}, about "
                f"{fmt_usd(steady * _YEAR_HOURS * (od - price))} a year. Prices: {source}."
            ),
            impact_usd=impact,
            window_start=inputs.window_start,
            window_end=inputs.window_start + hours * ONE_HOUR,
            scope=scope,
            evidence={
                "priced_per": "machine",
                "machine_type": machine,
                "gpu_model": model,
                "gpus_per_machine": gpus,
                "steady_machines": steady,
                "steady_gpus": steady * gpus,
                "steady_percentile": self.config.steady_percentile,
                "hours": hours,
                "hours_at_or_above_steady": sum(1 for c in counts if c >= steady),
                "max_machines": float(max(counts)),
                "mean_machines": float(round(sum(counts, Decimal(0)) / len(counts), 3)),
                "on_demand_usd_per_machine_hour": money(od),
                "term": self.config.term,
                "term_usd_per_machine_hour": {t: money(p) for t, p in per_term.items()},
                "instances": lines,
                "unused_commitment": {"machine_hours": float(unused), "usd": -money(unused * price)},
                "savings_usd": money(impact),
                "savings_per_year_usd": {
                    t: money(steady * _YEAR_HOURS * (od - p)) for t, p in per_term.items() if p < od
                },
                "price_source": source,
            },
            recommendation=(
                f"Buy a {years} resource commitment for the vCPUs, memory, {steady * gpus} {model} GPUs "
                f"and Local SSD of {steady} {machine} VMs in {region} (with a matching reservation) for "
                "the steady part of this fleet; keep bursts on demand or Spot."
            ),
            fingerprint=fingerprint(self.name, scope, machine),
        )

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
                "priced_per": "gpu",
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
        machines = sorted({str(e["machine_type"]) for e in lines if e["priced_per"] == "machine"})
        per_vm = f" (priced per whole VM for {', '.join(machines)})" if machines else ""
        return Finding(
            kind=self.name,
            severity=_capped(self, impact),
            title=f"Run restartable GPU work in {project} on Spot: save {fmt_usd(impact)}",
            summary=(
                f"{len(lines)} on-demand GPU instance(s) in {project} ({names}) look restartable and used "
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
    hours = sum((_machine_hours(r) for r in rows), Decimal(0))
    return {
        "instance": r0.instance or r0.instance_id,
        "instance_id": r0.instance_id,
        "zone": r0.zone,
        "gpu_model": r0.gpu_model,
        "reason": reason,
        "gpu_hours": float(sum((r.gpu_hours for r in rows), Decimal(0))),
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
