"""The daily digest: a pure model (`DigestData`) and its renderings.

The caller builds `DigestData` from billing aggregates with `DigestData.from_dicts(...)` (plain
dicts of Decimals); this module only renders it: Markdown (`render_markdown`), Block Kit
(`render_blocks`), a PNG chart (`alerts.charts.render_chart`), and hands it on: `write_digest` to
files, `enqueue_digest` to the outbox, which delivers it like any alert (retries with backoff, the
look-up after an uncertain send, `gpucost outbox`, the operator alert on a permanent failure). Every figure is printed from the Decimals given, rounded
half-even to cents, so the digest matches `gpucost report` for the same day.

Like with like: while the latest day is provisional its billing rows are still arriving, so it is
compared only with the part of the day before whose rows have arrived for it too (`like_for_like`;
the caller, `monitor.digest_data`, puts that part in `previous_by_*` and the rest in
`not_compared`), and the digest says how far billing has got ("12 of 24 hours billed so far"). A
clock hour only one of the two days has (a DST change) is compared with nothing, whichever day has it
(`unpaired_by_*`, `previous_unpaired`). A complete day is compared with the whole day before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from alerts.blocks import money
from alerts.charts import render_chart
from alerts.digest_jobs import DigestJobs, jobs_blocks, jobs_markdown, render_jobs_chart
from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate
from alerts.notifier import Message
from alerts.outbox import enqueue
from monitor.model import Finding, cents_adding_up, to_cents

__all__ = [
    "DIGEST_GROUP",
    "DigestData",
    "DigestFinding",
    "digest_key",
    "digest_markdown",
    "digest_message",
    "enqueue_digest",
    "render_blocks",
    "render_markdown",
    "write_digest",
]

ZERO = Decimal(0)


@dataclass(frozen=True)
class DigestFinding:
    title: str
    kind: str
    severity: str
    impact_usd: Decimal
    project: str | None = None
    provisional: bool = False
    estimated: bool = False

    @classmethod
    def of(cls, f: Finding | DigestFinding) -> DigestFinding:
        if isinstance(f, DigestFinding):
            return f
        return cls(
            f.title, f.kind, f.severity.value, f.impact_usd, f.scope.project, f.provisional, f.estimated
        )


@dataclass(frozen=True)
class DigestData:
    """Everything one digest shows. `day` is "yesterday" in `timezone`; `previous` is the day before.

    `previous_by_*` are what `day` is compared with: the whole day before, or, when
    `like_for_like` (a provisional day), only the day before's rows whose counterparts (same clock
    hour, resource, SKU) have arrived for `day`; `not_compared` is the day before's cost left out.
    Then too `unpaired_by_*` is the part of `day` in a clock hour the day before does not have, and
    `previous_unpaired` the day before's cost in one `day` does not have (a DST change): the change
    is of `compared_by_*`, the rest of `day`, so that it is not the length of the day.
    `billed_hours` of `day_hours` hours of `day` have billing rows, the latest starting at
    `last_billed_hour` (local time); None when unknown.
    """

    day: date
    timezone: str
    yesterday_by_category: dict[str, Decimal]
    previous_by_category: dict[str, Decimal]
    yesterday_by_project: dict[str, Decimal]
    previous_by_project: dict[str, Decimal]
    mtd_by_category: dict[str, Decimal]
    daily_by_category: dict[date, dict[str, Decimal]]
    idle_gpu_by_day: dict[date, Decimal] = field(default_factory=dict)
    #: Days some GPU-hours of which have no utilization: "all" (none of the day's was read yet),
    #: "none" (none has any: read, no GPU reported), both meaning idle dollars unknown, or "some"
    #: (not read yet, or no GPU reported: `idle_gpu_by_day` is then a lower bound). Absent: every
    #: GPU-hour had utilization.
    idle_unread: dict[date, str] = field(default_factory=dict)
    top_findings: tuple[DigestFinding, ...] = ()
    #: False when no detection has run on the store (`gpucost digest` before any daemon cycle): no
    #: findings then means none looked for, not none found
    detected: bool = True
    provisional_days: frozenset[date] = frozenset()
    currency: str = "USD"
    #: The invoice month (`YYYYMM`, `monitor.month`) the month to date sums: rows by `invoice.month`.
    invoice_month: str | None = None
    billed_hours: int | None = None
    day_hours: int = 24
    last_billed_hour: datetime | None = None
    #: the day's export rows so far over the day before's (a provisional day): every hour may have
    #: rows while most of them are still to come (seed 11's 11-13 read "24 of 24 hours billed" at
    #: $15,188 against $18k days)
    rows_share: Decimal | None = None
    #: the day's net on an invoice month other than `invoice_month` (its first hours, before
    #: midnight Pacific, on the month before): counted in the day, not in the month to date
    other_month: Decimal = ZERO
    like_for_like: bool = False
    not_compared: Decimal = ZERO
    unpaired_by_category: dict[str, Decimal] = field(default_factory=dict)
    unpaired_by_project: dict[str, Decimal] = field(default_factory=dict)
    previous_unpaired: Decimal = ZERO
    #: "Top jobs" of `day` and the daily spend per job (`alerts.digest_jobs`); None: not computed.
    jobs: DigestJobs | None = None

    @classmethod
    def from_dicts(
        cls,
        *,
        day: date,
        timezone: str,
        yesterday_by_category: Mapping[str, Decimal],
        previous_by_category: Mapping[str, Decimal],
        yesterday_by_project: Mapping[str, Decimal],
        previous_by_project: Mapping[str, Decimal],
        mtd_by_category: Mapping[str, Decimal],
        daily_by_category: Mapping[date, Mapping[str, Decimal]],
        idle_gpu_by_day: Mapping[date, Decimal] | None = None,
        idle_unread: Mapping[date, str] | None = None,
        findings: Iterable[Finding | DigestFinding] = (),
        provisional_days: Iterable[date] = (),
        top_n: int = 5,
        currency: str = "USD",
        invoice_month: str | None = None,
        billed_hours: int | None = None,
        day_hours: int = 24,
        last_billed_hour: datetime | None = None,
        like_for_like: bool = False,
        not_compared: Decimal = ZERO,
        unpaired_by_category: Mapping[str, Decimal] | None = None,
        unpaired_by_project: Mapping[str, Decimal] | None = None,
        previous_unpaired: Decimal = ZERO,
        jobs: DigestJobs | None = None,
        detected: bool = True,
        rows_share: Decimal | None = None,
        other_month: Decimal = ZERO,
    ) -> DigestData:
        """Validate (Decimals only: a float here means money was summed inexactly upstream) and keep
        the `top_n` findings by impact."""
        top = sorted((DigestFinding.of(f) for f in findings), key=lambda f: (-f.impact_usd, f.title))[:top_n]
        return cls(
            day=day,
            timezone=timezone,
            yesterday_by_category=_dec("yesterday_by_category", yesterday_by_category),
            previous_by_category=_dec("previous_by_category", previous_by_category),
            yesterday_by_project=_dec("yesterday_by_project", yesterday_by_project),
            previous_by_project=_dec("previous_by_project", previous_by_project),
            mtd_by_category=_dec("mtd_by_category", mtd_by_category),
            daily_by_category={
                k: _dec(f"daily_by_category[{k}]", v) for k, v in sorted(daily_by_category.items())
            },
            idle_gpu_by_day=_dec("idle_gpu_by_day", idle_gpu_by_day or {}),
            idle_unread=dict(idle_unread or {}),
            top_findings=tuple(top),
            provisional_days=frozenset(provisional_days),
            currency=currency,
            invoice_month=invoice_month,
            billed_hours=billed_hours,
            day_hours=day_hours,
            last_billed_hour=last_billed_hour,
            like_for_like=like_for_like,
            not_compared=_dec("not_compared", {"total": not_compared})["total"],
            unpaired_by_category=_dec("unpaired_by_category", unpaired_by_category or {}),
            unpaired_by_project=_dec("unpaired_by_project", unpaired_by_project or {}),
            previous_unpaired=_dec("previous_unpaired", {"total": previous_unpaired})["total"],
            jobs=jobs,
            detected=detected,
            rows_share=rows_share,
            other_month=_dec("other_month", {"total": other_month})["total"],
        )

    @property
    def month_label(self) -> str:
        """` (invoice month 2026-12)` when known, for the "Month to date" lines."""
        m = self.invoice_month
        return f" (invoice month {m[:4]}-{m[4:]})" if m else ""

    @property
    def month_note(self) -> str:
        """Why the month to date can be below yesterday: on the 2nd of a month a UTC day's first
        eight hours are the month before on the invoice (Cloud Billing's days begin at midnight
        Pacific), so the month to date leaves out part of the day it follows."""
        if not to_cents(self.other_month):
            return ""
        return f" ({money(self.other_month)} of {self.day} is on another invoice month)"

    @property
    def previous_day(self) -> date:
        return date.fromordinal(self.day.toordinal() - 1)

    @property
    def yesterday_total(self) -> Decimal:
        return sum(self.yesterday_by_category.values(), ZERO)

    @property
    def previous_total(self) -> Decimal:
        return sum(self.previous_by_category.values(), ZERO)

    @property
    def compared_by_category(self) -> dict[str, Decimal]:
        return _compared(self.yesterday_by_category, self.unpaired_by_category if self.like_for_like else {})

    @property
    def compared_by_project(self) -> dict[str, Decimal]:
        return _compared(self.yesterday_by_project, self.unpaired_by_project if self.like_for_like else {})

    @property
    def compared_total(self) -> Decimal:
        return sum(self.compared_by_category.values(), ZERO)

    @property
    def day_cents(self) -> dict[str, Decimal]:
        """The day's total as shown, split to the cent into its compared part (the tables' total,
        "same") and the part in a clock hour the day before lacks ("unpaired", its note), so the two
        add up to the headline: each rounded alone, $240.00 and $10.00 stood under $250.01."""
        return self.day_split(self.compared_total, to_cents(self.yesterday_total))

    def day_split(self, compared: Decimal, total: Decimal | None = None) -> dict[str, Decimal]:
        """`day_cents` of a table's sum of the day's compared figures (`compared`)."""
        unpaired = sum(self.unpaired_by_category.values(), ZERO) if self.like_for_like else ZERO
        return cents_adding_up({"same": compared, "unpaired": unpaired}, total=total)

    @property
    def previous_cents(self) -> dict[str, Decimal]:
        """The day before's total as its daily row shows it, split to the cent into its compared
        part (the tables' total, "same"), its cost not compared yet ("held", `pending`) and that in
        a clock hour the day lacks ("unpaired"), so the three add up to it: each rounded alone,
        $100.00 compared and $100.00 not compared yet stood beside a day before of $200.01."""
        return self.previous_split(self.previous_total)

    def previous_split(self, compared: Decimal) -> dict[str, Decimal]:
        """`previous_cents` of a table's sum of the day before's compared figures (`compared`)."""
        held, unpaired = (self.not_compared, self.previous_unpaired) if self.like_for_like else (ZERO, ZERO)
        return cents_adding_up({"same": compared, "held": held, "unpaired": unpaired})

    @property
    def mtd_total(self) -> Decimal:
        return sum(self.mtd_by_category.values(), ZERO)

    @property
    def provisional(self) -> bool:
        return self.day in self.provisional_days

    @property
    def completeness(self) -> str:
        """`12 of 24 hours billed so far, latest 11:00-12:00` for a provisional day, else ``.

        >>> from datetime import UTC
        >>> DigestData.from_dicts(day=date(2026, 12, 2), timezone="UTC", yesterday_by_category={},
        ...     previous_by_category={}, yesterday_by_project={}, previous_by_project={},
        ...     mtd_by_category={}, daily_by_category={}, provisional_days=[date(2026, 12, 2)],
        ...     billed_hours=12, last_billed_hour=datetime(2026, 12, 2, 11, tzinfo=UTC)).completeness
        '12 of 24 hours billed so far, latest 11:00-12:00'
        """
        if not self.provisional or self.billed_hours is None:
            return ""
        if not self.billed_hours:
            return "no hours billed yet"
        text = f"{self.billed_hours} of {self.day_hours} hours billed so far"
        if self.last_billed_hour is not None:
            h = self.last_billed_hour
            text += f", latest {h:%H:%M}-{(h.hour + 1) % 24:02d}:{h:%M}"
        if self.rows_share is not None:
            text += f"; {self.rows_share * 100:.0f}% as many export rows as {self.previous_day}"
        return text

    @property
    def versus(self) -> str:
        """What the change is against: `vs 2026-12-01` or `vs the same hours and resources of ...`."""
        if not self.like_for_like:
            return f"vs {self.previous_day}"
        return f"vs the same hours and resources of {self.previous_day}"

    @property
    def change(self) -> str:
        """The headline change, or why it is held (a provisional day with no billed hour yet)."""
        if self.like_for_like and not self.billed_hours:
            return f"change vs {self.previous_day} held until billing rows arrive"
        return f"{delta(self.day_cents['same'], self.previous_cents['same'])} {self.versus}"

    @property
    def pending(self) -> str:
        """The day before's cost left out of a like-for-like change, said out loud (a stopped
        resource shows here until the day is complete), or ``."""
        if not self.like_for_like or not self.not_compared:
            return ""
        return (
            f"{money(self.previous_cents['held'])} of {self.previous_day}'s cost not compared yet: its rows for "
            f"{self.day} have not arrived (late billing, or the resource stopped)"
        )

    @property
    def unpaired(self) -> list[str]:
        """The cost left out of a like-for-like change for a clock hour only one of the two days has,
        said out loud: else a reader finds the day's figure above its table's total."""
        if not self.like_for_like:
            return []
        pairs = [
            (self.day, self.previous_day, self.day_cents["unpaired"] if self.unpaired_by_category else ZERO),
            (
                self.previous_day,
                self.day,
                self.previous_cents["unpaired"] if self.previous_unpaired else ZERO,
            ),
        ]
        return [
            f"{money(cost)} of {has}'s cost not compared: it is in an hour {lacks} does not have (the clocks"
            " changed)"
            for has, lacks, cost in pairs
            if cost
        ]


def _compared(day: Mapping[str, Decimal], unpaired: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """The day's figures less their `unpaired` parts, ordered as `_dec` orders; a line that is all
    unpaired goes (a $0.00 row compared with nothing)."""
    out = {k: v - unpaired.get(k, ZERO) for k, v in day.items() if k not in unpaired or v != unpaired[k]}
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def _dec(name: str, m: Mapping[Any, Any]) -> dict[Any, Decimal]:
    out = {}
    for k, v in m.items():
        if not isinstance(v, Decimal | int) or isinstance(v, bool):
            raise TypeError(f"DigestData.{name}[{k!r}]: expected Decimal, got {type(v).__name__}")
        out[k] = Decimal(v)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def delta(now: Decimal, before: Decimal) -> str:
    """`+$12.00 (+5.0%)`; the percentage only when the day before, as shown, is not zero. Both the
    change and the percentage are of the figures shown beside them (to the cent), and the
    percentage is of the day before's size with the change's sign: a fall never reads "+-0.0%" (a
    tiny fall rounds to a signed zero), a fall from a negative day (credits over cost) is never a
    rise, and a fall of under a cent never reads as a rise of 100% beside two "$0.00" (a real
    export's network line went from $0.000021 to $0: "+$0.00 (+100.0%)").

    >>> delta(Decimal("105"), Decimal("100"))
    '+$5.00 (+5.0%)'
    >>> delta(Decimal("994.94"), Decimal("1000"))
    '-$5.06 (-0.5%)'
    >>> delta(Decimal("99994.94"), Decimal("100000"))
    '-$5.06 (-0.0%)'
    >>> delta(Decimal("-150"), Decimal("-100"))
    '-$50.00 (-50.0%)'
    >>> delta(Decimal("10.004"), Decimal("5.006")), delta(Decimal("99.996"), Decimal("100"))
    ('+$4.99 (+99.6%)', '+$0.00 (+0.0%)')
    >>> delta(Decimal("0"), Decimal("0.000021")), delta(Decimal("0.050438"), Decimal("0.050560"))
    ('+$0.00', '+$0.00 (+0.0%)')
    """
    shown, shown_before = to_cents(now), to_cents(before)
    d = shown - shown_before
    sign = "-" if d < 0 else "+"
    text = f"{sign}{money(abs(d))}"
    if shown_before:
        pct = (abs(d) / abs(shown_before) * 100).quantize(Decimal("0.1"))
        text += f" ({sign}{pct}%)"
    return text


_NOT_LOOKED = (
    "Not looked for: no detection has run on this state store yet (the daemon runs one each cycle;"
    " `gpucost run --once` runs one)."
)
_UNREAD_NOTE = (
    '*Idle GPU: "not read" where gpucost had not read the GPUs\' utilization for those hours (it'
    ' reads back to its detection window), "unknown" where no GPU reported any, "≥" where some'
    " GPU-hours have none (not read yet, or no GPU reported: a VM without the agent).*"
)


def idle_cell(d: DigestData, day: date) -> str:
    """A day's idle GPU dollars, as far as utilization was read:
    "not read" when none of its GPU-hours was, "unknown" when none had any, "≥ $X" when only some
    had (seed 23's daemon showed
    $0.00 for days before its first read reached back, and $1,875.43 for a day it read from 06:00,
    where the day held $2,500.58)."""
    value = d.idle_gpu_by_day.get(day, ZERO)
    unread = d.idle_unread.get(day)
    if unread == "all":
        return "not read"
    if unread == "none":
        return "unknown"
    return f"≥ {money(value)}" if unread == "some" else money(value)


def _md_cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _prov(d: DigestData, day: date) -> str:
    if day not in d.provisional_days:
        return ""
    done = d.completeness if day == d.day else ""
    return f" *(provisional: {done})*" if done else " *(provisional)*"


def _marks(f: DigestFinding) -> str:
    """`provisional, estimated`, as they apply: Slack's findings said "provisional" only, and an
    impact priced from the catalog before its billing rows landed read as billed."""
    return ", ".join(m for m, on in (("provisional", f.provisional), ("estimated", f.estimated)) if on)


def _shown_totals(
    d: DigestData, now: Mapping[str, Decimal], before: Mapping[str, Decimal]
) -> tuple[Decimal, Decimal]:
    """A table's totals of the day's compared figures (`now`) and the day before's (`before`) as
    shown: each day's part split to the cent with the parts its notes show (`DigestData.day_split`,
    `previous_split`), so that they add up to the headline and to the day before's daily row."""
    return d.day_split(sum(now.values(), ZERO))["same"], d.previous_split(sum(before.values(), ZERO))["same"]


def _compare_table(
    title: str, label: str, now: Mapping[str, Decimal], before: Mapping[str, Decimal], d: DigestData
) -> list[str]:
    keys = list(now) + [k for k in before if k not in now]
    before_head = f"{d.previous_day}" + (" (same hours and resources)" if d.like_for_like else "")
    day_head = f"{d.day}" + (" (same hours)" if d.like_for_like and d.unpaired_by_category else "")
    lines = [f"## {title}", "", f"| {label} | {day_head} | {before_head} | Change |", "|---|---:|---:|---:|"]
    # the change is of the totals shown: of the exact ones, it read +$140.00 beside $240.01 and
    # $100.00 where a clock hour was left out
    shown_ta, shown_tb = _shown_totals(d, now, before)
    shown_now, shown_before = cents_adding_up(now, total=shown_ta), cents_adding_up(before, total=shown_tb)
    for k in keys:
        a, b = shown_now.get(k, ZERO), shown_before.get(k, ZERO)
        lines.append(f"| {_md_cell(k)} | {money(a)} | {money(b)} | {delta(a, b)} |")
    lines += [
        f"| **Total** | **{money(shown_ta)}** | **{money(shown_tb)}** | {delta(shown_ta, shown_tb)} |",
        "",
    ]
    return lines


def render_markdown(d: DigestData, chart_name: str | None = None, jobs_chart_name: str | None = None) -> str:
    """The digest as Markdown (what `write_digest` saves and the console prints)."""
    lines = [
        f"# gpucost daily digest: {d.day} ({d.timezone})",
        "",
        f"- Yesterday ({d.day}): **{money(d.yesterday_total)}**{_prov(d, d.day)}, {d.change}",
        *([f"- {d.pending}"] if d.pending else []),
        *(f"- {line}" for line in d.unpaired),
        f"- Month to date{d.month_label}: **{money(d.mtd_total)}**{d.month_note}",
        "",
    ]
    lines += _compare_table(
        "Yesterday by category", "Category", d.compared_by_category, d.previous_by_category, d
    )
    lines += _compare_table(
        "Yesterday by project", "Project", d.compared_by_project, d.previous_by_project, d
    )
    if d.jobs is not None and d.jobs.lines:
        lines += jobs_markdown(d.jobs, d.day, money)
    lines += ["## Month to date by category", "", "| Category | Month to date |", "|---|---:|"]
    lines += [f"| {_md_cell(k)} | {money(v)} |" for k, v in cents_adding_up(d.mtd_by_category).items()]
    lines += [f"| **Total** | **{money(d.mtd_total)}** |", "", "## Top findings", ""]
    if not d.top_findings:
        lines.append("No findings." if d.detected else _NOT_LOOKED)
    for i, f in enumerate(d.top_findings, 1):
        marks = _marks(f)
        where = f" ({_md_cell(f.project)})" if f.project else ""
        lines.append(
            f"{i}. **{money(f.impact_usd)}** {_md_cell(f.title)}{where} `{f.kind}`{f' *({marks})*' if marks else ''}"
        )
    lines += ["", "## Daily spend", ""]
    # every category of the chart's days, the month's first: one spent only on days of the month
    # before was in no column, and its row did not add up
    cats = list(d.mtd_by_category)
    cats += sorted({c for v in d.daily_by_category.values() for c in v} - set(cats))
    if d.daily_by_category:
        lines += ["| " + " | ".join(["Day", *(_md_cell(c) for c in cats), "Total", "Idle GPU"]) + " |"]
        lines += ["|---|" + "---:|" * (len(cats) + 2)]
    else:  # a header alone, with a column per category of none, was not a table Markdown reads
        lines += ["No spend in these days."]
    for day, by_cat in d.daily_by_category.items():
        shown = cents_adding_up(by_cat)
        cells = " | ".join(money(shown.get(c, ZERO)) for c in cats)
        lines.append(
            f"| {day}{_prov(d, day)} | {cells} | {money(sum(by_cat.values(), ZERO))} | {idle_cell(d, day)} |"
        )
    if d.provisional_days:
        lines += ["", "*Provisional days may still change as late billing rows arrive.*"]
    if any(day in d.idle_unread for day in d.daily_by_category):
        lines += ["", _UNREAD_NOTE]
    if chart_name:
        lines += ["", f"![Daily spend by category]({chart_name})"]
    if jobs_chart_name:
        lines += ["", f"![Daily spend by job]({jobs_chart_name})"]
    return "\n".join(lines) + "\n"


def _fields(
    now: Mapping[str, Decimal], before: Mapping[str, Decimal], d: DigestData, limit: int = 10
) -> list[dict[str, Any]]:
    """Block Kit's at most 10 fields: past them, the rest summed in the last one (the 11th project
    and after were dropped without a word). The figures add up to the totals the Markdown's
    tables show (`_shown_totals`)."""
    shown_now, shown_before = _shown_totals(d, now, before)
    now, before = cents_adding_up(now, total=shown_now), cents_adding_up(before, total=shown_before)
    items = list(now.items())
    shown = items if len(items) <= limit else items[: limit - 1]
    cells = [(esc(k), v, before.get(k, ZERO)) for k, v in shown]
    if len(shown) < len(items):
        rest = items[len(shown) :]
        was = sum((before.get(k, ZERO) for k, _ in rest), ZERO)
        cells.append((f"{len(rest)} others", sum((v for _, v in rest), ZERO), was))
    return [
        {"type": "mrkdwn", "text": truncate(f"*{name}*\n{money(v)} ({delta(v, b)})", 1900)}
        for name, v, b in cells
    ]


def _restricted(d: DigestData) -> str:
    return f" ({d.versus})" if d.like_for_like else ""


def render_blocks(d: DigestData) -> list[dict[str, Any]]:
    """Block Kit for Slack; project names and titles are escaped (they come from billing data)."""
    done = d.completeness
    prov = (f" _(provisional: {done})_" if done else " _(provisional)_") if d.provisional else ""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"GPU cost digest for {d.day}"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*Yesterday:* {money(d.yesterday_total)}{prov} ({d.change})\n"
                + (f"_{d.pending}_\n" if d.pending else "")
                + "".join(f"_{line}_\n" for line in d.unpaired)
                + f"*Month to date{d.month_label}:* {money(d.mtd_total)}{d.month_note}",
            },
        },
    ]
    if d.yesterday_by_category:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*By category*{_restricted(d)}"},
                "fields": _fields(d.compared_by_category, d.previous_by_category, d),
            }
        )
    if d.yesterday_by_project:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*By project*{_restricted(d)}"},
                "fields": _fields(d.compared_by_project, d.previous_by_project, d),
            }
        )
    if d.jobs is not None:
        blocks += jobs_blocks(d.jobs, money)
    if d.top_findings:
        lines = [
            f"{i}. *{money(f.impact_usd)}* {esc(f.title)}"
            + (f" ({esc(f.project)})" if f.project else "")
            + (f" _({_marks(f)})_" if _marks(f) else "")
            for i, f in enumerate(d.top_findings, 1)
        ]
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": truncate("*Top findings*\n" + "\n".join(lines), 2900)},
            }
        )
    elif not d.detected:
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*Top findings*\n{_NOT_LOOKED}"}}
        )
    if d.provisional_days:
        days = ", ".join(str(x) for x in sorted(d.provisional_days))
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"Provisional days: {days}"}]}
        )
    return blocks


DIGEST_GROUP = "digest"  # the outbox group of digest rows


def digest_key(day: date, channel: str) -> str:
    """The digest's idempotency key, one per (day, channel): the outbox row's key and the
    message metadata Slack keeps, so a restart neither loses nor repeats the post.

    >>> digest_key(date(2026, 11, 3), "#costs")
    'digest-2026-11-03-#costs'
    """
    return f"digest-{day}-{channel}"


def digest_message(d: DigestData, channel: str) -> Message:
    """The digest post: fallback text (notifications, search) and Block Kit."""
    text = f"GPU cost digest for {d.day}: {money(d.yesterday_total)} yesterday, {money(d.mtd_total)} month to date"
    if d.completeness:
        text += f" (yesterday provisional: {d.completeness})"
    return Message(digest_key(d.day, channel), channel, text, render_blocks(d))


def enqueue_digest(
    conn: sqlite3.Connection, d: DigestData, png_path: str | Path | None, channel: str, now: datetime
) -> list[str]:
    """Queue the digest for `channel` in the outbox (inside the caller's transaction): the post,
    then its chart (`png_path`, uploaded into the post's thread; None: no chart). Keys are derived
    from (digest, day, channel), so queueing a day twice adds nothing. Returns the keys added."""
    msg = digest_message(d, channel)
    sequence = int(f"{d.day:%Y%m%d}")
    common = {"group_key": DIGEST_GROUP, "receiver": channel, "sequence": sequence, "now": now}
    added = []
    if enqueue(conn, key=msg.idempotency_key, reason="digest", root_key=None, message=msg, **common):
        added.append(msg.idempotency_key)
    if png_path is None:
        return added
    charts = [("chart", Path(png_path), f"Daily spend to {d.day}")]
    jobs_png = Path(png_path).with_name(f"digest-{d.day}-jobs.png")  # written by write_digest
    if d.jobs is not None and d.jobs.daily and jobs_png.is_file():
        charts.append(("jobs-chart", jobs_png, f"Daily spend per job to {d.day}"))
    for suffix, path, title in charts:
        chart = Message(f"{msg.idempotency_key}-{suffix}", channel, f"Chart: {title}")
        if enqueue(
            conn,
            key=chart.idempotency_key,
            reason="digest_chart",
            root_key=msg.idempotency_key,
            message=chart,
            file_path=str(path.resolve()),
            file_title=title,
            **common,
        ):
            added.append(chart.idempotency_key)
    return added


def digest_markdown(out_dir: str | Path, day: date) -> Path:
    """Where `write_digest` writes a day's Markdown (the daemon looks there for a day already done)."""
    return Path(out_dir) / f"digest-{day}.md"


def write_digest(d: DigestData, out_dir: str | Path) -> tuple[Path, Path]:
    """Write `digest-YYYY-MM-DD.md` and `.png` under `out_dir` (`digest.out_dir`, created if
    missing; `ConfigError` if it is a file); returns both paths."""
    from alerts.console import unusable_dir
    from monitor.errors import ConfigError

    out = Path(out_dir)
    if (problem := unusable_dir(out, "digest.out_dir")) is not None:
        raise problem
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"digest.out_dir: cannot create {out} ({e.strerror or e}); create it writable by the user"
            " gpucost runs as, or point digest.out_dir at a writable directory"
        ) from None
    png = render_chart(d, out / f"digest-{d.day}.png")
    jobs_png = None
    if d.jobs is not None and d.jobs.daily:
        jobs_png = render_jobs_chart(
            d.jobs,
            d.day,
            out / f"digest-{d.day}-jobs.png",
            provisional=d.provisional_days,
            currency=d.currency,
        )
    md = digest_markdown(out, d.day)
    md.write_text(render_markdown(d, png.name, jobs_png.name if jobs_png else None), encoding="utf-8")
    return md, png
