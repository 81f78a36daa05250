"""`job_budget`: a training job whose burn rate takes it past its budget (`[jobs.budgets]`).

A budget is keyed by a job name or by the value of any job label (`[jobs]` keys, e.g. `llm-pretrain
= 50000` or a `run` value): its rows are the billing rows carrying that value under one of the job
label keys (`JobsConfig.label_keys`), wherever they are (VMs, disks, buckets, several projects).
A job's budget covers its whole life, not a month: the detector sees every row the detection run
read (`month_to_date`: the window, the invoice month and the baselines' history before it) and adds
the sums of what gpucost holds before them (`DetectorInputs.held_spend`: the daemon's aggregates back
to their `covered_from`, `analyze`'s export as far back as the daemon would keep it). A run's read
start jumps a month forward when the Pacific month turns; counting only the rows read, a job's spend
fell by weeks of it from one hour to the next and its alert resolved. It says from when it counts
(`spend_from`): a job with spend in the first hour held may have begun before, and its message says
the spend is since then, not the job's whole life.

The projection is the project budgets' one (`budget_forecast.run_rate`, shared): the burn rate is
the mean hourly net spend over the last `run_rate_days` of settled billing (provisional hours are
an undercount while late rows land; they are counted at the larger of what was billed and the
rate), or over the job's provisional hours when it has no settled ones. A job that stopped (no
billed compute or utilization-estimated hour within `[jobs] running_within_hours` of the latest
hour billed in the export, as the jobs engine and a finished job's message count it) burns nothing
more.
Projected = spend so far + the rate over the next `horizon_days` (a job's end date is not in the
bill). Fires for the highest of `thresholds_pct` (of the budget) that the projection crosses:
fingerprint = (job, threshold in USD), so a growing projection is one alert, a raised budget or a
higher threshold a new one. Impact = the projected spend above that threshold (at 100 %: the
projected overrun).

Where the per-job hourly cost comes from: the detector inputs' cost hours, by their labels (the
jobs engine's identity, `monitor.jobs`: `JobsConfig.label_keys`), summed in the engine per hour,
label set, project and compute or not (`_spend_by_hour`): only those sums cross into Python. The
daemon's stored aggregates keep the `[billing] labels` keys only, so a job named by another key
(e.g. `k8s-label/...`) is seen once that key is stored too. A job whose value several keys carry
(a JobSet's pods by their `k8s-label/...`, its bucket by `job`) is said to be named by the first
of them in `[jobs]` order (`label_key`), as `monitor.jobs.identity.job_of` reads a label set.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import Field, field_validator

from monitor.detectors.base import Detector, DetectorConfig, fmt_usd, human, iso, money, q6, register
from monitor.detectors.budget_forecast import run_rate
from monitor.detectors.costs import Costs, billed_until
from monitor.detectors.inputs import CostHour, DetectorInputs, GpuHourTable, HeldSpend, LabelSpend
from monitor.model import Finding, Scope, fingerprint

if TYPE_CHECKING:
    from monitor.jobs.config import JobsConfig

__all__ = [
    "JobBudget",
    "JobBudgetConfig",
    "budgets_without_spend",
    "job_label_values",
    "reads_held",
    "without_spend_message",
]

_HOUR = timedelta(hours=1)
_ZERO = Decimal(0)
_COMPUTE = "compute."  # the subcategory of a job's compute sums (`_spend_by_hour`)


class JobBudgetConfig(DetectorConfig):
    """`run_rate_days`: recent settled days setting the burn rate. `horizon_days`: how far ahead the
    burn rate is projected. `thresholds_pct`: percents of each budget that alert (once each)."""

    min_impact_usd: Decimal = Field(default=Decimal(50), ge=0)
    run_rate_days: int = Field(default=3, ge=1, le=31)
    horizon_days: int = Field(default=7, ge=1, le=92)
    thresholds_pct: tuple[float, ...] = (100.0,)

    @field_validator("thresholds_pct")
    @classmethod
    def _thresholds(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or any(not 0 < t <= 1000 for t in v):
            raise ValueError(f"thresholds are percents of the budget above 0 and at most 1000, got {list(v)}")
        return tuple(sorted(set(v)))


def job_label_values(labels: Mapping[str, str], keys: Sequence[str]) -> dict[str, str]:
    """The adapter to the jobs engine's identity: value -> the first job label key carrying it.

    >>> job_label_values({"job": "llm", "run": "r7", "team": "ml"}, ("job", "run"))
    {'llm': 'job', 'r7': 'run'}
    """
    out: dict[str, str] = {}
    for key in keys:
        if (value := labels.get(key)) and value not in out:
            out[value] = key
    return out


def _watching(detectors: Sequence[Detector]) -> JobBudget | None:
    """The `job_budget` detector among those that run, if it runs with budgets."""
    watch = next((d for d in detectors if isinstance(d, JobBudget)), None)
    return watch if watch is not None and watch.jobs.budgets else None


def reads_held(detectors: Sequence[Detector]) -> bool:
    """Whether a job budget runs that counts what is held before the detection run's read start:
    `analyze` then reads its export as far back as the daemon keeps aggregates."""
    return _watching(detectors) is not None


def _held(inputs: DetectorInputs) -> HeldSpend:
    """What is held before the inputs' read start (nothing but the rows read when not known)."""
    return inputs.held_spend() if inputs.held_spend is not None else HeldSpend(None)


def _data_from(inputs: DetectorInputs, held: HeldSpend) -> datetime:
    """Where the billing a job budget counts begins: the store's start when known, else the read's."""
    return held.held_from if held.held_from is not None else inputs.history_start or inputs.window_start


def budgets_without_spend(detectors: Sequence[Detector], inputs: DetectorInputs) -> list[str]:
    """The `[jobs.budgets]` keys that no cost row of `inputs` carries under a job label key, when
    `job_budget` runs: such a budget can never fire, and nothing else would tell. Either the job has
    not started, or the key is not a value of its labels (a typo, the name of another key's value,
    a label the export does not carry); the caller says so (`without_spend_message`, a gauge)."""
    watch = _watching(detectors)
    if watch is None:
        return []
    budgets, keys = watch.jobs.budgets, watch.jobs.label_keys()
    seen: set[str] = set()
    for labels in [*inputs.hourly.label_sets.values(), *(s.labels for s in _held(inputs).spend)]:
        seen.update(v for v in job_label_values(labels, keys) if v in budgets)
    return sorted(set(budgets) - seen)


def without_spend_message(
    detectors: Sequence[Detector], inputs: DetectorInputs, budgets: Sequence[str]
) -> str:
    """What a user is told of `budgets_without_spend`, and how to tell which of the two it is."""
    watch = _watching(detectors)
    keys = watch.jobs.label_keys() if watch is not None else ()
    names = ", ".join(f'"{b}"' for b in budgets)
    one = len(budgets) == 1
    return (
        f"[jobs.budgets] {names}: no billing row since {iso(_data_from(inputs, _held(inputs)))}"
        f" carries {'it' if one else 'them'} under a job label ({', '.join(keys)}), so"
        f" {'its budget' if one else 'their budgets'} cannot fire: a job not started yet or ended"
        " before then, a key that is no label's value, or, in the daemon, a [jobs] label key added"
        " after those days were polled (`gpucost jobs` reads the export and lists the jobs)"
    )


def _hours(lo: datetime, hi: datetime) -> Decimal:
    return max(_ZERO, Decimal(str((hi - lo).total_seconds())) / 3600)


def _net(rows: Sequence[CostHour], lo: datetime | None, hi: datetime) -> Decimal:
    return sum((q6(r.net) for r in rows if (lo is None or lo <= r.hour) and r.hour < hi), _ZERO)


@register("job_budget")
class JobBudget(Detector):
    Config = JobBudgetConfig
    config: JobBudgetConfig
    month_to_date = True  # a job budget is for the job's life: every row read, not only the window
    needs_jobs = True  # built with `[jobs]` (`build_detectors(..., jobs=)`)

    def __init__(self, config: DetectorConfig | None = None, jobs: JobsConfig | None = None) -> None:
        super().__init__(config)
        if jobs is None:
            from monitor.jobs.config import JobsConfig  # lazily: monitor.jobs imports the detectors

            jobs = JobsConfig()
        self.jobs = jobs

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        as_of = min(now, inputs.window_end)
        budgets = self.jobs.budgets
        if not budgets or as_of <= inputs.window_start:
            return []
        keys = self.jobs.label_keys()
        rank = {key: i for i, key in enumerate(keys)}
        rows: dict[str, list[CostHour]] = defaultdict(list)
        label_key: dict[str, str] = {}

        def carried(value: str, key: str) -> None:  # the job's key: the first in `[jobs]` order
            if value not in label_key or rank[key] < rank[label_key[value]]:
                label_key[value] = key

        costs = inputs.hourly
        for r in _spend_by_hour(costs, budgets, keys, as_of):
            for value, key in job_label_values(r.labels, keys).items():
                if value in budgets:
                    rows[value].append(r)
                    carried(value, key)
        held = _held(inputs)
        before: dict[str, list[LabelSpend]] = defaultdict(list)  # sums of what is held before the rows
        for s in held.spend:
            for value, key in job_label_values(s.labels, keys).items():
                if value in budgets:
                    before[value].append(s)
                    carried(value, key)
        last_gpu = _last_gpu_hours(inputs.gpu_hour_table(), budgets, keys)
        # A job without GPU hours since `gpu_from` whose rows start before it may have earlier ones (a
        # billed GPU hour is also a compute row of the job): only then are those hours joined.
        split = inputs.gpu_from
        earlier = {j for j, rs in rows.items() if j not in last_gpu and split is not None and rs[0].hour < split}
        if earlier:
            last_gpu |= _last_gpu_hours(inputs.all_gpu_hour_table(), {j: budgets[j] for j in earlier}, keys)
        findings = []
        # quiet measured to the latest hour billed, as a finished job's message measures it: billing
        # lags the clock by hours, more than `running_within_hours` for some resources
        within = timedelta(hours=self.jobs.running_within_hours)
        jobs = sorted(rows.keys() | before.keys())
        quiet_to = billed_until(costs, inputs.window_start, as_of, within) if jobs else as_of
        span = _Span(_data_from(inputs, held), as_of, quiet_to)
        for job in jobs:
            amount = Decimal(str(budgets[job]))
            f = self._job(
                job, label_key[job], amount, rows[job], before[job], last_gpu.get(job), inputs, span
            )
            if f is not None:
                findings.append(f)
        return findings

    def projection(
        self,
        rows: Sequence[CostHour],
        before: Sequence[LabelSpend],
        last_gpu: datetime | None,
        inputs: DetectorInputs,
        span: _Span,
    ) -> dict[str, Any]:
        """The job's spend so far, its burn rate and the projection, as numbers a reader can add up:
        `spent_usd` is its net spend over [`spend_from`, `as_of`), the held sums before the rows
        read (`held_before_usd`) included."""
        as_of, data_from = span.as_of, span.data_from
        first = min([r.hour for r in rows] + [s.first for s in before])
        # as the jobs engine counts it: its compute rows' last hour when it has any (a checkpoint
        # bucket bills every hour after the job ended), else any row's
        compute = [r.hour for r in rows if r.subcategory.startswith("compute.")]
        last = max(compute + [s.last for s in before if s.compute], default=None)
        last = last if last is not None else max([r.hour for r in rows] + [s.last for s in before])
        spend_from = max(data_from, first)
        prov = min(max(inputs.provisional_from, spend_from), as_of)
        rated = max(spend_from, inputs.window_start)  # the rate from rows read, not held sums
        rr = run_rate(rows, rated, rated, prov, as_of, self.config.run_rate_days)
        latest = max(last, last_gpu) if last_gpu is not None else last
        running = latest + _HOUR >= span.quiet_to - timedelta(hours=self.jobs.running_within_hours)
        rate = rr.hourly if running else _ZERO
        held = sum((s.net for s in before), _ZERO)
        settled = held + _net(rows, None, prov)
        prov_billed = _net(rows, prov, as_of)
        prov_counted = q6(max(prov_billed, rate * _hours(prov, as_of)))
        ahead = q6(rate * 24 * self.config.horizon_days)
        return {
            "spend_from": iso(spend_from),
            "data_from": iso(data_from),
            # its first hour is the first hour held: it may have begun before, uncounted
            "started_before_data": first < data_from + _HOUR,
            "first_hour": iso(first),
            "last_billed_hour": iso(last),
            "last_utilization_hour": iso(last_gpu),
            "running": running,
            "as_of": iso(as_of),
            "spent_usd": q6(settled + prov_billed),
            "held_before_usd": q6(held),
            "settled_usd": q6(settled),
            "provisional_billed_usd": prov_billed,
            "provisional_counted_usd": prov_counted,
            "run_rate_from": iso(rr.start),
            "run_rate_to": iso(rr.end),
            "run_rate_hours": float(rr.hours),
            "run_rate_spend_usd": q6(rr.spend),
            "run_rate_from_provisional": rr.from_provisional,
            "hourly_burn_usd": q6(rate),
            "daily_burn_usd": q6(rate * 24),
            "horizon_days": self.config.horizon_days,
            "next_horizon_usd": ahead,
            "projected_usd": q6(settled + prov_counted + ahead),
            "_counted": settled + prov_counted,
            "_rate": rate,
        }

    def _job(
        self,
        job: str,
        key: str,
        amount: Decimal,
        rows: Sequence[CostHour],
        before: Sequence[LabelSpend],
        last_gpu: datetime | None,
        inputs: DetectorInputs,
        span: _Span,
    ) -> Finding | None:
        as_of = span.as_of
        p = self.projection(rows, before, last_gpu, inputs, span)
        projected: Decimal = p["projected_usd"]
        crossed = [t for t in self.config.thresholds_pct if projected > amount * Decimal(str(t)) / 100]
        if not crossed:
            return None
        pct = crossed[-1]
        level = q6(amount * Decimal(str(pct)) / 100)
        impact = q6(projected - level)
        if not self.keep(impact):
            return None
        counted, rate = p.pop("_counted"), p.pop("_rate")
        crosses_at = as_of if counted >= level else as_of + timedelta(hours=float((level - counted) / rate))
        what = "budget" if pct == 100 else f"{pct:g}% of its budget"
        spent: Decimal = p["spent_usd"]
        when = "has already crossed" if counted >= level else f"crosses {human(crosses_at)} at this rate"
        since = human(p["spend_from"])
        if p["started_before_data"]:  # not the job's whole life: say where the count starts
            since += ", the start of the billing gpucost holds (any spend before it is not counted),"
        summary = (
            f'Job "{job}" has a budget of {fmt_usd(amount)}; it has spent {fmt_usd(spent)} since '
            f"{since} and burns {fmt_usd(p['daily_burn_usd'])}/day, so it {when} its "
            f"{what} ({fmt_usd(level)}): {fmt_usd(projected)} within {self.config.horizon_days} days, "
            f"{fmt_usd(impact)} over."
        )
        if not p["running"]:
            summary += " The job has stopped (no recent billing or utilization)."
        if p["provisional_counted_usd"] != p["provisional_billed_usd"]:
            summary += " Recent hours are counted at the burn rate while their billing is still arriving."
        projects = sorted({r.project for r in [*rows, *before] if r.project})
        evidence: dict[str, Any] = {  # the headline first: alerts and reports show the first items
            "job": job,
            "budget_usd": money(amount),
            "spent_usd": money(spent),
            "daily_burn_usd": money(p["daily_burn_usd"]),
            "projected_usd": money(projected),
            "crosses_at": iso(crosses_at),
            "threshold_pct": pct,
            "threshold_usd": money(level),
            "overrun_usd": money(q6(projected - amount)),
            "label_key": key,
            "projects": projects,
        }
        evidence |= {
            k: (money(v) if isinstance(v, Decimal) else v) for k, v in p.items() if k not in evidence
        }
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=f'Job "{job}" projected {fmt_usd(projected)} vs its {what} {fmt_usd(level)}',
            summary=summary,
            impact_usd=impact,
            window_start=datetime.fromisoformat(p["spend_from"].replace("Z", "+00:00")),
            window_end=as_of,
            scope=Scope(project=projects[0] if len(projects) == 1 else None, labels={key: job}),
            evidence=evidence,
            recommendation=(
                f'Check what "{job}" is spending on (`gpucost jobs --job {job}`): idle GPUs, cross-zone '
                "traffic, Spot; stop it or raise its budget in [jobs.budgets] if the spend is planned."
            ),
            fingerprint=fingerprint(self.name, Scope(), job, f"{level:.2f}"),
            provisional=inputs.provisional_from < as_of,
        )


class _Span(NamedTuple):
    """What every job's spend of one run is counted over: from `data_from` (where the billing held
    begins) to `as_of`, running measured to `quiet_to`."""

    data_from: datetime
    as_of: datetime
    quiet_to: datetime


def _spend_by_hour(
    costs: Costs, budgets: Mapping[str, float], keys: Sequence[str], end: datetime
) -> list[CostHour]:
    """The budgeted jobs' spend before `end`, summed in the engine per hour, label set, project and
    compute or not: all a projection reads of the rows (`subcategory` is "compute." for compute,
    "" for the rest). At 5 M export rows a month, three budgeted jobs' 580,000 stored rows crossed
    into Python as `CostHour`s, 12.6 s of a 32 s detection run under cProfile."""
    budgeted = costs.labels_where(lambda labels: any(v in budgets for v in job_label_values(labels, keys)))
    if not budgeted:
        return []
    return [
        CostHour(
            hour=hour, project=project, subcategory=_COMPUTE if compute else "", cost=s.cost,
            credits=s.credits, labels=costs.labels_of(labels),
        )
        for (hour, labels, project, compute), s in costs.sums(
            ("hour", "labels", "project", "compute"), end=end, labels=budgeted
        ).items()
    ]  # fmt: skip


def _last_gpu_hours(
    hours: GpuHourTable, budgets: Mapping[str, float], keys: Sequence[str]
) -> dict[str, datetime]:
    """The latest GPU hour (billed or estimated from utilization) per budgeted job: utilization
    keeps a job running while its billing lags. Read from the table's columns, each label set's
    latest hour first (the hours of a node share one labels mapping: `monitor.assemble._billed`)."""
    latest: dict[int, tuple[Mapping[str, str], datetime]] = {}  # id -> (labels, kept alive: no id reused)
    for labels, hour in zip(hours["labels"], hours["hour"], strict=True):
        seen = latest.get(id(labels))
        if seen is None or hour > seen[1]:
            latest[id(labels)] = (labels, hour)
    out: dict[str, datetime] = {}
    for labels, hour in latest.values():
        for value in job_label_values(labels, keys):
            if value in budgets and (value not in out or hour > out[value]):
                out[value] = hour
    return out
