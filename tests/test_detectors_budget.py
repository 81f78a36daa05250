"""budget_forecast: month to date + run rate to month end, with provisional undercount handled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitor import month
from monitor.cycle import month_to_date_by_category
from monitor.detectors.budget_forecast import BudgetForecast, BudgetForecastConfig, month_bounds
from monitor.detectors.inputs import BudgetSpec, CostHour, DetectorInputs
from monitor.model import Severity
from tests.test_detectors_common import D, cost, inputs

H = timedelta(hours=1)
PROVISIONAL_FROM = 11 * 24  # window Nov 2 .. Nov 16; the last 3 days are provisional


def fleet(per_hour: str = "100", billed_provisional: str = "50", **kw) -> list:
    """$100/h of settled spend; the provisional days show only $50/h so far (late rows pending)."""
    return [
        cost(h, "compute.gpu", per_hour if h < PROVISIONAL_FROM else billed_provisional, **kw)
        for h in range(14 * 24)
    ]


def evaluate(rows, *budgets: BudgetSpec, cfg=None):
    inp = inputs(rows, provisional_hours=72, budgets=budgets)
    return BudgetForecast(cfg).evaluate(inp, inp.window_end)


@pytest.mark.parametrize(
    ("budget", "impact", "severity"),
    [
        ("60000", D(12100), Severity.CRITICAL),
        ("71500", D(600), Severity.WARNING),
        ("72060", None, None),  # $40 over: below min_impact_usd
        ("80000", None, None),
    ],
)
def test_forecast_against_total_budget(budget, impact, severity) -> None:
    findings = evaluate(fleet(), BudgetSpec(name="total", amount=D(budget)))
    if impact is None:
        assert findings == []
        return
    (f,) = findings
    assert (f.impact_usd, f.severity) == (impact, severity)
    ev = f.evidence
    # 11 settled days, 3 provisional days counted at the run rate (billed: $3,600 so far), the
    # month's first 17 h before the window at the run rate (the billing month starts at midnight
    # Pacific: Nov 1 07:00 UTC) and 15 days 8 h to go (to Dec 1 08:00 UTC)
    assert ev["settled_usd"] == 26400 and ev["provisional_billed_usd"] == 3600
    assert ev["provisional_counted_usd"] == 7200 and ev["before_window_estimate_usd"] == 1700
    assert ev["rest_of_month_usd"] == 36800 and ev["forecast_usd"] == 72100
    assert ev["month_to_date_usd"] == 30000 and ev["daily_run_rate_usd"] == 2400
    assert ev["month"] == "2026-11"
    assert f.provisional
    # spend so far + what the estimates add + the rest of the month = the forecast, all in the text
    assert "spend so far is $30,000.00" in f.summary
    assert "counted at the run rate while their billing is still arriving: $7,200.00 where $3,600.00" in f.summary
    assert "Days of the month before the analysed window are estimated at the run rate: $1,700.00" in f.summary


def test_project_and_label_budgets_only_count_their_rows() -> None:
    rows = fleet(project="a", labels={"team": "llm"}) + fleet(project="b", labels={"team": "vision"})
    findings = evaluate(
        rows,
        BudgetSpec(name="a", amount=D(60000), project="a"),
        BudgetSpec(name="vision", amount=D(70000), label=("team", "vision")),
        BudgetSpec(name="total", amount=D(150000)),
        BudgetSpec(name="b-big", amount=D(100000), project="b"),
    )
    assert {f.evidence["budget"]: f.impact_usd for f in findings} == {
        "a": D(12100),
        "vision": D(2100),
    }
    labels = {f.evidence["budget"]: f.scope.labels for f in findings}
    assert labels == {"a": {}, "vision": {"team": "vision"}}
    assert len({f.fingerprint for f in findings}) == 2


def test_already_over_budget_says_so() -> None:
    (f,) = evaluate(fleet(), BudgetSpec(name="total", amount=D(20000)))
    assert "already exceeded" in f.summary


def test_credits_larger_than_cost_lower_the_forecast() -> None:
    rows = [*fleet(), cost(5 * 24, "other", "0", credits="-20000")]  # a one-off promotion credit
    assert evaluate(rows, BudgetSpec(name="total", amount=D(60000))) == []


def test_everything_provisional_uses_what_was_billed() -> None:
    rows = [cost(h, "compute.gpu", "100") for h in range(48)]
    inp = inputs(rows, days=2, provisional_hours=48, budgets=(BudgetSpec(name="t", amount=D(50000)),))
    (f,) = BudgetForecast().evaluate(inp, inp.window_end)
    assert f.evidence["run_rate_from_provisional"] is True
    assert f.evidence["forecast_usd"] == 72100  # Nov 1 from 07:00 UTC + 2 seen + 27 d 8 h to go


def test_month_bounds() -> None:
    """Billing months start at midnight US Pacific time (PST, UTC-8, in December)."""
    assert month_bounds(datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        datetime(2026, 12, 1, 8, tzinfo=UTC),
        datetime(2027, 1, 1, 8, tzinfo=UTC),
    )
    assert month_bounds(datetime(2027, 1, 1, 7, 59, tzinfo=UTC))[0] == datetime(2026, 12, 1, 8, tzinfo=UTC)


def test_run_rate_days_is_honoured() -> None:
    rows = [cost(h, "compute.gpu", "100" if h < 10 * 24 else "300") for h in range(11 * 24)]
    inp = inputs(rows, days=11, budgets=(BudgetSpec(name="t", amount=D(1)),))
    (one,) = BudgetForecast(BudgetForecastConfig(run_rate_days=1)).evaluate(inp, inp.window_end)
    (seven,) = BudgetForecast().evaluate(inp, inp.window_end)
    assert one.evidence["daily_run_rate_usd"] == 7200
    assert seven.evidence["daily_run_rate_usd"] == round((6 * 2400 + 7200) / 7, 6)


def _late(hour: datetime, amount: str, invoice_month: str, **kw) -> CostHour:
    return CostHour(
        hour=hour,
        project="ml-prod",
        subcategory="compute.gpu",
        cost=D(amount),
        invoice_month=invoice_month,
        **kw,
    )


def test_rows_count_in_their_invoice_month_not_their_usage_month() -> None:
    """Steady $100/h of November, plus two rows whose usage month is not their invoice month:
    usage at Oct 31 20:00 UTC reported late and invoiced in November ($3,000), and usage at
    Nov 1 02:00 UTC (still Oct 31 in Pacific time) invoiced in October ($1,000)."""
    nov_start = datetime(2026, 11, 1, 7, tzinfo=UTC)  # midnight PDT
    end = datetime(2026, 11, 16, tzinfo=UTC)
    rows = [_late(nov_start + h * H, "100", "202611") for h in range(int((end - nov_start) / H))]
    rows += [_late(datetime(2026, 10, 31, 20, tzinfo=UTC), "3000", "202611")]
    rows += [_late(datetime(2026, 11, 1, 2, tzinfo=UTC), "1000", "202610")]
    inp = DetectorInputs(
        window_start=datetime(2026, 10, 25, tzinfo=UTC),
        window_end=end,
        provisional_from=end,
        hourly=tuple(rows),
        budgets=(BudgetSpec(name="total", amount=D(1)),),
    )
    (f,) = BudgetForecast().evaluate(inp, end)
    assert f.evidence["month"] == "2026-11"
    assert f.evidence["month_to_date_usd"] == 353 * 100 + 3000
    assert f.evidence["before_window_estimate_usd"] == 0
    # the same month to date for /metrics (per category, as the daemon exports it)
    assert month_to_date_by_category(inp, end) == {"compute": D(353 * 100 + 3000)}


@pytest.mark.parametrize(
    ("as_of", "provisional_billed"),
    [
        (datetime(2026, 12, 1, 9, tzinfo=UTC), 50),  # 01:00 PST on Dec 1: one hour of December
        (datetime(2026, 12, 2, 12, tzinfo=UTC), 28 * 50),
        (datetime(2026, 12, 3, 12, tzinfo=UTC), 52 * 50),
    ],
)
def test_run_rate_early_in_a_month_reads_only_settled_days(as_of, provisional_billed) -> None:
    """A steady $100/h fleet whose last 3 days (provisional) are billed at $50/h so far. In the first
    days of December the provisional days reach back into November: they are not settled because
    they belong to last month, so the run rate stays $2,400/day and December ends near $74,400."""
    provisional_from = datetime(as_of.year, as_of.month, as_of.day, tzinfo=UTC) - timedelta(days=2)
    start = as_of - timedelta(days=14)
    rows = [
        CostHour(
            hour=t, project="ml-prod", subcategory="compute.gpu", cost=D(100 if t < provisional_from else 50),
            invoice_month=month.month_at(t),
        )
        for t in (start + h * H for h in range(int((as_of - start) / H)))
    ]  # fmt: skip
    inp = DetectorInputs(
        window_start=start,
        window_end=as_of,
        provisional_from=provisional_from,
        hourly=tuple(rows),
        budgets=(BudgetSpec(name="total", amount=D(1)),),
    )
    (f,) = BudgetForecast().evaluate(inp, as_of)
    ev = f.evidence
    assert ev["month"] == "2026-12"
    assert ev["run_rate_to"] == provisional_from.isoformat().replace("+00:00", "Z")
    assert ev["daily_run_rate_usd"] == 2400 and ev["forecast_usd"] == 74400
    # every hour of December so far is provisional: counted at the run rate, billed at half of it
    december_hours = (as_of - month_bounds(as_of)[0]) / H
    assert ev["settled_usd"] == 0 and ev["provisional_billed_usd"] == provisional_billed
    assert ev["provisional_counted_usd"] == 100 * december_hours
    assert ev["provisional_counted_usd"] + ev["rest_of_month_usd"] == ev["forecast_usd"]


def test_a_budget_before_credits_counts_cost_alone() -> None:
    """A Budget API budget that excludes all credits measures spend before them: $100/h of cost
    with $40/h of CUD credits is $72,100 for November (721 hours), not the $43,260 paid."""
    rows = [cost(h, "compute.gpu", "100", credits="-40") for h in range(14 * 24)]
    gross, net = evaluate(
        rows, BudgetSpec(name="net", amount=D(1)), BudgetSpec(name="gross", amount=D(1), gross=True)
    )
    assert (net.evidence["forecast_usd"], gross.evidence["forecast_usd"]) == (43260, 72100)
    assert '"gross" (all projects, before credits)' in gross.summary
