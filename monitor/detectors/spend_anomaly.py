"""`spend_anomaly`: a day's spend per project (and per category inside a project) far above normal.

History: baselines read the `baseline_days` before each day, also before the reported window when
the inputs carry it (`DetectorInputs.history_start`; `gpucost analyze` and the daemon read that much
more billing), so a 7-day report is judged against 28 days of history, not against itself. Days
before the window are judged too (a jump that started before the window keeps its start day and is
kept out of baselines) but only days inside the window are reported.

Baseline: the median of earlier days of the same series, spread: the median absolute deviation
(MAD). `baseline = "same_weekday"` uses only the same weekday and judges a day once
`min_same_weekday` such earlier days exist; `"all_days"` uses every earlier day; `"auto"` uses the
same weekday when `min_same_weekday` such days exist, else all days. Both are robust: one earlier spike
does not raise the bar. A day is anomalous only when it is above the baseline by BOTH
`min_relative_increase` and `min_excess_usd` (and, when the MAD is not zero, by `min_robust_z`
robust standard deviations). Days already flagged are left out of later baselines, so a jump that
persists keeps counting instead of quietly becoming the norm; but not out of their weekday's when
their run of flagged days (runs parted by one usual day taken as one) is shorter than a week
(`_weekly`): such days count as earlier same weekdays, for "auto"'s choice too. A weekly pattern (weekend training at 12x the weekdays) is
flagged on its first weekends, judged against all days, then is the weekend's usual level once
`min_same_weekday` weekends are seen; before, the flagged weekends never counted, "auto" never
reached the same weekday and every weekend was flagged. A jump that persists runs a week or
more, even broken by a usual day: its days stay out. A series needs `min_history_days` of
history (from its first row) before it is judged: a new project is not an anomaly by itself.

A category finding is only raised on days its project as a whole is not flagged, so one jump is one
finding: the project finding names the categories that drove it. A category's flagged days right
after its project's flagged days (the category flagged on the last of those too) are that jump still
running while the project's total is not flagged yet, its other billing still arriving: the project's
finding carries them on (their excess in its impact, their days in its evidence). A last, partial day is compared with
the baseline pro-rated to the hours it covers. Days that reach into the provisional period are
labelled: late billing rows may still raise them.

Hourly, for the recent window: the daily check sees a jump a day late. The last
`hourly_window_hours` of billed hours, minus the newest `hourly_skip_recent_hours` (billing still
landing: they would look like a dip, or be raised later by late rows), are compared per project with
the median / MAD of the same hour of day on the previous `hourly_baseline_days` days, so a daily cycle
is not an anomaly; or, as `baseline` picks (same weekday once `min_same_weekday` earlier weeks
exist, for "auto"), of the same hour of the same weekday, so a weekly one is not either. An hour counts when it is above that baseline by BOTH `hourly_min_relative_increase`
and `hourly_min_excess_usd` (and `min_robust_z` robust deviations); a finding needs a run of at least
`hourly_min_hours` such hours in a row, so one busy hour is not a finding. Hours on days the daily
check already flags for the project (as a whole or a category) are not judged: one jump, one finding.

One jump, one alert: a finding's fingerprint is its scope plus the day the jump started (the first
day of its latest run of flagged days, or the day its first anomalous hour fell on), so a jump
flagged hourly today and daily tomorrow keeps one fingerprint and the alert pipeline updates it.
A daily run whose previous day ended with at least `hourly_min_hours` anomalous hours started on
that previous day; an hourly run continuing a daily-flagged jump (its anomalous hours reach back to a
flagged day) is that jump, not a new finding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from statistics import median
from typing import Any, Literal

from pydantic import Field, model_validator

from monitor.detectors.base import (
    Detector,
    DetectorConfig,
    fmt_usd,
    money,
    q6,
    register,
)
from monitor.detectors.costs import CostSum
from monitor.detectors.inputs import DetectorInputs
from monitor.detectors.spend_hourly import MAD_TO_SIGMA, continued_from, hourly_findings, project_hours
from monitor.model import Finding, Scope, category_of, counted, fingerprint
from monitor.timeutil import floor_hour

__all__ = ["SpendAnomaly", "SpendAnomalyConfig"]

_DAY = timedelta(days=1)


class SpendAnomalyConfig(DetectorConfig):
    """`baseline`: "same_weekday" compares a day with the same weekday of earlier weeks (judged once
    `min_same_weekday` of them exist), "all_days" with every earlier day, "auto" uses the same
    weekday when at least `min_same_weekday` earlier such days exist (flagged ones of a run shorter
    than a week count: a weekly pattern), else all days.
    `baseline_days`: how far back the baseline looks, before the reported window too. `amount`: "net" (after
    credits, what is paid) or "gross". `hourly_*`: the recent-window hourly check (module docstring);
    `hourly_min_excess_usd` is per hour, and a run's total must still reach `min_impact_usd`."""

    min_impact_usd: Decimal = Field(default=Decimal(100), ge=0)
    min_excess_usd: Decimal = Field(default=Decimal(100), ge=0)
    min_relative_increase: float = Field(default=0.5, ge=0)
    min_robust_z: float = Field(default=3.5, ge=0)
    baseline: Literal["auto", "same_weekday", "all_days"] = "auto"
    baseline_days: int = Field(default=28, ge=3, le=120)
    min_history_days: int = Field(default=7, ge=2)
    min_same_weekday: int = Field(default=3, ge=2)
    amount: Literal["net", "gross"] = "net"
    per_category: bool = True
    hourly: bool = True
    hourly_window_hours: int = Field(default=24, ge=1, le=168)
    hourly_skip_recent_hours: int = Field(default=6, ge=0, le=72)
    hourly_baseline_days: int = Field(default=7, ge=2, le=60)
    hourly_min_history_days: int = Field(default=4, ge=2)
    hourly_min_hours: int = Field(default=3, ge=1)
    hourly_min_excess_usd: Decimal = Field(default=Decimal(25), ge=0)
    hourly_min_relative_increase: float = Field(default=0.5, ge=0)

    @model_validator(mode="after")
    def _history(self) -> SpendAnomalyConfig:
        # more history than the baseline reads could never be had: the detector would never fire
        for prefix in ("", "hourly_"):
            need, look = getattr(self, f"{prefix}min_history_days"), getattr(self, f"{prefix}baseline_days")
            if need > look:
                raise ValueError(
                    f"{prefix}min_history_days ({need}) must be at most {prefix}baseline_days ({look})"
                )
        return self


@dataclass(frozen=True)
class _Day:
    day: date
    spend: Decimal
    baseline: Decimal
    mad: Decimal
    points: int
    kind: str
    covered_hours: int
    provisional: bool

    @property
    def excess(self) -> Decimal:
        return q6(self.spend - self.baseline)


def _history_days(inputs: DetectorInputs, first_reported: date, lookback: int) -> list[tuple[date, int]]:
    """Whole UTC days before `first_reported` (at most `lookback`) that `history_start` covers."""
    if inputs.history_start is None:
        return []
    d = max(inputs.history_start.astimezone(UTC).date(), first_reported - lookback * _DAY)
    if datetime.combine(d, time(), UTC) < inputs.history_start:
        d += _DAY
    out = []
    while d < first_reported:
        out.append((d, 24))
        d += _DAY
    return out


def _run_starts(flagged: Sequence[_Day]) -> dict[date, date]:
    """Each flagged day and the first day of its run of consecutive flagged days."""
    out: dict[date, date] = {}
    for before, f in zip([None, *flagged], flagged, strict=False):
        out[f.day] = out[before.day] if before is not None and (f.day - before.day).days == 1 else f.day
    return out


def _days(inputs: DetectorInputs, now: datetime) -> list[tuple[date, int]]:
    """Each UTC day touching the window with the hours of it the window covers; partial first day out."""
    end = min(inputs.window_end, now)
    out = []
    d = inputs.window_start.astimezone(UTC).date()
    while (start := datetime.combine(d, time(), UTC)) < end:
        lo, hi = max(start, inputs.window_start), min(start + _DAY, end)
        hours = int((hi - lo).total_seconds() // 3600)
        if lo == start and hours > 0:  # a first day cut by the window start would look like a dip
            out.append((d, hours))
        d += _DAY
    return out


@register("spend_anomaly")
class SpendAnomaly(Detector):
    Config = SpendAnomalyConfig
    config: SpendAnomalyConfig

    def _amount(self, s: CostSum) -> Decimal:
        """Sums are of micros (`Costs`): each row's amount was rounded to the micro, as evidence is."""
        return s.cost + (s.credits if self.config.amount == "net" else 0)

    def history_days(self) -> int:
        # +1: the window's first day, cut by its start, is history too
        return max(self.config.baseline_days, self.config.hourly_baseline_days) + 1

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        reported = _days(inputs, now)
        if not reported:
            return []
        days = _history_days(inputs, reported[0][0], self.config.baseline_days) + reported
        # whole hours, as `_days` counts them: a window ending at 01:30 summed the 01:00 hour too,
        # two hours of spend against one hour's baseline
        end = floor_hour(min(inputs.window_end, now))
        proj, cat, sub, provisional_days = self._daily(inputs, days, end)
        first_reported = reported[0][0]
        hourly = project_hours(self, inputs, end) if self.config.hourly else {}
        findings: list[Finding] = []
        # each day the daily check flags, with the start day of the project's jump it belongs to
        # (None: a category's), so an hourly run continuing a flagged jump is dated (and
        # fingerprinted) as that jump
        daily_flagged: dict[str | None, dict[date, date | None]] = defaultdict(dict)
        for project in sorted(proj, key=str):
            flagged = self._flag(proj[project], days, provisional_days)
            began = _began(proj[project], days)  # the project's usual level starts here (drivers)
            starts = _run_starts(flagged)
            if project in hourly:
                moved = {d: continued_from(self, hourly[project], d) for d in set(starts.values())}
                starts = {d: moved[start] for d, start in starts.items()}
            daily_flagged[project].update(starts)
            shown = [f for f in flagged if f.day >= first_reported]
            own: int | None = None  # the index of the project's finding, if raised
            if shown:
                drivers = _drivers(project, shown, sub, days, began)
                raised = self._finding(project, None, shown, drivers, starts[flagged[-1].day])
                own = len(findings) if raised else None
                findings.extend(raised)
            if not self.config.per_category:
                continue
            skip = {f.day for f in flagged}
            for (p, category), series in sorted(cat.items(), key=lambda kv: str(kv[0])):
                if p != project:
                    continue
                every = self._flag(series, days, provisional_days)
                cat_flagged = [f for f in every if f.day not in skip]
                cat_starts = _run_starts(cat_flagged)
                # a run of category days right after the project's flagged days, the category flagged
                # on the last of those too, is that jump still running while the project's total is
                # not flagged (its other categories' billing still arriving): the project's finding
                # carries it on, as it carries on the hours after it
                every_day = {e.day for e in every}
                carried = [
                    f for f in cat_flagged if (d := cat_starts[f.day] - _DAY) in starts and d in every_day
                ]
                for f in carried:
                    daily_flagged[project][f.day] = starts[cat_starts[f.day] - _DAY]
                shown_carried = [f for f in carried if f.day >= first_reported]
                if own is not None and shown_carried:
                    findings[own] = self._carried(findings[own], category, shown_carried)
                    cat_flagged = [f for f in cat_flagged if f not in carried]
                for d in cat_starts:
                    daily_flagged[project].setdefault(d, None)
                cat_shown = [f for f in cat_flagged if f.day >= first_reported]
                if cat_shown:
                    drivers = _drivers(
                        project, cat_shown, sub, days, began, lambda s, c=category: s.startswith(c)
                    )
                    start = cat_starts[cat_flagged[-1].day]
                    findings.extend(self._finding(project, category, cat_shown, drivers, start))
        if self.config.hourly:
            at = {f.fingerprint: i for i, f in enumerate(findings)}
            for h in hourly_findings(self, inputs, now, daily_flagged, hourly):
                if (i := at.get(h.fingerprint)) is None:
                    findings.append(h)
                else:  # one jump, one finding: the daily one, carried on by the hours after it
                    findings[i] = self._continued(findings[i], h)
        return findings

    def _carried(self, daily: Finding, category: str, days: Sequence[_Day]) -> Finding:
        """The project's finding carried on by `category`'s flagged days right after it (their days,
        marked with the category, in its evidence)."""
        excess = sum((d.excess for d in days), Decimal(0))
        dates = ", ".join(d.day.isoformat() for d in days)
        return self._still_running(
            daily,
            excess,
            f"{category} spend was above its usual level on {dates} by {fmt_usd(excess)} (counted in the "
            "impact), while the project's total was not flagged yet.",
            datetime.combine(days[-1].day, time(), UTC) + _DAY,
            {"days": [*daily.evidence["days"], *({**_day_evidence(d), "category": category} for d in days)]},
            any(d.provisional for d in days),
        )

    def _continued(self, daily: Finding, hourly: Finding) -> Finding:
        """The daily finding of a jump still running in the hours after its flagged days (their hours
        in its evidence). Else a jump whose latest day is not flagged yet (its billing still
        arriving) would look over."""
        hours = hourly.evidence["hours"]
        was, their = ("was", "its") if len(hours) == 1 else ("were", "their")
        return self._still_running(
            daily,
            hourly.impact_usd,
            f"{counted(len(hours), 'hour')} since {hours[0]['hour']} {was} above the usual level for {their} hour"
            f" of day, by {fmt_usd(hourly.impact_usd)} more (counted in the impact).",
            hourly.window_end,
            {"days": [*daily.evidence["days"], *hourly.evidence["days"]], "hours": hours},
            hourly.provisional,
        )

    def _still_running(
        self, daily: Finding, excess: Decimal, how: str, until: datetime, evidence: dict[str, Any], provisional: bool
    ) -> Finding:
        """`daily` carried on: `excess` added to its impact, its window to `until`, `how` it still
        runs in its summary, `evidence` over its own."""
        impact = daily.impact_usd + excess
        return replace(
            daily,
            severity=self.severity(impact),
            title=f"{daily.title.rsplit(' jumped: ', 1)[0]} jumped: {fmt_usd(impact)} above baseline",
            summary=f"{daily.summary} It is still running: {how}",
            impact_usd=impact,
            window_end=max(daily.window_end, until),
            evidence={**daily.evidence, **evidence},
            provisional=daily.provisional or provisional,
        )

    def _daily(
        self, inputs: DetectorInputs, days: Sequence[tuple[date, int]], end: datetime
    ) -> tuple[
        dict[str | None, dict[date, Decimal]],
        dict[tuple[str | None, str], dict[date, Decimal]],
        dict[tuple[str | None, str], dict[date, Decimal]],
        set[date],
    ]:
        """Daily spend per project, (project, category) and (project, subcategory) over `days`, and
        the days that are (or hold hours billed) provisionally."""
        first = datetime.combine(days[0][0], time(), UTC)
        proj: dict[str | None, dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        cat: dict[tuple[str | None, str], dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        sub: dict[tuple[str | None, str], dict[date, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
        provisional: set[date] = set()
        for (project, subcategory, d), s in inputs.hourly.sums(("project", "subcategory", "day"), start=first, end=end).items():
            amt = self._amount(s)
            proj[project][d] += amt
            cat[(project, category_of(subcategory))][d] += amt
            sub[(project, subcategory)][d] += amt
            if s.provisional:
                provisional.add(d)
        prov_day = inputs.provisional_from.astimezone(UTC).date()
        return proj, cat, sub, provisional | {d for d, _ in days if d >= prov_day}

    def _flag(
        self, series: Mapping[date, Decimal], days: Sequence[tuple[date, int]], provisional: set[date]
    ) -> list[_Day]:
        """Anomalous days of one series; flagged days are kept out of later baselines."""
        began = _began(series, days)
        if began is None:
            return []
        history: list[date] = []
        out: list[_Day] = []
        for d, hours in days:
            if d < began:
                continue
            spend = series.get(d, Decimal(0))
            weekly = _weekly({f.day for f in out})
            day = self._judge(series, history, weekly, d, spend, hours, d in provisional)
            if day is not None and self._anomalous(day):
                out.append(day)
            elif hours == 24:
                history.append(d)
        return out

    def _judge(
        self,
        series: Mapping[date, Decimal],
        history: Sequence[date],
        weekly: Sequence[date],
        d: date,
        spend: Decimal,
        hours: int,
        provisional: bool,
    ) -> _Day | None:
        """`d` against its baseline (None: too little history). `history`: the earlier full days not
        flagged; `weekly`: the flagged ones that recur weekly (`_weekly`), the same weekday's level."""
        recent = [h for h in history if (d - h).days <= self.config.baseline_days]
        if len(recent) < self.config.min_history_days:
            return None
        same = [
            h for h in (*recent, *weekly) if h.weekday() == d.weekday() and (d - h).days <= self.config.baseline_days
        ]
        kind = self.config.baseline
        if kind == "auto":
            kind = "same_weekday" if len(same) >= self.config.min_same_weekday else "all_days"
        points = same if kind == "same_weekday" else recent
        if len(points) < (self.config.min_same_weekday if kind == "same_weekday" else 2):
            return None
        values = [series.get(h, Decimal(0)) for h in points]
        med = Decimal(median(values))
        mad = Decimal(median([abs(v - med) for v in values]))
        scale = Decimal(hours) / 24
        return _Day(d, spend, q6(med * scale), q6(mad * scale), len(points), kind, hours, provisional)

    def _anomalous(self, day: _Day) -> bool:
        cfg = self.config
        excess = day.excess
        if excess < cfg.min_excess_usd or excess <= 0:
            return False
        if excess < Decimal(str(cfg.min_relative_increase)) * max(day.baseline, Decimal(0)):
            return False
        return day.mad == 0 or excess >= Decimal(str(cfg.min_robust_z)) * MAD_TO_SIGMA * day.mad

    def _finding(
        self,
        project: str | None,
        category: str | None,
        flagged: Sequence[_Day],
        drivers: list[dict[str, Any]],
        started: date,
    ) -> list[Finding]:
        impact = sum((d.excess for d in flagged), Decimal(0))
        if not self.keep(impact):
            return []
        what = f"{category} spend in {project}" if category else f"spend in {project}"
        worst = max(flagged, key=lambda d: d.excess)
        ratio = f"{worst.spend / worst.baseline:.1f}×" if worst.baseline > 0 else "far above"
        prov = [d.day.isoformat() for d in flagged if d.provisional]
        summary = (
            f"Daily {what} was above its usual level on {counted(len(flagged), 'day')} by {fmt_usd(impact)} "
            f"in total; worst {worst.day.isoformat()}: {fmt_usd(worst.spend)} vs a usual "
            f"{fmt_usd(worst.baseline)} ({ratio}, median of {worst.points} earlier "
            f"{'same weekdays' if worst.kind == 'same_weekday' else 'days'})."
        )
        if prov:
            summary += f" Provisional: billing for {', '.join(prov)} may still grow."
        top = ", ".join(
            f"{e['subcategory']} +{fmt_usd(Decimal(str(e['increase_usd'])))}" for e in drivers[:3]
        )
        scope = Scope(project=project)
        extra = (category,) if category else ()
        return [
            Finding(
                kind=self.name,
                severity=self.severity(impact),
                title=f"{what[0].upper()}{what[1:]} jumped: {fmt_usd(impact)} above baseline",
                summary=summary,
                impact_usd=impact,
                window_start=datetime.combine(flagged[0].day, time(), UTC),
                window_end=datetime.combine(flagged[-1].day, time(), UTC) + _DAY,
                scope=scope,
                evidence={
                    "granularity": "daily",
                    "category": category,
                    "amount": self.config.amount,
                    "days": [_day_evidence(d) for d in flagged],
                    "drivers": drivers,
                    "started": started.isoformat(),
                },
                recommendation=(
                    f"Check what started in {project} on {flagged[0].day.isoformat()}"
                    + (f"; the increase is mostly {top}" if top else "")
                    + ". If it is expected (a new training run), nothing to do; otherwise stop the "
                    "resources behind it."
                ),
                fingerprint=fingerprint(self.name, scope, *extra, started.isoformat()),
                provisional=bool(prov),
            )
        ]


def _day_evidence(d: _Day) -> dict[str, Any]:
    return {
        "date": d.day.isoformat(),
        "spend_usd": money(d.spend),
        "baseline_usd": money(d.baseline),
        "mad_usd": money(d.mad),
        "excess_usd": money(d.excess),
        "baseline": d.kind,
        "baseline_points": d.points,
        "hours_covered": d.covered_hours,
        "provisional": d.provisional,
    }


def _weekly(flagged: set[date]) -> list[date]:
    """The days of `flagged` in runs shorter than a week, runs parted by a single usual day taken
    as one: training on some days of every week (a weekend, Thursday to Sunday), not a jump still
    running. Their weekday's baseline counts them: the first such days judged against the others
    are flagged, but once `min_same_weekday` weeks are seen they are that weekday's usual level. A
    jump that persists runs a week or more, even broken by a usual day (a job paused a day; taken
    as runs shorter than a week, it was its weekdays' norm in two weeks: helper 63's review), and
    its days stay out of every baseline. A rise on five weekdays of every week is such a pattern
    too once repeated: it is flagged for its first two weeks."""

    def near(d: date, step: timedelta) -> bool:
        return d + step in flagged or (d + step + step in flagged)

    out = []
    for f in flagged:
        lo, hi = f, f
        while near(lo, -_DAY):
            lo -= _DAY if lo - _DAY in flagged else 2 * _DAY
        while near(hi, _DAY):
            hi += _DAY if hi + _DAY in flagged else 2 * _DAY
        if (hi - lo).days < 6:
            out.append(f)
    return out


def _began(series: Mapping[date, Decimal], days: Sequence[tuple[date, int]]) -> date | None:
    """The first of `days` with spend in `series` (None: none has): where its usual level starts."""
    return next((d for d, _ in days if d in series), None)


def _drivers(
    project: str | None,
    flagged: Sequence[_Day],
    sub: Mapping[tuple[str | None, str], Mapping[date, Decimal]],
    days: Sequence[tuple[date, int]],
    began: date | None,
    keep: Callable[[str], bool] = lambda s: True,
) -> list[dict[str, Any]]:
    """Which subcategories grew on the flagged days, versus their median on the other full days
    since the project's spend `began` (`_began`), as `_flag` judges its days: the days of history
    before it are no usual level (a fleet whose export began 11 days before a jump was read with 14
    empty days of history, a usual GPU spend of $0 and a driver larger than the whole jump)."""
    flagged_days = {d.day for d in flagged}
    normal = [d for d, h in days if h == 24 and d not in flagged_days and began is not None and d >= began]
    out = []
    for (p, subcat), series in sub.items():
        if p != project or not keep(subcat):
            continue
        base = Decimal(median([series.get(d, Decimal(0)) for d in normal])) if normal else Decimal(0)
        inc = sum((series.get(d.day, Decimal(0)) - base * d.covered_hours / 24 for d in flagged), Decimal(0))
        if inc > 0:
            out.append({"subcategory": subcat, "increase_usd": money(inc), "usual_daily_usd": money(base)})
    return sorted(out, key=lambda e: (-e["increase_usd"], e["subcategory"]))[:5]
