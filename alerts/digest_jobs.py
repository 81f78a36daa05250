"""The digest's "Top jobs": yesterday's cost per training job, its idle and cross-zone shares, and
the daily spend per job (a stacked chart), from the jobs engine (`monitor.jobs.build_jobs`).

Pure, like `alerts.digest`: the caller (`monitor.digest_data`) hands in what it read of the stored
aggregates (`JobsSection`). Yesterday: its rows and GPU hours joined with utilization, a few hours
at a time, converted into the engine's input rows (`stored_rows`) and built by the engine (`_build`,
the one place this module builds records: re-point it there). The chart's two weeks: sums the
store's engine made per hour and label set (`monitor.billing_poll.stored_job_sums`), through
`monitor.jobs.build.job_spend` (each job's spend by hour, the same to the micro: all the chart
reads; the digest runs every day, and two weeks of rows were most of its time). The
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
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate
from monitor.model import cents_adding_up, idle_usd

__all__ = [
    "NO_JOB",
    "DigestJob",
    "DigestJobs",
    "JobsSection",
    "chart_spend",
    "digest_jobs",
    "engine_rows",
    "job_records",
    "jobs_blocks",
    "jobs_markdown",
    "render_jobs_chart",
    "stored_rows",
    "top_jobs",
]

ZERO = Decimal(0)
_MICROS = Decimal(1_000_000)
INTER_ZONE = "network.inter_zone"
NO_JOB = "(no job label)"
_COLORS = ["#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD", "#DD8452", "#937860"]


def engine_rows(hourly: Iterable[Any], keys: Sequence[str]) -> list[dict[str, Any]]:
    """`CostHour`s (stored aggregates, `monitor.assemble.cost_hours`) as `queries/jobs.sql`-shaped
    rows: a row's job labels are its labels under the job label `keys` (`JobsConfig.label_keys`).
    Label sets repeat across rows: each distinct one is formatted once."""
    wanted = set(keys)
    formatted: dict[tuple, str | None] = {}
    out = []
    for h in hourly:
        items = tuple(h.labels.items())
        if items not in formatted:
            formatted[items] = _job_labels(items, wanted)
        out.append(
            {
                "usage_hour": h.hour,
                "job_labels": formatted[items],
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
        )
    return out


def _job_labels(labels: Iterable[tuple[str, str]], wanted: set[str]) -> str | None:
    """`queries/jobs.sql`'s `job_labels`: the job label keys present, sorted, as `k=v,k=v`."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels) if k in wanted and v) or None


def stored_rows(rows: Iterable[tuple], keys: Sequence[str]) -> list[dict[str, Any]]:
    """`engine_rows(cost_hours(...), keys)` straight from the stored aggregates: the tuples of
    `monitor.billing_poll.stored_job_columns` (hour, then `STORED_JOB_COLUMNS`, money in integer
    micros), without a `CostHour` and a parsed label dict per row. Money as `CostHour` has it:
    gross, and net = gross + credits."""
    from monitor.jobs.identity import parse_labels

    wanted = set(keys)
    formatted: dict[str, str | None] = {}
    out = []
    for hour, raw, project, zone, cluster, resource, instance_id, sub, gross, credits, usage in rows:
        raw = raw or ""
        if raw not in formatted:  # each label set parsed once
            formatted[raw] = _job_labels(parse_labels(raw).items(), wanted)
        out.append(
            {
                "usage_hour": hour,
                "job_labels": formatted[raw],
                "project_id": project,
                "zone": zone,
                "cluster": cluster,
                "resource_name": resource,
                "instance_id": instance_id,
                "subcategory": sub,
                "gross_micros": int(gross),
                "net_micros": int(gross) + int(credits),
                "usage_amount": Decimal(str(usage)) if usage is not None else ZERO,
            }
        )
    return out


def _build(
    rows: Sequence[dict[str, Any]],
    gpu_hours: Sequence[Any],
    jobs: Any,
    window_end: datetime,
    prices: Any = None,
    only: Collection[str] | None = None,
) -> list[Any]:
    """`monitor.jobs.build_jobs` on engine rows, with the `[jobs]` settings (`jobs`); `gpu_hours`
    `GpuHour`s or a table (`GpuHourTable`)."""
    from monitor.jobs.build import build_jobs  # lazily: monitor.jobs imports the analysis

    return build_jobs(
        rows,
        gpu_hours,
        keys=jobs.label_keys(),
        window_end=window_end,
        running_within=timedelta(hours=jobs.running_within_hours),
        prices=prices,
        only=only,
    )


def job_records(
    hourly: Iterable[Any],
    gpu_hours: Sequence[Any],
    jobs: Any,
    window_end: datetime,
    prices: Any = None,
    *,
    only: Collection[str] | None = None,
) -> list[Any]:
    """The adapter to the jobs engine: `CostHour`s and `GpuHour`s through `monitor.jobs.build_jobs`
    (`engine_rows`). `only`: just these jobs' records (the same as in the full list)."""
    return _build(engine_rows(hourly, jobs.label_keys()), gpu_hours, jobs, window_end, prices, only)


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
    #: GPU spend of the line with no utilization (not reported, or not read), and whether any of
    #: its GPU-hours had utilization: what its idle cell can claim (`idle_text`)
    unmonitored_cost: Decimal = ZERO
    monitored: bool = False
    gpu_hours: Decimal = ZERO

    def idle_text(self) -> tuple[str, str]:
        """(idle dollars, idle share) as far as utilization tells them (`monitor.model.idle_usd`):
        the share is a lower bound as the dollars are, and none when they are unknown."""
        dollars = idle_usd(self.idle_cost, self.unmonitored_cost, self.monitored, self.gpu_hours)
        if dollars == "unknown" or self.idle_share is None:
            return dollars, "-"
        return dollars, ("≥ " if self.unmonitored_cost else "") + _pct(self.idle_share)

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
        unmonitored_cost=sum((r.gpu.unmonitored_cost for r in records), ZERO),
        monitored=any(r.gpu.monitored_gpu_hours for r in records),
        gpu_hours=sum((Decimal(r.gpu.gpu_hours) for r in records), ZERO),
    )


def _other_name(count: int) -> str:
    return f"{count} other job{'s' if count != 1 else ''}"


def top_jobs(day_records: Sequence[Any], chart_records: Sequence[Any], tz: str, n: int = 5) -> DigestJobs:
    """Yesterday's lines from the engine's records of yesterday (`day_records`), and the daily
    series from its records of the chart's days (`chart_records`: `JobRecord`s or `JobSpend`s, only
    their jobs and hours are read; hours by day in `tz`)."""
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
    # series sorted by name: the order records come in (pieces of hours, jobs by cost) says nothing
    return DigestJobs(tuple(lines), {d: dict(sorted(v.items())) for d, v in sorted(daily.items())})


def chart_spend(sums: Any, keys: Sequence[str]) -> list[Any]:
    """Each job's spend by hour (`monitor.jobs.build.job_spend`) from the engine's sums of the
    stored aggregates (`monitor.billing_poll.JobSums`): each stored label set's job found once,
    as the engine finds it from `stored_rows`' job labels (which keep only the job keys with a
    value: all `job_of` reads of them)."""
    from monitor.jobs.build import job_spend
    from monitor.jobs.identity import job_of, parse_labels

    found: dict[str | None, str | None] = {}

    def job(raw: str | None) -> str | None:
        if raw not in found:
            found[raw] = job_of(parse_labels(raw), keys)
        return found[raw]

    return job_spend(
        ((h, job(raw), *rest) for h, raw, *rest in sums.money),
        ((h, job(raw), *rest) for h, raw, *rest in sums.fees),
        ((h, job(raw), *rest) for h, raw, *rest in sums.nodes),
    )


class JobsSection:
    """The "Top jobs" section (`digest_jobs`): the chart's days from the engine's sums of their
    hours (`chart`), yesterday from its stored rows and GPU hours, fed a piece at a time (`add`), so
    the caller never holds the chart's two weeks of rows and GPU hours (at bench scale 48, 7.4 M
    export rows over 45 days, they peaked the digest at 1.7 GB).

    Exact: every figure of the section is per usage hour (a row's money, the cluster fee shares of
    its hour, the GPU usage of its hour; the digest's GPU hours are billed ones, no estimates), so
    pieces added one by one give the whole window's figures to the micro. Pieces may be cut between
    any two hours, as long as no hour comes twice."""

    def __init__(self, day: date, tz: str, jobs: Any = None, n: int = 5):
        from monitor.detectors.inputs import GpuHourTable  # lazily: the detectors take 0.4 s to import

        if jobs is None:
            from monitor.jobs.config import JobsConfig

            jobs = JobsConfig()
        zone = ZoneInfo(tz)
        self._jobs, self._keys, self._tz, self._n = jobs, jobs.label_keys(), tz, n
        self._lo = datetime.combine(day, time(), zone)
        self._hi = datetime.combine(day + timedelta(days=1), time(), zone)
        self._chart: list[Any] = []
        self._day_rows: list[dict[str, Any]] = []
        self._day_gpu = GpuHourTable.from_rows([])

    def chart(self, sums: Any) -> JobsSection:
        """The chart's spend per job and hour from the engine's sums of some hours
        (`monitor.billing_poll.stored_job_sums`): `chart_spend`, all the chart reads."""
        self._chart += chart_spend(sums, self._keys)
        return self

    def add(self, rows: Sequence[tuple], gpu: Sequence[Any]) -> JobsSection:
        """Stored rows of some hours (`monitor.billing_poll.stored_job_columns`) and their GPU hours
        joined with utilization (a `GpuHourTable`, or `GpuHour`s): what of them falls on the
        section's day, the GPU hours kept as columns."""
        from monitor.detectors.inputs import GpuHourTable  # lazily, as in `__init__`

        lo, hi = self._lo, self._hi
        self._day_rows += [r for r in stored_rows(rows, self._keys) if lo <= r["usage_hour"] < hi]
        self._day_gpu = self._day_gpu.extended(GpuHourTable.of(gpu).between(lo, hi))
        return self

    @property
    def day(self) -> tuple[datetime, datetime]:
        """The section's day, [start, end): the hours whose rows `add` keeps."""
        return self._lo, self._hi

    def result(self) -> DigestJobs:
        yesterday = _build(self._day_rows, self._day_gpu, self._jobs, self._hi)
        return top_jobs(yesterday, self._chart, self._tz, self._n)


def digest_jobs(
    sums: Any, rows: Sequence[tuple], gpu: Sequence[Any], day: date, tz: str, jobs: Any = None, n: int = 5
) -> DigestJobs:
    """The "Top jobs" of `day` and the daily series, from the engine's sums of the chart's days
    (`monitor.billing_poll.stored_job_sums`), the day's stored aggregates
    (`monitor.billing_poll.stored_job_columns`) and their GPU hours joined with utilization, all at
    once (`JobsSection` takes them a piece at a time). `jobs`: `[jobs]` (None: its defaults)."""
    return JobsSection(day, tz, jobs, n).chart(sums).add(rows, gpu).result()


def _idle_share(j: DigestJob) -> str:
    dollars, share = j.idle_text()
    return dollars if dollars == "unknown" else share


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
    costs = _costs_shown(d)
    for j, cost in zip(d.lines, costs, strict=True):
        name = f"*{_cell(j.name)}*" if j.other or j.name == NO_JOB else _cell(j.name)
        idle, idle_share = j.idle_text()
        lines.append(
            f"| {name} | {money(cost)} | {idle} | {idle_share} | "
            f"{money(j.cross_zone_cost)} | {_pct(j.cross_zone_share)} |"
        )
    lines += [f"| **Total** | **{money(sum(costs, ZERO))}** | | | | |", ""]
    return lines


def _costs_shown(d: DigestJobs) -> list[Decimal]:
    """The lines' costs to the cent, adding up to their total as shown (`cents_adding_up`): each
    rounded alone, the demo's lines summed to $15,188.00 under a total of $15,187.99 (helper 72)."""
    shown = cents_adding_up({i: j.cost for i, j in enumerate(d.lines)})
    return [shown[i] for i in range(len(d.lines))]


def jobs_blocks(d: DigestJobs, money: Any) -> list[dict[str, Any]]:
    """One Block Kit section: a line per job (names come from labels: escaped)."""
    if not d.lines:
        return []
    text = "\n".join(
        f"{'_' if j.other or j.name == NO_JOB else '*'}{esc(j.name)}{'_' if j.other or j.name == NO_JOB else '*'}"
        f" {money(cost)}: idle {_idle_share(j)}, cross-zone {_pct(j.cross_zone_share)}"
        for j, cost in zip(d.lines, _costs_shown(d), strict=True)
    )
    return [{"type": "section", "text": {"type": "mrkdwn", "text": truncate("*Top jobs*\n" + text, 2900)}}]


def render_jobs_chart(
    d: DigestJobs, day: date, path: str | Path, *, provisional: Iterable[date] = (), currency: str = "USD"
) -> Path:
    """Daily spend stacked by job (the top jobs, the others, the unlabelled), the digest chart's
    size and style (`alerts.charts`); provisional days drawn faint. Writes the PNG, returns it."""
    from alerts.charts import finish_daily_chart, new_figure, stack_bars

    days = sorted(d.daily)
    names = d.series or sorted({s for v in d.daily.values() for s in v})
    names += [s for s in sorted({s for v in d.daily.values() for s in v}) if s not in names]
    faint = set(provisional)
    fig = new_figure()
    ax = fig.add_subplot(1, 1, 1)
    x = list(range(len(days)))
    series = [
        (
            name,
            [float(d.daily[x_day].get(name, ZERO)) for x_day in days],
            "#8C8C8C" if name == NO_JOB else _COLORS[i % len(_COLORS)],
        )
        for i, name in enumerate(names)
    ]
    bottom = stack_bars(ax, x, series, [x_day in faint for x_day in days])
    ax.set_ylim(0, max([*bottom, 1.0]) * 1.2)
    return finish_daily_chart(fig, ax, x, days, currency, f"Daily spend by job to {day.isoformat()}", path)
