"""`spend_anomaly`, hourly, for the recent window: the daily check sees a jump a day late.

Each project's hourly spend over the last `hourly_window_hours` (minus the newest
`hourly_skip_recent_hours`, whose billing is still arriving) is compared with the median / MAD of
the same hour of day over the previous `hourly_baseline_days`; a run of at least `hourly_min_hours`
anomalous hours (relative and absolute thresholds both met) is one finding. As the daily check's
`baseline` picks, an hour is compared with the same hour of the same weekday of the weeks in
`baseline_days` instead (`_weekly_points`): always with "same_weekday" (no hour is judged before
`min_same_weekday` such weeks), with "auto" once that many exist. Else a weekend usually 12x the
weekdays was flagged every weekend, 24 hours against a median of mostly weekdays. Hours on days the daily
check already flags are not judged, so one jump is never reported twice. Baselines reach before the
window when the inputs carry history (`DetectorInputs.history_start`).

The finding's fingerprint is the project plus the day the jump started (`start_day`): walking back
from the run to the jump's earliest anomalous hour, past the reported window if need be, the day its
first `hourly_min_hours` anomalous hours complete. The daily check dates its runs by the same rule
(`continued_from`), so a jump seen hourly today and daily tomorrow is one alert; and a run whose walk
back crosses a day the daily check flags takes that flagged jump's day, so a jump flagged daily and
still running today is one alert too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from statistics import median
from typing import Any, Protocol

from monitor.detectors.base import ONE_HOUR, first_last, fmt_usd, human, iso, money, q6
from monitor.detectors.costs import CostSum
from monitor.detectors.inputs import DetectorInputs
from monitor.model import Finding, Scope, Severity, counted, fingerprint

__all__ = ["MAD_TO_SIGMA", "continued_from", "hourly_findings", "jump_start", "project_hours", "start_day"]

#: MAD x 1.4826 estimates the standard deviation of normally distributed values.
MAD_TO_SIGMA = Decimal("1.4826")
_DAY = timedelta(days=1)


class SpendAnomalyLike(Protocol):
    """What the hourly check needs of the `spend_anomaly` detector (its config and policies)."""

    name: str
    config: Any

    def _amount(self, s: CostSum) -> Decimal: ...

    def keep(self, impact: Decimal) -> bool: ...

    def severity(self, impact: Decimal) -> Severity: ...


@dataclass(frozen=True)
class _Hour:
    hour: datetime
    spend: Decimal
    baseline: Decimal
    mad: Decimal
    points: int
    provisional: bool
    anomalous: bool
    weekly: bool = False  # against the same weekday's hour (`_weekly_points`), not the previous days'

    @property
    def excess(self) -> Decimal:
        return q6(self.spend - self.baseline)


def _runs(hours: Sequence[_Hour | None], min_hours: int) -> list[list[_Hour]]:
    """Runs of consecutive anomalous hours at least `min_hours` long: a sustained jump, not a blip.
    None (an hour not judged: no history, or the daily check covers it) ends a run."""
    runs: list[list[_Hour]] = [[]]
    for h in hours:
        if h is not None and h.anomalous:
            runs[-1].append(h)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if len(r) >= min_hours]


def _hour_evidence(h: _Hour) -> dict[str, Any]:
    return {
        "hour": iso(h.hour),
        "spend_usd": money(h.spend),
        "baseline_usd": money(h.baseline),
        "mad_usd": money(h.mad),
        "excess_usd": money(h.excess),
        "baseline_points": h.points,
        "provisional": h.provisional,
    }


def _hour_days(flagged: Sequence[_Hour]) -> list[dict[str, Any]]:
    """The flagged hours summed per day, in the daily evidence's shape (reports show `days`)."""
    by_day: dict[date, list[_Hour]] = defaultdict(list)
    for h in flagged:
        by_day[h.hour.date()].append(h)
    return [
        {
            "date": d.isoformat(),
            "spend_usd": money(sum((h.spend for h in hs), Decimal(0))),
            "baseline_usd": money(sum((h.baseline for h in hs), Decimal(0))),
            "excess_usd": money(sum((h.excess for h in hs), Decimal(0))),
            "hours_covered": len(hs),
            "provisional": any(h.provisional for h in hs),
        }
        for d, hs in sorted(by_day.items())
    ]


def hourly_findings(
    det: SpendAnomalyLike,
    inputs: DetectorInputs,
    now: datetime,
    daily_flagged: Mapping[str | None, Mapping[date, date | None]],
    series: Mapping[str | None, Mapping[datetime, Decimal]] | None = None,
) -> list[Finding]:
    """Hourly findings per project, leaving out hours on days the daily check already flags.
    `daily_flagged`: per project, each flagged day and the start day of the project's jump it
    belongs to (None for a category's). `series`: `project_hours(det, inputs, ...)` when the caller
    already built it."""
    end = min(inputs.window_end, now).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    cutoff = end - det.config.hourly_skip_recent_hours * ONE_HOUR
    lo = max(cutoff - det.config.hourly_window_hours * ONE_HOUR, inputs.window_start)
    if series is None:
        series = project_hours(det, inputs, cutoff)
    provisional = {
        key for key, s in inputs.hourly.sums(("project", "hour"), start=lo, end=cutoff).items() if s.provisional
    }
    findings: list[Finding] = []
    for project in sorted(series, key=str):
        s, done = series[project], daily_flagged.get(project, {})
        if not s:
            continue
        first = min(s)
        hours: list[_Hour | None] = []
        h = lo
        while h < cutoff:
            prov = h >= inputs.provisional_from or (project, h) in provisional
            hours.append(None if h.date() in done else _judge_hour(det, s, first, h, prov))
            h += ONE_HOUR
        runs = _runs(hours, det.config.hourly_min_hours)
        if runs:
            began = jump_start(det, s, runs[0][0].hour) or runs[0][0].hour
            findings.extend(_hourly_finding(det, project, runs, _started(det, began, runs[0][0].hour, done)))
    return findings


def start_day(det: SpendAnomalyLike, began: datetime) -> date:
    """The day a jump that began at hour `began` is dated by: the day its first `hourly_min_hours`
    anomalous hours complete, the first day the hourly check could flag it. A jump that began in a
    day's last hours is the next day's, as the daily check, which sees that next day, dates it."""
    return (began + (det.config.hourly_min_hours - 1) * ONE_HOUR).date()


def _started(
    det: SpendAnomalyLike, began: datetime, first: datetime, flagged: Mapping[date, date | None]
) -> date:
    """An hourly run's start day. When its jump (walked back from the run's `first` hour to `began`)
    crosses a day the daily check flags for the project, the run continues that flagged jump and
    takes its start day, so both carry one fingerprint; else `start_day`."""
    d = first.date() - _DAY
    while d >= began.date():
        if (flagged_start := flagged.get(d)) is not None:
            return flagged_start
        d -= _DAY
    return start_day(det, began)


def project_hours(
    det: SpendAnomalyLike, inputs: DetectorInputs, end: datetime
) -> dict[str | None, dict[datetime, Decimal]]:
    """Spend per project and hour before `end`, from the history start (else the window start)."""
    lo = min(inputs.history_start or inputs.window_start, inputs.window_start)
    series: dict[str | None, dict[datetime, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for (project, hour), s in inputs.hourly.sums(("project", "hour"), start=lo, end=end).items():
        series[project][hour] += det._amount(s)
    return series


def jump_start(det: SpendAnomalyLike, s: Mapping[datetime, Decimal], h: datetime) -> datetime | None:
    """The earliest hour of the unbroken stretch of anomalous hours ending at `h` (None when `h`
    itself is not anomalous): where a jump began, wherever the reported window starts."""
    if not s:
        return None
    first, start = min(s), None
    while h >= first:
        judged = _judge_hour(det, s, first, h, False)
        if judged is None or not judged.anomalous:
            break
        start, h = h, h - ONE_HOUR
    return start


def continued_from(det: SpendAnomalyLike, s: Mapping[datetime, Decimal], day: date) -> date:
    """The day a jump first flagged on `day` (daily) started: the previous day when it ended with at
    least `hourly_min_hours` anomalous hours (a jump that began in the evening), else `day`."""
    midnight = datetime.combine(day, datetime.min.time(), UTC)
    began = jump_start(det, s, midnight - ONE_HOUR)
    return day if began is None else min(day, start_day(det, began))


def _judge_hour(
    det: SpendAnomalyLike, s: Mapping[datetime, Decimal], first: datetime, h: datetime, prov: bool
) -> _Hour | None:
    """The hour against the same hour of the previous days (since the project's first row), or of the
    same weekday of earlier weeks (`_weekly_points`)."""
    points = _weekly_points(det.config, first, h)
    weekly = points is not None
    if points is None:
        points = [h - k * _DAY for k in range(1, det.config.hourly_baseline_days + 1)]
        points = [p for p in points if p >= first]
        if len(points) < det.config.hourly_min_history_days:
            return None
    if not points:
        return None
    values = [s.get(p, Decimal(0)) for p in points]
    med = q6(Decimal(median(values)))
    mad = q6(Decimal(median([abs(v - med) for v in values])))
    spend = q6(s.get(h, Decimal(0)))
    cfg, excess = det.config, spend - med
    anomalous = (
        excess > 0
        and excess >= cfg.hourly_min_excess_usd
        and excess >= Decimal(str(cfg.hourly_min_relative_increase)) * max(med, Decimal(0))
        and (mad == 0 or excess >= Decimal(str(cfg.min_robust_z)) * MAD_TO_SIGMA * mad)
    )
    return _Hour(h, spend, med, mad, len(points), prov, anomalous, weekly)


def _weekly_points(cfg: Any, first: datetime, h: datetime) -> list[datetime] | None:
    """The same hour of the same weekday in the weeks of `baseline_days` before `h` (since `first`), as
    the daily check's `baseline` picks: "same_weekday" always ([] judges no hour before
    `min_same_weekday` such weeks), "auto" once that many exist; None: the previous days instead. A
    weekend usually 12x the weekdays is not an anomaly every weekend."""
    if cfg.baseline == "all_days":
        return None
    weeks = [p for k in range(1, cfg.baseline_days // 7 + 1) if (p := h - 7 * k * _DAY) >= first]
    if len(weeks) >= cfg.min_same_weekday:
        return weeks
    return [] if cfg.baseline == "same_weekday" else None


def _hourly_finding(
    det: SpendAnomalyLike, project: str | None, runs: Sequence[Sequence[_Hour]], started: date
) -> list[Finding]:
    flagged = [h for run in runs for h in run]
    impact = sum((h.excess for h in flagged), Decimal(0))
    if not det.keep(impact):
        return []
    start, stop = first_last(h.hour for h in flagged)
    worst = max(flagged, key=lambda h: h.excess)
    prov = [h for h in flagged if h.provisional]
    summary = (
        f"Hourly spend in {project} was above its usual level for {counted(len(flagged), 'hour')} in a row "
        f"since {human(start)}, by {fmt_usd(impact)} in total; worst {human(worst.hour)}: "
        f"{fmt_usd(worst.spend)} vs a usual {fmt_usd(worst.baseline)} for that hour of "
        f"{'the week' if worst.weekly else 'day'} (median of {worst.points} earlier "
        f"{'same weekdays' if worst.weekly else 'days'}). The daily check has not flagged these days (yet)."
    )
    if prov:
        summary += f" Provisional: billing from {human(prov[0].hour)} may still grow."
    scope = Scope(project=project)
    return [
        Finding(
            kind=det.name,
            severity=det.severity(impact),
            title=f"Hourly spend in {project} jumped: {fmt_usd(impact)} above baseline "
            f"over {counted(len(flagged), 'hour')}",
            summary=summary,
            impact_usd=impact,
            window_start=start,
            window_end=stop,
            scope=scope,
            evidence={
                "granularity": "hourly",
                "category": None,
                "amount": det.config.amount,
                "hours": [_hour_evidence(h) for h in flagged],
                "days": _hour_days(flagged),
                "drivers": [],
                "started": started.isoformat(),
            },
            recommendation=(
                f"Check what started in {project} around {human(start)}: spend has run above its "
                "usual level for this time of day for hours. If it is expected (a new training run), "
                "nothing to do; otherwise stop the resources behind it before the day adds up."
            ),
            fingerprint=fingerprint(det.name, scope, started.isoformat()),
            provisional=bool(prov),
        )
    ]
