"""The durable outbox and the notification log, in the state store (component "alerts").

Write-ahead delivery: `process` writes the outbox row in the same transaction as the notification
log update, before anything is sent; `deliver_outbox` marks a row sent only after the receiver
confirmed (recording Slack's `ts` and channel id) and, in the same transaction, writes the delivery
time into the notification log (`last_notified_at`), so the log never says "sent" for a message
that is still pending. Rows are keyed by an idempotency key
(`UNIQUE`), so a message is enqueued once, and a row leaves `pending` only through `mark_sent` /
`mark_failed`, so a sent key is never sent again.

Before each send the row is marked `inflight` and the channel id it goes to is stored with it; a
crash or an uncertain failure leaves the flag set and the next attempt first asks the notifier
whether the message already arrived, in that channel (Slack's history only takes ids, not names).
When Slack confirms a post to a channel *name*, the id it answered with is remembered for that name
(`alerts_channels`, `known_channel_id`): a fallback for bots that may not list channels.

Row states: pending -> sent | failed. Retryable errors keep the row pending with `next_attempt_at`
(Retry-After, else bounded exponential backoff) for up to `MAX_ATTEMPTS` attempts (about a day; a
rate-limited one does not count);
permanent errors, and retries exhausted, mark it failed with the error. A failed row is told to the
operator once (`unalerted_failures` / `mark_failure_alerted`, persisted, so neither every tick nor a
restart repeats it; a re-queue clears the mark so a second failure is told again).

A row may carry a file (`file_path`, `file_title`: the digest's chart) instead of a message: it is
uploaded into its root's thread once the root is sent.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from alerts.notifier import Message
from monitor.model import Finding, Scope, Severity
from monitor.state.store import StateStore

__all__ = [
    "MAX_ATTEMPTS",
    "MIGRATIONS",
    "WITH_ROOT",
    "OutboxRow",
    "OutboxStatus",
    "backoff",
    "clock_stepped",
    "defer_pending",
    "due_rows",
    "enqueue",
    "ensure_schema",
    "fmt_ts",
    "get_row",
    "idempotency_key",
    "known_channel_id",
    "load_firing",
    "mark_attempt",
    "mark_failed",
    "mark_failure_alerted",
    "mark_retry",
    "mark_sent",
    "parse_ts",
    "save_firing",
    "status",
    "thread_told",
    "unalerted_failures",
]

COMPONENT = "alerts"

MIGRATIONS: list[str] = [
    """
    CREATE TABLE alerts_nflog (
        group_key TEXT NOT NULL,
        receiver TEXT NOT NULL,
        labels TEXT NOT NULL,
        entry TEXT NOT NULL,
        snapshots TEXT NOT NULL,
        root_key TEXT,
        active INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (group_key, receiver)
    );
    CREATE TABLE alerts_outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_key TEXT NOT NULL UNIQUE,
        group_key TEXT NOT NULL,
        receiver TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        reason TEXT NOT NULL,
        root_key TEXT,
        channel TEXT NOT NULL,
        text TEXT NOT NULL,
        blocks TEXT NOT NULL,
        reply_broadcast INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        inflight INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        next_attempt_at TEXT NOT NULL,
        sent_at TEXT,
        slack_ts TEXT,
        slack_channel TEXT,
        last_error TEXT,
        failed_at TEXT
    );
    CREATE INDEX alerts_outbox_due ON alerts_outbox (status, next_attempt_at, id)
    """,
    # v2: the channel id a row is posted to (persisted before the first send, so a lookup after a
    # crash searches that channel) and, per channel name, the id Slack last answered with.
    """
    ALTER TABLE alerts_outbox ADD COLUMN channel_id TEXT;
    CREATE TABLE alerts_channels (
        name TEXT PRIMARY KEY,
        channel_id TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )
    """,
    # v3: group timers. `wait_until` is when a waiting group is due; `alerts_firing` holds what
    # fired at the last detection run, so the outbox job can flush a due group without one.
    """
    ALTER TABLE alerts_nflog ADD COLUMN wait_until TEXT;
    CREATE TABLE alerts_firing (
        fingerprint TEXT PRIMARY KEY,
        finding TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )
    """,
    # v4: which findings from before the first start were posted in a summary, to which channel,
    # in which message: each is summarised once, and never alerted one by one.
    """
    CREATE TABLE alerts_summarized (
        fingerprint TEXT NOT NULL,
        receiver TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        summarized_at TEXT NOT NULL,
        PRIMARY KEY (fingerprint, receiver)
    )
    """,
    # v5: a file to upload into the root's thread (the digest's chart) and when a failed row was
    # told to the operator (once per failure).
    """
    ALTER TABLE alerts_outbox ADD COLUMN file_path TEXT;
    ALTER TABLE alerts_outbox ADD COLUMN file_title TEXT;
    ALTER TABLE alerts_outbox ADD COLUMN failure_alerted_at TEXT
    """,
]

#: The error of an "all resolved" failed with its thread's root (`alerts.delivery`): it is not a
#: failure of its own (no operator alert, not the outbox's last error), and it goes back to pending
#: with its root (`alerts.outbox_admin.requeue_failed`).
WITH_ROOT = "not posted: the first message of its thread failed"

BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_CAP = timedelta(minutes=30)
#: Attempts before a retryable failure becomes permanent: 6 backoffs up to the cap (31.5 min),
#: then 47 at 30 min, about 24 h in all. A re-queue starts the count again.
MAX_ATTEMPTS = 54


def ensure_schema(store: StateStore) -> None:
    store.migrate(COMPONENT, MIGRATIONS)


def fmt_ts(dt: datetime) -> str:
    """Fixed-width UTC text, so SQL string comparison orders like time."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime; pass a timezone-aware UTC time")
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def backoff(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min, ... capped at 30 min: retry soon, never hammer (`MAX_ATTEMPTS` bounds it).

    >>> [int(backoff(n).total_seconds()) for n in (1, 2, 3, 10)]
    [30, 60, 120, 1800]
    """
    n = max(attempts, 1) - 1
    return min(BACKOFF_BASE * (2 ** min(n, 20)), BACKOFF_CAP)


@dataclass(frozen=True)
class OutboxRow:
    id: int
    idempotency_key: str
    group_key: str
    receiver: str
    sequence: int
    reason: str
    root_key: str | None
    channel: str
    text: str
    blocks: list[dict[str, Any]]
    reply_broadcast: bool
    status: str
    attempts: int
    inflight: bool
    created_at: datetime
    next_attempt_at: datetime
    slack_ts: str | None
    slack_channel: str | None
    last_error: str | None
    channel_id: str | None = None  # where the first attempt went; None until then
    file_path: str | None = None  # a file row: upload this into the root's thread
    file_title: str | None = None
    failed_at: str | None = None  # when it failed for good (identifies that failure)

    def message(self, thread_ts: str | None) -> Message:
        return Message(
            idempotency_key=self.idempotency_key,
            channel=self.channel,
            text=self.text,
            blocks=self.blocks,
            thread_ts=thread_ts,
            reply_broadcast=self.reply_broadcast and thread_ts is not None,
        )


def _row(r: sqlite3.Row) -> OutboxRow:
    return OutboxRow(
        id=r["id"],
        idempotency_key=r["idempotency_key"],
        group_key=r["group_key"],
        receiver=r["receiver"],
        sequence=r["sequence"],
        reason=r["reason"],
        root_key=r["root_key"],
        channel=r["channel"],
        text=r["text"],
        blocks=json.loads(r["blocks"]),
        reply_broadcast=bool(r["reply_broadcast"]),
        status=r["status"],
        attempts=r["attempts"],
        inflight=bool(r["inflight"]),
        created_at=parse_ts(r["created_at"]),
        next_attempt_at=parse_ts(r["next_attempt_at"]),
        slack_ts=r["slack_ts"],
        slack_channel=r["slack_channel"],
        last_error=r["last_error"],
        channel_id=r["channel_id"],
        file_path=r["file_path"],
        file_title=r["file_title"],
        failed_at=r["failed_at"],
    )


def enqueue(
    conn: sqlite3.Connection,
    *,
    key: str,
    group_key: str,
    receiver: str,
    sequence: int,
    reason: str,
    root_key: str | None,
    message: Message,
    now: datetime,
    file_path: str | None = None,
    file_title: str | None = None,
) -> bool:
    """Insert a pending row (inside the caller's transaction); False if the key already exists.
    With `file_path` the row uploads that file (into its root's thread) instead of posting text."""
    cur = conn.execute(
        "INSERT OR IGNORE INTO alerts_outbox (idempotency_key, group_key, receiver, sequence, reason,"
        " root_key, channel, text, blocks, reply_broadcast, status, created_at, next_attempt_at,"
        " file_path, file_title) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
        (
            key,
            group_key,
            receiver,
            sequence,
            reason,
            root_key,
            message.channel,
            message.text,
            json.dumps(message.blocks),
            int(message.reply_broadcast),
            fmt_ts(now),
            fmt_ts(now),
            file_path,
            file_title,
        ),
    )
    return cur.rowcount == 1


def due_rows(
    store: StateStore, now: datetime, limit: int, keys: Sequence[str] | None = None
) -> list[OutboxRow]:
    """Pending rows whose next attempt is due and that may go now, oldest first; only those with an
    idempotency key in `keys` when given.

    A row waits, and is not returned, while its thread root is pending (a reply goes into the
    thread), while its root failed if it is a file (the digest's chart belongs under it), and
    while an older reply in its thread is pending: a "resolved" never overtakes the update before
    it, retried on its backoff. Rows that wait are left out in SQL, not skipped after the `limit`:
    fifty charts of failed digests at the head of the outbox held every later row of every channel.
    """
    if keys is not None and not keys:
        return []
    only = "" if keys is None else f" AND o.idempotency_key IN ({', '.join('?' for _ in keys)})"
    with store.transaction() as conn:
        rows = conn.execute(
            f"SELECT o.* FROM alerts_outbox o WHERE o.status = 'pending' AND o.next_attempt_at <= ?{only}"
            " AND NOT EXISTS (SELECT 1 FROM alerts_outbox r WHERE r.idempotency_key = o.root_key"
            "  AND (r.status = 'pending' OR (r.status = 'failed' AND o.file_path IS NOT NULL)))"
            " AND NOT EXISTS (SELECT 1 FROM alerts_outbox e WHERE e.status = 'pending'"
            "  AND e.root_key = o.root_key AND e.id < o.id)"
            " ORDER BY o.id LIMIT ?",
            (fmt_ts(now), *(keys or ()), limit),
        ).fetchall()
    return [_row(r) for r in rows]


def get_row(store: StateStore, key: str) -> OutboxRow | None:
    with store.transaction() as conn:
        r = conn.execute("SELECT * FROM alerts_outbox WHERE idempotency_key = ?", (key,)).fetchone()
    return None if r is None else _row(r)


def mark_attempt(store: StateStore, row_id: int, channel_id: str | None = None) -> None:
    """Committed before the send: a crash from here on leaves the attempt marked uncertain, and
    `channel_id` (when known) says which channel to search. A recorded id is never overwritten."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE alerts_outbox SET attempts = attempts + 1, inflight = 1,"
            " channel_id = COALESCE(channel_id, ?) WHERE id = ? AND status = 'pending'",
            (channel_id, row_id),
        )


def mark_sent(store: StateStore, row_id: int, ts: str | None, channel: str | None, now: datetime) -> None:
    """Record Slack's confirmation; if the row named its channel, remember the id for that name."""
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE alerts_outbox SET status = 'sent', inflight = 0, sent_at = ?, slack_ts = ?,"
            " slack_channel = ?, last_error = NULL WHERE id = ? AND status = 'pending'",
            (fmt_ts(now), ts, channel, row_id),
        )
        if cur.rowcount == 1:
            _log_outcome(conn, row_id, "last_notified_at", now)
        if channel:
            conn.execute(
                "INSERT INTO alerts_channels (name, channel_id, updated_at)"
                " SELECT channel, ?, ? FROM alerts_outbox WHERE id = ? AND channel != ?"
                " ON CONFLICT (name) DO UPDATE SET channel_id = excluded.channel_id,"
                " updated_at = excluded.updated_at",
                (channel, fmt_ts(now), row_id, channel),
            )


def known_channel_id(store: StateStore, name: str) -> str | None:
    """The id Slack last answered with for a post to channel `name`, if any."""
    with store.transaction() as conn:
        r = conn.execute("SELECT channel_id FROM alerts_channels WHERE name = ?", (name,)).fetchone()
    return None if r is None else r[0]


def mark_retry(
    store: StateStore, row_id: int, next_at: datetime, error: str, *, uncertain: bool, uncount: bool = False
) -> None:
    """`uncount`: the attempt just marked does not count towards `MAX_ATTEMPTS` (Slack answered 429:
    it processed nothing and said when to come back; honoured for as long as it lasts, a 30 s
    Retry-After used the 54 attempts meant to span a day in 27 minutes)."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE alerts_outbox SET next_attempt_at = ?, last_error = ?, inflight = ?,"
            " attempts = attempts - ? WHERE id = ? AND status = 'pending'",
            (fmt_ts(next_at), error, int(uncertain), int(uncount), row_id),
        )


def thread_told(store: StateStore, root_key: str) -> bool:
    """Whether any message of the thread rooted at `root_key` (the root or a reply) was sent."""
    with store.transaction() as conn:
        r = conn.execute(
            "SELECT 1 FROM alerts_outbox WHERE status = 'sent' AND (idempotency_key = ? OR root_key = ?)"
            " LIMIT 1",
            (root_key, root_key),
        ).fetchone()
    return r is not None


#: The notification log's times (`alerts.dedupe.LogEntry`), which group waits and intervals count from.
_ENTRY_TIMES = ("first_seen_at", "last_notified_at", "queued_at", "last_failed_at")


def clock_stepped(store: StateStore, step: timedelta, now: datetime) -> int:
    """The wall clock was stepped back by -`step`: every stored time of the outbox and the
    notification log still ahead of `now` was set on the clock before the step, so it moves with
    it (never before `now`): a row's next attempt, a group's timer and the times its `group_wait`,
    `group_interval` and `repeat_interval` count from. Stepped back an hour, a new alert in its
    `group_wait` and a row in its backoff waited the hour (helper 56's review). Returns how many
    rows moved; a step forward moves nothing (what was ahead is due sooner, as it should)."""
    if step >= timedelta(0):
        return 0

    def moved(text: str | None) -> str | None:
        at = None if text is None else parse_ts(text)
        return text if at is None or at <= now else fmt_ts(max(at + step, now))

    count = 0
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT id, next_attempt_at FROM alerts_outbox WHERE status = 'pending' AND next_attempt_at > ?",
            (fmt_ts(now),),
        ).fetchall()
        for row_id, at in rows:
            conn.execute("UPDATE alerts_outbox SET next_attempt_at = ? WHERE id = ?", (moved(at), row_id))
        count += len(rows)
        for group, receiver, text, wait in conn.execute(
            "SELECT group_key, receiver, entry, wait_until FROM alerts_nflog"
        ).fetchall():
            entry = json.loads(text)
            new = {k: moved(entry.get(k)) for k in _ENTRY_TIMES}
            if new == {k: entry.get(k) for k in _ENTRY_TIMES} and moved(wait) == wait:
                continue
            conn.execute(
                "UPDATE alerts_nflog SET entry = ?, wait_until = ? WHERE group_key = ? AND receiver = ?",
                (json.dumps(entry | new), moved(wait), group, receiver),
            )
            count += 1
    return count


def defer_pending(store: StateStore, until: datetime) -> int:
    """Slack said "rate limited, retry after N s": no pending row is tried before `until`, whether it
    was in the stopped batch or not (https://api.slack.com/docs/rate-limits). Returns how many."""
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE alerts_outbox SET next_attempt_at = ? WHERE status = 'pending' AND next_attempt_at < ?",
            (fmt_ts(until), fmt_ts(until)),
        )
    return cur.rowcount


def mark_failed(store: StateStore, row_id: int, error: str, now: datetime, *, told: bool = False) -> None:
    """`told`: the operator already knows (the failure of the row it depends on was told), so
    `alert_failures` does not tell this one again."""
    with store.transaction() as conn:
        cur = conn.execute(
            "UPDATE alerts_outbox SET status = 'failed', inflight = 0, last_error = ?, failed_at = ?,"
            " failure_alerted_at = ? WHERE id = ? AND status = 'pending'",
            (error, fmt_ts(now), fmt_ts(now) if told else None, row_id),
        )
        if cur.rowcount == 1:
            _log_outcome(conn, row_id, "last_failed_at", now)


def unalerted_failures(store: StateStore) -> list[OutboxRow]:
    """Failed rows the operator was not told about yet, oldest first."""
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT * FROM alerts_outbox WHERE status = 'failed' AND failure_alerted_at IS NULL ORDER BY id"
        ).fetchall()
    return [_row(r) for r in rows]


def mark_failure_alerted(store: StateStore, row_id: int, now: datetime) -> None:
    with store.transaction() as conn:
        conn.execute(
            "UPDATE alerts_outbox SET failure_alerted_at = ? WHERE id = ? AND status = 'failed'",
            (fmt_ts(now), row_id),
        )


def _log_outcome(conn: sqlite3.Connection, row_id: int, key: str, now: datetime) -> None:
    """Write a message's outcome into its group's notification log, in the transaction that moved
    the row out of `pending`: the log says "delivered at" only once the receiver confirmed, so
    `repeat_interval` counts from delivery. `queued_at` is cleared when the outcome is that of the
    newest message (an older one arriving late leaves a newer queued message queued)."""
    r = conn.execute(
        "SELECT n.entry, o.sequence FROM alerts_outbox o JOIN alerts_nflog n"
        " ON n.group_key = o.group_key AND n.receiver = o.receiver WHERE o.id = ?",
        (row_id,),
    ).fetchone()
    if r is None:
        return
    entry, sequence = json.loads(r[0]), r[1]
    stamp = fmt_ts(now)
    entry[key] = max(entry.get(key) or stamp, stamp)  # fixed-width text orders like time
    if sequence >= entry.get("sequence", 0):
        entry["queued_at"] = None
    conn.execute(
        "UPDATE alerts_nflog SET entry = ? WHERE group_key = (SELECT group_key FROM alerts_outbox"
        " WHERE id = ?) AND receiver = (SELECT receiver FROM alerts_outbox WHERE id = ?)",
        (json.dumps(entry), row_id, row_id),
    )


# -- what fired at the last detection run (for group timers) ------------------------------------------


def _tag(v: Any) -> Any:
    """JSON with the types findings carry (Decimal, datetime, date) kept, so a finding read back
    renders exactly as it would have at detection time."""
    if isinstance(v, Decimal):
        return {"$dec": str(v)}
    if isinstance(v, datetime):
        return {"$dt": v.isoformat()}
    if isinstance(v, date):
        return {"$date": v.isoformat()}
    return str(v)  # as `monitor.state.findings` stores it: never fail a detection over evidence


def _untag(d: dict[str, Any]) -> Any:
    if len(d) == 1:
        ((k, v),) = d.items()
        if k == "$dec":
            return Decimal(v)
        if k == "$dt":
            return datetime.fromisoformat(v)
        if k == "$date":
            return date.fromisoformat(v)
    return d


def _encode(f: Finding) -> str:
    data = {fl.name: getattr(f, fl.name) for fl in fields(f)}
    data["scope"] = {fl.name: getattr(f.scope, fl.name) for fl in fields(f.scope)}
    data["severity"] = f.severity.value
    return json.dumps(data, default=_tag, sort_keys=True)


def _decode(text: str) -> Finding:
    data = json.loads(text, object_hook=_untag)
    data["scope"] = Scope(**data["scope"])
    data["severity"] = Severity(data["severity"])
    return Finding(**data)


def save_firing(conn: sqlite3.Connection, findings: Sequence[Finding], now: datetime) -> None:
    """Replace the stored set of firing findings (inside the caller's transaction)."""
    conn.execute("DELETE FROM alerts_firing")
    conn.executemany(
        "INSERT INTO alerts_firing (fingerprint, finding, updated_at) VALUES (?, ?, ?)",
        [(f.fingerprint, _encode(f), fmt_ts(now)) for f in findings],
    )


def load_firing(conn: sqlite3.Connection) -> list[Finding]:
    """What fired at the last detection run, as it was then."""
    return [_decode(r[0]) for r in conn.execute("SELECT finding FROM alerts_firing ORDER BY fingerprint")]


@dataclass(frozen=True)
class OutboxStatus:
    """Delivery health for `gpucost check`, metrics and logs."""

    pending: int
    failed: int
    sent: int
    last_error: str | None
    oldest_pending_at: datetime | None

    @property
    def healthy(self) -> bool:
        return self.failed == 0


def status(store: StateStore) -> OutboxStatus:
    """Counts by state and the most recent error (of a failed row, else of a retrying one)."""
    ensure_schema(store)
    with store.transaction() as conn:
        counts = dict(conn.execute("SELECT status, COUNT(*) FROM alerts_outbox GROUP BY status").fetchall())
        oldest = conn.execute(
            "SELECT MIN(created_at) FROM alerts_outbox WHERE status = 'pending'"
        ).fetchone()[0]
        err = conn.execute(
            "SELECT last_error FROM alerts_outbox WHERE last_error IS NOT NULL AND status != 'sent'"
            " AND last_error NOT LIKE ? ORDER BY (status = 'failed') DESC, id DESC LIMIT 1",
            (WITH_ROOT + "%",),
        ).fetchone()
    return OutboxStatus(
        pending=counts.get("pending", 0),
        failed=counts.get("failed", 0),
        sent=counts.get("sent", 0),
        last_error=None if err is None else err[0],
        oldest_pending_at=None if oldest is None else parse_ts(oldest),
    )


def idempotency_key(group_key: str, receiver: str, fingerprints: Sequence[str], sequence: int) -> str:
    """hash(group key, receiver, fingerprints, notification sequence): one key per message."""
    payload = json.dumps([group_key, receiver, sorted(fingerprints), sequence], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


# -- helpers ---------------------------------------------------------------------------------------
