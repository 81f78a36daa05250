"""The daily digest: a pure model (`DigestData`) and its renderings.

The caller builds `DigestData` from billing aggregates with `DigestData.from_dicts(...)` (plain
dicts of Decimals); this module only renders it: Markdown (`render_markdown`), Block Kit
(`render_blocks`), a PNG chart (`alerts.charts.render_chart`), and delivers it (`send_digest` to a
notifier, `write_digest` to files). Every figure is printed from the Decimals given, rounded
half-even to cents, so the digest matches `gpucost report` for the same day.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from alerts.blocks import money
from alerts.charts import render_chart
from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate
from alerts.notifier import DeliveryResult, Message, Notifier, Outcome
from monitor.model import Finding

__all__ = [
    "DigestData",
    "DigestDelivery",
    "DigestFinding",
    "render_blocks",
    "render_markdown",
    "send_digest",
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
    """Everything one digest shows. `day` is "yesterday" in `timezone`; `previous` is the day before."""

    day: date
    timezone: str
    yesterday_by_category: dict[str, Decimal]
    previous_by_category: dict[str, Decimal]
    yesterday_by_project: dict[str, Decimal]
    previous_by_project: dict[str, Decimal]
    mtd_by_category: dict[str, Decimal]
    daily_by_category: dict[date, dict[str, Decimal]]
    idle_gpu_by_day: dict[date, Decimal] = field(default_factory=dict)
    top_findings: tuple[DigestFinding, ...] = ()
    provisional_days: frozenset[date] = frozenset()
    currency: str = "USD"
    #: The invoice month (`YYYYMM`, `monitor.month`) the month to date sums: rows by `invoice.month`.
    invoice_month: str | None = None

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
        findings: Iterable[Finding | DigestFinding] = (),
        provisional_days: Iterable[date] = (),
        top_n: int = 5,
        currency: str = "USD",
        invoice_month: str | None = None,
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
            top_findings=tuple(top),
            provisional_days=frozenset(provisional_days),
            currency=currency,
            invoice_month=invoice_month,
        )

    @property
    def month_label(self) -> str:
        """` (invoice month 2026-12)` when known, for the "Month to date" lines."""
        m = self.invoice_month
        return f" (invoice month {m[:4]}-{m[4:]})" if m else ""

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
    def mtd_total(self) -> Decimal:
        return sum(self.mtd_by_category.values(), ZERO)

    @property
    def provisional(self) -> bool:
        return self.day in self.provisional_days


def _dec(name: str, m: Mapping[Any, Any]) -> dict[Any, Decimal]:
    out = {}
    for k, v in m.items():
        if not isinstance(v, Decimal | int) or isinstance(v, bool):
            raise TypeError(f"DigestData.{name}[{k!r}]: expected Decimal, got {type(v).__name__}")
        out[k] = Decimal(v)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def delta(now: Decimal, before: Decimal) -> str:
    """`+$12.00 (+5.0%)`; the percentage only when the day before is not zero.

    >>> delta(Decimal("105"), Decimal("100"))
    '+$5.00 (+5.0%)'
    """
    d = now - before
    sign = "-" if d < 0 else "+"
    text = f"{sign}{money(abs(d))}"
    if before:
        pct = (d / before * 100).quantize(Decimal("0.1"))
        text += f" ({'+' if pct >= 0 else ''}{pct}%)"
    return text


def _md_cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _prov(d: DigestData, day: date) -> str:
    return " *(provisional)*" if day in d.provisional_days else ""


def _compare_table(
    title: str, label: str, now: Mapping[str, Decimal], before: Mapping[str, Decimal], d: DigestData
) -> list[str]:
    keys = list(now) + [k for k in before if k not in now]
    lines = [f"## {title}", "", f"| {label} | {d.day} | {d.previous_day} | Change |", "|---|---:|---:|---:|"]
    for k in keys:
        a, b = now.get(k, ZERO), before.get(k, ZERO)
        lines.append(f"| {_md_cell(k)} | {money(a)} | {money(b)} | {delta(a, b)} |")
    ta, tb = sum(now.values(), ZERO), sum(before.values(), ZERO)
    lines += [f"| **Total** | **{money(ta)}** | **{money(tb)}** | {delta(ta, tb)} |", ""]
    return lines


def render_markdown(d: DigestData, chart_name: str | None = None) -> str:
    """The digest as Markdown (what `write_digest` saves and the console prints)."""
    lines = [
        f"# gpucost daily digest: {d.day} ({d.timezone})",
        "",
        f"- Yesterday ({d.day}): **{money(d.yesterday_total)}**{_prov(d, d.day)}, "
        f"{delta(d.yesterday_total, d.previous_total)} vs {d.previous_day}",
        f"- Month to date{d.month_label}: **{money(d.mtd_total)}**",
        "",
    ]
    lines += _compare_table(
        "Yesterday by category", "Category", d.yesterday_by_category, d.previous_by_category, d
    )
    lines += _compare_table(
        "Yesterday by project", "Project", d.yesterday_by_project, d.previous_by_project, d
    )
    lines += ["## Month to date by category", "", "| Category | Month to date |", "|---|---:|"]
    lines += [f"| {_md_cell(k)} | {money(v)} |" for k, v in d.mtd_by_category.items()]
    lines += [f"| **Total** | **{money(d.mtd_total)}** |", "", "## Top findings", ""]
    if not d.top_findings:
        lines.append("No findings.")
    for i, f in enumerate(d.top_findings, 1):
        marks = ", ".join(m for m, on in (("provisional", f.provisional), ("estimated", f.estimated)) if on)
        where = f" ({_md_cell(f.project)})" if f.project else ""
        lines.append(
            f"{i}. **{money(f.impact_usd)}** {_md_cell(f.title)}{where} `{f.kind}`{f' *({marks})*' if marks else ''}"
        )
    lines += ["", "## Daily spend", ""]
    cats = list(d.mtd_by_category) or sorted({c for v in d.daily_by_category.values() for c in v})
    lines += ["| Day | " + " | ".join(_md_cell(c) for c in cats) + " | Total | Idle GPU |"]
    lines += ["|---|" + "---:|" * (len(cats) + 2)]
    for day, by_cat in d.daily_by_category.items():
        cells = " | ".join(money(by_cat.get(c, ZERO)) for c in cats)
        lines.append(
            f"| {day}{_prov(d, day)} | {cells} | {money(sum(by_cat.values(), ZERO))} | "
            f"{money(d.idle_gpu_by_day.get(day, ZERO))} |"
        )
    if d.provisional_days:
        lines += ["", "*Provisional days may still change as late billing rows arrive.*"]
    if chart_name:
        lines += ["", f"![Daily spend by category]({chart_name})"]
    return "\n".join(lines) + "\n"


def _fields(
    now: Mapping[str, Decimal], before: Mapping[str, Decimal], limit: int = 10
) -> list[dict[str, Any]]:
    return [
        {
            "type": "mrkdwn",
            "text": truncate(f"*{esc(k)}*\n{money(v)} ({delta(v, before.get(k, ZERO))})", 1900),
        }
        for k, v in list(now.items())[:limit]
    ]


def render_blocks(d: DigestData) -> list[dict[str, Any]]:
    """Block Kit for Slack; project names and titles are escaped (they come from billing data)."""
    prov = " _(provisional)_" if d.provisional else ""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"GPU cost digest for {d.day}"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*Yesterday:* {money(d.yesterday_total)}{prov} "
                f"({delta(d.yesterday_total, d.previous_total)} vs {d.previous_day})\n"
                f"*Month to date{d.month_label}:* {money(d.mtd_total)}",
            },
        },
    ]
    if d.yesterday_by_category:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "*By category*"},
                "fields": _fields(d.yesterday_by_category, d.previous_by_category),
            }
        )
    if d.yesterday_by_project:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "*By project*"},
                "fields": _fields(d.yesterday_by_project, d.previous_by_project),
            }
        )
    if d.top_findings:
        lines = [
            f"{i}. *{money(f.impact_usd)}* {esc(f.title)}"
            + (f" ({esc(f.project)})" if f.project else "")
            + (" _(provisional)_" if f.provisional else "")
            for i, f in enumerate(d.top_findings, 1)
        ]
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": truncate("*Top findings*\n" + "\n".join(lines), 2900)},
            }
        )
    if d.provisional_days:
        days = ", ".join(str(x) for x in sorted(d.provisional_days))
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"Provisional days: {days}"}]}
        )
    return blocks


@dataclass(frozen=True)
class DigestDelivery:
    post: DeliveryResult
    chart: DeliveryResult | None

    @property
    def ok(self) -> bool:
        return self.post.outcome is Outcome.SENT and (
            self.chart is None or self.chart.outcome is Outcome.SENT
        )


def send_digest(
    notifier: Notifier, d: DigestData, png_path: str | Path, channel: str = "#gpucost-alerts"
) -> DigestDelivery:
    """Post the digest text, then upload the chart (`files_upload_v2`) into its thread.

    Not queued in the outbox: the caller re-runs the day on failure (the result says which part failed).
    Like the outbox after an uncertain send, it first looks for its idempotency key in the channel:
    a process killed after Slack took the post but before the caller recorded it does not post twice.
    """
    text = f"GPU cost digest for {d.day}: {money(d.yesterday_total)} yesterday, {money(d.mtd_total)} month to date"
    msg = Message(f"digest-{d.day}-{channel}", channel, text, render_blocks(d))
    found = notifier.lookup(msg)
    if found is not None and found.outcome is Outcome.SENT:
        return DigestDelivery(found, None)
    post = notifier.send(msg)
    if post.outcome is not Outcome.SENT:
        return DigestDelivery(post, None)
    where = post.channel or channel
    thread = post.ts if notifier.supports_threads else None
    chart = notifier.send_file(where, Path(png_path), f"Daily spend to {d.day}", thread)
    return DigestDelivery(post, chart)


def write_digest(d: DigestData, out_dir: str | Path) -> tuple[Path, Path]:
    """Write `digest-YYYY-MM-DD.md` and `.png` under `out_dir`; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = render_chart(d, out / f"digest-{d.day}.png")
    md = out / f"digest-{d.day}.md"
    md.write_text(render_markdown(d, png.name), encoding="utf-8")
    return md, png
