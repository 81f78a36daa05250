"""`group_wait` / `group_interval` are timers (as in Alertmanager), flushed by the outbox job.

The daemon runs detection after each utilization poll (every 5 minutes) and the outbox job every
`daemon.outbox_seconds` (30 s). A finding first seen at t must reach Slack by t + group_wait + the
outbox interval, with no further detection run, across a restart, and exactly once. Real slack-sdk
client against the local fake Slack, real SQLite, an injected clock, no sleeps.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.console import ConsoleNotifier
from alerts.pipeline import Deps, flush_due, outbox_tick, process
from alerts.slack import SlackNotifier
from monitor.config import AlertsConfig, SlackConfig
from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.state.store import SQLiteStore
from tests.fakes.slack_server import FakeSlack
from tests.test_state_postgres import pg_server, pg_url, store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 18, 14, 0, 8, tzinfo=UTC)  # the first detection run, 8 s after start
TOKEN = "xoxb-test-token"
GROUP_WAIT = timedelta(seconds=30)
OUTBOX = timedelta(seconds=30)  # daemon.outbox_seconds default
DETECTION = timedelta(minutes=5)  # utilization_poll_minutes default


def finding(instance: str = "a3-hung-1", kind: str = "idle_gpu", impact: str = "812.40") -> Finding:
    scope = Scope(project="ml-train-prod", zone="us-central1-a", instance=instance)
    return Finding(
        kind=kind,
        severity=Severity.CRITICAL,
        title=f"GPU VM {instance} went idle",
        summary=f"8 x H100 on {instance} under 5% for 6 h",
        impact_usd=Decimal(impact),
        window_start=T0 - timedelta(hours=6),
        window_end=T0.replace(minute=0, second=0),
        scope=scope,
        evidence={
            "gpus": 8,
            "gpu_model": "H100",
            "idle_hours": 6,
            "idle_gpu_hours": Decimal("48.0"),
            "idle_cost_usd": Decimal("812.40"),
            "since": T0,
        },
        recommendation="Check the job; stop the VM if it hung",
        fingerprint=fingerprint(kind, scope),
    )


@dataclass
class Env:
    slack: FakeSlack
    db: Path
    alerts: AlertsConfig

    def deps(self) -> Deps:
        """A fresh process: new store connection, new client (what a restart gives)."""
        notifier = SlackNotifier(SecretStr(TOKEN), self.slack.base_url, timeout=30)  # only a hang times out
        return Deps(SQLiteStore(self.db), notifier, self.alerts, SlackConfig(channel="C0ALERTS"))

    def nflog(self) -> list[dict]:
        with SQLiteStore(self.db).transaction() as conn:
            return [json.loads(r[0]) for r in conn.execute("SELECT entry FROM alerts_nflog")]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with FakeSlack(token=TOKEN) as slack:
        yield Env(slack, tmp_path / "state.sqlite", AlertsConfig(group_wait_seconds=30))


def ticks(start: datetime, end: datetime, every: timedelta = OUTBOX) -> Iterator[datetime]:
    t = start
    while t <= end:
        yield t
        t += every


def test_a_waiting_group_is_sent_by_the_outbox_job_without_another_detection(env: Env) -> None:
    deps = env.deps()
    a = finding()
    rep = process([a], T0, deps)
    assert rep.waiting == 1 and rep.notified == ()
    sent_at = None
    # the outbox job's ticks, offset from detection as in the daemon; no detection runs again
    for now in ticks(T0 + timedelta(seconds=3), T0 + DETECTION - timedelta(seconds=1)):
        _, dr = outbox_tick(deps, now)
        if dr.sent:
            sent_at = now
            break
        assert env.slack.messages == [], f"sent before group_wait ended, at {now - T0}"
    assert sent_at is not None, "the waiting group was never flushed without a detection run"
    assert T0 + GROUP_WAIT <= sent_at <= T0 + GROUP_WAIT + OUTBOX
    [msg] = env.slack.messages
    assert a.fingerprint in json.dumps(msg["blocks"]) and "$812.40" in json.dumps(msg["blocks"])


def test_the_timer_survives_a_restart_during_the_wait(env: Env) -> None:
    a, b = finding("n1"), finding("n2", impact="20")
    first = env.deps()
    process([a, b], T0, first)
    outbox_tick(first, T0 + timedelta(seconds=10))
    first.store.close()  # the process dies 12 s into the wait
    second = env.deps()  # restarted: its first detection has not run yet
    for now in ticks(T0 + timedelta(seconds=25), T0 + GROUP_WAIT + OUTBOX):
        outbox_tick(second, now)
    [msg] = env.slack.messages
    body = json.dumps(msg["blocks"])
    assert a.fingerprint in body and b.fingerprint in body


def test_no_double_send_when_detection_and_the_timer_both_see_the_group(env: Env) -> None:
    deps = env.deps()
    a = finding()
    process([a], T0, deps)
    flushed = flush_due(deps, T0 + GROUP_WAIT)  # the timer enqueues; delivery has not run yet
    assert len(flushed.notified) == 1
    # the next detection arrives before the delivery, and again after it
    assert process([a], T0 + GROUP_WAIT + timedelta(seconds=1), deps).notified == ()
    for now in ticks(T0 + GROUP_WAIT + timedelta(seconds=2), T0 + 2 * DETECTION):
        if now >= T0 + DETECTION:
            process([a], now, deps)
        outbox_tick(deps, now)
    assert len(env.slack.messages) == 1


def test_the_log_records_delivery_not_the_timer_flush(env: Env) -> None:
    deps = env.deps()
    process([finding()], T0, deps)
    flush_due(deps, T0 + GROUP_WAIT)
    [entry] = env.nflog()
    assert entry["last_notified_at"] is None and entry["queued_at"] is not None
    outbox_tick(deps, T0 + GROUP_WAIT + timedelta(seconds=1))
    [entry] = env.nflog()
    assert entry["last_notified_at"] is not None and entry["queued_at"] is None


def test_an_update_waiting_for_group_interval_is_flushed_when_the_interval_ends(env: Env) -> None:
    deps = env.deps()
    a, b = finding("n1"), finding("n2", impact="20")
    process([a], T0, deps)
    outbox_tick(deps, T0 + GROUP_WAIT)  # the first message: group_interval counts from here
    rep = process([a, b], T0 + timedelta(minutes=1), deps)
    assert rep.waiting == 1
    interval = timedelta(seconds=env.alerts.group_interval_seconds)
    for now in ticks(T0 + GROUP_WAIT + OUTBOX, T0 + GROUP_WAIT + interval + OUTBOX):
        outbox_tick(deps, now)
    assert len(env.slack.messages) == 2
    update = env.slack.messages[1]
    assert update["thread_ts"] == env.slack.messages[0]["ts"]
    assert b.fingerprint in json.dumps(update["blocks"])


def test_a_group_that_vanished_while_waiting_sends_nothing(env: Env) -> None:
    deps = env.deps()
    process([finding()], T0, deps)
    process([], T0 + timedelta(seconds=10), deps)
    for now in ticks(T0, T0 + 3 * GROUP_WAIT):
        outbox_tick(deps, now)
    assert env.slack.messages == []


def test_a_flushed_message_reads_as_one_from_a_detection_run(tmp_path: Path) -> None:
    """The stored findings render exactly as the live ones would (Decimal evidence included)."""
    a = finding()

    def blocks(flush: bool) -> list:
        d = tmp_path / ("flush" if flush else "live")
        notifier = ConsoleNotifier(d, stream=io.StringIO())
        deps = Deps(SQLiteStore(d / "state.sqlite"), notifier, AlertsConfig(group_wait_seconds=30))
        process([a], T0, deps)
        if not flush:
            process([a], T0 + GROUP_WAIT, deps)
        outbox_tick(deps, T0 + GROUP_WAIT)
        [line] = (d / "alerts.jsonl").read_text().splitlines()
        return json.loads(line)["blocks"]

    live, flushed = blocks(flush=False), blocks(flush=True)
    assert flushed == live
    assert "6 idle hours, 48.0 idle GPU-hours of 8× H100 = $812.40" in json.dumps(flushed, ensure_ascii=False)


def test_the_timer_works_on_both_state_stores(store, tmp_path: Path) -> None:  # noqa: F811
    """SQLite and PostgreSQL (through the dialect layer): the console notifier, a timer flush."""
    notifier = ConsoleNotifier(tmp_path / "alerts", io.StringIO())
    deps = Deps(store, notifier, AlertsConfig(group_wait_seconds=30), SlackConfig())
    process([finding()], T0, deps)
    assert outbox_tick(deps, T0 + timedelta(seconds=29))[1].sent == 0
    flushed, delivered = outbox_tick(deps, T0 + GROUP_WAIT)
    assert (len(flushed.notified), delivered.sent) == (1, 1)
    assert outbox_tick(deps, T0 + GROUP_WAIT + OUTBOX)[1].sent == 0
    assert len((tmp_path / "alerts" / "alerts.jsonl").read_text().splitlines()) == 1
