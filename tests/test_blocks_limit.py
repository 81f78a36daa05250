"""A group alert stays under Slack's 50 blocks, however many findings it holds: more is
`invalid_blocks`, which Slack refuses for good, and the alert would be lost."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from alerts.blocks import MAX_BLOCKS, render_group
from alerts.dedupe import Reason
from monitor.model import Finding, Scope, Severity

T = datetime(2026, 11, 1, tzinfo=UTC)


def _finding(i: int) -> Finding:
    return Finding(
        "idle_gpu",
        Severity.WARNING,
        f"Idle GPUs on node-{i}",
        "8x H100 idle",
        Decimal(100 + i),
        T,
        T,
        Scope(project="ml", instance=f"node-{i}"),
        {"idle_gpu_hours": 16, "gpus": 8},
        "Stop it",
        f"fp{i}",
    )


@pytest.mark.parametrize("reason", [Reason.NEW_GROUP, Reason.NEW_FIRING, Reason.REPEAT])
@pytest.mark.parametrize("n", [1, 6, 7, 8, 30])
def test_a_group_of_any_size_fits_slacks_block_limit(reason: Reason, n: int) -> None:
    firing = [_finding(i) for i in range(n)]
    resolved = [{"title": f"old {i}", "impact_usd": "5"} for i in range(25)]
    _, blocks = render_group(reason, firing, frozenset(f.fingerprint for f in firing), resolved)
    assert len(blocks) <= MAX_BLOCKS
    headers = sum(1 for b in blocks if b["type"] == "header")
    more = [b for b in blocks if b["type"] == "section" and b["text"]["text"].startswith("…and ")]
    assert headers == n or (headers < n and more), (n, headers)
    if headers < n:  # the rest counted, with their impact as listed
        rest = sum(100 + i for i in range(headers, n))
        assert more[0]["text"]["text"] == f"…and {n - headers} more findings (${rest:,.2f})"


def test_a_long_title_keeps_its_dollars_in_the_header() -> None:
    from alerts.blocks import HEADER_MAX, finding_blocks

    title = (
        "Idle GPUs on GKE node gke-llm-train-h100-pool-c1a0321d-1eb0 (llm-train/h100-pool): 8× H100 80GB"
        " idle for 42 h until 2026-11-07 03:00 UTC, $3,291.64"
    )
    f = _finding(0)
    f = Finding(f.kind, Severity.CRITICAL, title, *(getattr(f, k) for k in ("summary", "impact_usd")),
                f.window_start, f.window_end, f.scope, f.evidence, f.recommendation, f.fingerprint)  # fmt: skip
    header = finding_blocks(f, new=True)[0]["text"]["text"]
    assert len(header) <= HEADER_MAX and header.startswith("CRITICAL: Idle GPUs on GKE node")
    assert header.endswith("…, $3,291.64")


def test_the_fallback_text_says_a_lone_findings_figure_once() -> None:
    f = _finding(0)
    titled = Finding(f.kind, f.severity, "Cross-zone traffic in llm-train: $100.00", *(
        getattr(f, k) for k in ("summary", "impact_usd", "window_start", "window_end", "scope", "evidence",
                                "recommendation", "fingerprint")))  # fmt: skip
    text, _ = render_group(Reason.NEW_GROUP, [titled], frozenset(), [])
    assert text == "[WARNING] New: Cross-zone traffic in llm-train: $100.00"
    text, _ = render_group(Reason.NEW_GROUP, [titled, _finding(1)], frozenset(), [])
    assert text.endswith("(+1 more): $201.00")


def test_an_alerts_evidence_is_worded_as_the_report_words_it() -> None:
    """The alert showed "month: 2026-11, as_of: ..., settled_usd: 136919.196759, ... (+11 more in
    the report)" where `analyze`'s report was readable."""
    from alerts.blocks import finding_blocks

    f = _finding(0)
    evidence = {"month": "2026-11", "as_of": "2026-11-14T06:00:00Z", "settled_usd": 136919.196759,
                "month_to_date_usd": 237267.93, "daily_run_rate_usd": 18121.21, "forecast_usd": 549669.22,
                "budget_usd": 400000.0}  # fmt: skip
    budget = Finding("budget_forecast", *(getattr(f, k) for k in ("severity", "title", "summary", "impact_usd",
                     "window_start", "window_end", "scope")), evidence, f.recommendation, "fpb")  # fmt: skip
    ctx = finding_blocks(budget, new=True)[-1]["elements"][0]["text"]
    assert ctx == (
        "Evidence: 2026-11: month to date $237,267.93, run rate $18,121.21/day, forecast $549,669.22 vs"
        " budget $400,000.00 · fp `fpb`"
    )
