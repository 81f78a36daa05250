"""Build the daily digest's figures from the stored hourly aggregates (net cost, exact Decimals).

Days are calendar days in the digest's time zone, so "yesterday" means what the team means by it.
The month to date is the invoice month (`monitor.month`): the one holding the end of that day, with
rows counted by their `invoice_month` (late end-of-month usage and corrections land on the invoice
that carries them), the same month budgets and `/metrics` use. The figures are the same hourly
aggregates `gpucost report` sums, so the two always agree.

Like with like. Billing rows arrive hours to days after the usage, and late and corrected rows
keep changing past hours for days (/work/shared/reference/gcp.md section 2: loads come "at regular
intervals" with no latency guarantee; `monitor.billing_poll`: days from `provisional_since` on are
provisional). Nothing says an hour's rows arrive together, so the rule assumes they do not: an hour
can hold some resources' rows and not yet others' (the simulated demo fleet, whose lateness is
drawn per resource-hour, has ~150 of an hour's ~170 resource rows a day later). So a provisional
day's total is short of its final figure; compared with the whole day before it announces a drop
every morning that is only lag, and even compared with "the same hours of the day before" (the
demo read -46% on a steady fleet). The rule: the day before counts only its rows whose counterpart
has arrived for the latest day, the same (clock hour in the digest's zone, project, resource, SKU,
cost type) (`_match_key`); where the stored grain sums several resources (CPU, RAM, disks: no
resource name), the day before counts the share of its export rows that has arrived (`_previous`).
What is late on the latest day is left out of both days, wherever it falls; a new resource or SKU
still shows as an increase; the day before's cost with no counterpart
yet (late rows, or a resource that stopped) is reported as not compared yet
(`DigestData.not_compared`), never silently dropped, and is compared once the day is complete: a
day no longer provisional is compared with the whole day before. The latest day's own figures are
never cut: they are what `gpucost report` shows for that day.

A clock hour only one of the two days has (a DST change: the hour repeated when clocks go back, the
one skipped when they go forward) has nothing to be compared with, whichever day has it: its cost is
left out of the change and said (`DigestData.unpaired_by_category`, `previous_unpaired`), as a late
row's is. Counted as the day's, the 25-hour day read +4.2% on a steady fleet, and the day after it
compared its one 01:00 with both of the day before's (-4.0%).
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

from alerts.digest import DigestData, DigestFinding
from alerts.digest_jobs import JobsSection
from monitor import month
from monitor.assemble import gpu_hour_table, gpu_node_hours
from monitor.billing_poll import (
    ResourceHourNet,
    month_net_by_category,
    net_by_hour,
    net_by_resource_hour,
    provisional_since,
    rows_by_hour,
    stored_job_columns,
    stored_job_sums,
)
from monitor.jobs.build import CLUSTER_FEE
from monitor.state.analytics import AggregateStore
from monitor.state.findings import open_findings
from monitor.state.store import StateStore
from monitor.utilization.coverage import Coverage, hours_covered
from monitor.utilization.hourly import UtilHours
from monitor.utilization.mirror import join_tables as utilization_join_tables
from monitor.utilization.mirror import sync as sync_utilization
from monitor.utilization.mirror import whole_hours as utilization_copy_whole_hours
from monitor.utilization.state import load_util_hours

__all__ = ["digest_data"]

_CHART_DAYS = 14
_MICRO = Decimal("0.000001")
#: Stored rows whose GPU node-hours and utilization the digest reads at a time (and the rows
#: themselves on the digest's day). A stored row held about 2.3 KB in Python with its share of GPU
#: hours and utilization (bench scale 48: 710,207 rows, 1.6 GB), so a piece holds at most about
#: 230 MB; fewer, larger pieces are faster (each costs a few queries: on a small fleet, 14 one-day
#: pieces made the digest 0.3 s slower than one).
ROWS_AT_ONCE = 100_000


def digest_data(
    store: StateStore,
    day: date,
    timezone: str,
    now: datetime,
    provisional_days: int,
    idle_threshold_pct: float = 10.0,
    jobs: Any = None,
    *,
    aggregates: AggregateStore,
    rows_at_once: int = ROWS_AT_ONCE,
    coverage: Coverage = None,
    detected: bool = True,
) -> DigestData:
    """Billing from the `aggregates` store, utilization and findings from the state `store`.
    `jobs`: the `[jobs]` config naming jobs in "Top jobs" (None: its defaults). `rows_at_once`:
    the stored rows the chart reads at a time (see `ROWS_AT_ONCE`). `coverage`: the utilization
    the store has read (`monitor.cycle.utilization_coverage`; None: all of it), so that a day whose
    GPU-hours were not read says so instead of showing $0.00 of idle GPUs. `detected`: whether a
    detection has run on the store (its findings were looked for)."""
    with aggregates.session():  # one open of the aggregate file for all the digest's reads
        return _digest_data(
            store,
            day,
            timezone,
            now,
            provisional_days,
            idle_threshold_pct,
            jobs,
            aggregates,
            rows_at_once,
            coverage,
            detected,
        )


def _digest_data(
    store: StateStore,
    day: date,
    timezone: str,
    now: datetime,
    provisional_days: int,
    idle_threshold_pct: float,
    jobs: Any,
    aggregates: AggregateStore,
    rows_at_once: int,
    coverage: Coverage,
    detected: bool,
) -> DigestData:
    tz = ZoneInfo(timezone)
    end = datetime.combine(day + timedelta(days=1), time(), tz)
    invoice = month.current_month(end)
    chart_start = datetime.combine(day - timedelta(days=_CHART_DAYS - 1), time(), tz)
    # Days, projects and the month to date are sums from the engine (per hour, for the digest's time
    # zone); so is the comparison of the day with the day before (per resource-hour). Rows cross into
    # Python only for the jobs section, a piece of hours at a time.
    since = provisional_since(now, provisional_days)
    start = min(chart_start, since)

    by_day_cat: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    by_day_proj: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    mtd: dict[str, Decimal] = defaultdict(Decimal)
    mtd.update(month_net_by_category(aggregates, month.read_start(invoice), start, invoice))
    other_month = Decimal(0)  # the day's net on another invoice month
    for hour, category, project, invoice_month, net in net_by_hour(aggregates, start, end):
        d = hour.astimezone(tz).date()
        by_day_cat[d][category] += net
        by_day_proj[d][project or "(no project)"] += net
        if month.row_month(invoice_month, hour) == invoice:
            mtd[category] += net
        elif d == day:
            other_month += net

    prov_from = since.astimezone(tz).date()
    provisional = day >= prov_from
    # Net per resource-hour only where rows are matched: the day and the day before (`_previous`).
    before = datetime.combine(day - timedelta(days=1), time(), tz)
    sums = net_by_resource_hour(aggregates, before, end)
    latest = [r for r in sums if r.hour.astimezone(tz).date() == day]
    billed = sorted({r.hour for r in latest})
    arrived = _arrived(latest, tz) if provisional else None
    only_day, only_before = _unpaired_slots(day, tz) if provisional else (set(), set())
    prev_cat, prev_proj, held, prev_unpaired = _previous(
        sums, day - timedelta(days=1), tz, arrived, only_before
    )
    unpaired_cat: dict[str, Decimal] = defaultdict(Decimal)
    unpaired_proj: dict[str, Decimal] = defaultdict(Decimal)
    for r in latest:
        if _slot(r.hour, tz) in only_day:
            unpaired_cat[r.category] += r.net
            unpaired_proj[r.project or "(no project)"] += r.net

    # The chart's spend per job from the engine's sums of its hours (`stored_job_sums`). Its idle
    # dollars, and yesterday's jobs, a piece of hours at a time: at most `rows_at_once` stored rows'
    # GPU node-hours and utilization in Python at once, never two weeks of them (1.7 GB at bench
    # scale 48). The idle dollars and the jobs' figures are per hour (the digest joins billed GPU
    # hours only: no prices, no estimates), so the pieces add up exactly.
    idle: dict[date, Decimal] = defaultdict(Decimal)
    # GPU node-hours per day, and those whose utilization was never read (before the daemon's first
    # read reached back, a digest run on its own): their idle dollars are unknown, not $0.00
    node_hours: dict[date, int] = defaultdict(int)
    unread: dict[date, int] = defaultdict(int)
    dark: dict[date, int] = defaultdict(int)  # with no utilization, read or not
    section = JobsSection(day, timezone, jobs).chart(
        stored_job_sums(aggregates, chart_start, end, CLUSTER_FEE)
    )
    day_lo, day_hi = section.day
    sync_utilization(store, aggregates)  # the join reads whole hours' utilization from its copy
    covered = hours_covered(coverage)
    for lo, hi in _pieces(aggregates, chart_start, end, rows_at_once):
        # no prices, so no estimates: the join alone reads utilization (`monitor.assemble.gpu_hour_table`)
        if utilization_copy_whole_hours(lo, hi):
            util, tables = UtilHours.of(()), utilization_join_tables(store, aggregates, lo, hi)
        else:  # a time zone of a half-hour offset: pieces cut hours, read as `load_util_hours` reads them
            util, tables = load_util_hours(store, lo, hi), None
        nodes = gpu_node_hours(aggregates, lo, hi, since)
        joined = gpu_hour_table(nodes, util, idle_threshold_pct, None, hi, tables=tables)
        # read as columns, here and by the jobs engine (`JobsSection.add`, `monitor.jobs.build_jobs`)
        c = joined.columns
        day_of = {hour: hour.astimezone(tz).date() for hour in set(c["hour"])}
        for hour, cost, pct, project in zip(
            c["hour"], c["idle_cost"], c["mean_utilization_pct"], c["project"], strict=True
        ):
            d = day_of[hour]
            idle[d] += cost
            node_hours[d] += 1
            if pct is None:  # idle unknown: not read yet, or no GPU reported
                dark[d] += 1
                if not covered(project, hour):
                    unread[d] += 1
        if lo < day_hi and hi > day_lo:
            section.add(stored_job_columns(aggregates, max(lo, day_lo), min(hi, day_hi)), joined)
        del util, tables, joined  # before the next piece's are read

    chart_from = day - timedelta(days=_CHART_DAYS - 1)
    findings = [r.payload for r in open_findings(store)]
    day_rows = sum(r.rows for r in latest)
    before_rows = sum(r.rows for r in sums if r.hour.astimezone(tz).date() == day - timedelta(days=1))
    return DigestData.from_dicts(
        day=day,
        timezone=timezone,
        yesterday_by_category=dict(by_day_cat.get(day, {})),
        previous_by_category=prev_cat,
        yesterday_by_project=dict(by_day_proj.get(day, {})),
        previous_by_project=prev_proj,
        mtd_by_category=dict(mtd),
        daily_by_category={d: dict(v) for d, v in by_day_cat.items() if chart_from <= d <= day},
        idle_gpu_by_day={d: v for d, v in idle.items() if chart_from <= d <= day},
        # where GPU node-hours have no utilization (unread, or never reported: a VM without the
        # agent) the day's idle dollars are a floor, as "Top jobs" says of a job's (≥), or unknown
        idle_unread={
            d: _idle_known(unread.get(d, 0), n, node_hours[d])
            for d, n in dark.items()
            if chart_from <= d <= day
        },
        findings=[_digest_finding(f) for f in findings],
        provisional_days={d for d in by_day_cat if d >= prov_from} | ({day} if provisional else set()),
        invoice_month=invoice,
        billed_hours=len(billed),
        day_hours=_hours(datetime.combine(day, time(), tz), end),
        last_billed_hour=billed[-1].astimezone(tz) if billed else None,
        like_for_like=provisional,
        not_compared=held,
        unpaired_by_category=dict(unpaired_cat),
        unpaired_by_project=dict(unpaired_proj),
        previous_unpaired=prev_unpaired,
        jobs=section.result(),
        detected=detected,
        other_month=other_month,
        rows_share=Decimal(day_rows) / Decimal(before_rows) if provisional and before_rows else None,
    )


def _idle_known(unread: int, dark: int, node_hours: int) -> str:
    """What a day's idle GPU dollars are, of its GPU node-hours `unread` (utilization not read)
    and `dark` (none, read or not, `unread` among them): `DigestData.idle_unread`."""
    if unread == node_hours:
        return "all"
    return "none" if dark == node_hours else "some"


def _arrived(latest: list[ResourceHourNet], tz: ZoneInfo) -> dict[tuple, int]:
    """The latest day's `_match_key`s, with the export rows each holds so far."""
    out: dict[tuple, int] = defaultdict(int)
    for r in latest:
        out[_match_key(r, tz)] += r.rows
    return dict(out)


def _previous(
    rows: list[ResourceHourNet],
    previous: date,
    tz: ZoneInfo,
    arrived: dict[tuple, int] | None,
    unpaired: set[tuple[int, int]],
) -> tuple[dict[str, Decimal], dict[str, Decimal], Decimal, Decimal]:
    """The day before by category and by project: all of it, or (`arrived` given) only its sums whose
    `_match_key` the latest day has rows for; the net cost left out for rows yet to arrive, and that
    in the `unpaired` clock hours, which the latest day does not have (see the module docstring).

    Where the stored grain keeps no resource (CPU, RAM, disks, internet traffic: issue 12's
    aggregates name resources for GPUs and zone and region traffic only), one sum holds several
    resources' rows, and the latest day may hold only some of them yet: the day before counts the
    share of its rows that has arrived (`rows`), the rest is not compared yet. Matched whole, the
    demo's digest compared a day whose CPU and RAM rows were still arriving with the whole day
    before: -3.6% where the export, resource by resource, says +0.9%."""
    by_cat: dict[str, Decimal] = defaultdict(Decimal)
    by_proj: dict[str, Decimal] = defaultdict(Decimal)
    held = unpaired_net = Decimal(0)
    for r in rows:
        if r.hour.astimezone(tz).date() != previous:
            continue
        if _slot(r.hour, tz) in unpaired:
            unpaired_net += r.net
            continue
        counted = r.net
        if arrived is not None:
            have = arrived.get(_match_key(r, tz), 0)
            if have == 0:
                held += r.net
                continue
            if r.resource is None and have < r.rows:
                counted = (r.net * have / r.rows).quantize(_MICRO)
        by_cat[r.category] += counted
        by_proj[r.project or "(no project)"] += counted
        held += r.net - counted
    return dict(by_cat), dict(by_proj), held, unpaired_net


def _match_key(r: ResourceHourNet, tz: ZoneInfo) -> tuple:
    """What makes a row of one day "the same" as a row of the day before: clock hour (`_slot`),
    project, resource, SKU and cost type. Labels and the invoice month are left out: they may change
    from one day to the next for the same usage (the sums `net_by_resource_hour` gives are already
    over them)."""
    return (_slot(r.hour, tz), r.project, r.resource, r.sku_id, r.subcategory, r.cost_type)


def _pieces(
    aggregates: AggregateStore, start: datetime, end: datetime, rows_at_once: int
) -> list[tuple[datetime, datetime]]:
    """[start, end) cut between hours into pieces of at most `rows_at_once` stored rows (an hour
    of more is a piece of its own): a small fleet's two weeks are one piece, read in one go."""
    cuts, rows = [start], 0
    for hour, n in rows_by_hour(aggregates, start, end):
        if rows and rows + n > rows_at_once:
            cuts.append(hour)
            rows = 0
        rows += n
    return list(pairwise([*cuts, end]))


def _hours(start: datetime, end: datetime) -> int:
    """The billing hours of a day between two local midnights: the UTC hours starting in it (23 or
    25 on a DST change; on Lord Howe's half-hour changes 23 of a 23.5-hour day and 25 of a 24.5-hour
    one, where rounding its length said 24). Counted in UTC, not wall time."""
    first = math.ceil(start.astimezone(UTC).timestamp() / 3600)
    return max(0, math.ceil(end.astimezone(UTC).timestamp() / 3600) - first)


def _slot(hour: datetime, tz: ZoneInfo) -> tuple[int, int]:
    """An hour's clock hour in the digest's zone, so that DST days line up, and its `fold`: the hour
    repeated when clocks go back is another hour than the first (keyed by clock time alone, the day
    after a 25-hour day matched its 01:00 with both of the day before's). Not its minute: where a
    change moves clocks by half an hour (Australia/Lord_Howe), every hour after it would start at
    another minute than the day before's, and nothing after the change was compared."""
    local = hour.astimezone(tz)
    return local.hour, local.fold


def _day_slots(day: date, tz: ZoneInfo) -> set[tuple[int, int]]:
    """The `_slot`s of the stored (UTC) hours a local day holds, from the calendar, not the rows:
    24, or 23 and 25 on a DST change."""
    t = datetime.combine(day, time(), tz).astimezone(UTC).replace(minute=0)
    end = datetime.combine(day + timedelta(days=1), time(), tz)
    slots = set()
    while t < end:
        if t.astimezone(tz).date() == day:
            slots.add(_slot(t, tz))
        t += timedelta(hours=1)
    return slots


def _unpaired_slots(day: date, tz: ZoneInfo) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The clock hours `day` has and the day before has not, and those the day before has and `day`
    has not: on a DST change, one hour that nothing can be compared with."""
    now, before = _day_slots(day, tz), _day_slots(day - timedelta(days=1), tz)
    return now - before, before - now


def _digest_finding(p: dict) -> DigestFinding:
    return DigestFinding(
        title=p["title"],
        kind=p["kind"],
        severity=p["severity"],
        impact_usd=Decimal(str(p["impact_usd"])),
        project=(p.get("scope") or {}).get("project"),
        provisional=bool(p.get("provisional")),
        estimated=bool(p.get("estimated")),
    )
