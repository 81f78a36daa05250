"""Telling the channel once when the billing export stops arriving.

Every figure gpucost shows comes from the BigQuery export. When it stops (the export was turned off
or moved to another dataset), polls succeed, detectors find nothing new and
the digest shows days of $0.00: silence that reads like a quiet fleet. Google's loads come "at regular
intervals" with no latency guarantee; cost usually appears within a day and has been seen 1.6 days
late (../shared/reference/gcp.md, section 2), so the default `[billing] stale_after_hours` is 48:
a fleet that runs GPUs bills something every hour, and two days without a single new load is not
lateness.

One message per stale episode, through the outbox like any alert (never lost, never repeated): its
key is the latest load's export time, so a second poll of the same stale export adds nothing, and an
export that resumes, then stops again, is told again. An export that has loaded nothing at all
since gpucost first ran against its store (a table left empty: the export was never turned on, or
writes elsewhere) is told the same way, once, measured from that first start: its polls succeed too.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from alerts.escape import escape_mrkdwn as esc
from alerts.notifier import Message
from alerts.outbox import enqueue, ensure_schema, fmt_ts
from monitor.state.store import StateStore

__all__ = ["EXPORT_GROUP", "export_stale_message", "is_stale", "stale_since", "tell_stale_export"]

EXPORT_GROUP = "billing-export"


def is_stale(latest_export: datetime | None, now: datetime, stale_after: timedelta) -> bool:
    """Whether the export's latest load is older than `stale_after` (never with it 0, or no load)."""
    return latest_export is not None and stale_after > timedelta(0) and now - latest_export > stale_after


def stale_since(
    latest_export: datetime | None, watched_since: datetime | None, now: datetime, stale_after: timedelta
) -> datetime | None:
    """Since when the export is stale at `now`, or None when it is not: measured from its latest
    load, or, without any, from when gpucost started watching it (`watched_since`, its first start
    on the store; None: not known, never stale)."""
    since = latest_export if latest_export is not None else watched_since
    return since if is_stale(since, now, stale_after) else None


def export_stale_message(
    latest_export: datetime, now: datetime, receiver: str, table: str, *, never: bool = False
) -> Message:
    """What stopped, since when, and where to look; keyed by the latest load and the receiver.
    `never`: no load was ever seen, and `latest_export` is when gpucost started watching."""
    hours = int((now - latest_export) / timedelta(hours=1))
    if never:
        head = "gpucost: the billing export has not loaded anything"
        since = f"since gpucost started watching it on {latest_export:%Y-%m-%d %H:%M} UTC ({hours} h ago)"
        text = (
            f"The Cloud Billing export (`{esc(table)}`) has loaded no rows at all {since}. Every figure"
            " is missing, not zero: spend, findings and the digest read an empty fleet."
        )
    else:
        head = "gpucost: the billing export has stopped arriving"
        text = (
            f"The Cloud Billing export (`{esc(table)}`) has loaded nothing since {latest_export:%Y-%m-%d %H:%M} UTC"
            f" ({hours} h ago). Every figure after that is missing, not zero: spend, findings and the"
            " digest read a quiet fleet."
        )
    fix = (
        "Check in the Cloud Console (Billing, then Billing export) that the detailed usage cost export"
        " is still on and still writes to this table; `gpucost check` shows the latest export time"
        " gpucost sees."
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": head}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*What to do:* {fix}"}},
    ]
    seed = f"{fmt_ts(latest_export)}\x00{receiver}" + (f"\x00never\x00{table}" if never else "")
    digest = hashlib.sha256(seed.encode()).hexdigest()[:20]
    return Message(f"export-stale-{digest}", receiver, f"{head}: {text}", blocks)


def tell_stale_export(
    store: StateStore,
    *,
    latest_export: datetime | None,
    now: datetime,
    stale_after: timedelta,
    receiver: str,
    table: str,
    watched_since: datetime | None = None,
) -> str | None:
    """Queue the message when the export is stale and this episode was not told; returns its key
    when queued now. Without any load (`latest_export` None) the export is stale once
    `stale_after` has passed since `watched_since` (gpucost's first start on this store)."""
    since = stale_since(latest_export, watched_since, now, stale_after)
    if since is None:
        return None
    msg = export_stale_message(since, now, receiver, table, never=latest_export is None)
    ensure_schema(store)
    with store.transaction() as conn:
        queued = enqueue(
            conn,
            key=msg.idempotency_key,
            group_key=EXPORT_GROUP,
            receiver=receiver,
            sequence=int(since.timestamp()),
            reason="export_stale",
            root_key=None,
            message=msg,
            now=now,
        )
    return msg.idempotency_key if queued else None
