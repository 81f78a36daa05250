"""Build the daily digest's figures from the stored hourly aggregates (net cost, exact Decimals).

Days are calendar days in the digest's time zone, so "yesterday" means what the team means by it.
The month to date is the invoice month (`monitor.month`): the one holding the end of that day, with
rows counted by their `invoice_month` (late end-of-month usage and corrections land on the invoice
that carries them), the same month budgets and `/metrics` use. The figures are the same hourly
aggregates `gpucost report` sums, so the two always agree.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from alerts.digest import DigestData, DigestFinding
from monitor import month
from monitor.assemble import gpu_hours
from monitor.billing_poll import hourly_costs, provisional_since
from monitor.state.findings import open_findings
from monitor.state.store import StateStore
from monitor.utilization import load_samples

__all__ = ["digest_data"]

_CHART_DAYS = 14


def digest_data(
    store: StateStore,
    day: date,
    timezone: str,
    now: datetime,
    provisional_days: int,
    idle_threshold_pct: float = 10.0,
) -> DigestData:
    tz = ZoneInfo(timezone)
    end = datetime.combine(day + timedelta(days=1), time(), tz)
    invoice = month.current_month(end)
    chart_start = datetime.combine(day - timedelta(days=_CHART_DAYS - 1), time(), tz)
    start = min(chart_start, month.read_start(invoice))
    rows = hourly_costs(store, start, end, now=now, provisional_days=provisional_days)

    by_day_cat: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    by_day_proj: dict[date, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    mtd: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        d = r.usage_hour.astimezone(tz).date()
        by_day_cat[d][r.category] += r.net
        by_day_proj[d][r.keys.get("project_id") or "(no project)"] += r.net
        if month.row_month(r.keys.get("invoice_month"), r.usage_hour) == invoice:
            mtd[r.category] += r.net

    previous = day - timedelta(days=1)

    idle: dict[date, Decimal] = defaultdict(Decimal)
    samples = load_samples(store, chart_start, end)  # the chart's days only: not the month's reading
    charted = [r for r in rows if r.usage_hour >= chart_start]
    for g in gpu_hours(charted, samples, idle_threshold_pct, None, end):
        idle[g.hour.astimezone(tz).date()] += g.idle_cost

    chart_from = day - timedelta(days=_CHART_DAYS - 1)
    prov_from = provisional_since(now, provisional_days).astimezone(tz).date()
    findings = [r.payload for r in open_findings(store)]
    return DigestData.from_dicts(
        day=day,
        timezone=timezone,
        yesterday_by_category=dict(by_day_cat.get(day, {})),
        previous_by_category=dict(by_day_cat.get(previous, {})),
        yesterday_by_project=dict(by_day_proj.get(day, {})),
        previous_by_project=dict(by_day_proj.get(previous, {})),
        mtd_by_category=dict(mtd),
        daily_by_category={d: dict(v) for d, v in by_day_cat.items() if chart_from <= d <= day},
        idle_gpu_by_day={d: v for d, v in idle.items() if chart_from <= d <= day},
        findings=[_digest_finding(f) for f in findings],
        provisional_days=[d for d in by_day_cat if d >= prov_from],
        invoice_month=invoice,
    )


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
