"""The dedupe decision is pure: a table of (log entry, firing now) -> (action, reason, new log)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from alerts.dedupe import Action, LogEntry, Policy, Reason, decide

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)
H = timedelta(hours=1)
POLICY = Policy(group_wait=30 * S, group_interval=300 * S, repeat_interval=24 * H, send_resolved=True)
NO_RESOLVED = Policy(group_wait=30 * S, group_interval=300 * S, repeat_interval=24 * H, send_resolved=False)


def fs(*xs: str) -> frozenset[str]:
    return frozenset(xs)


def notified(firing: frozenset[str], at: datetime, seq: int = 1) -> LogEntry:
    return LogEntry(firing=firing, last_notified_at=at, sequence=seq, episode=1)


CASES = [
    # id, entry, firing (notifiable), still_firing (all), now, policy, action, reason, new, resolved
    ("nothing at all", None, fs(), fs(), T0, POLICY, Action.NONE, None, fs(), fs()),
    (
        "new group waits group_wait",
        None,
        fs("a"),
        fs("a"),
        T0,
        POLICY,
        Action.WAIT,
        Reason.NEW_GROUP,
        fs("a"),
        fs(),
    ),
    (
        "new group still waiting",
        LogEntry(first_seen_at=T0),
        fs("a", "b"),
        fs("a", "b"),
        T0 + 29 * S,
        POLICY,
        Action.WAIT,
        Reason.NEW_GROUP,
        fs("a", "b"),
        fs(),
    ),
    (
        "new group notifies after group_wait",
        LogEntry(first_seen_at=T0),
        fs("a", "b"),
        fs("a", "b"),
        T0 + 30 * S,
        POLICY,
        Action.NOTIFY,
        Reason.NEW_GROUP,
        fs("a", "b"),
        fs(),
    ),
    (
        "zero group_wait notifies at once",
        None,
        fs("a"),
        fs("a"),
        T0,
        Policy(timedelta(0), 300 * S, 24 * H),
        Action.NOTIFY,
        Reason.NEW_GROUP,
        fs("a"),
        fs(),
    ),
    (
        "waiting group vanished: forget first_seen",
        LogEntry(first_seen_at=T0),
        fs(),
        fs(),
        T0 + S,
        POLICY,
        Action.RECORD,
        None,
        fs(),
        fs(),
    ),
    (
        "unchanged: nothing",
        notified(fs("a"), T0),
        fs("a"),
        fs("a"),
        T0 + H,
        POLICY,
        Action.NONE,
        None,
        fs(),
        fs(),
    ),
    (
        "repeat after repeat_interval",
        notified(fs("a"), T0),
        fs("a"),
        fs("a"),
        T0 + 24 * H,
        POLICY,
        Action.NOTIFY,
        Reason.REPEAT,
        fs(),
        fs(),
    ),
    (
        "just before repeat_interval",
        notified(fs("a"), T0),
        fs("a"),
        fs("a"),
        T0 + 24 * H - S,
        POLICY,
        Action.NONE,
        None,
        fs(),
        fs(),
    ),
    (
        "new fingerprint within group_interval waits",
        notified(fs("a"), T0),
        fs("a", "b"),
        fs("a", "b"),
        T0 + 299 * S,
        POLICY,
        Action.WAIT,
        Reason.NEW_FIRING,
        fs("b"),
        fs(),
    ),
    (
        "new fingerprint after group_interval",
        notified(fs("a"), T0),
        fs("a", "b"),
        fs("a", "b"),
        T0 + 300 * S,
        POLICY,
        Action.NOTIFY,
        Reason.NEW_FIRING,
        fs("b"),
        fs(),
    ),
    (
        "one of two resolved",
        notified(fs("a", "b"), T0),
        fs("a"),
        fs("a"),
        T0 + H,
        POLICY,
        Action.NOTIFY,
        Reason.RESOLVED,
        fs(),
        fs("b"),
    ),
    (
        "all resolved",
        notified(fs("a", "b"), T0),
        fs(),
        fs(),
        T0 + H,
        POLICY,
        Action.NOTIFY,
        Reason.ALL_RESOLVED,
        fs(),
        fs("a", "b"),
    ),
    (
        "all resolved, send_resolved off: record only",
        notified(fs("a"), T0),
        fs(),
        fs(),
        T0 + H,
        NO_RESOLVED,
        Action.RECORD,
        Reason.ALL_RESOLVED,
        fs(),
        fs("a"),
    ),
    (
        "resolution waits for group_interval",
        notified(fs("a"), T0),
        fs(),
        fs(),
        T0 + 10 * S,
        POLICY,
        Action.WAIT,
        Reason.ALL_RESOLVED,
        fs(),
        fs("a"),
    ),
    (
        "silenced but firing is muted, not resolved",
        notified(fs("a", "b"), T0),
        fs("a"),
        fs("a", "b"),
        T0 + H,
        POLICY,
        Action.NONE,
        None,
        fs(),
        fs(),
    ),
    (
        "all muted: no repeat",
        notified(fs("a"), T0),
        fs(),
        fs("a"),
        T0 + 48 * H,
        POLICY,
        Action.NONE,
        None,
        fs(),
        fs(),
    ),
    (
        "new + resolved at once",
        notified(fs("a"), T0),
        fs("b"),
        fs("b"),
        T0 + H,
        NO_RESOLVED,
        Action.NOTIFY,
        Reason.NEW_FIRING,
        fs("b"),
        fs("a"),
    ),
]


@pytest.mark.parametrize(
    ("entry", "firing", "still", "now", "policy", "action", "reason", "new", "resolved"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decide_table(entry, firing, still, now, policy, action, reason, new, resolved) -> None:
    d = decide(entry, firing, still, now, policy)
    assert (d.action, d.reason, d.new, d.resolved) == (action, reason, new, resolved)


def test_notify_advances_the_log() -> None:
    d = decide(LogEntry(first_seen_at=T0, sequence=4, episode=2), fs("a"), fs("a"), T0 + H, POLICY)
    assert d.entry == LogEntry(  # queued, not delivered: the outbox records the delivery
        firing=fs("a"), last_notified_at=None, first_seen_at=None, sequence=5, episode=3, queued_at=T0 + H
    )
    d2 = decide(d.entry, fs("a", "b"), fs("a", "b"), T0 + 2 * H, POLICY)
    assert d2.entry.firing == fs("a", "b") and d2.entry.sequence == 6 and d2.entry.episode == 3


def test_all_resolved_closes_the_episode_and_next_firing_is_a_new_group() -> None:
    closed = decide(notified(fs("a"), T0), fs(), fs(), T0 + H, POLICY).entry
    assert closed.firing == fs()
    again = decide(closed, fs("a"), fs("a"), T0 + 2 * H, POLICY)
    assert (again.action, again.reason) == (Action.WAIT, Reason.NEW_GROUP)


def test_wait_keeps_the_first_seen_time() -> None:
    first = decide(None, fs("a"), fs("a"), T0, POLICY)
    second = decide(first.entry, fs("a", "b"), fs("a", "b"), T0 + 10 * S, POLICY)
    assert first.entry.first_seen_at == second.entry.first_seen_at == T0


def test_repeats_count_from_delivery_and_never_pile_up_behind_a_queued_message() -> None:
    queued = LogEntry(firing=fs("a"), sequence=1, episode=1, queued_at=T0)
    # undelivered for two repeat intervals: still no second message
    assert decide(queued, fs("a"), fs("a"), T0 + 48 * H, POLICY).action is Action.NONE
    delivered = replace(queued, queued_at=None, last_notified_at=T0 + 10 * H)
    assert decide(delivered, fs("a"), fs("a"), T0 + 33 * H, POLICY).action is Action.NONE
    d = decide(delivered, fs("a"), fs("a"), T0 + 34 * H, POLICY)
    assert (d.action, d.reason) == (Action.NOTIFY, Reason.REPEAT)
    # a message that failed for good (revoked token) is tried again a repeat interval later
    failed = replace(queued, queued_at=None, last_failed_at=T0 + H)
    assert decide(failed, fs("a"), fs("a"), T0 + 24 * H, POLICY).action is Action.NONE
    assert decide(failed, fs("a"), fs("a"), T0 + 25 * H, POLICY).action is Action.NOTIFY
    # a change waits group_interval from the queued message, delivered or not
    assert decide(queued, fs("a", "b"), fs("a", "b"), T0 + 299 * S, POLICY).action is Action.WAIT
    assert decide(queued, fs("a", "b"), fs("a", "b"), T0 + 300 * S, POLICY).action is Action.NOTIFY


@pytest.mark.parametrize(
    ("name", "entry", "firing", "now", "due"),
    [
        ("new group: first seen + group_wait", None, fs("a"), T0 + 5 * S, T0 + 35 * S),
        ("new group keeps its first sighting", LogEntry(first_seen_at=T0), fs("a", "b"), T0 + 29 * S, T0 + 30 * S),
        ("update: last message + group_interval", notified(fs("a"), T0), fs("a", "b"), T0 + 60 * S, T0 + 300 * S),
        (
            "update: counts from a queued message too",
            replace(notified(fs("a"), T0), queued_at=T0 + 100 * S),
            fs("a", "b"),
            T0 + 120 * S,
            T0 + 400 * S,
        ),
    ],
)
def test_a_wait_says_when_the_group_is_due(name, entry, firing, now, due) -> None:
    """The group's timer: the pipeline persists it and the outbox job flushes the group then."""
    d = decide(entry, firing, firing, now, POLICY)
    assert d.action is Action.WAIT, name
    assert d.wait_until == due, name
    assert decide(d.entry, firing, firing, due, POLICY).action is Action.NOTIFY, name
    assert decide(d.entry, firing, firing, due - S, POLICY).action is Action.WAIT, name
