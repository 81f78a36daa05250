"""The one definition of "month" in gpucost: the invoice month, as the billing export defines it.

Every export row carries `invoice.month` (`YYYYMM`, aggregated as `invoice_month`): the invoice the
cost lands on. It is not the month of `usage_start_time`: usage reported late at the end of a month
rolls over to the next month's invoice, and corrections of earlier usage are invoiced in the month
they are made ("Sometimes, at the end of a calendar month, there is a delay in usage reporting. The
costs of late-reported usage might not be included on that month's invoice and instead might roll
over to the next month's invoice", https://cloud.google.com/billing/docs/how-to/read-invoice).
So budgets, the digest's month to date and `/metrics` all put a row in its `invoice_month`
(`row_month`), never in the month of its usage hour.

Which month is "now", and how many hours of it are left, needs the month's boundaries in time:
Cloud Billing days begin at midnight US Pacific Time and observe US daylight saving ("The 24-hour
period for Cloud Billing reports begins at midnight US and Canadian Pacific Time (UTC-8) and
observes the US daylight saving time shifts", https://cloud.google.com/billing/docs/how-to/reports),
so a month runs from the 1st 00:00 America/Los_Angeles. A row without an invoice month (hand-written
fixtures) falls back to the month its usage hour is in on that clock.

    >>> from datetime import UTC, datetime
    >>> month_at(datetime(2026, 12, 1, 3, tzinfo=UTC))  # 19:00 on Nov 30 in California
    '202611'
    >>> [t.isoformat() for t in month_bounds("202612")]
    ['2026-12-01T08:00:00+00:00', '2027-01-01T08:00:00+00:00']
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from monitor.timeutil import naive_utc

__all__ = [
    "BILLING_TZ",
    "MONTH_PATTERN",
    "current_month",
    "month_at",
    "month_bounds",
    "month_label",
    "previous_month",
    "read_start",
    "row_month",
]

#: The clock Cloud Billing's days and months follow (see the module docstring).
BILLING_TZ = ZoneInfo("America/Los_Angeles")
#: An invoice month, `YYYYMM` (the export's `invoice.month`).
MONTH_PATTERN = r"\d{4}(0[1-9]|1[0-2])"
_MONTH = re.compile(rf"^{MONTH_PATTERN}$")
_TICK = timedelta(microseconds=1)


def month_at(at: datetime) -> str:
    """`YYYYMM` of the billing month holding the instant `at` (timezone-aware)."""
    if at.tzinfo is None:
        raise ValueError("naive datetime; pass a timezone-aware UTC time")
    return at.astimezone(BILLING_TZ).strftime("%Y%m")


def current_month(as_of: datetime) -> str:
    """The month whose spend is "to date" at `as_of`, an exclusive end (the last instant covered
    is just before it, so an end at a month's first instant still reports the month that ended)."""
    return month_at(as_of - _TICK)


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) of `month` (`YYYYMM`), in UTC."""
    if not _MONTH.match(month or ""):
        raise ValueError(f"bad invoice month {month!r}: expected YYYYMM, e.g. 202611")
    y, m = int(month[:4]), int(month[4:])
    ny, nm = (y + 1, 1) if m == 12 else (y, m + 1)
    start = datetime(y, m, 1, tzinfo=BILLING_TZ).astimezone(UTC)
    end = datetime(ny, nm, 1, tzinfo=BILLING_TZ).astimezone(UTC)
    return start, end


def previous_month(month: str) -> str:
    start, _ = month_bounds(month)
    return month_at(start - _TICK)


def read_start(month: str) -> datetime:
    """How far back usage must be read to see every row of `month`'s invoice: from the previous
    month's start, since corrections of last month's usage are invoiced this month."""
    return month_bounds(previous_month(month))[0]


def row_month(invoice_month: str | None, usage_hour: datetime) -> str:
    """The month a row counts in: its `invoice_month`, else (no invoice data) its usage month."""
    if invoice_month and _MONTH.match(invoice_month):
        return invoice_month
    return month_at(usage_hour)


def row_month_sql(month: str, invoice: str = "invoice_month", hour: str = "hour") -> tuple[str, list[Any]]:
    """`row_month(invoice, hour) == month` as a DuckDB condition over a naive-UTC `hour` column, with
    its parameters: the engines count a row in the month exactly as `row_month` does."""
    lo, hi = (naive_utc(b) for b in month_bounds(month))
    sql = f"CASE WHEN regexp_full_match(coalesce({invoice}, ''), ?) THEN {invoice} = ? ELSE {hour} >= ? AND {hour} < ? END"
    return sql, [MONTH_PATTERN, month, lo, hi]


def month_label(month: str) -> str:
    """`2026-11` for summaries and evidence."""
    return f"{month[:4]}-{month[4:]}"
