"""The alert pipeline end to end: real slack-sdk client against the local fake Slack, real SQLite.

Time is an injected clock; every scenario checks what actually reached the server.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.console import ConsoleNotifier
from alerts.outbox import status
from alerts.pipeline import Deps, deliver_outbox, process
from alerts.slack import SlackNotifier, WebhookNotifier
from monitor.config import AlertsConfig, Route, Silence, SlackConfig, parse_config
from monitor.detectors import registered
from monitor.errors import ConfigError
from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.state.store import SQLiteStore
from tests.fakes.slack_server import Failure, FakeSlack

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TOKEN = "xoxb-test-token"
EVIL = "<!channel> <http://evil|click>"


def finding(
    kind: str = "idle_gpu",
    project: str = "ml-prod",
    instance: str = "a3-node-1",
    severity: Severity = Severity.WARNING,
    impact: str = "123.45",
    labels: dict[str, str] | None = None,
) -> Finding:
    scope = Scope(project=project, zone="us-central1-a", instance=instance, labels=labels or {})
    return Finding(
        kind=kind,
        severity=severity,
        title=f"Idle GPUs on {instance}",
        summary=f"8 x H100 on {instance} under 5% for 6 h",
        impact_usd=Decimal(impact),
        window_start=T0 - timedelta(hours=6),
        window_end=T0,
        scope=scope,
        evidence={"gpus": 8, "mean_util_pct": 3.1},
        recommendation="Stop the instance or shrink the node pool",
        fingerprint=fingerprint(kind, scope),
    )


class Crash(Exception):
    """Stands in for `kill -9` at a fault point."""


@dataclass
class Clock:
    now: datetime = T0

    def advance(self, **kw: float) -> datetime:
        self.now += timedelta(**kw)
        return self.now


@dataclass
class Env:
    slack: FakeSlack
    db: Path
    alerts: AlertsConfig = field(default_factory=lambda: AlertsConfig(group_wait_seconds=30))
    slack_cfg: SlackConfig = field(default_factory=lambda: SlackConfig(channel="C0ALERTS"))
    token: str = TOKEN
    clock: Clock = field(default_factory=Clock)
    timeout: int = 30  # the client's; generous, so only a stall the test stages times out

    def deps(self, fault=None, notifier=None) -> Deps:
        n = notifier or SlackNotifier(SecretStr(self.token), self.slack.base_url, timeout=self.timeout)
        return Deps(SQLiteStore(self.db), n, self.alerts, self.slack_cfg, fault=fault)

    def cycle(self, findings: list[Finding], deps: Deps | None = None):
        d = deps or self.deps()
        rep = process(findings, self.clock.now, d)
        return rep, deliver_outbox(d, self.clock.now)

    def posts(self) -> list[dict]:
        return self.slack.messages


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with FakeSlack(token=TOKEN) as slack:
        yield Env(slack, tmp_path / "state.sqlite")


def fps_in(msg: dict) -> str:
    return json.dumps(msg["blocks"])


def test_group_wait_then_one_message_with_every_finding(env: Env) -> None:
    a, b = finding(instance="n1"), finding(instance="n2", impact="10")
    rep, dr = env.cycle([a, b])
    assert rep.waiting == 1 and dr.sent == 0 and env.posts() == []
    env.clock.advance(seconds=29)
    env.cycle([a, b])
    assert env.posts() == []
    env.clock.advance(seconds=1)
    rep, dr = env.cycle([a, b])
    assert dr.sent == 1 and len(rep.notified) == 1
    [msg] = env.posts()
    assert msg["channel"] == "C0ALERTS" and msg["thread_ts"] is None
    body = fps_in(msg)
    assert a.fingerprint in body and b.fingerprint in body
    assert "$123.45" in body and "Stop the instance" in body
    # the outbox recorded Slack's ts
    st = status(SQLiteStore(env.db))
    assert (st.sent, st.pending, st.failed) == (1, 0, 0)


def test_exactly_once_per_repeat_interval_over_three_days(env: Env) -> None:
    a, b = finding(instance="n1"), finding(kind="inter_zone_egress", instance="n2")
    deps = env.deps()
    end = T0 + timedelta(hours=72)
    while env.clock.now < end:
        env.cycle([a, b], deps)
        env.clock.advance(minutes=15)
    posts = env.posts()
    for f in (a, b):
        times = [m["ts"] for m in posts if f.fingerprint in fps_in(m)]
        assert len(times) == 3, f"{f.kind}: {len(times)} messages in 72 h"  # first + 2 repeats
    roots = [m for m in posts if m["thread_ts"] is None]
    assert len(roots) == 2  # one group per kind
    repeats = [m for m in posts if m["thread_ts"] is not None]
    assert all(m["reply_broadcast"] for m in repeats)
    assert {m["thread_ts"] for m in repeats} == {m["ts"] for m in roots}


@pytest.mark.parametrize(("remind", "told"), [(False, 1), (True, 3)])
def test_a_finding_whose_waste_is_over_is_told_once_not_reminded(env: Env, remind: bool, told: int) -> None:
    """An idle run that ended inside the window (`still_idle` false) stays a finding while the
    detection window holds it: it was told when found, and reminding it every repeat interval for
    up to two weeks is noise. What still goes on is reminded as before; `remind_ended = true`
    reminds everything that fires, as Alertmanager does."""
    f = finding(instance="hung-job-vm")
    past = replace(f, evidence={**f.evidence, "still_idle": False})  # its run ended
    going = finding(kind="inter_zone_egress", instance="n2")  # another group (kind, project)
    env.alerts = env.alerts.model_copy(update={"remind_ended": remind})
    deps = env.deps()
    while env.clock.now < T0 + timedelta(hours=72):
        env.cycle([past, going], deps)
        env.clock.advance(minutes=15)
    shown = {f.kind: sum(f.fingerprint in fps_in(m) for m in env.posts()) for f in (past, going)}
    assert shown == {"idle_gpu": told, "inter_zone_egress": 3}


def test_a_group_with_a_waste_still_going_is_reminded_whole(env: Env) -> None:
    """The ended run shares a group with a node still idle: the group is reminded for the one
    still going, and every message shows the whole group, the ended run too."""
    f = finding(instance="hung-job-vm")
    past = replace(f, evidence={**f.evidence, "still_idle": False})
    going = finding(instance="forgotten-vm")  # same kind and project: one group
    deps = env.deps()
    while env.clock.now < T0 + timedelta(hours=72):
        env.cycle([past, going], deps)
        env.clock.advance(minutes=15)
    posts = env.posts()
    assert len(posts) == 3 and all(
        past.fingerprint in fps_in(m) and going.fingerprint in fps_in(m) for m in posts
    )


def test_resolution_goes_in_the_thread_of_the_first_message(env: Env) -> None:
    a, b = finding(instance="n1"), finding(instance="n2")
    env.alerts = AlertsConfig(group_wait_seconds=0, group_interval_seconds=300)
    env.cycle([a, b])
    [root] = env.posts()
    env.clock.advance(minutes=10)
    env.cycle([a])  # b resolved
    env.clock.advance(minutes=10)
    env.cycle([])  # a resolved
    root2, upd1, upd2 = env.posts()
    assert root2 == root
    assert upd1["thread_ts"] == upd2["thread_ts"] == root["ts"]
    # its preview names what resolved, not the group's first finding still firing
    assert upd1["text"] == "[RESOLVED] Idle GPUs on n2 (1 finding still firing)"
    # the resolution of n2, with n1 still firing shown beside it: every message shows the whole group
    assert "Idle GPUs on n2" in json.dumps(upd1["blocks"]) and "Idle GPUs on n1" in json.dumps(upd1["blocks"])
    assert upd2["text"].startswith("[RESOLVED]") and "n1" in upd2["text"]
    # firing again later opens a new thread
    env.clock.advance(hours=1)
    env.cycle([a])
    assert env.posts()[-1]["thread_ts"] is None and len(env.posts()) == 4


def test_send_resolved_off_sends_no_resolution(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0, send_resolved=False)
    env.cycle([finding()])
    env.clock.advance(hours=1)
    env.cycle([])
    env.clock.advance(hours=30)
    env.cycle([])
    assert len(env.posts()) == 1


def test_429_delays_by_retry_after_then_delivers_once(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack.fail("chat.postMessage", Failure(status=429, retry_after=120))
    _, dr = env.cycle([finding()])
    assert (dr.sent, dr.retried, dr.rate_limited) == (0, 1, True)
    st = status(SQLiteStore(env.db))
    assert st.pending == 1 and "rate limited" in (st.last_error or "")
    env.clock.advance(seconds=119)
    assert deliver_outbox(env.deps(), env.clock.now).sent == 0
    assert len(env.slack.calls("chat.postMessage")) == 1  # not even tried before Retry-After
    env.clock.advance(seconds=1)
    assert deliver_outbox(env.deps(), env.clock.now).sent == 1
    assert len(env.posts()) == 1 and len(env.slack.calls("chat.postMessage")) == 2
    env.clock.advance(hours=1)
    assert deliver_outbox(env.deps(), env.clock.now).sent == 0
    assert len(env.posts()) == 1


def test_a_rate_limit_however_long_never_uses_up_the_attempts(env: Env) -> None:
    """Each 429 was counted as a failed attempt, and Retry-After replaced the backoff meant to
    spread `MAX_ATTEMPTS` over a day: 30 minutes of 429s at Retry-After 30 s failed the alert for
    good, and it was never sent once Slack took posts again (helper 51's audit)."""
    from alerts.outbox import MAX_ATTEMPTS, get_row

    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack.fail("chat.postMessage", Failure(status=429, retry_after=30), times=2 * MAX_ATTEMPTS)
    rep, _ = env.cycle([finding()])
    (key,) = [n.idempotency_key for n in rep.notified]
    deps = env.deps()
    for _ in range(2 * MAX_ATTEMPTS - 1):  # an hour of 429s, tried at every Retry-After
        env.clock.advance(seconds=30)
        deliver_outbox(deps, env.clock.now)
    row = get_row(deps.store, key)
    assert (row.status, row.attempts) == ("pending", 0), row.last_error
    env.clock.advance(seconds=30)
    assert deliver_outbox(deps, env.clock.now).sent == 1  # Slack takes posts again
    assert len(env.posts()) == 1


def test_a_resolution_never_overtakes_the_update_before_it(env: Env) -> None:
    """Replies of a thread went out in any order: an update retried on its backoff after two
    500s was posted after the group's later "resolved", leaving the thread's last word a stale
    "firing" (helper 51's audit). A reply now waits for the older replies of its thread."""
    env.alerts = AlertsConfig(group_wait_seconds=0, group_interval_seconds=300)
    a, b = finding(instance="n1"), finding(instance="n2")
    env.cycle([a])
    env.clock.advance(minutes=10)
    env.slack.fail("chat.postMessage", Failure(status=500), times=2)
    env.cycle([a, b])  # the update: 500, retried in 30 s, 500 again, retried in 60 s
    env.clock.advance(minutes=5)
    assert env.cycle([])[1].sent == 0  # all resolved, queued behind the update
    for _ in range(2):
        env.clock.advance(minutes=1)
        deliver_outbox(env.deps(), env.clock.now)
    texts = [m["text"] for m in env.posts()]
    assert [t.split(":")[0] for t in texts] == [
        "[WARNING] New",
        "[WARNING] Update",
        "[RESOLVED] Idle GPUs on n1, Idle GPUs on n2",
    ]
    assert len({m["thread_ts"] for m in env.posts()[1:]}) == 1  # both in the first message's thread


def test_a_resolution_is_not_posted_where_the_alert_never_was(env: Env) -> None:
    """The group's first message failed for good (Slack refused its blocks): its "resolved"
    was posted alone, telling the channel of an alert it never heard fire (helper 51's audit). It
    fails with its root, quietly (the root's failure was told), and a re-queue sends both in
    order."""
    from alerts.outbox_admin import requeue_failed

    env.alerts = AlertsConfig(group_wait_seconds=0, group_interval_seconds=300)
    env.slack.fail("chat.postMessage", Failure(error="invalid_blocks"), times=1)
    env.cycle([finding()])
    env.clock.advance(minutes=10)
    _, dr = env.cycle([])
    store = SQLiteStore(env.db)
    assert (dr.sent, dr.failed, dr.operator_alerts) == (0, 1, 0)
    assert env.posts() == [] and status(store).failed == 2
    requeue_failed(store, env.clock.now)
    for _ in range(2):
        deliver_outbox(env.deps(), env.clock.now)
    assert [m["text"].split(":")[0] for m in env.posts()] == [
        "[WARNING] New",
        "[RESOLVED] Idle GPUs on a3-node-1",
    ]
    assert env.posts()[1]["thread_ts"] == env.posts()[0]["ts"]


def test_a_partial_resolution_of_a_group_never_told_still_says_what_fires(env: Env) -> None:
    """A "resolved" while others of the group still fire shows those: news to a channel that
    heard nothing of the group, posted, not failed with the root as an "all resolved" is (helper
    56's review)."""
    env.alerts = AlertsConfig(group_wait_seconds=0, group_interval_seconds=300)
    env.slack.fail("chat.postMessage", Failure(error="invalid_blocks"), times=1)
    env.cycle([finding(instance="n1"), finding(instance="n2")])
    env.clock.advance(minutes=10)
    _, dr = env.cycle([finding(instance="n2")])
    assert dr.sent == 1 and "still firing" in env.posts()[0]["text"] and "n2" in fps_in(env.posts()[0])


def test_a_resolution_goes_back_with_its_root_whichever_is_requeued(env: Env) -> None:
    """The operator alert names the root's id: re-queued alone, it announced an alert that had
    resolved, and its "resolved" stayed failed, untold, paging for good (helper 56's review). The
    outbox's last error stays the root's cause, not the resolution's note."""
    from alerts.outbox_admin import list_outbox, requeue_failed
    from monitor.cli.check import check_outbox

    env.alerts = AlertsConfig(group_wait_seconds=0, group_interval_seconds=300)
    for requeued in ("root", "resolution"):
        env.slack.fail("chat.postMessage", Failure(error="channel_not_found"), times=1)
        env.cycle([finding(instance=requeued)])
        env.clock.advance(minutes=10)
        env.cycle([])
        store = SQLiteStore(env.db)
        assert "channel_not_found" in check_outbox(store).detail
        failed = sorted(e.id for e in list_outbox(store) if e.status == "failed")
        assert len(failed) == 2
        assert (
            requeue_failed(store, env.clock.now, (failed[0] if requeued == "root" else failed[1],)) == failed
        )
        deliver_outbox(env.deps(), env.clock.now)
        assert status(store).failed == 0 and status(store).pending == 0
        assert [m["text"].split(":")[0] for m in env.posts()[-2:]] == [
            "[WARNING] New",
            f"[RESOLVED] Idle GPUs on {requeued}",
        ]
        env.clock.advance(days=1)


@pytest.mark.parametrize("wait", ["group_wait", "backoff"])
def test_a_clock_stepped_back_moves_what_the_outbox_waits_for(env: Env, wait: str) -> None:
    """The scheduler moves its interval jobs back with a stepped clock (monitor.daemon), but the
    times the outbox waits for are stored on the wall clock: a new alert in `group_wait`, a row in
    its backoff, waited the step's hour anyway (helper 56's review). `clock_stepped` moves them."""
    from alerts.outbox import clock_stepped
    from alerts.pipeline import outbox_tick

    env.alerts = AlertsConfig(group_wait_seconds=30 if wait == "group_wait" else 0)
    if wait == "backoff":
        env.slack.fail("chat.postMessage", Failure(status=500), times=1)  # retried in 30 s
    env.cycle([finding()])
    assert env.posts() == []
    env.clock.advance(hours=-1)  # NTP steps the wall clock back an hour
    moved = 1 if wait == "group_wait" else 2  # the group's log; and the row in its backoff
    assert clock_stepped(SQLiteStore(env.db), timedelta(hours=-1), env.clock.now) == moved
    env.clock.advance(seconds=60)  # the outbox job, moved back by the watch, a minute later
    outbox_tick(env.deps(), env.clock.now)
    assert len(env.posts()) == 1
    assert clock_stepped(SQLiteStore(env.db), timedelta(hours=1), env.clock.now) == 0  # forward: nothing


def test_retention_keeps_a_thread_root_while_a_reply_to_it_is_pending(env: Env) -> None:
    """Retention kept a root only while its group fired. A group that fired past the horizon
    and resolved lost its root under its pending "resolved": after an uncertain first attempt
    (posted in the thread, the answer lost) the retry searched the channel's top level, found
    nothing and posted again, top level (helper 51's audit)."""
    from monitor.state.retention import horizon, prune

    env.alerts = AlertsConfig(group_wait_seconds=0)
    a = finding()
    env.cycle([a])
    env.clock.advance(days=100)  # it fires on, past the 90-day horizon, and then resolves
    env.cycle([a])
    env.clock.advance(minutes=10)
    env.timeout = 1
    env.slack.fail("chat.postMessage", Failure(delay=4, process_first=True))  # posted, answer lost
    env.cycle([])
    prune(SQLiteStore(env.db), horizon(env.clock.now, 90, 14))  # the daily retention job
    env.clock.advance(minutes=5)
    deliver_outbox(env.deps(), env.clock.now)
    resolved = [m for m in env.posts() if m["text"].startswith("[RESOLVED]")]
    assert len(resolved) == 1 and resolved[0]["thread_ts"] == env.posts()[0]["ts"]
    assert status(SQLiteStore(env.db)).pending == 0


def test_500_is_retried_with_backoff_and_not_duplicated(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack.fail("chat.postMessage", Failure(status=500), times=2)
    _, dr = env.cycle([finding()])
    assert dr.retried == 1
    env.clock.advance(seconds=29)
    assert deliver_outbox(env.deps(), env.clock.now).retried == 0  # backoff 30 s not over
    env.clock.advance(seconds=1)
    assert deliver_outbox(env.deps(), env.clock.now).retried == 1  # second 500; next wait 60 s
    env.clock.advance(seconds=60)
    assert deliver_outbox(env.deps(), env.clock.now).sent == 1
    assert len(env.posts()) == 1 and len(env.slack.calls("chat.postMessage")) == 3
    # each retry after an uncertain 5xx first checked whether the message had arrived
    assert len(env.slack.calls("conversations.history")) == 2


@pytest.mark.parametrize("channel", ["C0ALERTS", "#alerts"])  # history needs the id of a name
def test_timeout_after_slack_posted_is_found_not_resent(env: Env, channel: str) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack_cfg = SlackConfig(channel=channel)
    # Slack posts, then stalls 4 s past the client's 1 s timeout: a margin no scheduler delay on a
    # loaded machine closes (the stalled handler thread does not hold the test up)
    env.timeout = 1
    env.slack.fail("chat.postMessage", Failure(delay=5, process_first=True))
    _, dr = env.cycle([finding()])
    assert dr.retried == 1 and len(env.posts()) == 1  # Slack has it; we do not know yet
    env.clock.advance(minutes=5)
    dr = deliver_outbox(env.deps(), env.clock.now)
    assert (dr.recovered, dr.sent) == (1, 0)
    assert len(env.slack.calls("chat.postMessage")) == 1 and len(env.posts()) == 1
    st = status(SQLiteStore(env.db))
    assert (st.sent, st.pending) == (1, 0)


def test_invalid_auth_fails_is_surfaced_and_not_retried(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.token = "xoxb-revoked"
    _, dr = env.cycle([finding()])
    assert (dr.sent, dr.failed) == (0, 1)
    st = status(SQLiteStore(env.db))
    assert (st.failed, st.pending, st.healthy) == (1, 0, False)
    assert st.last_error == "chat.postMessage: invalid_auth"
    for _ in range(5):
        env.clock.advance(hours=1)
        deliver_outbox(env.deps(), env.clock.now)
    assert len(env.slack.calls("chat.postMessage")) == 1


def test_channel_not_found_is_permanent(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack_cfg = SlackConfig(channel="#no-such-channel")
    _, dr = env.cycle([finding()])
    assert dr.failed == 1
    assert status(SQLiteStore(env.db)).last_error == "chat.postMessage: channel_not_found"


@pytest.mark.parametrize("point", ["after_enqueue", "before_send"])
def test_crash_between_written_and_sent_then_restart_delivers_once(env: Env, point: str) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)

    def crash(at: str) -> None:
        if at == point:
            raise Crash(at)

    with pytest.raises(Crash):
        env.cycle([finding()], env.deps(fault=crash))
    assert env.slack.calls("chat.postMessage") == []
    assert status(SQLiteStore(env.db)).pending == 1
    # a new process on the same SQLite file
    env.clock.advance(minutes=1)
    fresh = env.deps()
    process([finding()], env.clock.now, fresh)  # the log already has it: nothing new enqueued
    first, second = deliver_outbox(fresh, env.clock.now), deliver_outbox(fresh, env.clock.now)
    assert (first.sent, second.sent) == (1, 0)
    env.clock.advance(minutes=5)
    deliver_outbox(env.deps(), env.clock.now)
    assert len(env.posts()) == 1 and len(env.slack.calls("chat.postMessage")) == 1


@pytest.mark.parametrize("channel", ["C0ALERTS", "#alerts"])
def test_crash_after_slack_confirmed_but_before_recording_is_not_resent(env: Env, channel: str) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack_cfg = SlackConfig(channel=channel)

    def crash(at: str) -> None:
        if at == "after_send":
            raise Crash(at)

    with pytest.raises(Crash):
        env.cycle([finding()], env.deps(fault=crash))
    assert len(env.posts()) == 1
    env.clock.advance(minutes=1)
    dr = deliver_outbox(env.deps(), env.clock.now)
    assert dr.recovered == 1 and len(env.slack.calls("chat.postMessage")) == 1
    assert status(SQLiteStore(env.db)).sent == 1


def test_label_value_arrives_escaped(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    f = finding(project="p<&>", instance=EVIL, labels={"team": EVIL})
    env.cycle([f])
    [call] = env.slack.calls("chat.postMessage")
    raw = call.body
    assert b"<!channel>" not in raw and b"<http://evil" not in raw
    assert b"&lt;!channel&gt; &lt;http://evil|click&gt;" in raw
    assert b"p&lt;&amp;&gt;" in raw
    msg = env.posts()[0]
    assert "<!" not in msg["text"] and "<http" not in msg["text"]


def test_silence_mutes_until_it_expires(env: Env) -> None:
    until = (T0 + timedelta(hours=2)).isoformat()
    env.alerts = AlertsConfig(
        group_wait_seconds=0, silences=(Silence(match={"project": "sandbox"}, until=until, comment="ok"),)
    )
    loud, quiet = finding(project="ml-prod"), finding(project="sandbox")
    rep, _ = env.cycle([loud, quiet])
    assert rep.silenced == 1
    assert [quiet.fingerprint in fps_in(m) for m in env.posts()] == [False]
    env.clock.advance(hours=1)
    env.cycle([loud, quiet])
    assert len(env.posts()) == 1  # still silenced, and not "resolved" either
    env.clock.advance(hours=1)
    env.cycle([loud, quiet])
    assert len(env.posts()) == 2 and quiet.fingerprint in fps_in(env.posts()[-1])


def test_silence_by_label_and_min_severity(env: Env) -> None:
    env.alerts = AlertsConfig(
        group_wait_seconds=0,
        min_severity="warning",
        silences=(Silence(match={"label.team": "research"}, until="2099-01-01T00:00:00Z"),),
    )
    rep, _ = env.cycle(
        [
            finding(instance="info", severity=Severity.INFO),
            finding(instance="muted", labels={"team": "research"}),
            finding(instance="shown", severity=Severity.CRITICAL),
        ]
    )
    assert (rep.below_min_severity, rep.silenced) == (1, 1)
    [msg] = env.posts()
    assert "shown" in msg["text"] and "muted" not in fps_in(msg) and "info" not in msg["text"]


def test_routes_send_team_findings_to_the_team_channel(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    env.slack_cfg = SlackConfig(
        channel="C0ALERTS",
        routes=(
            Route(match={"label.team": "ml"}, channel="#ml-team"),
            Route(match={"severity": "critical"}, channel="#digest"),
        ),
    )
    ml = finding(instance="n1", labels={"team": "ml"}, severity=Severity.CRITICAL)
    crit = finding(instance="n2", severity=Severity.CRITICAL)
    other = finding(instance="n3")
    env.cycle([ml, crit, other])
    by_channel = {m["channel"]: fps_in(m) for m in env.posts()}
    assert set(by_channel) == {"C0MLTEAM", "C0DIGEST", "C0ALERTS"}
    assert ml.fingerprint in by_channel["C0MLTEAM"]  # first matching route wins
    assert crit.fingerprint in by_channel["C0DIGEST"] and other.fingerprint in by_channel["C0ALERTS"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"slack": {"routes": [{"match": {"teem": "ml"}, "channel": "#x"}]}},
            'slack.routes.0.match: unknown key "teem"; use one of kind, severity, project, zone, region, '
            "cluster, instance or label.<key>",
        ),
        ({"slack": {"routes": [{"match": {}, "channel": "#x"}]}}, "slack.routes.0.match: empty matcher"),
        (
            {"alerts": {"silences": [{"match": {"severity": "Critical"}, "until": "2027-01-01"}]}},
            'alerts.silences.0.match: severity "Critical": use one of info, warning, critical',
        ),
        (
            {"alerts": {"silences": [{"match": {"kind": "idle-gpu"}, "until": "2027-01-01"}]}},
            'alerts.silences.0.match: unknown kind "idle-gpu"; use one of budget_forecast,',
        ),
        ({"alerts": {"group_by": ["kind", "team"]}}, 'alerts.group_by.1: unknown key "team"'),
        (
            {"alerts": {"silences": [{"match": {"kind": "x"}, "until": "next week"}]}},
            'bad timestamp "next week"',
        ),
    ],
)
def test_bad_matchers_are_config_errors_as_the_config_loads(given: dict, message: str) -> None:
    # `gpucost check` said "config OK" of matchers and group keys `gpucost run` then refused, and a
    # silence of severity "Critical" or kind "idle-gpu" matched nothing, silently
    with pytest.raises(ConfigError) as e:
        parse_config(given, "gpucost.toml")
    assert str(e.value).startswith("gpucost.toml: ") and message in str(e.value)


def test_matchers_take_every_kind_a_finding_has() -> None:
    kinds = [*registered(), "job_finished"]
    routes = [{"match": {"kind": k, "severity": "info"}, "channel": "#x"} for k in kinds]
    assert len(parse_config({"slack": {"routes": routes}}).slack.routes) == len(kinds)


def test_console_notifier_through_the_same_pipeline(tmp_path: Path) -> None:
    out = io.StringIO()
    notifier = ConsoleNotifier(tmp_path / "alerts", out)
    deps = Deps(
        SQLiteStore(tmp_path / "s.sqlite"), notifier, AlertsConfig(group_wait_seconds=0), SlackConfig()
    )
    a, b = finding(instance="n1", labels={"team": EVIL}), finding(instance="n2")
    process([a, b], T0, deps)
    assert deliver_outbox(deps, T0).sent == 1
    process([a], T0 + timedelta(hours=1), deps)
    assert deliver_outbox(deps, T0 + timedelta(hours=1)).sent == 1
    lines = [json.loads(x) for x in (tmp_path / "alerts" / "alerts.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and lines[1]["thread_ts"] == lines[0]["ts"]
    assert "&lt;!channel&gt;" in json.dumps(lines[0]["blocks"])
    printed = out.getvalue()
    assert "Idle GPUs on n1" in printed and "$123.45" in printed and "(thread 1.000000)" in printed


def test_webhook_has_no_threads_so_updates_are_top_level(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0)
    deps = env.deps(notifier=WebhookNotifier(env.slack.webhook_url))
    env.cycle([finding(instance="n1"), finding(instance="n2")], deps)
    env.clock.advance(hours=1)
    env.cycle([finding(instance="n1")], deps)
    hooks = env.slack.calls("webhook")
    assert len(hooks) == 2 and all("thread_ts" not in h.params for h in hooks)
    assert status(deps.store).sent == 2


def _log_entry(db: Path) -> dict:
    with SQLiteStore(db).transaction() as conn:
        [row] = conn.execute("SELECT entry FROM alerts_nflog").fetchall()
    return json.loads(row["entry"])


def test_the_log_records_delivery_not_queueing_and_repeats_count_from_delivery(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0, repeat_interval_hours=4)
    env.slack.fail("chat.postMessage", Failure(status=429, retry_after=3 * 3600))  # Slack busy for 3 h
    _, dr = env.cycle([finding()])
    assert dr.retried == 1 and env.posts() == []
    assert _log_entry(env.db)["last_notified_at"] is None  # queued, not sent
    env.clock.advance(hours=2)
    env.cycle([finding()])
    assert _log_entry(env.db)["last_notified_at"] is None and env.posts() == []
    env.clock.advance(hours=1)
    _, dr = env.cycle([finding()])
    assert dr.sent == 1 and len(env.posts()) == 1
    delivered = env.clock.now
    assert _log_entry(env.db)["last_notified_at"] == delivered.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    env.clock.advance(hours=1)  # 4 h after queueing, 1 h after delivery: no repeat yet
    env.cycle([finding()])
    assert len(env.posts()) == 1
    env.clock.advance(hours=2, minutes=59)
    env.cycle([finding()])
    assert len(env.posts()) == 1
    env.clock.advance(minutes=1)  # 4 h after delivery
    env.cycle([finding()])
    assert len(env.posts()) == 2 and env.posts()[1]["thread_ts"] == env.posts()[0]["ts"]


def test_a_recovered_delivery_is_logged_once_and_not_posted_twice(env: Env) -> None:
    env.alerts = AlertsConfig(group_wait_seconds=0, repeat_interval_hours=4)

    def crash(at: str) -> None:
        if at == "after_send":
            raise Crash(at)

    with pytest.raises(Crash):
        env.cycle([finding()], env.deps(fault=crash))
    assert len(env.posts()) == 1 and _log_entry(env.db)["last_notified_at"] is None
    env.clock.advance(minutes=10)
    _, dr = env.cycle([finding()])
    assert dr.recovered == 1 and len(env.slack.calls("chat.postMessage")) == 1
    assert _log_entry(env.db)["last_notified_at"] == env.clock.now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    env.clock.advance(hours=4)
    env.cycle([finding()])
    assert len(env.posts()) == 2  # the repeat, once
