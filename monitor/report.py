"""The attributed cost report: gross / credits / net per group, provisional days marked.

`build_report` runs `queries/report.sql` (aggregated by the engine per usage day and group key) and
folds the days into one line per group, keeping apart the part of each line that falls on
provisional days, which Google may still correct. Rendering (rich table, JSON, CSV) is pure.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitor.billing_poll import provisional_since
from monitor.model import micros_to_decimal, plain_cents
from monitor.render import cents_grid, shares_adding_up
from monitor.sources.base import BillingSource
from monitor.sources.factory import search_range
from monitor.timeutil import floor_day, floor_hour, to_iso

log = logging.getLogger(__name__)

__all__ = [
    "GROUPINGS",
    "CostReport",
    "ReportLine",
    "build_report",
    "data_as_of",
    "data_extent",
    "data_window",
    "default_window",
    "parse_by",
    "render_csv",
    "render_json",
    "render_table",
]

#: `--by` values (plus `label:KEY`).
GROUPINGS = ("category", "project", "region", "zone", "instance", "service", "sku", "cluster")
#: The parts of a line's net a table shows (`credit_micros` is the three credits' sum).
_PARTS = ("gross_micros", "cud_micros", "sud_micros", "other_credit_micros")
_MONEY = ("gross_micros", "cud_micros", "sud_micros", "other_credit_micros", "credit_micros", "net_micros")
_NONE = "(none)"
#: Load days read past the later of the data's latest load and the window's end (the latest load's
#: own day, and the next for loads made after midnight UTC).
_LATE = timedelta(days=2)


def parse_by(text: str) -> tuple[str, str]:
    """`--by` as (group_by, label_key): `project` -> ("project", ""), `label:team` -> ("label", "team")."""
    if text.startswith("label:"):
        key = text.removeprefix("label:")
        if not key:
            raise ValueError('label grouping needs a key, e.g. "label:team"')
        return "label", key
    if text not in GROUPINGS:
        raise ValueError(f'unknown grouping "{text}"; use one of {", ".join(GROUPINGS)} or label:KEY')
    return text, ""


@dataclass(frozen=True)
class ReportLine:
    """One group's money in integer micros of `currency` (the invoice's); `provisional_net_micros`
    is the part on provisional days."""

    key: str | None
    pricing_model: str | None = None
    currency: str | None = None
    gross_micros: int = 0
    cud_micros: int = 0
    sud_micros: int = 0
    other_credit_micros: int = 0
    credit_micros: int = 0
    net_micros: int = 0
    provisional_net_micros: int = 0
    provisional: bool = False
    row_count: int = 0

    def add(self, row: dict[str, Any], provisional: bool) -> ReportLine:
        sums = {m: getattr(self, m) + int(row[m]) for m in _MONEY}
        return replace(
            self,
            **sums,
            row_count=self.row_count + int(row["row_count"]),
            provisional=self.provisional or provisional,
            provisional_net_micros=self.provisional_net_micros
            + (int(row["net_micros"]) if provisional else 0),
        )

    @property
    def label(self) -> str:
        name = self.key if self.key is not None else _NONE
        return f"{name} ({self.pricing_model})" if self.pricing_model else name

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "pricing_model": self.pricing_model,
            "currency": self.currency,
        }
        for m in (*_MONEY, "provisional_net_micros"):
            out[m.removesuffix("_micros")] = float(micros_to_decimal(getattr(self, m)))
            out[m] = getattr(self, m)
        out["provisional"] = self.provisional
        out["rows"] = self.row_count
        return out


@dataclass(frozen=True)
class CostReport:
    """Lines per key (and currency), and one total per currency: amounts in two currencies (billing
    accounts invoiced in USD and EUR in one export) are never added together. `total` is the
    window's total when it holds one currency, else None."""

    start: datetime
    end: datetime
    by: str
    provisional_since: datetime
    lines: tuple[ReportLine, ...]
    totals: tuple[ReportLine, ...]
    engine: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def shown_totals(self) -> tuple[ReportLine, ...]:
        """The totals a table or CSV shows: one per currency, a zero total for a window without rows."""
        return self.totals or (ReportLine(key="TOTAL"),)

    @property
    def total(self) -> ReportLine | None:
        return self.shown_totals[0] if len(self.shown_totals) == 1 else None

    def to_dict(self) -> dict[str, Any]:
        total = self.total
        return {
            "start": to_iso(self.start),
            "end": to_iso(self.end),
            "by": self.by,
            "engine": self.engine,
            "provisional_since": to_iso(self.provisional_since),
            "currencies": [t.currency for t in self.totals],
            "lines": [line.to_dict() for line in self.lines],
            "total": total.to_dict() if total is not None else None,
            "totals": [t.to_dict() for t in self.totals],
        }


def read_until(as_of: datetime, end: datetime) -> datetime:
    """Where the load days (`_PARTITIONTIME`) a window's query reads end: every row loaded by the
    time the data is read counts, however long after its usage, as in the billing poll, `analyze`
    and `jobs`. `report` read the loads of 7 days past the window's end: koku's real export has
    rows loaded 27 days after their usage, and `report` left out $0.10 of its $0.36 that `analyze`
    counted. On BigQuery a window in the past reads the load days from its start to now."""
    return max(as_of, end) + _LATE


def _base_params(start: datetime, end: datetime, as_of: datetime | None = None) -> dict[str, Any]:
    return {"usage_start": start, "usage_end": end, "partition_end": read_until(as_of or end, end)}


def data_extent(
    source: BillingSource, start: datetime, end: datetime, as_of: datetime | None = None
) -> tuple[datetime | None, datetime | None, datetime | None, int]:
    """(first usage start, last usage end, last export time, rows) of the data in [start, end),
    loaded by `as_of` (`read_until`; None: by the window's end).

    The last usage end is at least the end of the hour of the last usage start: koku's real
    `tmp_example.csv` has rows starting at 23:00 that end days before, and a default window ending
    at the latest `usage_end_time` left them out ($0.355465 of $0.355562, with no word)."""
    (row,) = source.run("extent", _base_params(start, end, as_of)).rows or [{}]
    last_start, last_end = row.get("max_usage_start"), row.get("max_usage_end")
    if last_start is not None and (last_end is None or last_end <= last_start):
        last_end = floor_hour(last_start) + timedelta(hours=1)
    return (
        row.get("min_usage_start"),
        last_end,
        row.get("max_export_time"),
        int(row.get("row_count") or 0),
    )


def default_window(
    latest_usage_end: datetime | None, start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """`--start/--end` defaults: end = latest usage in the data (else now), start = end - 14 days."""
    given = end is not None
    end = end or latest_usage_end or now
    start = start or end - timedelta(days=14)
    if start >= end:  # "--end (now)" to a user who gave no --end
        what = "--end" if given else "the data's latest usage" if latest_usage_end else "now"
        raise ValueError(
            f"--start ({to_iso(start)}) must be before {what} ({to_iso(end)})"
            + ("" if given else "; pass --end")
        )
    return start, end


def data_as_of(last_export: datetime | None, end: datetime) -> datetime:
    """What provisional days count back from in data read from files or a local table: its latest
    load, never before the window's end. One rule for `analyze` and `report`: a file exported
    before its usage (koku's real `2024-03-01_5.csv`: loaded in 2022 for usage in 2024) had `report`
    mark everything from 2022-07-31 provisional, where `analyze` said 2024-02-28."""
    return max(last_export, end) if last_export is not None else end


def data_window(
    source: BillingSource, start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime, datetime]:
    """(start, end, as_of) of a window over the exported data: `--start/--end` default to its
    extent (`default_window`), and `as_of`, what provisional days count back from, is its latest
    load (`data_as_of`): the latest of all the data, not of the window's own rows, since a local
    copy holds every row it was given (a window of 2 October read as of that day's last load left
    out the rows of 1 October loaded on the 31st from its month to date: $0.15 of $0.25 on koku's
    real export, where BigQuery's path, as of now, read them). One rule for `report` and `analyze`
    of files or a table (a live daemon's window counts from the clock instead). Raises ValueError
    when the window is empty or reversed."""
    lo, hi = search_range(source.engine, now)
    _, last_end, last_export, rows = data_extent(source, start or lo, end or hi, now)
    # the window's rows were not all the data's (a local copy: reading its extent is free)
    if (start is not None or end is not None) and source.engine != "bigquery":
        first, last, last_export, everywhere = data_extent(source, lo, hi, now)
        if not rows and everywhere and (start or lo) < (end or hi):  # a mistyped year read $0.00, silent
            log.warning(
                "no export rows in the window %s to %s; the data's usage runs from %s to %s",
                to_iso(start or lo),
                to_iso(end or hi),
                to_iso(first),
                to_iso(last),
            )
    start, end = default_window(last_end, start, end, now)
    return start, end, data_as_of(last_export, end)


def build_report(
    source: BillingSource,
    *,
    start: datetime,
    end: datetime,
    by: str = "category",
    now: datetime,
    provisional_days: int = 3,
) -> CostReport:
    """Run `report.sql` for [start, end) and fold days into lines, largest net first."""
    group_by, label_key = parse_by(by)
    since = provisional_since(now, provisional_days)
    params = _base_params(start, end, now) | {"group_by": group_by, "label_key": label_key}
    result = source.run("report", params)
    lines: dict[tuple[str | None, str | None, str | None], ReportLine] = {}
    totals: dict[str | None, ReportLine] = {}
    for row in result.rows:
        provisional = floor_day(row["usage_day"]) >= since
        cur = row["currency"]
        k = (row["group_key"], row["pricing_model"], cur)
        lines[k] = lines.get(k, ReportLine(key=k[0], pricing_model=k[1], currency=cur)).add(row, provisional)
        totals[cur] = totals.get(cur, ReportLine(key="TOTAL", currency=cur)).add(row, provisional)
    ordered = sorted(lines.values(), key=lambda line: (line.currency or "", -line.net_micros, line.label))
    return CostReport(
        start=start,
        end=end,
        by=by,
        provisional_since=since,
        lines=tuple(ordered),
        totals=tuple(totals[c] for c in sorted(totals, key=lambda c: c or "")),
        engine=source.engine,
        extra={"bytes_processed": result.bytes_processed},
    )


def _shown(lines: list[ReportLine], total: ReportLine) -> list[list[str]]:
    """One currency's lines, then its total, as a table shows them: gross, CUD, SUD, other credits
    and net to the cent. The net is the figure of record: the total's is the exact net to
    the cent, each line's its exact net to the cent, the lines' adding up to the total's; the
    parts are adjusted to them (`cents_grid`), so each column adds up to the total shown and each
    line's parts to its net (each cell rounded alone, seed 7's compute.cpu read 2,262.60 - 21.80 =
    2,240.81 and its TOTAL net 66,817.34 over lines summing to 66,817.32). The CSV and JSON keep
    the exact micros."""
    parts = {i: [micros_to_decimal(getattr(line, m)) for m in _PARTS] for i, line in enumerate(lines)}
    grid, total_parts = cents_grid(parts, len(_PARTS))  # the lines' sum is the total, to the micro
    shown = [grid[i] for i in range(len(lines))] + [total_parts]
    return [[plain_cents(v) for v in (*p, sum(p, Decimal(0)))] for p in shown]


def _sections(report: CostReport) -> Iterator[tuple[list[ReportLine], ReportLine]]:
    """Each currency's lines and its total, currencies in order (one section for most exports)."""
    for total in report.shown_totals:
        yield [line for line in report.lines if line.currency == total.currency], total


def render_table(report: CostReport, console: Console) -> None:
    """A rich table; `*` marks lines with cost on provisional days. Amounts in two currencies get a
    section and a total each, their shares of that total."""
    several = len(report.totals) > 1
    currency = "" if several or not report.totals else f" ({escape(report.totals[0].currency or '')})"
    notes = []
    if any(line.provisional for line in report.lines):  # not a window ending before them
        notes.append(
            f"* includes provisional days (from {report.provisional_since.date().isoformat()}): "
            "late and corrected rows may still change them"
        )
    if several:
        notes.append("each currency has its own total: amounts in two currencies are never added")
    table = Table(
        title=f"Cost by {escape(report.by)}{currency}, {to_iso(report.start)} to {to_iso(report.end)}",
        caption="; ".join(notes) or None,
    )
    table.add_column(report.by)
    if several:
        table.add_column("currency")
    for col in ("gross", "CUD", "SUD", "other credits", "net", "share"):
        table.add_column(col, justify="right")
    for lines, total in _sections(report):
        # adding up to the TOTAL's 100.0%, as in `analyze`'s Markdown; a share of nothing (or of a
        # net credit) is no figure: koku's real 2024-03-01_5.csv bills $0, and every line and its
        # TOTAL showed 0.0%
        shares = shares_adding_up({i: Decimal(line.net_micros) for i, line in enumerate(lines)})
        shares[len(lines)] = "100.0%" if total.net_micros > 0 else "-"
        for i, (line, cells) in enumerate(zip((*lines, total), _shown(lines, total), strict=True)):
            table.add_row(
                escape(line.label) + (" *" if line.provisional else ""),
                *([escape(line.currency or "")] if several else []),
                *cells,
                shares.get(i, "-"),
                end_section=line is (lines[-1] if lines else None) or line is total,
                style="bold" if line is total else None,
            )
    console.print(table)


def render_json(report: CostReport) -> str:
    return json.dumps(report.to_dict(), indent=2)


CSV_COLUMNS = (
    "key",
    "pricing_model",
    "currency",
    "gross",
    "cud_credits",
    "sud_credits",
    "other_credits",
    "credits",
    "net",
    "provisional_net",
    "provisional",
    "rows",
)


def render_csv(report: CostReport, out: TextIO | None = None) -> str:
    """CSV with exact decimal amounts (6 places, as summed in micros) in each row's `currency`; the
    totals, one per currency, are the last rows."""
    buf = out or io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for line in (*report.lines, *report.shown_totals):
        w.writerow(
            [
                line.key if line.key is not None else "",
                line.pricing_model or "",
                line.currency or "",
                *(f"{micros_to_decimal(getattr(line, m)):.6f}" for m in (*_MONEY, "provisional_net_micros")),
                "true" if line.provisional else "false",
                line.row_count,
            ]
        )
    return buf.getvalue() if out is None else ""
