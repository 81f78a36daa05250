"""spend_anomaly: robust daily baselines, both thresholds, new projects, zero days, provisional days."""

from __future__ import annotations

from decimal import Decimal

import pytest

from monitor.detectors.spend_anomaly import SpendAnomaly, SpendAnomalyConfig
from tests.test_detectors_common import D, cost, inputs


def daily(amounts: list[str | None], project: str = "ml-prod", sub: str = "compute.gpu", **kw) -> list:
    """One row per hour; each day's total is amounts[d] (None = no rows that day, a data gap)."""
    rows = []
    for d, amt in enumerate(amounts):
        if amt is None:
            continue
        per_hour = (D(amt) / 24).quantize(D("0.000001"))
        last = D(amt) - per_hour * 23  # the day adds up exactly
        rows += [
            cost(d * 24 + h, sub, str(per_hour if h < 23 else last), project=project, **kw) for h in range(24)
        ]
    return rows


def evaluate(rows, cfg=None, days=14, **kw):
    inp = inputs(rows, days=days, **kw)
    return SpendAnomaly(cfg).evaluate(inp, inp.window_end)


STEADY = ["1000", "1040", "980", "1010", "990", "1020", "1000", "1005", "995", "1030"]

CASES = [
    # daily spend, expected impact (None = no finding)
    ([*STEADY, "1000", "1010", "990", "1000"], None),
    ([*STEADY, "2500", "1010", "990", "1000"], D("1497.5")),  # median of the previous 10 days: 1002.5
    ([*STEADY, "1400", "1000", "990", "1000"], None),  # +40%: below the relative threshold
    (["100", "104", "98", "101", "99", "102", "100", "101", "99", "103", "190", "100", "100", "100"], None),
    # +90% but only +$90: below the absolute threshold
    ([*STEADY, "2500", "2500", "2500", "2500"], D("5990")),  # a jump that persists keeps counting
    ([*STEADY[:7], "0", *STEADY[7:], "1000", "1000", "1000"], None),  # a day of zero spend
    ([*STEADY[:7], None, *STEADY[7:], "1000", "1000", "1000"], None),  # a day with no rows (gap)
]


@pytest.mark.parametrize(("amounts", "impact"), CASES)
def test_project_daily_spend(amounts, impact) -> None:
    findings = [f for f in evaluate(daily(amounts)) if f.evidence["category"] is None]
    if impact is None:
        assert findings == []
        return
    (f,) = findings
    assert f.impact_usd == impact
    assert sum(D(str(d["excess_usd"])) for d in f.evidence["days"]) == f.impact_usd
    assert f.scope.project == "ml-prod"


def test_one_jump_is_one_finding_naming_its_driver() -> None:
    rows = daily([*STEADY, "1000", "1000", "1000", "1000"])
    rows += daily(["5"] * 10 + ["900", "5", "5", "5"], sub="network.inter_zone")
    findings = evaluate(rows)
    assert len(findings) == 1  # the project finding; no separate network finding for the same day
    (f,) = findings
    assert f.evidence["drivers"][0]["subcategory"] == "network.inter_zone"
    assert "network.inter_zone +$895.00" in f.recommendation
    assert f.evidence["days"][0]["date"] == "2026-11-12"


def test_category_jump_hidden_inside_a_big_project() -> None:
    rows = daily(["20000", "20100", "19900", "20050", "19950"] * 3)[: 14 * 24]
    rows += daily(["10"] * 10 + ["600", "10", "10", "10"], sub="network.inter_region")
    (f,) = evaluate(rows)
    assert f.evidence["category"] == "network"
    assert f.impact_usd == D(590)
    assert f.title == "Network spend in ml-prod jumped: $590.00 above baseline"
    other = evaluate(rows, SpendAnomalyConfig(per_category=False))
    assert other == []


def test_new_project_with_no_history_is_not_anomalous() -> None:
    rows = daily(STEADY + ["1000"] * 4)
    rows += daily([None] * 10 + ["5000", "5000", "5000", "5000"], project="new-proj")
    assert [f.scope.project for f in evaluate(rows)] == []


def test_new_project_becomes_judgeable_after_min_history_days() -> None:
    rows = daily(
        [None, None, None, "100", "100", "100", "100", "100", "100", "100", "900", "100", "100", "100"]
    )
    (f,) = evaluate(rows)
    assert f.impact_usd == 800


def test_provisional_days_are_labelled() -> None:
    rows = daily([*STEADY, "1000", "1000", "1000", "3000"])
    (f,) = evaluate(rows, provisional_hours=48)
    assert f.provisional
    assert f.evidence["days"][0]["provisional"] is True
    assert "Provisional: billing for 2026-11-15 may still grow." in f.summary
    (g,) = evaluate(rows, provisional_hours=0)
    assert not g.provisional and g.fingerprint == f.fingerprint


def test_credits_larger_than_cost_net_and_gross() -> None:
    rows = daily([*STEADY, "1000", "1000", "1000", "1000"])
    # day 12: a $2,000 burst fully covered by a promotion credit of $2,500
    rows += [cost(12 * 24, "compute.gpu", "2000", credits="-2500")]
    assert evaluate(rows) == []  # net spend fell, nothing paid above normal
    (f,) = evaluate(rows, SpendAnomalyConfig(amount="gross"))
    assert f.impact_usd == D(2000)


def test_same_weekday_baseline_when_history_allows() -> None:
    # 5 weeks: weekdays $1,000, weekends $100; a Saturday at $1,000 is an anomaly only by weekday
    week = ["1000"] * 5 + ["100", "100"]
    amounts = week * 4 + ["1000"] * 5 + ["1000", "100"]
    rows = daily(amounts)
    (f,) = evaluate(rows, days=35)
    assert f.evidence["days"][0]["date"] == "2026-12-05"  # a Saturday
    assert f.evidence["days"][0]["baseline"] == "same_weekday"
    assert f.impact_usd == 900
    assert evaluate(rows, SpendAnomalyConfig(baseline="all_days"), days=35) == []


def test_partial_last_day_is_compared_pro_rata() -> None:
    rows = daily([*STEADY, "1000", "1000", "1000"])
    rows += [cost(13 * 24 + h, "compute.gpu", "125") for h in range(12)]  # $1,500 in 12 hours
    inp = inputs(rows, days=14)
    (f,) = SpendAnomaly().evaluate(inp, inp.window_end - 12 * (inp.window_end - inp.window_start) / (14 * 24))
    day = f.evidence["days"][0]
    assert day["hours_covered"] == 12 and day["baseline_usd"] == 500.0
    assert f.impact_usd == Decimal(1000)
