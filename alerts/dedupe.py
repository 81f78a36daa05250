"""The dedupe decision: a pure function over one notification-log entry.

Modelled on Alertmanager's `nflog` + `DedupStage`. For one (group key, receiver) the log remembers
which fingerprints were announced as firing, when a message of the group was last DELIVERED (set by
`alerts.outbox.mark_sent`, never at enqueue time), when the newest message was queued while it is
still undelivered, and when a new episode was first seen (for `group_wait`). Given what fires now,
`decide` says whether to notify, wait, only update the log, or do nothing. It reads no clock and
no database: the pipeline passes `now` and the entry in, and persists the entry `decide` hands back.

A WAIT carries `wait_until`, the moment the group becomes due: the pipeline persists it as the
group's timer, and the outbox job flushes the group then (`alerts.pipeline.flush_due`), as
Alertmanager's group timers do, instead of waiting for the next detection run.

Rules (in order):
- No open episode (nothing announced as firing): a group with notifiable findings waits
  `group_wait` from when it was first seen, then notifies (`NEW_GROUP`; a new thread).
- Open episode, something changed (a new fingerprint fires; with `send_resolved`, a fingerprint
  resolved; or everything resolved): notify once `group_interval` has passed since the last
  message was queued or delivered, else wait. Without `send_resolved`, resolutions only update the log.
- Open episode, nothing changed, still firing: notify again once `repeat_interval` has passed
  since the last DELIVERY (or permanent failure), and never while a message is still queued: a
  message stuck behind a Slack outage is retried, not joined by repeats, and the next repeat
  counts from when it finally arrived. Only a group with a finding still current is reminded
  (`current`: those whose waste is not over, `Finding.over`; all unless the pipeline says): an
  idle run that ended last week was told when found, and a daily "still firing" about it, for as
  long as the window holds it, is noise.

A fingerprint is *resolved* when it no longer fires at all. One that still fires but is silenced
or below `min_severity` is *muted*: it stays in the log and is not announced either way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

__all__ = ["Action", "Decision", "LogEntry", "Policy", "Reason", "decide"]


class Action(StrEnum):
    NONE = "none"  # nothing to do
    WAIT = "wait"  # something to say, but group_wait / group_interval has not elapsed
    RECORD = "record"  # update the log without a message (resolutions when send_resolved is off)
    NOTIFY = "notify"


class Reason(StrEnum):
    NEW_GROUP = "new_group"
    NEW_FIRING = "new_firing"
    RESOLVED = "resolved"
    ALL_RESOLVED = "all_resolved"
    REPEAT = "repeat"


@dataclass(frozen=True)
class Policy:
    group_wait: timedelta
    group_interval: timedelta
    repeat_interval: timedelta
    send_resolved: bool = True


@dataclass(frozen=True)
class LogEntry:
    """The persisted state of one (group key, receiver).

    `sequence` counts notifications (it feeds the idempotency key); `episode` counts threads;
    `first_seen_at` is when the current not-yet-announced episode appeared (None once announced).
    `last_notified_at` is when a message was last delivered (None until one was); `queued_at` when
    the newest message was enqueued, None once it was delivered or failed for good;
    `last_failed_at` when the newest message failed permanently.
    """

    firing: frozenset[str] = frozenset()
    last_notified_at: datetime | None = None
    first_seen_at: datetime | None = None
    sequence: int = 0
    episode: int = 0
    queued_at: datetime | None = None
    last_failed_at: datetime | None = None

    @property
    def last_outcome_at(self) -> datetime | None:
        """When the last message was delivered or gave up: repeat intervals count from here."""
        return _latest(self.last_notified_at, self.last_failed_at)

    @property
    def last_activity_at(self) -> datetime | None:
        """Delivered, failed or queued, whichever is latest: group intervals count from here."""
        return _latest(self.last_notified_at, self.last_failed_at, self.queued_at)


def _latest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Decision:
    action: Action
    entry: LogEntry  # the entry to persist (equal to the input when action is NONE)
    reason: Reason | None = None
    new: frozenset[str] = frozenset()
    resolved: frozenset[str] = frozenset()
    wait_until: datetime | None = None  # for WAIT: when the group is due (its timer; see pipeline)


def decide(
    entry: LogEntry | None,
    firing: frozenset[str],
    still_firing: frozenset[str],
    now: datetime,
    policy: Policy,
    current: frozenset[str] | None = None,
) -> Decision:
    """Decide for one group.

    `firing`: this group's notifiable fingerprints now (after silences and min_severity).
    `still_firing`: every fingerprint firing now, notifiable or not (absence means resolved).
    `current`: the fingerprints whose waste is not over (None: all); only they earn a repeat.
    """
    e = entry or LogEntry()
    if not e.firing:
        return _new_episode(e, firing, now, policy)
    new = firing - e.firing
    resolved = e.firing - still_firing
    kept = (e.firing - resolved) | firing
    if not kept:
        reason = Reason.ALL_RESOLVED
    elif new:
        reason = Reason.NEW_FIRING
    elif resolved:
        reason = Reason.RESOLVED
    elif (
        (firing if current is None else firing & current)
        and e.queued_at is None
        and _due(e.last_outcome_at, now, policy.repeat_interval)
    ):
        return _notify(e, Reason.REPEAT, kept, now, frozenset(), frozenset())
    else:
        return Decision(Action.NONE, e)
    if not new and not policy.send_resolved:
        return Decision(Action.RECORD, replace(e, firing=kept), reason, new, resolved)
    last = e.last_activity_at
    if last is not None and now < last + policy.group_interval:
        return Decision(Action.WAIT, e, reason, new, resolved, last + policy.group_interval)
    return _notify(e, reason, kept, now, new, resolved)


def _due(since: datetime | None, now: datetime, interval: timedelta) -> bool:
    return since is not None and now >= since + interval


def _new_episode(e: LogEntry, firing: frozenset[str], now: datetime, policy: Policy) -> Decision:
    if not firing:
        if e.first_seen_at is None:
            return Decision(Action.NONE, e)
        return Decision(Action.RECORD, replace(e, first_seen_at=None))  # vanished while waiting
    seen = e.first_seen_at or now
    if now < seen + policy.group_wait:
        due = seen + policy.group_wait
        return Decision(Action.WAIT, replace(e, first_seen_at=seen), Reason.NEW_GROUP, firing, wait_until=due)
    entry = replace(e, first_seen_at=None, episode=e.episode + 1)
    return _notify(entry, Reason.NEW_GROUP, firing, now, firing, frozenset())


def _notify(
    e: LogEntry,
    reason: Reason,
    kept: frozenset[str],
    now: datetime,
    new: frozenset[str],
    resolved: frozenset[str],
) -> Decision:
    """Queue a message: the log says "queued at `now`"; delivery records `last_notified_at`."""
    entry = replace(e, firing=kept, queued_at=now, sequence=e.sequence + 1)
    return Decision(Action.NOTIFY, entry, reason, new, resolved)
