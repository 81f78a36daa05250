"""The digest's "Top jobs": yesterday's cost per training job, its idle and cross-zone shares, and
the daily spend per job (a stacked chart), from the jobs engine (`monitor.jobs.build_jobs`).

Pure, like `alerts.digest`: the caller (`monitor.digest_data`) hands in the stored aggregates it
already read (cost hours and the GPU hours joined with utilization); `job_records` turns them into
the engine's per-job records, the one place this module calls the engine (re-point it there). The
figures add up: the top `n` jobs, the other jobs summed, and the spend without a job label make
yesterday's total to the micro (the engine assigns every row to one job, cluster fees shared by
node-hours), so the section never disagrees with "Yesterday" above it. Money is net (after
credits), as everywhere in the digest; idle dollars are the idle GPU-hours at the price paid
(`idle_gpu`'s figure); cross-zone dollars the job's `network.inter_zone` net cost.

Where the job names come from in the daemon: the stored aggregates keep the `[billing] labels`
keys, so `[jobs]` keys must be among them to be seen here (`job` is by default).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate

__all__ = [
    "NO_JOB",
    "DigestJob",
    "DigestJobs",
    "digest_jobs",
    "job_records",
    "jobs_blocks",
    "jobs_markdown",
    "render_jobs_chart",
    "top_jobs",
]

ZERO = Decimal(0)
_MICROS = Decimal(1_000_000)
INTER_ZONE = "network.inter_zone"
NO_JOB = "(no job label)"
_COLORS = ["#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD", "#DD8452", "#937860"]


def job_records(
    hourly: Iterable[Any], gpu_hours: Sequence[Any], jobs: Any, window_end: datetime, prices: Any = None
) -> list[Any]:
    """The adapter to the jobs engine: `CostHour`s (stored aggregates, `monitor.assemble.cost_hours`)
    and `GpuHour`s as `queries/jobs.sql`-shaped rows, through `monitor.jobs.build_jobs`. A row's job
    labels are its labels under the `[jobs]` keys (`JobsConfig.label_keys`)."""
    from monitor.jobs.build import build_jobs  # lazily: monitor.jobs imports the analysis

    keys = jobs.label_keys()
    wanted = set(keys)
    rows = [
        {
            "usage_hour": h.hour,
            "job_labels": ",".join(f"{k}={v}" for k, v in sorted(h.labels.items()) if k in wanted and v)
            or None,
            "project_id": h.project,
            "zone": h.zone,
            "cluster": h.cluster,
            "resource_name": h.instance,
            "instance_id": h.instance_id,
            "subcategory": h.subcategory,
            "gross_micros": int(h.cost * _MICROS),
            "net_micros": int(h.net * _MICROS),
            "usage_amount": h.usage_pricing_units,
        }
        for h in hourly
    ]
    return build_jobs(
        rows,
        list(gpu_hours),
        keys=keys,
        window_end=window_end,
        running_within=timedelta(hours=jobs.running_within_hours),
        prices=prices,
    )


@dataclass(frozen=True)
class DigestJob:
    """One line of "Top jobs": `name` a job, `other` the rest of the jobs summed (`count` of them),
    or `NO_JOB`. Money is net, exact."""

    name: str
    cost: Decimal
    idle_cost: Decimal = ZERO
    cross_zone_cost: Decimal = ZERO
    count: int = 1
    other: bool = False

    @property
    def idle_share(self) -> Decimal | None:
        return self.idle_cost / self.cost if self.cost > 0 else None

    @property
    def cross_zone_share(self) -> Decimal | None:
        return self.cross_zone_cost / self.cost if self.cost > 0 else None


@dataclass(frozen=True)
class DigestJobs:
    """`lines`: the top jobs, the others summed, the unlabelled spend (what is non-zero), in that
    order; they add up to `total`. `daily`: day -> series name -> net cost, for the chart (series:
    the top jobs' names, "other jobs", `NO_JOB`)."""

    lines: tuple[DigestJob, ...]
    daily: dict[date, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def total(self) -> Decimal:
        return sum((j.cost for j in self.lines), ZERO)

    @property
    def series(self) -> list[str]:
        return [j.name for j in self.lines]


def _line(name: str, records: Sequence[Any], other: bool = False) -> DigestJob:
    return DigestJob(
        name=name,
        cost=sum((r.net_cost for r in records), ZERO),
        idle_cost=sum((r.gpu.idle_cost for r in records), ZERO),
        cross_zone_cost=sum(
            (Decimal(r.net_by_subcategory.get(INTER_ZONE, 0)) / _MICROS for r in records), ZERO
        ),
        count=len(records),
        other=other,
    )


def _other_name(count: int) -> str:
    return f"{count} other job{'s' if count != 1 else ''}"


def top_jobs(day_records: Sequence[Any], chart_records: Sequence[Any], tz: str, n: int = 5) -> DigestJobs:
    """Yesterday's lines from the engine's records of yesterday (`day_records`), and the daily
    series from its records of the chart's days (`chart_records`, hours by day in `tz`)."""
    named = sorted((r for r in day_records if r.job is not None), key=lambda r: (-r.net_cost, r.job))
    if not named and all(r.job is None for r in chart_records):
        return DigestJobs(())  # no job labels at all: no section, no chart
    top, rest = named[:n], named[n:]
    lines = [_line(r.job, [r]) for r in top]
    if rest:
        lines.append(_line(_other_name(len(rest)), rest, other=True))
    unlabelled = [r for r in day_records if r.job is None]
    if unlabelled and any(r.net_cost or r.gpu.idle_cost for r in unlabelled):
        lines.append(_line(NO_JOB, unlabelled))
    shown = {r.job for r in top}
    others = _other_name(len(rest)) if rest else "other jobs"
    zone = ZoneInfo(tz)
    daily: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for r in chart_records:
        series = r.job if r.job in shown else (NO_JOB if r.job is None else others)
        for h in r.hours:
            daily[h.hour.astimezone(zone).date()][series] += h.net_cost
    return DigestJobs(tuple(lines), {d: dict(v) for d, v in sorted(daily.items())})


def digest_jobs(
    rows: Sequence[Any], gpu: Sequence[Any], day: date, tz: str, jobs: Any = None, n: int = 5
) -> DigestJobs:
    """The "Top jobs" of `day` and the daily series, from the digest's stored aggregates of the chart's
    days (`HourlyCost`s) and their GPU hours joined with utilization. `jobs`: `[jobs]` (None: its
    defaults)."""
    from monitor.assemble import cost_hours  # lazily, like `job_records`

    if jobs is None:
        from monitor.jobs.config import JobsConfig

        jobs = JobsConfig()
    zone = ZoneInfo(tz)
    lo = datetime.combine(day, time(), zone)
    hi = datetime.combine(day + timedelta(days=1), time(), zone)
    hours = cost_hours(rows)
    chart = job_records(hours, gpu, jobs, hi)
    yesterday = job_records(
        [h for h in hours if lo <= h.hour < hi], [g for g in gpu if lo <= g.hour < hi], jobs, hi
    )
    return top_jobs(yesterday, chart, tz, n)


def _pct(share: Decimal | None) -> str:
    return "-" if share is None else f"{(share * 100).quantize(Decimal('0.1'))}%"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def jobs_markdown(d: DigestJobs, day: date, money: Any) -> list[str]:
    """The "Top jobs" section as Markdown lines (`money` formats a Decimal like the digest does)."""
    lines = [
        f"## Top jobs ({day})",
        "",
        "| Job | Cost | Idle GPU | Idle share | Cross-zone | Cross-zone share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for j in d.lines:
        name = f"*{_cell(j.name)}*" if j.other or j.name == NO_JOB else _cell(j.name)
        lines.append(
            f"| {name} | {money(j.cost)} | {money(j.idle_cost)} | {_pct(j.idle_share)} | "
            f"{money(j.cross_zone_cost)} | {_pct(j.cross_zone_share)} |"
        )
    lines += [f"| **Total** | **{money(d.total)}** | | | | |", ""]
    return lines


def jobs_blocks(d: DigestJobs, money: Any) -> list[dict[str, Any]]:
    """One Block Kit section: a line per job (names come from labels: escaped)."""
    if not d.lines:
        return []
    text = "\n".join(
        f"{'_' if j.other or j.name == NO_JOB else '*'}{esc(j.name)}{'_' if j.other or j.name == NO_JOB else '*'}"
        f" {money(j.cost)}: idle {_pct(j.idle_share)}, cross-zone {_pct(j.cross_zone_share)}"
        for j in d.lines
    )
    return [{"type": "section", "text": {"type": "mrkdwn", "text": truncate("*Top jobs*\n" + text, 2900)}}]


def render_jobs_chart(
    d: DigestJobs, day: date, path: str | Path, *, provisional: Iterable[date] = (), currency: str = "USD"
) -> Path:
    """Daily spend stacked by job (the top jobs, the others, the unlabelled), the digest chart's
    size and style (`alerts.charts`); provisional days drawn faint. Writes the PNG, returns it."""
    from alerts.charts import CHART_DPI, CHART_SIZE_PX, finish_daily_chart

    days = sorted(d.daily)
    names = d.series or sorted({s for v in d.daily.values() for s in v})
    names += [s for s in sorted({s for v in d.daily.values() for s in v}) if s not in names]
    faint = set(provisional)
    fig = Figure(figsize=(CHART_SIZE_PX[0] / CHART_DPI, CHART_SIZE_PX[1] / CHART_DPI), dpi=CHART_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = list(range(len(days)))
    bottom = [0.0] * len(days)
    for i, name in enumerate(names):
        vals = [float(d.daily[x_day].get(name, ZERO)) for x_day in days]
        color = "#8C8C8C" if name == NO_JOB else _COLORS[i % len(_COLORS)]
        bars = ax.bar(x, vals, bottom=bottom, color=color, label=name, width=0.8)
        for bar, x_day in zip(bars, days, strict=True):
            if x_day in faint:
                bar.set_alpha(0.45)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylim(0, max([*bottom, 1.0]) * 1.2)
    return finish_daily_chart(fig, ax, x, days, currency, f"Daily spend by job to {day.isoformat()}", path)
