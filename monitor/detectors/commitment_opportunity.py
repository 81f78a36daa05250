"""`commitment_opportunity`: the GPU fleet that ran on demand in (almost) every hour, priced as a
1- or 3-year commitment (per whole VM when the machine type's prices are known, else per GPU; see
`monitor.detectors.opportunities` for what both opportunity detectors share)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from monitor.detectors.base import ONE_HOUR, Detector, fmt_usd, money, q6, register
from monitor.detectors.inputs import DetectorInputs
from monitor.detectors.opportunities import (
    OnDemandHours,
    OpportunityConfig,
    capped_severity,
    commitment_saving,
    committed_hours,
    machine_price_source,
    machine_prices,
    on_demand_hours,
    price_source,
    short_of,
    split_by_machine_price,
    steady_count,
    yearly_saving,
)
from monitor.model import Finding, Scope, counted, fingerprint

__all__ = ["CommitmentOpportunity", "CommitmentOpportunityConfig"]


class CommitmentOpportunityConfig(OpportunityConfig):
    """`term`: the commitment priced ("commit_1y" or "commit_3y"). `steady_percentile`: the hourly
    on-demand GPU count reached in all but this percent of hours counts as steady. `min_days`: the
    window must be at least this long to call anything steady."""

    term: Literal["commit_1y", "commit_3y"] = "commit_1y"
    steady_percentile: float = Field(default=10, ge=0, le=50)
    min_days: int = Field(default=7, ge=1)


def _data_start(inputs: DetectorInputs, end: datetime) -> datetime:
    """Where the window's billing data begins: hours before the export's first row are not hours
    the fleet stood still. Read as zero, a window reaching a day before seed 11's export
    counted 4 committed VMs x 24 h as unused ($5,892.83 off a $36,430.90 saving)."""
    first = inputs.hourly.sums((), start=inputs.window_start, end=end).get(())
    return max(inputs.window_start, first.first) if first is not None else inputs.window_start


def _span(hours: int) -> str:
    """The period a saving is stated over: "14 days", "13 days 18 hours", "20 hours" (a 7.5-day
    window's saving read "per 7 days", a weekly rate about 7% too high; the demo's first screen
    then read "save $35,129.80 per 324 hours")."""
    days, rest = divmod(hours, 24)
    parts = [counted(days, "day")] if days else []
    return " ".join(parts + ([counted(rest, "hour")] if rest or not days else []))


@register("commitment_opportunity")
class CommitmentOpportunity(Detector):
    Config = CommitmentOpportunityConfig
    config: CommitmentOpportunityConfig
    advice = True

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        end = min(inputs.window_end, now)
        begin = _data_start(inputs, end)
        hours = int((end - begin).total_seconds() // 3600)
        if inputs.prices is None or hours < self.config.min_days * 24:
            return []
        table = on_demand_hours(inputs, now)
        c = table.columns
        by_machine, by_gpu = split_by_machine_price(table, inputs.prices, ("on_demand", self.config.term))
        groups: dict[tuple[str | None, str | None, str], dict[datetime, Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        project, region, model, hour = c["project"], c["region"], c["gpu_model"], c["hour"]
        od = c["on_demand_gpu_hours"]
        for i in by_gpu:
            groups[(project[i], region[i], model[i] or "")][hour[i]] += od[i]
        grid = [begin + i * ONE_HOUR for i in range(hours)]
        findings = []
        for key in sorted(groups, key=str):
            counts = [groups[key].get(h, Decimal(0)) for h in grid]
            steady = steady_count(counts, self.config.steady_percentile)
            if steady >= 1 and (f := self._finding(key, steady, counts, inputs, grid)) is not None:
                findings.append(f)
        vms: dict[tuple[str | None, str | None, str], list[int]] = defaultdict(list)
        machine = c["machine_type"]
        for i in by_machine:
            vms[(project[i], region[i], machine[i] or "")].append(i)
        for key in sorted(vms, key=str):
            if (f := self._machine_finding(key, table, vms[key], grid, inputs)) is not None:
                findings.append(f)
        return findings

    def _machine_finding(
        self,
        key: tuple[str | None, str | None, str],
        table: OnDemandHours,
        rows: Sequence[int],
        grid: Sequence[datetime],
        inputs: DetectorInputs,
    ) -> Finding | None:
        """One machine type's steady VM count, priced per whole machine (see the module docstring).
        `rows`: its VMs' row numbers in `table`."""
        _, region, machine = key
        assert inputs.prices is not None
        per_hour: dict[datetime, dict[tuple[str | None, str], Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        c = table.columns
        hour, node_of, od_machine = c["hour"], c["node"], c["on_demand_machine_hours"]
        first: dict[tuple[str | None, str], int] = {}
        for i in sorted(rows, key=hour.__getitem__):
            node = node_of[i]
            per_hour[hour[i]][node] += od_machine[i]
            first.setdefault(node, i)
        counts = [sum(per_hour[h].values(), Decimal(0)) if h in per_hour else Decimal(0) for h in grid]
        steady = steady_count(counts, self.config.steady_percentile)
        found = machine_prices(inputs.prices, machine, region, ("on_demand", self.config.term))
        if steady < 1 or found is None or found[self.config.term] >= found["on_demand"]:
            return None
        od, price = found["on_demand"], found[self.config.term]
        covered = committed_hours(per_hour, grid, steady)
        ran: dict[tuple[str | None, str], Decimal] = defaultdict(Decimal)  # per VM, summed by hour
        for at in per_hour.values():
            for ik, part in at.items():
                ran[ik] += part
        lines = [
            {
                "instance": c["instance"][first[ik]] or c["instance_id"][first[ik]],
                "instance_id": c["instance_id"][first[ik]],
                "zone": c["zone"][first[ik]],
                "on_demand_machine_hours": float(ran[ik]),
                "committed_machine_hours": float(covered[ik]),
                "savings_usd": money(covered[ik] * (od - price)),
            }
            for ik in sorted(covered, key=str)
            if covered[ik] > 0
        ]
        unused, impact = commitment_saving(covered.values(), counts, steady, od, price)
        if not self.keep(impact):
            return None
        sample = (c["gpu_model"][rows[0]], c["gpus"][rows[0]])
        return self._machine_report(key, steady, counts, lines, unused, impact, sample, inputs, grid)

    def _machine_report(
        self,
        key: tuple[str | None, str | None, str],
        steady: int,
        counts: Sequence[Decimal],
        lines: list[dict[str, Any]],
        unused: Decimal,
        impact: Decimal,
        sample: tuple[str, int],
        inputs: DetectorInputs,
        grid: Sequence[datetime],
    ) -> Finding:
        """`sample`: the GPU model and count of the machine type's first row."""
        project, region, machine = key
        hours = len(grid)
        assert inputs.prices is not None
        terms = machine_prices(inputs.prices, machine, region, ("on_demand", "commit_1y", "commit_3y"))
        terms = terms or machine_prices(inputs.prices, machine, region, ("on_demand", self.config.term)) or {}
        od, price = terms["on_demand"], terms[self.config.term]
        model, gpus = sample
        scope = Scope(project=project, region=region)
        years = "1-year" if self.config.term == "commit_1y" else "3-year"
        source = machine_price_source(inputs.prices, machine, region, ("on_demand", self.config.term))
        per_term = {t: p for t, p in terms.items() if t != "on_demand"}
        used = steady * hours - unused
        year = {t: yearly_saving(used, unused, hours, od, p) for t, p in per_term.items()}
        dip = (
            f" (after {fmt_usd(q6(unused * price))} of committed {machine} hours no VM used)"
            if unused > 0
            else ""
        )
        return Finding(
            kind=self.name,
            severity=capped_severity(self, impact),
            title=f"Commit {steady}× {machine} in {region} ({project}): save {fmt_usd(impact)} over {_span(hours)}",
            summary=(
                f"{project} ran at least {steady} {machine} VMs ({gpus} {model} GPUs each) on demand in "
                f"{region} in {100 - self.config.steady_percentile:g}% of the {hours} hours analysed. "
                f"Priced per whole VM (vCPUs, RAM, GPUs, bundled Local SSD): a {years} commitment at "
                f"{fmt_usd(price)}/h instead of {fmt_usd(od)}/h on demand would have saved "
                f"{fmt_usd(impact)} in this window{dip}, about "
                f"{fmt_usd(year[self.config.term])} a year. Prices: {source}."
            ),
            impact_usd=impact,
            window_start=grid[0],  # the hours analysed: from where the window's billing begins
            window_end=grid[-1] + ONE_HOUR,
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
                "hours_at_or_above_steady": sum(1 for c in counts if not short_of(c, steady)),
                "max_machines": float(round(max(counts), 3)),  # a micro-rounded share: 7.99998857 reads 8.0
                "mean_machines": float(round(sum(counts, Decimal(0)) / len(counts), 3)),
                "on_demand_usd_per_machine_hour": money(od),
                "term": self.config.term,
                "term_usd_per_machine_hour": {t: money(p) for t, p in per_term.items()},
                "instances": lines,
                "unused_commitment": {"machine_hours": float(unused), "usd": money(-unused * price)},
                "savings_usd": money(impact),
                "savings_per_year_usd": {t: money(year[t]) for t, p in per_term.items() if p < od},
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
        grid: Sequence[datetime],
    ) -> Finding | None:
        project, region, model = key
        hours = len(grid)
        assert inputs.prices is not None
        od = inputs.prices.gpu_hourly(model, region, "on_demand")
        price = inputs.prices.gpu_hourly(model, region, self.config.term)
        if od is None or price is None or price >= od:
            return None
        used = sum((min(c, Decimal(steady)) for c in counts), Decimal(0))
        unused, impact = commitment_saving([used], counts, steady, od, price)
        if not self.keep(impact):
            return None
        terms = {
            t: p
            for t in ("commit_1y", "commit_3y")
            if (p := inputs.prices.gpu_hourly(model, region, t)) is not None
        }
        year = {t: yearly_saving(used, unused, hours, od, p) for t, p in terms.items()}
        dip = (
            f" (after {fmt_usd(q6(unused * price))} of committed {model} GPU-hours no VM used)"
            if unused > 0
            else ""
        )
        scope = Scope(project=project, region=region)
        years = "1-year" if self.config.term == "commit_1y" else "3-year"
        source = price_source(inputs.prices, model, region, ("on_demand", self.config.term))
        return Finding(
            kind=self.name,
            severity=capped_severity(self, impact),
            title=f"Commit {steady}× {model} in {region} ({project}): save {fmt_usd(impact)} over {_span(hours)}",
            summary=(
                f"{project} ran at least {steady} {model} GPUs on demand in {region} in "
                f"{100 - self.config.steady_percentile:g}% of the {hours} hours analysed. A {years} "
                f"commitment at {fmt_usd(price)}/GPU-h instead of {fmt_usd(od)} would have saved "
                f"{fmt_usd(impact)} in this window{dip}, about {fmt_usd(year[self.config.term])} a year. "
                f"Prices: {source}."
            ),
            impact_usd=impact,
            window_start=grid[0],  # the hours analysed: from where the window's billing begins
            window_end=grid[-1] + ONE_HOUR,
            scope=scope,
            evidence={
                "priced_per": "gpu",
                "gpu_model": model,
                "steady_gpus": steady,
                "steady_percentile": self.config.steady_percentile,
                "hours": hours,
                "hours_at_or_above_steady": sum(1 for c in counts if not short_of(c, steady)),
                "max_gpus": float(round(max(counts), 3)),  # a micro-rounded share: 7.99998857 reads 8.0
                "mean_gpus": float(round(sum(counts, Decimal(0)) / len(counts), 3)),
                "on_demand_usd_per_gpu_hour": money(od),
                "term": self.config.term,
                "term_usd_per_gpu_hour": {t: money(p) for t, p in terms.items()},
                "committed_gpu_hours": float(used),
                "unused_commitment": {"gpu_hours": float(unused), "usd": money(-unused * price)},
                "savings_usd": money(impact),
                "savings_per_year_usd": {t: money(year[t]) for t, p in terms.items() if p < od},
                "price_source": source,
            },
            recommendation=(
                f"Buy a {years} resource commitment for {steady} {model} GPUs in {region} (with a "
                "matching reservation) for the steady part of this fleet; keep bursts on demand or Spot."
            ),
            fingerprint=fingerprint(self.name, scope, model),
        )
