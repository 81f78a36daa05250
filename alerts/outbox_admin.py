"""The operator's view of the outbox: list what is pending or failed, put failed messages back.

A message fails for good when Slack refuses it (`channel_not_found`, `is_archived`,
`invalid_auth`...): nothing was posted, so once the operator fixed the cause (invited the bot,
renamed the channel, rotated the token) sending it again is safe and is exactly what is wanted.
Re-queued rows go through the normal delivery path (idempotency key, retries, the look-up in the
channel before a re-send), and their group's notification log says "queued" again so no repeat
is added behind them. A re-queued row that fails again is told to the operator again. Digest rows
(reason `digest`, and `digest_chart` for its chart) are listed and re-queued like alerts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from alerts.outbox import WITH_ROOT, ensure_schema, fmt_ts
from monitor.state.store import StateStore

__all__ = ["OutboxEntry", "list_outbox", "requeue_failed"]


@dataclass(frozen=True)
class OutboxEntry:
    id: int
    status: str
    attempts: int
    channel: str
    reason: str
    created_at: str
    last_error: str | None
    text: str


def list_outbox(store: StateStore, statuses: tuple[str, ...] = ("pending", "failed")) -> list[OutboxEntry]:
    """Rows in `statuses`, oldest first."""
    ensure_schema(store)
    marks = ", ".join("?" for _ in statuses)
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT id, status, attempts, channel, reason, created_at, last_error, text FROM alerts_outbox"
            f" WHERE status IN ({marks}) ORDER BY id",
            statuses,
        ).fetchall()
    return [OutboxEntry(*r) for r in rows]


def requeue_failed(store: StateStore, now: datetime, ids: tuple[int, ...] = ()) -> list[int]:
    """Put failed rows (all, or those in `ids`) back to pending, due at once; returns their ids.

    An "all resolved" failed with its thread's root (`WITH_ROOT`) goes back with it, either way:
    the root alone would announce an alert that already resolved, the reply alone would fail again.
    """
    ensure_schema(store)
    stamp = fmt_ts(now)
    with store.transaction() as conn:
        failed = conn.execute(
            "SELECT id, idempotency_key, root_key, last_error FROM alerts_outbox WHERE status = 'failed'"
            " ORDER BY id"
        ).fetchall()
        wanted = {r[0] for r in failed if not ids or r[0] in ids}
        keys = {r[1] for r in failed if r[0] in wanted}
        with_root = [r for r in failed if (r[3] or "").startswith(WITH_ROOT)]
        wanted |= {r[0] for r in with_root if r[2] in keys}  # the root chosen: its resolution too
        roots = {r[2] for r in with_root if r[0] in wanted}
        wanted |= {r[0] for r in failed if r[1] in roots}  # the resolution chosen: its root too
        chosen = [r[0] for r in failed if r[0] in wanted]
        for row_id in chosen:
            conn.execute(
                "UPDATE alerts_outbox SET status = 'pending', attempts = 0, inflight = 0, failed_at = NULL,"
                " failure_alerted_at = NULL, next_attempt_at = created_at WHERE id = ?",  # due at once
                (row_id,),
            )
            _queued_again(conn, row_id, stamp)
    return chosen


def _queued_again(conn: Any, row_id: int, stamp: str) -> None:
    """The group's log says a message is queued, as when it was first enqueued (no repeat behind it)."""
    r = conn.execute(
        "SELECT n.entry, n.group_key, n.receiver FROM alerts_outbox o JOIN alerts_nflog n"
        " ON n.group_key = o.group_key AND n.receiver = o.receiver WHERE o.id = ?",
        (row_id,),
    ).fetchone()
    if r is None:
        return
    entry = json.loads(r[0])
    entry["queued_at"] = stamp
    conn.execute(
        "UPDATE alerts_nflog SET entry = ? WHERE group_key = ? AND receiver = ?",
        (json.dumps(entry), r[1], r[2]),
    )
