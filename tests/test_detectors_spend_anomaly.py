"""spend_anomaly: robust daily baselines, both thresholds, new projects, zero days, provisional days."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest

from alerts.console import ConsoleNotifier
from alerts.pipeline import Deps, deliver_outbox, process
from monitor.config import AlertsConfig, SlackConfig
from monitor.detectors import run_in_window
from monitor.detectors.base import fmt_usd
from monitor.detectors.spend_anomaly import SpendAnomaly, SpendAnomalyConfig
from monitor.state.findings import record_findings
from monitor.state.store import SQLiteStore
from tests.test_detectors_common import T0, D, cost, inputs


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


def test_a_window_ending_mid_hour_compares_the_hours_it_sums() -> None:
    """A steady $100/h project judged at 01:30: the last day was summed to 01:30, the 01:00 hour
    with it, against one hour's baseline ("Spend in ml-prod jumped: $100.00"; `gpucost analyze
    --end 2026-12-01T01:30:00Z` on a simulated fleet flagged three steady projects so)."""
    inp = inputs([cost(h, "compute.gpu", "100") for h in range(13 * 24 + 2)])
    assert SpendAnomaly().evaluate(inp, T0 + timedelta(days=13, hours=1, minutes=30)) == []


# -- hourly, recent window ------------------------------------------------------------------------------

LAST = 14 * 24  # the window's end, in hours from T0


def hourly(base: str = "40", step: str = "0", step_hours: int = 0, cycle: bool = False, **kw) -> list:
    """14 days at `base` per hour (optionally a daily cycle: x0.5 at night, x1.5 from 08 to 20 UTC);
    the last `step_hours` hours of the window get `step` more per hour."""
    rows = []
    for h in range(LAST):
        amt = D(base) * (D("1.5") if 8 <= h % 24 < 20 else D("0.5")) if cycle else D(base)
        amt += D(h * 7919 % 5) / 10  # a little wobble, as real spend has
        if h >= LAST - step_hours:
            amt += D(step)
        rows.append(cost(h, "compute.gpu", str(amt), **kw))
    return rows


def hourly_findings(rows, cfg=None, **kw) -> list:
    return [f for f in evaluate(rows, cfg, **kw) if f.evidence["granularity"] == "hourly"]


QUIET_DAILY = SpendAnomalyConfig(min_relative_increase=100)  # the daily check never fires

HOURLY_CASES = [
    # base $/h, step $/h, hours stepped up (ending at the window end), expected flagged hours
    ("40", "30", 11, 5),  # 5 judged hours above; the newest 6 are skipped (billing still landing)
    ("40", "30", 6, 0),  # only in the skip window: ignored
    ("40", "30", 8, 0),  # 2 judged hours: not a sustained run
    ("40", "30", 9, 0),  # 3 hours, but $90 in all: below `min_impact_usd`
    ("40", "35", 9, 3),  # 3 hours, $105
    ("40", "0", 0, 0),  # steady
    ("100", "30", 11, 0),  # +$30/h but only +30%: below the relative threshold
    ("10", "20", 11, 0),  # +200% but only +$20/h: below the absolute threshold
    ("10", "30", 11, 5),  # +300% and +$30/h
]


@pytest.mark.parametrize(("base", "step", "step_hours", "flagged"), HOURLY_CASES)
def test_hourly_step_up_in_the_recent_window(base, step, step_hours, flagged) -> None:
    rows = hourly(base, step, step_hours)
    findings = hourly_findings(rows, QUIET_DAILY)  # small bases: the daily check would see the jump
    if not flagged:
        assert findings == []
        return
    (f,) = findings
    hours = f.evidence["hours"]
    assert len(hours) == flagged
    assert hours[-1]["hour"] == "2026-11-15T17:00:00Z"  # the last hour before the 6 skipped ones
    assert f.impact_usd == sum(D(str(h["excess_usd"])) for h in hours)
    assert f.impact_usd == pytest.approx(D(step) * flagged, abs=D("0.5") * flagged)
    assert all(h["baseline_points"] == 7 for h in hours)
    assert f.title.startswith("Hourly spend in ml-prod jumped:")
    assert not f.provisional


def test_hourly_with_default_config_and_configurable_skip_window() -> None:
    (f,) = evaluate(hourly("40", "30", 11))  # +33% for the day: the daily check does not fire
    assert f.evidence["granularity"] == "hourly" and len(f.evidence["hours"]) == 5
    rows = hourly("40", "30", 6)
    (f,) = hourly_findings(rows, SpendAnomalyConfig(hourly_skip_recent_hours=0))
    assert len(f.evidence["hours"]) == 6
    assert f.evidence["hours"][-1]["hour"] == "2026-11-15T23:00:00Z"


def test_hourly_daily_cycle_is_not_an_anomaly() -> None:
    rows = hourly("40", cycle=True)
    assert evaluate(rows) == []
    # a baseline blind to the hour of day would see the daytime hours as +200%: this one does not
    stepped = hourly("40", "40", 11, cycle=True)
    (f,) = hourly_findings(stepped)
    assert len(f.evidence["hours"]) == 5


def test_hourly_does_not_double_report_what_daily_reports() -> None:
    rows = hourly("40", "60", 3 * 24)  # a 3-day step up: +150%, +$1,440 a day
    findings = evaluate(rows)
    assert [f.evidence["granularity"] for f in findings] == ["daily"]
    assert len(findings[0].evidence["days"]) == 3
    # with the daily check out of the way, the same hours are flagged hourly
    (f,) = evaluate(rows, QUIET_DAILY)
    assert f.evidence["granularity"] == "hourly" and len(f.evidence["hours"]) == 24


def test_hourly_finding_is_distinct_and_labels_provisional_hours() -> None:
    daily_rows = daily([*STEADY, "1000", "1000", "1000", "3000"])
    (d,) = evaluate(daily_rows)
    (f,) = hourly_findings(hourly("40", "30", 11))
    # both jumps started on 2026-11-15 in ml-prod: one jump, one fingerprint (scope + start day)
    assert f.fingerprint == d.fingerprint and f.scope == d.scope
    assert d.evidence["granularity"] == "daily"
    (p,) = hourly_findings(hourly("40", "30", 11), provisional_hours=8)
    assert p.provisional and p.fingerprint == f.fingerprint
    assert [h["provisional"] for h in p.evidence["hours"]] == [False, False, False, True, True]
    assert "Provisional: billing from 2026-11-15 16:00 UTC may still grow." in p.summary


def test_hourly_new_project_needs_history() -> None:
    rows = hourly("10") + [cost(h, "compute.gpu", "80", project="new-proj") for h in range(LAST - 72, LAST)]
    assert evaluate(rows) == []


def test_hourly_config_is_strict() -> None:
    with pytest.raises(
        ValueError, match=r"hourly_min_history_days \(9\) must be at most hourly_baseline_days \(7\)"
    ):
        SpendAnomalyConfig(hourly_min_history_days=9)
    # the daily pair too: 60 days of history within a 7-day baseline never fired (a helper's audit)
    with pytest.raises(ValueError, match=r"\bmin_history_days \(60\) must be at most baseline_days \(7\)"):
        SpendAnomalyConfig(min_history_days=60, baseline_days=7)
    with pytest.raises(ValueError, match="hourly_windw_hours"):
        SpendAnomalyConfig(hourly_windw_hours=3)  # type: ignore[call-arg]
    assert hourly_findings(hourly("40", "30", 11), SpendAnomalyConfig(hourly=False)) == []


# -- history before the window, baseline modes, one fingerprint per jump ---------------------------------

WEEK = ["1000"] * 5 + ["100", "100"]  # T0 is a Monday: weekdays $1,000, weekends $100


def windowed(rows, first_day: int, days: int, cfg=None, now_hours: float | None = None):
    """Detectors run as `gpucost analyze` runs them: data from T0, report window from `first_day`."""
    inp = inputs(rows, days=first_day + days)
    now = inp.window_end if now_hours is None else T0 + timedelta(hours=now_hours)
    start = T0 + timedelta(days=first_day)
    return run_in_window(replace(inp, window_end=min(inp.window_end, now)), [SpendAnomaly(cfg)], now, start)


def test_a_seven_day_window_is_judged_against_baseline_days_of_history() -> None:
    amounts = ["1000"] * 31 + ["2500", "1000", "1000", "1000"]  # 35 days; the jump on day 31
    rows = daily(amounts)
    (f,) = windowed(rows, 28, 7)  # the 7-day report of `gpucost analyze --start ... --end ...`
    (day,) = f.evidence["days"]
    assert day["date"] == "2026-12-03" and f.impact_usd == 1500
    assert (day["baseline"], day["baseline_points"]) == ("same_weekday", 4)  # 4 earlier Thursdays
    (f,) = windowed(rows, 28, 7, SpendAnomalyConfig(baseline="all_days"))
    assert f.evidence["days"][0]["baseline_points"] == 28  # baseline_days, not the window's 7
    (f,) = windowed(rows, 28, 7, SpendAnomalyConfig(baseline_days=7))
    assert f.evidence["days"][0]["baseline_points"] == 7


def test_history_before_the_window_is_never_reported() -> None:
    rows = daily([*STEADY, *STEADY, "5000", *STEADY[:7], "1000"])  # a spike on day 20 only
    assert [f.evidence["days"][0]["date"] for f in windowed(rows, 14, 14)] == ["2026-11-22"]
    assert windowed(rows, 21, 7) == []


@pytest.mark.parametrize(
    ("baseline", "weeks", "min_same", "kind"),
    [
        ("same_weekday", 4, 3, "same_weekday"),
        ("auto", 4, 3, "same_weekday"),
        ("auto", 2, 3, None),  # 2 earlier Saturdays < min_same_weekday: all days, where $1,000 is usual
        ("auto", 2, 2, "same_weekday"),
        ("all_days", 4, 3, None),
        ("same_weekday", 2, 3, None),  # too few earlier Saturdays to judge by weekday
    ],
)
def test_baseline_modes_with_history_before_a_one_week_window(baseline, weeks, min_same, kind) -> None:
    # history: `weeks` weeks of weekdays $1,000 / weekends $100; reported: a week with a $1,000 Saturday
    rows = daily(WEEK * weeks + ["1000"] * 5 + ["1000", "100"])
    cfg = SpendAnomalyConfig(baseline=baseline, min_same_weekday=min_same)
    findings = windowed(rows, weeks * 7, 7, cfg)
    if kind is None:
        assert findings == []
        return
    (f,) = findings
    (day,) = f.evidence["days"]
    assert day["date"] == (T0 + timedelta(days=weeks * 7 + 5)).date().isoformat()  # the Saturday
    assert (day["baseline"], day["baseline_usd"], day["baseline_points"]) == (kind, 100.0, weeks)
    assert f.impact_usd == 900


def test_a_jump_flagged_hourly_today_and_daily_tomorrow_is_one_fingerprint(tmp_path) -> None:
    """$40/h for 3 weeks, then +$30/h from 14:00 on day 21: that evening's hours are flagged hourly
    (the day as a whole is +31%: not daily); the next day, +75%, is flagged daily."""
    jump = 21 * 24 + 14
    rows = [cost(h, "compute.gpu", str(D(40) + (D(30) if h >= jump else 0))) for h in range(24 * 24)]
    today = windowed(rows, 14, 8, now_hours=22 * 24 + 2)  # 02:00 on day 22
    tomorrow = windowed(rows, 14, 9, now_hours=23 * 24 + 2)  # 02:00 on day 23
    (h,) = today
    (d,) = tomorrow
    assert h.evidence["granularity"] == "hourly" and d.evidence["granularity"] == "daily"
    assert h.evidence["started"] == d.evidence["started"] == "2026-11-23"
    assert h.fingerprint == d.fingerprint
    store = SQLiteStore(tmp_path / "state.sqlite")
    assert record_findings(store, today, T0 + timedelta(hours=22 * 24 + 2))["new"] == 1
    counts = record_findings(store, tomorrow, T0 + timedelta(hours=23 * 24 + 2))
    assert (counts["new"], counts["updated"], counts["resolved"]) == (0, 1, 0)
    # through the alert pipeline: one message, no second "new" alert the next day (repeats aside)
    alerts = AlertsConfig(group_wait_seconds=0, repeat_interval_hours=48)
    deps = Deps(store, ConsoleNotifier(tmp_path / "alerts", io.StringIO()), alerts, SlackConfig())
    for findings, hour in ((today, 22 * 24 + 2), (tomorrow, 23 * 24 + 2)):
        process(findings, T0 + timedelta(hours=hour), deps)
        deliver_outbox(deps, T0 + timedelta(hours=hour))
    assert len((tmp_path / "alerts" / "alerts.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("began", [20, 21, 22, 23])
@pytest.mark.parametrize("now", [10, 16, 22])
def test_a_jump_flagged_daily_and_still_running_today_is_one_finding(began, now) -> None:
    """+$60/h from `began` o'clock on day 21 until 05:00 on day 24, seen at `now` o'clock on day 24:
    days 22 and 23 are flagged daily and the morning of day 24 (not flagged: pro rata, the day is
    ordinary) is anomalous hour by hour. A jump that began in a day's last `hourly_min_hours` - 1
    hours is dated the next day by both checks, whatever the hour the detection runs."""
    jump, stop = 21 * 24 + began, 24 * 24 + 5
    rows = [cost(h, "compute.gpu", str(D(40) + (D(60) if jump <= h < stop else 0))) for h in range(25 * 24)]
    (f,) = windowed(rows, 14, 11, now_hours=24 * 24 + now)
    assert f.evidence["granularity"] == "daily"
    assert f.evidence["started"] == ("2026-11-23" if began <= 21 else "2026-11-24")
    # still running on day 24 (at 10:00 its partial day is flagged daily; later in the day it is
    # ordinary as a whole, and its morning's hours carry the daily finding on): window and impact
    assert f.window_end >= T0 + timedelta(days=24)
    assert f.evidence["days"][-1]["date"] == "2026-11-26"
    assert f.impact_usd == sum(D(str(d["excess_usd"])) for d in f.evidence["days"])
    assert fmt_usd(f.impact_usd) in f.title
    assert bool(f.evidence.get("hours")) == ("It is still running" in f.summary) == (now > 10)
    # the hourly run alone (the daily check quiet) is dated by the same rule
    (h,) = windowed(rows, 14, 11, SpendAnomalyConfig(min_relative_increase=100), now_hours=24 * 24 + 22)
    assert h.evidence["granularity"] == "hourly" and h.evidence["started"] == f.evidence["started"]


def test_an_hourly_run_continuing_a_flagged_jump_takes_its_start_day() -> None:
    """+$1,000/h at 22:00 and 23:00 on day 21, then +$60/h until 05:00 on day 24: those two hours
    make day 21 itself a flagged day, so the daily check dates the jump day 21, where `start_day`
    alone would date it day 22. Day 24's morning hours walk back into the flagged days and take day
    21: one jump, one finding."""
    jump, stop = 21 * 24 + 22, 24 * 24 + 5

    def step(h: int) -> D:
        return D(0) if not jump <= h < stop else D(1000) if h < jump + 2 else D(60)

    rows = [cost(h, "compute.gpu", str(D(40) + step(h))) for h in range(25 * 24)]
    (f,) = windowed(rows, 14, 11, now_hours=24 * 24 + 22)
    assert f.evidence["granularity"] == "daily" and f.evidence["started"] == "2026-11-23"
    assert f.evidence["days"][0]["date"] == "2026-11-23"


@pytest.mark.parametrize("now", [1, 5])
def test_a_jump_its_category_still_shows_while_the_project_total_lags_is_one_finding(now) -> None:
    """Compute +$60/h from 02:00 on day 21 over $40/h, storage $40/h; seen at `now` o'clock on day
    24, with day 23's storage rows mostly not landed yet (10% of them: the daemon's production test,
    where late rows left a day's total ordinary while its compute was not). The project is flagged
    on days 21 and 22, only compute on day 23: before, day 23 was a second finding ("compute spend
    jumped", started day 23) and the project's ended on day 22, so a first start read the jump as
    over. Now the project's finding carries day 23 on: one jump, one finding, still running."""
    jump, end = 21 * 24 + 2, 24 * 24 + now
    late = range(23 * 24, end)  # storage rows still to land

    def storage(h: int) -> str:
        return "4" if h in late else "40"

    rows = [
        r
        for h in range(end)
        for r in (
            cost(h, "compute.gpu", str(D(40) + (D(60) if h >= jump else 0))),
            cost(h, "storage.gcs", storage(h)),
        )
    ]
    (f,) = windowed(rows, 14, 11, now_hours=end)
    assert f.evidence["category"] is None and f.evidence["started"] == "2026-11-23"
    carried = ["2026-11-25"] + (["2026-11-26"] if now == 5 else [])  # day 24's 5 hours: +$300 pro rata
    assert [d["date"] for d in f.evidence["days"]] == ["2026-11-23", "2026-11-24", *carried]
    assert [d.get("category") for d in f.evidence["days"]] == [None, None] + ["compute"] * len(carried)
    assert f.window_end == T0 + timedelta(days=23 + len(carried))
    assert f.impact_usd == sum(D(str(d["excess_usd"])) for d in f.evidence["days"])
    assert fmt_usd(f.impact_usd) in f.title and "It is still running: compute spend" in f.summary


def test_drivers_measure_the_usual_level_from_when_the_spend_began() -> None:
    """An export that began 10 days before the jump, read with a month of history before it: the
    empty history days made the usual GPU spend $0 and its driver +$10,000.00, more than the whole
    jump ($5,990.00; found by comparing `analyze` with the export, seed 7's ml-research)."""
    rows = daily([*STEADY, "2500", "2500", "2500", "2500"])
    inp = replace(inputs(rows), history_start=T0 - timedelta(days=29))
    (f,) = SpendAnomaly().evaluate(inp, inp.window_end)
    assert f.impact_usd == D("5990")
    assert f.evidence["drivers"] == [{"subcategory": "compute.gpu", "increase_usd": 5990.0, "usual_daily_usd": 1002.5}]


WEEKEND_TRAINING = ["200"] * 5 + ["2400", "2400"]  # T0 is a Monday: weekdays $200, weekends $2,400


def test_a_weekly_pattern_is_not_an_anomaly_every_weekend() -> None:
    """Six identical weeks, the weekends 12x the weekdays (helper 59's repro): with `baseline = "auto"`
    the second Saturday, with one earlier Saturday, is judged against all days and flagged; flagged
    days were kept out of later baselines, so Saturdays never reached `min_same_weekday` and every
    weekend was flagged ("Spend in ml-prod jumped: $4,400.00" on the sixth). Only the first two
    weekends judged are, before a weekly pattern is seen; the third is the weekend's usual level."""
    rows, daily_only = daily(WEEKEND_TRAINING * 6), SpendAnomalyConfig(hourly=False)  # hourly: below
    assert windowed(rows, 35, 7, daily_only) == []
    (f,) = windowed(rows, 7, 35, daily_only)
    assert [(d["date"], d["baseline"]) for d in f.evidence["days"]] == [
        ("2026-11-14", "all_days"),
        ("2026-11-15", "all_days"),
        ("2026-11-21", "all_days"),
        ("2026-11-22", "all_days"),
    ]
    # a one-off weekend spike is no weekly pattern: the next, usual weekend is not flagged
    rows = daily(WEEKEND_TRAINING * 4 + ["200"] * 5 + ["5000", "5000"] + WEEKEND_TRAINING)
    (f,) = windowed(rows, 28, 14, daily_only)
    assert [(d["date"], d["baseline"]) for d in f.evidence["days"]] == [
        ("2026-12-05", "same_weekday"),
        ("2026-12-06", "same_weekday"),
    ]
    assert f.impact_usd == 2 * (5000 - 2400)


def test_a_jump_that_persists_keeps_counting_past_its_weekdays() -> None:
    """A flagged run of a week or more is a jump, not a weekly pattern: its days stay out of the
    same weekday's baseline too, and it keeps counting for as long as before (4 weeks)."""
    (f,) = windowed(daily(["1000"] * 28 + ["2500"] * 35), 28, 35)
    days = f.evidence["days"]
    assert (days[0]["date"], days[-1]["date"], len(days)) == ("2026-11-30", "2026-12-21", 22)


@pytest.mark.parametrize("baseline", ["auto", "same_weekday"])
def test_a_weekly_pattern_is_not_an_anomaly_hour_by_hour(baseline) -> None:
    """The same six weeks (helper 59's repro): each weekend hour was compared with the same hour of
    the previous 7 days, 5 of them weekdays, and every weekend day was flagged hourly ("Hourly spend
    in ml-prod jumped: $2,200.00 above baseline over 24 hours"), with "same_weekday" too. Once
    `min_same_weekday` weeks exist, an hour is compared with the same hour of the same weekday."""
    rows = daily(WEEKEND_TRAINING * 6)
    cfg = SpendAnomalyConfig(baseline=baseline)
    for now in range(36 * 24, 42 * 24 + 1, 6):  # every 6 hours of the sixth week
        assert windowed(rows, 35, 7, cfg, now_hours=now) == [], now
    # a GPU jump on the sixth Saturday is still seen hour by hour, against the usual Saturday
    jump = 40 * 24 + 8  # +$60/h from 08:00
    spiked = rows + [cost(h, "compute.gpu", "60") for h in range(jump, 41 * 24)]
    (f,) = windowed(spiked, 35, 7, cfg, now_hours=40 * 24 + 17)
    assert f.evidence["granularity"] == "hourly" and f.evidence["hours"][0]["hour"] == "2026-12-12T08:00:00Z"
    assert [h["baseline_points"] for h in f.evidence["hours"]] == [4, 4, 4]  # the 4 weeks of baseline_days
    assert f.evidence["hours"][0]["baseline_usd"] == 100.0
    assert "for that hour of the week (median of 4 earlier same weekdays)" in f.summary
    # two weeks, too few for the same weekday: "auto" takes the same hour of the previous days, as
    # before; "same_weekday" judges no hour yet, as its daily check judges no day
    found = hourly_findings(hourly("40", "30", 11), cfg)
    if baseline == "same_weekday":
        assert found == []
        return
    (f,) = found
    assert f.evidence["hours"][0]["baseline_points"] == 7 and "hour of day (median of 7 earlier days)" in f.summary


def test_a_jump_broken_by_a_usual_day_keeps_counting() -> None:
    """$1,000 a day for four weeks, then $2,500 for five, every sixth day back at $1,000 (a job
    paused a day): its runs of flagged days were shorter than a week, so they were taken for a
    weekly pattern and the jump was its weekdays' usual level after two weeks, 14 of its 30 days
    flagged (helper 63's review). Runs parted by one usual day are one run."""
    amounts = ["1000"] * 28 + [("1000" if i % 6 == 5 else "2500") for i in range(35)]
    fs = windowed(daily(amounts), 28, 35, SpendAnomalyConfig(hourly=False))
    flagged = {d["date"] for f in fs for d in f.evidence["days"]}
    assert len(flagged) >= 27  # of 30 jumped days (as before weekly patterns were learned)


def test_a_pattern_of_four_days_a_week_is_learned_as_a_weekend_is() -> None:
    """$200 Monday to Wednesday, $2,400 Thursday to Sunday, ten weeks: with a day weekly only when
    at most two of the six before were flagged, Sunday (after Thursday to Saturday) never was, and
    every Thursday to Sunday was flagged for eight weeks, 32 days (helper 67's review). Runs parted
    by one usual day are one run, and a run under a week is weekly."""
    week = ["200"] * 3 + ["2400"] * 4
    fs = windowed(daily(week * 10), 14, 56, SpendAnomalyConfig(hourly=False))
    assert len({d["date"] for f in fs for d in f.evidence["days"]}) <= 8  # its first two weeks
