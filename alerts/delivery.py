"""`deliver_outbox`: send what is due, then record the outcome. The retry policy lives here.

For each due row (oldest first): resolve the thread (a reply waits while its thread root is still
pending); resolve the channel to its id (the row's recorded id, else the notifier's, else the id
Slack last confirmed for that name); if an earlier attempt is uncertain, ask the notifier whether
the message already arrived in that channel; mark the attempt, persisting the id; send to the id;
record sent / retry / failed. A channel that does not resolve is posted to by name, and a lookup
there cannot succeed: after an uncertain failure such a message may arrive twice, never zero times.
A 429 stops the batch, since the rest would be rate limited too. An exception a notifier did not
classify is treated as an uncertain retryable failure and logged: it reaches the retry logic
instead of being swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from alerts.notifier import DeliveryResult, Outcome
from alerts.outbox import (
    OutboxRow,
    backoff,
    due_rows,
    ensure_schema,
    get_row,
    known_channel_id,
    mark_attempt,
    mark_failed,
    mark_retry,
    mark_sent,
)

if TYPE_CHECKING:
    from alerts.pipeline import Deps

__all__ = ["DeliveryReport", "deliver_outbox", "fire_fault"]

log = logging.getLogger("alerts.delivery")


@dataclass(frozen=True)
class DeliveryReport:
    sent: int = 0
    retried: int = 0
    failed: int = 0
    deferred: int = 0  # replies waiting for their thread root
    recovered: int = 0  # found already delivered after an uncertain attempt
    rate_limited: bool = False


def fire_fault(hook: Callable[[str], None] | None, point: str) -> None:
    if hook is not None:
        hook(point)


def deliver_outbox(deps: Deps, now: datetime) -> DeliveryReport:
    """Attempt every due pending message once; never sends a row that is already sent."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    ensure_schema(deps.store)
    counts = {"sent": 0, "retried": 0, "failed": 0, "deferred": 0, "recovered": 0}
    rate_limited = False
    for row in due_rows(deps.store, now, deps.batch_size):
        outcome, result = _deliver_one(deps, row, now)
        counts[outcome] += 1
        if result is not None and result.outcome is Outcome.RETRY and result.retry_after is not None:
            rate_limited = True
            break
    return DeliveryReport(**counts, rate_limited=rate_limited)


def _thread(deps: Deps, row: OutboxRow) -> tuple[bool, str | None, str]:
    """(ready, thread_ts, channel). Replies go to the root's thread and channel id once it is sent."""
    if row.root_key is None:
        return True, None, row.channel
    root = get_row(deps.store, row.root_key)
    if root is None or root.status == "failed":
        return True, None, row.channel
    if root.status == "pending":
        return False, None, row.channel
    if not deps.notifier.supports_threads or root.slack_ts is None:
        return True, None, row.channel
    return True, root.slack_ts, root.slack_channel or row.channel


def _deliver_one(deps: Deps, row: OutboxRow, now: datetime) -> tuple[str, DeliveryResult | None]:
    ready, thread_ts, channel = _thread(deps, row)
    if not ready:
        return "deferred", None
    channel_id = row.channel_id or _resolve(deps, channel)
    msg = replace(row.message(thread_ts), channel=channel_id or channel)
    if row.inflight:
        found = _call(lambda: deps.notifier.lookup(msg), "lookup")
        if found is not None and found.outcome is not Outcome.FAILED:
            found = replace(found, uncertain=True)  # a failed lookup leaves the attempt uncertain
            outcome = _record(deps, row, found, now, attempts=row.attempts)
            return ("recovered" if found.outcome is Outcome.SENT else outcome), found
        if found is not None:
            log.warning(
                "cannot check whether %s arrived (%s); sending again", row.idempotency_key, found.error
            )
    fire_fault(deps.fault, "before_send")
    mark_attempt(deps.store, row.id, channel_id)
    result = _call(lambda: deps.notifier.send(msg), "send")
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
        log.info("alert %s sent to %s (ts %s)", row.idempotency_key, result.channel or row.channel, result.ts)
        return "sent"
    error = result.error or "unknown error"
    if result.outcome is Outcome.RETRY:
        delay = timedelta(seconds=result.retry_after) if result.retry_after is not None else backoff(attempts)
        mark_retry(deps.store, row.id, now + delay, error, uncertain=result.uncertain)
        log.warning(
            "alert %s to %s not delivered (%s); retry in %s", row.idempotency_key, row.channel, error, delay
        )
        return "retried"
    mark_failed(deps.store, row.id, error, now)
    log.error(
        "alert %s to %s failed permanently: %s; nothing was posted: fix the cause, then "
        "`gpucost outbox --config ... --requeue %d` sends it",
        row.idempotency_key,
        row.channel,
        error,
        row.id,
    )
    return "failed"
