"""First start is not a flood: what had already ended when gpucost first started is history.

A finding whose window ended before the first start (`monitor.state.store.first_start`, less
`first_start_grace_hours` for billing lag) is not news: the pipeline's `history` stage keeps it out
of every group, and once the history was read (the backfill covered the whole window, or at the
latest `first_start_summary_wait_minutes` after the first start) every such finding not yet told goes out in ONE summary message per channel,
through the outbox like any alert. `alerts_summarized` remembers what was told, so a restart sends
nothing again and a finding from before the start found later goes in a follow-up summary.
"""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from alerts.blocks import render_summary
from alerts.notifier import Message
from alerts.outbox import enqueue, fmt_ts, idempotency_key, parse_ts
from monitor.config import AlertsConfig
from monitor.model import Finding
from monitor.state.store import StateStore, first_start, recorded_first_start

__all__ = ["SUMMARY_GROUP", "enqueue_summaries", "history_settings"]

SUMMARY_GROUP = "first_start_summary"  # the outbox group of first-start summaries


def history_settings(
    a: AlertsConfig, store: StateStore, now: datetime, *, history_read: bool = False
) -> dict[str, Any]:
    """The first start (recorded now if nothing recorded it yet; an older outbox row wins, so an
    upgraded install does not call what it already alerted "history") and the cut it implies.
    The summary is due once the history was read, or when the wait ends if reading it takes longer
    (a backfill held back by quota: what is found later goes in a follow-up summary)."""
    if not a.first_start_summary:
        return {}
    started = recorded_first_start(store)
    if started is None:
        with store.transaction() as conn:
            oldest = conn.execute("SELECT MIN(created_at) FROM alerts_outbox").fetchone()[0]
        started = first_start(store, min(now, parse_ts(oldest)) if oldest else now)
    return {
        "started": started,
        "history_cut": started - timedelta(hours=a.first_start_grace_hours),
        "summary_due": history_read or now >= started + timedelta(minutes=a.first_start_summary_wait_minutes),
    }


def enqueue_summaries(
    conn: sqlite3.Connection, past: list[tuple[Finding, str]], *, now: datetime, started: datetime
) -> list[str]:
    """One summary per channel of the history not told yet, and the record that it was told.
    A finding some group already announced (before first starts were recorded) was told too."""
    told = {(r[0], r[1]) for r in conn.execute("SELECT fingerprint, receiver FROM alerts_summarized")}
    for r in conn.execute("SELECT receiver, entry FROM alerts_nflog"):
        told |= {(fp, r[0]) for fp in json.loads(r[1])["firing"]}
    by_receiver: dict[str, list[Finding]] = {}
    for f, receiver in past:
        if (f.fingerprint, receiver) not in told:
            by_receiver.setdefault(receiver, []).append(f)
    keys: list[str] = []
    for receiver, found in sorted(by_receiver.items()):
        found.sort(key=lambda f: (-f.impact_usd, f.fingerprint))
        earlier = conn.execute(
            "SELECT COUNT(DISTINCT idempotency_key) FROM alerts_summarized WHERE receiver = ?", (receiver,)
        ).fetchone()[0]
        span = started - min(f.window_start for f in found)
        days = max(1, math.ceil(span.total_seconds() / 86400))
        text, blocks = render_summary(found, days, started, follow_up=earlier > 0)
        fps = [f.fingerprint for f in found]
        key = idempotency_key(SUMMARY_GROUP, receiver, fps, earlier + 1)
        msg = Message(key, receiver, text, blocks)
        enqueue(
            conn,
            key=key,
            group_key=SUMMARY_GROUP,
            receiver=receiver,
            sequence=earlier + 1,
            reason="summary",
            root_key=None,
            message=msg,
            now=now,
        )
        conn.executemany(
            "INSERT INTO alerts_summarized (fingerprint, receiver, idempotency_key, summarized_at)"
            " VALUES (?, ?, ?, ?)",
            [(fp, receiver, key, fmt_ts(now)) for fp in fps],
        )
        keys.append(key)
    return keys
