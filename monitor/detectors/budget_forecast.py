"""`budget_forecast`: month-to-date spend plus a run-rate forecast to month end, against each budget.

The month is the invoice month (`monitor.month`): the one holding the last instant covered
(`min(now, window_end)`), and a row counts in it when its `invoice_month` says so, whatever its usage
hour (late end-of-month usage rolls into the next invoice; corrections land where they are invoiced).
The run rate is the mean hourly net spend over the last `run_rate_days` of *settled* data (before
`provisional_from`), because the provisional hours are an undercount while late billing rows land:
they are counted at the larger of what was billed so far and the run rate. Month days before the
window (when the window does not reach back to the 1st) are filled at the run rate and labelled.
Fires when the forecast exceeds the budget; impact = forecast overrun.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor import month
from monitor.detectors.base import Detector, DetectorConfig, fmt_usd, iso, money, q6, register
from monitor.detectors.costs import Costs
from monitor.detectors.inputs import BudgetSpec, CostHour, DetectorInputs
from monitor.model import Finding, Scope, fingerprint

__all__ = ["BudgetForecast", "BudgetForecastConfig", "RunRate", "month_bounds", "run_rate"]

_HOUR = timedelta(hours=1)


class BudgetForecastConfig(DetectorConfig):
    """`run_rate_days`: how many recent settled days set the run rate. `min_impact_usd`: the smallest
    forecast overrun worth a finding."""

    min_impact_usd: Decimal = Field(default=Decimal(50), ge=0)
    run_rate_days: int = Field(default=7, ge=1, le=31)


def month_bounds(at: datetime) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) of the invoice month holding `at`."""
    return month.month_bounds(month.month_at(at))


def _hours(lo: datetime, hi: datetime) -> Decimal:
    return max(Decimal(0), Decimal(str((hi - lo).total_seconds())) / 3600)


def _sum(rows: Sequence[CostHour], lo: datetime | None, hi: datetime) -> Decimal:
    return sum(
        (q6(r.cost) + q6(r.credits) for r in rows if (lo is None or lo <= r.hour) and r.hour < hi), Decimal(0)
    )


@dataclass(frozen=True)
class RunRate:
    """Mean hourly net spend over [start, end): `spend` / `hours` = `hourly`."""

    start: datetime
    end: datetime
    from_provisional: bool
    spend: Decimal
    hours: Decimal

    @property
    def hourly(self) -> Decimal:
        return self.spend / self.hours if self.hours > 0 else Decimal(0)


def run_rate(
    rows: Sequence[CostHour],
    data_from: datetime,
    fallback_from: datetime,
    settled_to: datetime,
    as_of: datetime,
    days: int,
) -> RunRate:
    """The burn rate over the last `days` of *settled* data before `settled_to` (provisional hours are
    an undercount while late rows land), reaching back no further than `data_from`; when no settled
    hour is there, over [`fallback_from`, `as_of`) instead (`from_provisional`). Pure: shared by the
    project budgets (`budget_forecast`) and the job budgets (`job_budget`)."""
    lo = max(data_from, settled_to - timedelta(days=days))
    from_provisional = _hours(lo, settled_to) == 0
    hi = settled_to
    if from_provisional:
        lo, hi = fallback_from, as_of
    return RunRate(lo, hi, from_provisional, _sum(rows, lo, hi), _hours(lo, hi))


def budget_hours(costs: Costs, budget: BudgetSpec) -> list[CostHour]:
    """The budget's spend per hour and invoice month, as `CostHour`s of no project or SKU: all the
    forecast reads (`_sum`, `_in_month`), summed in the engine (sums of micros, so exact). A
    `gross` budget's spend is before credits: they are left out."""
    where: dict[str, Any] = {"project": budget.project} if budget.project is not None else {}
    if budget.label is not None:
        key, value = budget.label
        where["labels"] = costs.labels_where(lambda labels: labels.get(key) == value)
    return [
        CostHour(
            hour=hour, project=budget.project, subcategory="", cost=s.cost,
            credits=Decimal(0) if budget.gross else s.credits,
            invoice_month=invoice, provisional=s.provisional,
        )
        for (hour, invoice), s in costs.sums(("hour", "invoice_month"), **where).items()
    ]  # fmt: skip


def _in_month(rows: Sequence[CostHour], m: str) -> list[CostHour]:
    return [r for r in rows if month.row_month(r.invoice_month, r.hour) == m]


@register("budget_forecast")
class BudgetForecast(Detector):
    Config = BudgetForecastConfig
    config: BudgetForecastConfig
    month_to_date = True

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        as_of = min(now, inputs.window_end)
        if as_of <= inputs.window_start:
            return []
        findings = []
        for budget in sorted(inputs.budgets, key=lambda b: b.name):
            if (f := self._budget(budget, budget_hours(inputs.hourly, budget), inputs, as_of)) is not None:
                findings.append(f)
        return findings

    def forecast(self, rows: Sequence[CostHour], inputs: DetectorInputs, as_of: datetime) -> dict[str, Any]:
        """The forecast and its parts, as numbers a reader can add up."""
        m = month.current_month(as_of)
        m_start, m_end = month.month_bounds(m)
        billed = _in_month(rows, m)  # what this invoice holds, whenever the usage was
        seen_from = max(m_start, inputs.window_start)
        # the run rate ends where settled data ends, not at `prov`: early in a month `prov` is raised to
        # the month start, and last month's provisional hours (an undercount) would set the rate
        settled_to = min(inputs.provisional_from, as_of)
        prov = min(max(inputs.provisional_from, seen_from), as_of)
        rr = run_rate(rows, inputs.window_start, seen_from, settled_to, as_of, self.config.run_rate_days)
        rr_lo, rr_hi, rr_from_provisional, rate = rr.start, rr.end, rr.from_provisional, rr.hourly
        settled = q6(_sum(billed, None, prov))
        prov_billed = q6(_sum(billed, prov, as_of))
        prov_counted = q6(max(prov_billed, rate * _hours(prov, as_of)))
        before = q6(rate * _hours(m_start, seen_from))
        rest = q6(rate * _hours(as_of, m_end))
        return {
            "month": month.month_label(m),
            "as_of": iso(as_of),
            "settled_usd": settled,
            "provisional_billed_usd": prov_billed,
            "provisional_counted_usd": prov_counted,
            "before_window_estimate_usd": before,
            "rest_of_month_usd": rest,
            "month_to_date_usd": settled + prov_billed,
            "forecast_usd": settled + prov_counted + before + rest,
            "daily_run_rate_usd": q6(rate * 24),
            "run_rate_from": iso(rr_lo),
            "run_rate_to": iso(rr_hi),
            "run_rate_from_provisional": rr_from_provisional,
            "hours_left": float(_hours(as_of, m_end)),
        }

    def _budget(
        self, budget: BudgetSpec, rows: Sequence[CostHour], inputs: DetectorInputs, as_of: datetime
    ) -> Finding | None:
        fc = self.forecast(rows, inputs, as_of)
        forecast: Decimal = fc["forecast_usd"]
        mtd: Decimal = fc["month_to_date_usd"]
        impact = q6(forecast - budget.amount)
        if not self.keep(impact):
            return None
        labels = {budget.label[0]: budget.label[1]} if budget.label else {}
        scope = Scope(project=budget.project, labels=labels)
        target = budget.project or (
            f"{budget.label[0]}={budget.label[1]}" if budget.label else "all projects"
        )
        scoped = f"{target}, before credits" if budget.gross else target
        over_now = mtd > budget.amount
        summary = (
            f'Budget "{budget.name}" ({scoped}) is {fmt_usd(budget.amount)} for {fc["month"]}; '
            f"spend so far is {fmt_usd(mtd)} and at {fmt_usd(fc['daily_run_rate_usd'])}/day the month "
            f"ends near {fmt_usd(forecast)}, {fmt_usd(impact)} over."
        )
        if over_now:
            summary += " The budget is already exceeded."
        # each estimate with its figure, so that spend so far + the estimates + the rest of the month
        # at the run rate add up to the forecast (a reader could not find $1,320.48 of it)
        if fc["provisional_counted_usd"] != fc["provisional_billed_usd"]:
            summary += (
                " Recent days are counted at the run rate while their billing is still arriving:"
                f" {fmt_usd(fc['provisional_counted_usd'])} where {fmt_usd(fc['provisional_billed_usd'])}"
                " is billed so far."
            )
        if fc["before_window_estimate_usd"]:
            summary += (
                " Days of the month before the analysed window are estimated at the run rate:"
                f" {fmt_usd(fc['before_window_estimate_usd'])}."
            )
        evidence = {k: (money(v) if isinstance(v, Decimal) else v) for k, v in fc.items()}
        evidence |= {"budget": budget.name, "budget_usd": money(budget.amount), "overrun_usd": money(impact)}
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=f'Budget "{budget.name}" forecast {fmt_usd(forecast)} vs {fmt_usd(budget.amount)}',
            summary=summary,
            impact_usd=impact,
            window_start=max(month.month_bounds(month.current_month(as_of))[0], inputs.window_start),
            window_end=as_of,
            scope=scope,
            evidence=evidence,
            recommendation=(
                f"Review the biggest costs of {target} this month (see the attribution and the other "
                "findings); stop idle resources, or raise the budget if the spend is planned."
            ),
            fingerprint=fingerprint(self.name, scope, budget.name),
            provisional=inputs.provisional_from < as_of,
        )
