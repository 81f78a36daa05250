"""`deliver_outbox`: send what is due, then record the outcome. The retry policy lives here.

For each due row (oldest first): resolve the thread (a reply waits while its thread root is still
pending); resolve the channel to its id (the row's recorded id, else the notifier's, else the id
Slack last confirmed for that name); if an earlier attempt is uncertain, ask the notifier whether
the message already arrived in that channel; mark the attempt, persisting the id; send to the id;
record sent / retry / failed. A channel that does not resolve is posted to by name, and a lookup
there cannot succeed: after an uncertain failure such a message may arrive twice, never zero times.
A 429 stops the batch, since the rest would be rate limited too. An exception a notifier did not
classify is treated as an uncertain retryable failure and logged: it reaches the retry logic
instead of being swallowed. After `MAX_ATTEMPTS` retryable failures a row fails for good; a 429
is not one (Slack processed nothing and said when to come back).

Rows go in order where order is read: a reply waits for its root and for the older replies of
its thread (`due_rows`), so a "resolved" never lands above the update it follows; an "all
resolved" whose root failed for good with nothing of its thread sent fails with it (`WITH_ROOT`),
never telling a channel of an alert it did not hear fire.

A file row (the digest's chart) is uploaded with `send_file` into its root's thread once the root
is sent, and waits while the root is failed (a re-queue of the root brings it along). After an
uncertain upload the thread is searched for a file of that name and title (`lookup_file`) before
uploading again, so an upload interrupted after Slack took it shows once.

One pass at a time: a pass holds the state store's `OUTBOX_LOCK` (an OS file lock beside SQLite, a
session advisory lock on PostgreSQL, both released when their process dies), so the outbox tick, the
digest job and a `gpucost digest --send` in another process never read the same pending row and both
post it; a pass that waited `Deps.lock_wait_s` in vain leaves the rows to the one running.

A row that failed for good is an alert about gpucost itself (`alert_failures`, run after every
delivery pass): one ERROR log line naming the channel and the fix, and one message on the console
notifier (never the failing channel), once per failed row; `gpucost_outbox_messages{state="failed"}`
counts them (`monitor.cycle.run_delivery`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from alerts.notifier import AUTH_ERRORS, TOKEN_REFUSED, DeliveryResult, Message, Outcome
from alerts.outbox import (
    MAX_ATTEMPTS,
    WITH_ROOT,
    OutboxRow,
    backoff,
    defer_pending,
    due_rows,
    ensure_schema,
    get_row,
    known_channel_id,
    mark_attempt,
    mark_failed,
    mark_failure_alerted,
    mark_retry,
    mark_sent,
    thread_told,
    unalerted_failures,
)

if TYPE_CHECKING:
    from alerts.pipeline import Deps

__all__ = ["OUTBOX_LOCK", "DeliveryReport", "alert_failures", "deliver_outbox", "fire_fault", "how_to_fix"]

log = logging.getLogger("alerts.delivery")


@dataclass(frozen=True)
class DeliveryReport:
    sent: int = 0
    retried: int = 0
    failed: int = 0
    deferred: int = 0  # replies waiting for their thread root
    recovered: int = 0  # found already delivered after an uncertain attempt
    rate_limited: bool = False
    operator_alerts: int = 0  # failed rows told to the operator in this pass
    busy: bool = False  # another pass held the outbox past `Deps.lock_wait_s`: nothing was tried


def fire_fault(hook: Callable[[str], None] | None, point: str) -> None:
    if hook is not None:
        hook(point)


def deliver_outbox(deps: Deps, now: datetime, keys: Sequence[str] | None = None) -> DeliveryReport:
    """Attempt every due pending message (or those with a key in `keys`) once; never sends a row
    that is already sent. Then tell the operator about rows that failed for good."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    ensure_schema(deps.store)
    with deps.store.exclusive(OUTBOX_LOCK, deps.lock_wait_s) as held:
        if not held:
            log.info(
                "another delivery pass holds the outbox; its rows are left to it",
                extra={"waited_s": deps.lock_wait_s},
            )
            return DeliveryReport(busy=True)
        counts = {"sent": 0, "retried": 0, "failed": 0, "deferred": 0, "recovered": 0}
        rate_limited, tried = False, set()
        # again while a batch settled rows: a root sent, or failed, frees the rows that waited for
        # it (its replies, its chart), which go in the same pass, as they did when read at once
        while not rate_limited and (
            batch := [r for r in due_rows(deps.store, now, deps.batch_size, keys) if r.id not in tried]
        ):
            settled = 0
            for row in batch:
                tried.add(row.id)
                outcome, result = _deliver_one(deps, row, now)
                counts[outcome] += 1
                settled += outcome in ("sent", "recovered", "failed")
                if result is not None and result.outcome is Outcome.RETRY and result.retry_after is not None:
                    rate_limited = True  # the rest waits out Retry-After too, in this pass and the next ones
                    defer_pending(deps.store, now + timedelta(seconds=result.retry_after))
                    break
            if not settled:
                break
        told = alert_failures(deps, now)
    return DeliveryReport(**counts, rate_limited=rate_limited, operator_alerts=told)


#: The state store's named lock a delivery pass holds (`StateStore.exclusive`): a pending row is
#: read and sent by one pass at a time, whichever process or thread runs it (the daemon's outbox
#: tick, its digest job, a `gpucost digest --send`), or two passes that read it before either
#: marked it would both post it.
OUTBOX_LOCK = "outbox"


#: The reply that says a whole group stopped firing (`alerts.dedupe.Reason.ALL_RESOLVED`; a partial
#: "resolved" shows the findings still firing, news to a channel that heard nothing of the group).
_ALL_RESOLVED = "all_resolved"


def _thread(deps: Deps, row: OutboxRow) -> tuple[str, str | None, str]:
    """(state, thread_ts, channel); state "go", "wait" or "orphan". Replies go to the root's thread
    and channel id once it is sent; a file waits while its root is failed (it belongs under it);
    an "all resolved" whose root failed with nothing of its thread sent is an orphan. `due_rows` leaves
    out the rows that wait; this answers for one read before a root changed."""
    if row.root_key is None:
        return "go", None, row.channel
    root = get_row(deps.store, row.root_key)
    if root is not None and root.status == "failed":
        if row.file_path is not None:
            return "wait", None, row.channel
        if row.reason == _ALL_RESOLVED and not thread_told(deps.store, root.idempotency_key):
            return "orphan", None, row.channel
        return "go", None, row.channel
    if root is None:
        return "go", None, row.channel
    if root.status == "pending":
        return "wait", None, row.channel
    if not deps.notifier.supports_threads or root.slack_ts is None:
        return "go", None, row.channel
    return "go", root.slack_ts, root.slack_channel or row.channel


def _deliver_one(deps: Deps, row: OutboxRow, now: datetime) -> tuple[str, DeliveryResult | None]:
    state, thread_ts, channel = _thread(deps, row)
    if state == "wait":
        return "deferred", None
    if state == "orphan":
        # the group's first message failed for good and nothing of it reached the channel: a lone
        # "[RESOLVED]" would tell of an alert it never heard fire. It fails with its root (whose
        # failure the operator was told), and a re-queue sends both, the root first.
        error = f"{WITH_ROOT} ({row.root_key}), so {row.channel} never heard it fire"
        mark_failed(deps.store, row.id, error, now, told=True)
        return "failed", None
    channel_id = row.channel_id or _resolve(deps, channel)
    if row.file_path is not None:
        return _upload(deps, row, channel_id or channel, thread_ts, now)
    msg = replace(row.message(thread_ts), channel=channel_id or channel)
    if row.inflight:
        recovered = _recover(deps, row, now, _call(lambda: deps.notifier.lookup(msg), "lookup"))
        if recovered is not None:
            return recovered
    fire_fault(deps.fault, "before_send")
    mark_attempt(deps.store, row.id, channel_id)
    result = _call(lambda: deps.notifier.send(msg), "send")
    fire_fault(deps.fault, "after_send")
    return _record(deps, row, result, now, attempts=row.attempts + 1), result


def _recover(
    deps: Deps, row: OutboxRow, now: datetime, found: DeliveryResult | None
) -> tuple[str, DeliveryResult | None] | None:
    """After an uncertain attempt, what the notifier's lookup `found`: the recorded outcome when it
    answered (sent: "recovered"; a transient lookup error: retried), None to send again (not
    there, or the lookup failed for good: sent twice rather than never)."""
    if found is not None and found.outcome is not Outcome.FAILED:
        found = replace(found, uncertain=True)  # a failed lookup leaves the attempt uncertain
        outcome = _record(deps, row, found, now, attempts=row.attempts)
        return ("recovered" if found.outcome is Outcome.SENT else outcome), found
    if found is not None:
        log.warning("cannot check whether %s arrived (%s); sending again", row.idempotency_key, found.error)
    return None


def _upload(
    deps: Deps, row: OutboxRow, channel: str, thread_ts: str | None, now: datetime
) -> tuple[str, DeliveryResult | None]:
    """A file row: after an uncertain attempt, look for the file in its thread first (by name and
    title), then upload it."""
    path = Path(row.file_path or "")
    if not path.is_file():
        result = DeliveryResult.failed(f"file {path} is missing (written by the digest; re-render the day)")
        return _record(deps, row, result, now, attempts=row.attempts), result
    title = row.file_title or path.name
    if row.inflight:
        lookup = _call(lambda: deps.notifier.lookup_file(channel, path, title, thread_ts), "lookup_file")
        recovered = _recover(deps, row, now, lookup)
        if recovered is not None:
            return recovered
    fire_fault(deps.fault, "before_send")
    mark_attempt(deps.store, row.id, channel)
    result = _call(lambda: deps.notifier.send_file(channel, path, title, thread_ts), "send_file")
    fire_fault(deps.fault, "after_send")
    return _record(deps, row, result, now, attempts=row.attempts + 1), result


def _resolve(deps: Deps, channel: str) -> str | None:
    """The id to post to and search: the notifier's answer, else the id Slack confirmed earlier."""
    try:
        found = deps.notifier.resolve_channel(channel)
    except Exception as e:  # resolution is best effort; delivery goes on by name
        log.exception("resolving channel %s raised %s", channel, type(e).__name__)
        found = None
    return found or known_channel_id(deps.store, channel)


def _call(fn: Callable[[], DeliveryResult | None], what: str) -> DeliveryResult | None:
    try:
        return fn()
    except Exception as e:  # an unclassified failure is retried, and logged, never dropped
        log.exception("notifier %s raised %s; will retry", what, type(e).__name__)
        return DeliveryResult.retry(f"{type(e).__name__}: {e}", uncertain=True)


def _record(
    deps: Deps, row: OutboxRow, result: DeliveryResult | None, now: datetime, *, attempts: int
) -> str:
    if result is None:  # a lookup that found nothing and cannot fail
        result = DeliveryResult.retry("lookup returned nothing", uncertain=True)
    if result.outcome is Outcome.SENT:
        mark_sent(deps.store, row.id, result.ts, result.channel, now)
        channel = result.channel or row.channel
        # the console notifier "sent to #gpucost-alerts" in the demo, with no Slack token set
        where = f"the console (for {channel})" if deps.notifier.name == "console" else channel
        log.info("alert %s sent to %s (ts %s)", row.idempotency_key, where, result.ts)
        return "sent"
    error = result.error or "unknown error"
    rate_limited = result.retry_after is not None  # Slack processed nothing: not a failed attempt
    if result.outcome is Outcome.RETRY and (rate_limited or attempts < MAX_ATTEMPTS):
        delay = timedelta(seconds=result.retry_after) if result.retry_after is not None else backoff(attempts)
        uncount = rate_limited and attempts > row.attempts  # this pass marked an attempt
        mark_retry(deps.store, row.id, now + delay, error, uncertain=result.uncertain, uncount=uncount)
        log.warning(
            "%s %s to %s not delivered (%s); retry in %s",
            _what(row),
            row.idempotency_key,
            row.channel,
            error,
            delay,
            extra={
                "channel": row.channel,
                "error": error,
                "outbox_id": row.id,
                "retry_in_s": delay.total_seconds(),
            },
        )
        return "retried"
    if result.outcome is Outcome.RETRY:
        error = f"{EXHAUSTED} after {attempts} attempts (last: {error})"
    mark_failed(deps.store, row.id, error, now)  # told to the operator by `alert_failures`
    return "failed"


EXHAUSTED = "retries exhausted"


def how_to_fix(error: str, channel: str) -> str:
    """What the operator should do about a permanent failure, by Slack's error code.

    >>> how_to_fix("chat.postMessage: is_archived", "#alerts")
    'channel #alerts is archived: unarchive it, or point slack.channel / the route at another channel'
    """
    code = error.rsplit(": ", 1)[-1]
    if error.startswith(EXHAUSTED):
        return (
            f"Slack did not take it for about a day (the last error says why): check the network path"
            f" to slack.com, https://status.slack.com and {channel}"
        )
    if code in AUTH_ERRORS:
        return TOKEN_REFUSED
    if code == "channel_not_found":
        return (
            f"channel {channel} does not exist or the bot cannot see it: fix slack.channel / the route,"
            " or invite the bot to the private channel"
        )
    if code == "not_in_channel":
        return f"the bot is not in {channel}: invite it (/invite @your-bot)"
    if code == "is_archived":
        return f"channel {channel} is archived: unarchive it, or point slack.channel / the route at another channel"
    if code == "missing_scope":
        return "the Slack app lacks a scope (chat:write, files:write): add it and reinstall the app"
    if "is missing" in error:
        return "the digest's chart file was removed before it was sent: `gpucost digest --date DAY --send`"
    return f"see Slack's error {code!r} for {channel}"


def _what(row: OutboxRow) -> str:
    return {"digest": "digest", "digest_chart": "digest chart"}.get(row.reason, "alert")


def alert_failures(deps: Deps, now: datetime) -> int:
    """Tell the operator, once per row, about every message that failed for good: an ERROR log line
    and a console message (never through the failing channel). The mark is persisted after the
    console message, and the console is searched for it first, so a crash in between repeats
    nothing. Returns how many were told."""
    rows = unalerted_failures(deps.store)
    for row in rows:
        error = row.last_error or "unknown error"
        fix = how_to_fix(error, row.channel)
        posted = "it was not confirmed" if error.startswith(EXHAUSTED) else "nothing was posted"
        log.error(
            "%s %s to %s failed permanently: %s; %s: fix the cause, then "
            "`gpucost outbox --config ... --requeue %d` sends it. Fix: %s",
            _what(row),
            row.idempotency_key,
            row.channel,
            error,
            posted,
            row.id,
            fix,
            extra={"channel": row.channel, "error": error, "outbox_id": row.id},
        )
        _tell_console(deps, row, error, fix)
        mark_failure_alerted(deps.store, row.id, now)
    return len(rows)


def _tell_console(deps: Deps, row: OutboxRow, error: str, fix: str) -> None:
    head = f"gpucost could not deliver a {_what(row)} to {row.channel}: {error}"
    text = f"{head}\nFix: {fix}\nThen: gpucost outbox --config ... --requeue {row.id}"
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "gpucost: delivery failed"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
    ]
    msg = Message(f"outbox-failed-{row.id}-{row.failed_at}", "gpucost (operator)", text, blocks)
    console = deps.operator
    if console is None:
        return
    try:
        found = console.lookup(msg)
        result = found if found is not None else console.send(msg)
    except Exception as e:  # the log line above already told it; never stop delivery over this
        log.exception("console alert for outbox row %d raised %s", row.id, type(e).__name__)
        return
    if result.outcome is not Outcome.SENT:
        log.error("console alert for outbox row %d not written: %s", row.id, result.error)
