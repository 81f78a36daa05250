"""Block Kit for alert notifications (and the plain-text fallback Slack shows in notifications).

Layout per finding: header, impact, scope, why, what to do, evidence summary. Every string that
comes from billing data goes through `escape_mrkdwn`; our own markup (`*bold*`) is added around the
escaped text. Field lengths are capped below Block Kit's limits, since `invalid_blocks` is a
permanent error and would turn a long label into a lost alert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from alerts.dedupe import Reason
from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate
from monitor.model import Finding, counted, to_cents
from monitor.model import usd as money  # `$1,234.57`, `-$3.00`: the one dollar format
from monitor.render import evidence_line

__all__ = ["money", "render_group", "render_summary", "snapshot"]

HEADER_MAX = 150
SECTION_MAX = 2900
MAX_BLOCKS = 50  # Slack's limit per message: more is `invalid_blocks`, a permanent failure
_SEVERITY_EMOJI = {"critical": ":rotating_light:", "warning": ":warning:", "info": ":information_source:"}
_REASON_TEXT = {
    Reason.NEW_GROUP: "New",
    Reason.NEW_FIRING: "Update: new finding",
    Reason.RESOLVED: "Update: resolved",
    Reason.ALL_RESOLVED: "Resolved",
    Reason.REPEAT: "Still firing",
}


def snapshot(f: Finding) -> dict[str, Any]:
    """What the log keeps of a finding so a later resolution message can name it."""
    return {
        "title": f.title,
        "kind": f.kind,
        "severity": f.severity.value,
        "impact_usd": str(f.impact_usd),
        "project": f.scope.project,
    }


def _plain(text: str, limit: int = HEADER_MAX) -> dict[str, Any]:
    return {"type": "plain_text", "text": truncate(text, limit), "emoji": True}


def _md(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, SECTION_MAX)}}


def _scope_text(f: Finding) -> str:
    s = f.scope
    parts = [
        f"{name}: `{esc(v)}`"
        for name, v in (
            ("project", s.project),
            ("zone", s.zone or s.region),
            ("cluster", s.cluster),
            ("instance", s.instance),
        )
        if v
    ]
    parts += [f"{esc(k)}=`{esc(v)}`" for k, v in sorted(s.labels.items())]
    return " · ".join(parts) or "(no scope)"


def _evidence_text(f: Finding) -> str:
    """The evidence as `gpucost analyze`'s report words it (`monitor.render.evidence_line`, one
    wording for both): the alert showed a raw dump of keys ("month: 2026-11, as_of: ...,
    settled_usd: 136919.196759, ... (+11 more in the report)") where the report was readable."""
    return esc(evidence_line({"kind": f.kind, "evidence": f.evidence}))


def _impact_text(f: Finding) -> str:
    marks = [m for m, on in (("provisional", f.provisional), ("estimated", f.estimated)) if on]
    suffix = f" _({', '.join(marks)})_" if marks else ""
    window = f"{f.window_start:%Y-%m-%d %H:%M}–{f.window_end:%Y-%m-%d %H:%M} UTC"
    return f"*Impact:* {money(f.impact_usd)} over {window}{suffix}"


def _header(f: Finding) -> str:
    """`CRITICAL: <title>` within the header's limit, cut in the middle so that a title's closing
    figure (", $3,291.64") stays: cut at the end, a GKE node's title lost its dollars ("..., $…")."""
    text = f"{f.severity.value.upper()}: {esc(f.title)}"
    tail = text[text.rfind(", $") :] if ", $" in text else ""
    if len(text) <= HEADER_MAX or not tail or len(tail) > HEADER_MAX // 3:
        return text  # `_plain` cuts it at the end
    return truncate(text[: -len(tail)], HEADER_MAX - len(tail)) + tail


def finding_blocks(f: Finding, *, new: bool) -> list[dict[str, Any]]:
    emoji = _SEVERITY_EMOJI.get(f.severity.value, "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(_header(f))},
        _md(f"{emoji} {_impact_text(f)}{'  :new:' if new else ''}"),
        _md(f"*Scope:* {_scope_text(f)}"),
        _md(f"*Why:* {esc(f.summary)}"),
        _md(f"*What to do:* {esc(f.recommendation)}"),
    ]
    if f.evidence:
        ctx = truncate(f"Evidence: {_evidence_text(f)} · fp `{f.fingerprint}`", SECTION_MAX)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": ctx}]})
    return blocks


def _resolved_blocks(resolved: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    lines = [
        f":white_check_mark: ~{esc(r.get('title', '?'))}~ (last impact {money(Decimal(r['impact_usd']))})"
        for r in resolved[:20]
    ]
    if len(resolved) > 20:
        lines.append(f"…and {len(resolved) - 20} more")
    return [_md("*Resolved:*\n" + "\n".join(lines))] if lines else []


def _total(findings: Sequence[Finding]) -> str:
    """Findings' impacts summed as they are listed (each to the cent), so a total always adds up
    to its lines: seed 23's first-start summary said "worth $24,883.35" over six lines that add up
    to $24,883.34 (the unrounded impacts summed)."""
    return money(sum((to_cents(f.impact_usd) for f in findings), Decimal(0)))


def _fallback(reason: Reason, firing: Sequence[Finding], resolved: Sequence[Mapping[str, Any]]) -> str:
    """The notification's preview. A resolution names what resolved: it named the group's first
    finding still firing ("Update: resolved: Commit 3× a2-highgpu-1g ...", advice still active,
    when the a2-highgpu-8g advice had resolved)."""
    head = _REASON_TEXT[reason]
    if reason is Reason.RESOLVED and resolved:
        still = f" ({counted(len(firing), 'finding')} still firing)" if firing else ""
        return _resolved_names(resolved) + still
    if firing:
        total = _total(firing)
        first = firing[0]
        more = f" (+{len(firing) - 1} more)" if len(firing) > 1 else ""
        text = f"[{first.severity.value.upper()}] {head}: {esc(first.title)}{more}"
        # a lone finding whose title ends with its figure said it twice ("...: $7,331.26: $7,331.26")
        return text if not more and first.title.endswith(total) else f"{text}: {total}"
    return _resolved_names(resolved)


def _resolved_names(resolved: Sequence[Mapping[str, Any]]) -> str:
    names = ", ".join(esc(r.get("title", "?")) for r in resolved[:3])
    return f"[RESOLVED] {names}" + (" …" if len(resolved) > 3 else "")


def render_group(
    reason: Reason,
    firing: Sequence[Finding],
    new: frozenset[str],
    resolved: Sequence[Mapping[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) for one group notification. `firing` is sorted by impact by the caller."""
    blocks: list[dict[str, Any]] = []
    if reason is not Reason.NEW_GROUP:
        blocks.append(_md(f"*{_REASON_TEXT[reason]}*"))
    tail = _resolved_blocks(resolved)
    shown = 0
    # as many findings as fit under Slack's block limit with the tail ("…and N more", resolved): a
    # fixed 8 counted 6 blocks each and forgot the dividers, so a group of 8 idle nodes in one
    # project made 56 blocks, which Slack refuses for good (seen in a synthetic group; an update
    # of 7 made 51)
    for f in firing:
        part = [{"type": "divider"}] if blocks else []
        part += finding_blocks(f, new=f.fingerprint in new and reason is not Reason.NEW_GROUP)
        more = 1 if shown + 1 < len(firing) else 0
        if len(blocks) + len(part) + more + len(tail) > MAX_BLOCKS:
            break
        blocks += part
        shown += 1
    if shown < len(firing):
        rest = _total(firing[shown:])
        blocks.append(_md(f"…and {len(firing) - shown} more findings ({rest})"))
    blocks.extend(tail)
    return truncate(_fallback(reason, firing, resolved), 3000), blocks


SUMMARY_MAX = 20  # findings listed in a first-start summary; the rest are counted


def render_summary(
    findings: Sequence[Finding], days: int, started: datetime, *, follow_up: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) for the one message that lists what ended before gpucost first
    started: history, told once, instead of one "New" alert each. `findings` sorted by the caller."""
    total = _total(findings)
    head = f"{'More of what' if follow_up else 'What'} gpucost found in the last {days} days"
    n = len(findings)
    intro = (
        f"Before gpucost started watching ({started:%Y-%m-%d %H:%M} UTC), the history shows {n}"
        f" finding{'s' if n != 1 else ''} worth {total} that had already ended. They are listed once"
        " here, not alerted one by one; anything still going on is alerted on its own."
    )
    lines = [
        f"{_SEVERITY_EMOJI.get(f.severity.value, '')} *{esc(f.title)}*: {money(f.impact_usd)}"
        f" ({f.window_start:%Y-%m-%d %H:%M}–{f.window_end:%Y-%m-%d %H:%M} UTC)"
        + (f" · project `{esc(f.scope.project)}`" if f.scope.project else "")
        for f in findings[:SUMMARY_MAX]
    ]
    if n > SUMMARY_MAX:
        rest = _total(findings[SUMMARY_MAX:])
        lines.append(f"…and {n - SUMMARY_MAX} more ({rest}); `gpucost analyze` lists them all")
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(head)}, _md(intro)]
    chunk: list[str] = []
    for line in lines:  # sections stay under Block Kit's text limit
        if chunk and len("\n".join([*chunk, line])) > SECTION_MAX:
            blocks.append(_md("\n".join(chunk)))
            chunk = []
        chunk.append(line)
    if chunk:
        blocks.append(_md("\n".join(chunk)))
    return truncate(f"{head}: {n} finding{'s' if n != 1 else ''}, {total}", 3000), blocks
