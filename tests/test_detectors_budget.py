"""budget_forecast: month to date + run rate to month end, with provisional undercount handled."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitor.detectors.budget_forecast import BudgetForecast, BudgetForecastConfig, month_bounds
from monitor.detectors.inputs import BudgetSpec
from monitor.model import Severity
from tests.test_detectors_common import D, cost, inputs

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
        ("60000", D(12000), Severity.CRITICAL),
        ("71500", D(500), Severity.WARNING),
        ("71960", None, None),  # $40 over: below min_impact_usd
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
    # 11 settled days, 3 provisional days counted at the run rate (billed: $3,600 so far),
    # Nov 1 (before the window) at the run rate, and 15 days to go: 30 days x $2,400
    assert ev["settled_usd"] == 26400 and ev["provisional_billed_usd"] == 3600
    assert ev["provisional_counted_usd"] == 7200 and ev["before_window_estimate_usd"] == 2400
    assert ev["rest_of_month_usd"] == 36000 and ev["forecast_usd"] == 72000
    assert ev["month_to_date_usd"] == 30000 and ev["daily_run_rate_usd"] == 2400
    assert ev["month"] == "2026-11"
    assert f.provisional
    assert "Recent days are counted at the run rate" in f.summary
    assert "Days of the month before the analysed window are estimated" in f.summary


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
        "a": D(12000),
        "vision": D(2000),
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
    assert f.evidence["forecast_usd"] == 72000  # Nov 1 + 2 seen + 27 to go, at $2,400/day


def test_month_bounds() -> None:
    assert month_bounds(datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )


def test_run_rate_days_is_honoured() -> None:
    rows = [cost(h, "compute.gpu", "100" if h < 10 * 24 else "300") for h in range(11 * 24)]
    inp = inputs(rows, days=11, budgets=(BudgetSpec(name="t", amount=D(1)),))
    (one,) = BudgetForecast(BudgetForecastConfig(run_rate_days=1)).evaluate(inp, inp.window_end)
    (seven,) = BudgetForecast().evaluate(inp, inp.window_end)
    assert one.evidence["daily_run_rate_usd"] == 7200
    assert seven.evidence["daily_run_rate_usd"] == round((6 * 2400 + 7200) / 7, 6)
