"""Issue 13 item 2, the Slack half of the fault matrix: every delivery fault, through the real
slack-sdk client against the local Slack (tests/fakes/slack_server.py), in Slack's wire format.

Faults and what Slack documents about them:
- HTTP 429 + `Retry-After` + `{"ok": false, "error": "ratelimited"}`: "a HTTP 429 Too Many Requests
  error, and a Retry-After HTTP header containing the number of seconds until you can retry"
  (https://api.slack.com/docs/rate-limits);
- HTTP 500; a connection reset mid-response; no answer before the client's timeout: the outcome is
  unknown ("It's possible some aspect of the operation succeeded before the error was raised",
  `fatal_error` / `internal_error` at https://api.slack.com/methods/chat.postMessage), so the next
  attempt first looks the message up by its metadata idempotency key (`conversations.history`);
- `invalid_auth` ("Some aspect of authentication cannot be validated"), `channel_not_found` ("Value
  passed for channel was invalid"; a private channel the bot is not in), `is_archived` ("Channel has
  been archived"), all HTTP 200 with `ok: false` (https://api.slack.com/methods/chat.postMessage):
  permanent, produced here by the workspace itself (revoked token, bot removed, channel archived);
- an unexpected exception inside delivery (a garbled 200 answer slack-sdk cannot read).

Each row runs the daemon's own outbox job (`Service.job_specs()` wrapped in `GuardedJob`, exactly
what the scheduler calls) on an injected clock, and asserts three invariants:
1. the daemon keeps running: the job never fails, nothing escapes it;
2. nothing lost, nothing doubled: once the fault clears, the messages Slack holds equal a
   fault-free run's, each once. Transient faults are retried on the outbox's schedule (no earlier
   than `Retry-After` / the backoff, checked one second before and at the due time); permanent ones
   mark the row failed, are not retried however long the daemon runs, and
   `gpucost outbox --requeue-failed` delivers them once after the fix;
3. the failure is visible: a structured log record naming the channel and the error, `/metrics`
   (`gpucost_delivery_failures_total`, `gpucost_outbox_messages`) and `/readyz`. Decision: Slack
   faults, even permanent ones, do not make `/readyz` answer 503 (readiness gates traffic and
   rollouts, a restart or reschedule cannot fix Slack, and a failed row persists until re-queued,
   so a 503 would hold back the very rollout that fixes the token); `/readyz` lists them under
   `delivery` (pending, failed, last error) and the page comes from
   `gpucost_outbox_messages{state="failed"} > 0`.

SIGKILL during delivery runs the real daemon (`tests/daemon_process.py`): the `chat.postMessage`
answer is held, the process is killed while the post is in flight (once after Slack stored it, once
before), restarted, and the message must be in Slack exactly once.

The whole module runs with `SLACK_BOT_TOKEN` set to a sentinel; every row greps every surface (all
log records, subprocess output, exception texts, the outbox rows, `/metrics`, `/readyz`,
`gpucost check`, `gpucost outbox`) for it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from alerts.factory import make_notifier
from alerts.pipeline import Deps as AlertDeps
from alerts.pipeline import deliver_outbox, process
from alerts.slack import SlackNotifier
from monitor.cli import cli
from monitor.clock import FixedClock
from monitor.config import AlertsConfig, SlackConfig, load_config, slack_token
from monitor.daemon import Scheduler
from monitor.errors import ConfigError
from monitor.http import HealthServer
from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.service import Service
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_billing
from monitor.state.store import SQLiteStore
from tests.daemon_process import REPO, DaemonProcess, http_get
from tests.export_rows import export_row, write_ndjson
from tests.fakes.slack_server import Failure, FakeSlack, Hold

pytestmark = pytest.mark.integration

SENTINEL = "xoxb-SENTINEL-0000-DO-NOT-LEAK"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
CHANNEL = "C0ALERTS"  # the private channel #alerts; an id, as Slack's history lookups need
CLIENT_TIMEOUT = 1  # seconds; the fake holds its answer past it
RETRY_AFTER = 120


# -- fixtures: the sentinel token, a one-row billing export -------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def sentinel_token() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLACK_BOT_TOKEN", SENTINEL)
        yield


@pytest.fixture(scope="module")
def billing_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("billing")
    conn = open_billing_db(tmp / "billing.duckdb")
    try:
        load_billing([write_ndjson(tmp / "export.ndjson", [export_row()])], conn)
    finally:
        conn.close()
    return tmp / "billing.duckdb"


def write_config(tmp: Path, slack: FakeSlack, billing: Path) -> Path:
    """A production-shaped config: local billing and utilization, Slack at the fake, no group wait
    (one message per group at once), no resolved messages (the daemon's detection over the tiny
    export must not add any), JSON logs, an ephemeral HTTP port."""
    db = tmp / "billing.duckdb"
    shutil.copyfile(billing, db)
    (tmp / "util").mkdir(exist_ok=True)
    (tmp / "util" / "none.json").write_text("[]")  # no samples (a directory without files is an error)
    path = tmp / "gpucost.toml"
    path.write_text(
        f"""
[billing]
db = "{db}"
[utilization]
files = ["{tmp / "util"}"]
[slack]
channel = "{CHANNEL}"
api_base_url = "{slack.base_url}"
[alerts]
group_wait_seconds = 0
send_resolved = false
console_dir = "{tmp / "alerts"}"
[digest]
out_dir = "{tmp / "out"}"
[state]
url = "sqlite:///{tmp / "state.sqlite"}"
[http]
port = 0
[daemon]
outbox_seconds = 0.2
jitter_seconds = 0
[logging]
format = "json"
""",
        encoding="utf-8",
    )
    return path


def finding(kind: str, project: str) -> Finding:
    scope = Scope(project=project, zone="us-central1-a", instance="a3-node-1")
    return Finding(
        kind=kind,
        severity=Severity.WARNING,
        title=f"{kind} on a3-node-1",
        summary="8 x H100 under 5% for 6 h",
        impact_usd=Decimal("123.45"),
        window_start=T0 - timedelta(hours=6),
        window_end=T0,
        scope=scope,
        evidence={"gpus": 8},
        recommendation="Stop the instance",
        fingerprint=fingerprint(kind, scope),
    )


FINDINGS = [finding("idle_gpu", "ml-prod"), finding("idle_gpu", "ml-research")]


def enqueue_alerts(store: SQLiteStore, notifier: Any) -> list[str]:
    """Two alert groups, so two messages, queued at T0 as detection would; their idempotency keys."""
    report = process(FINDINGS, T0, alert_deps(store, notifier))
    keys = [n.idempotency_key for n in report.notified]
    assert len(keys) == 2, report
    return keys


def alert_deps(store: SQLiteStore, notifier: Any) -> AlertDeps:
    """The alert settings of `write_config`, for queueing (and the fault-free run) outside a daemon."""
    return AlertDeps(
        store, notifier, AlertsConfig(group_wait_seconds=0, send_resolved=False), SlackConfig(channel=CHANNEL)
    )


# -- what Slack and the outbox hold --------------------------------------------------------------------


def keys_in_slack(slack: FakeSlack) -> Counter[str]:
    return Counter(
        m["metadata"]["event_payload"]["idempotency_key"] for m in slack.messages if m.get("metadata")
    )


def delivered(slack: FakeSlack) -> set[tuple[str, str, str]]:
    """(idempotency key, channel, text) of every message: what a person in the channel sees."""
    return {
        (m["metadata"]["event_payload"]["idempotency_key"], m["channel"], m["text"])
        for m in slack.messages
        if m.get("metadata")
    }


def outbox(db: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM alerts_outbox ORDER BY id")]
    finally:
        conn.close()


def metric(text: str, name: str, **labels: str) -> float:
    """One sample from a Prometheus exposition (0 when the series does not exist)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series == (f"{name}{{{want}}}" if want else name):
            return float(value)
    return 0.0


def assert_no_leak(*texts: str) -> None:
    for text in texts:
        assert SENTINEL not in text, (
            f"the Slack token leaked: ...{text[max(text.find(SENTINEL) - 200, 0) :][:400]}"
        )


def records_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record of every logger, with its message, arguments, extras and traceback."""
    return caplog.text + "\n".join(repr(vars(r)) for r in caplog.records)


# -- the in-process daemon ------------------------------------------------------------------------------


@dataclass
class Rig:
    """The daemon's wiring (`Service`) on an injected clock: its outbox job is run by hand."""

    tmp: Path
    slack: FakeSlack
    config: Path
    service: Service
    clock: FixedClock
    http: HealthServer
    keys: list[str] = field(default_factory=list)

    def tick(self, **advance: float) -> None:
        """Advance the clock, then run the outbox job as the scheduler does; it must not fail."""
        self.clock.advance(timedelta(**advance))
        job = self.service.sched.jobs["outbox_delivery"]  # type: ignore[union-attr]
        assert job() is True, f"the outbox job failed: {job.last_error}"
        assert job.failures == 0

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.http.port, path)

    def readyz(self) -> tuple[int, dict[str, Any]]:
        code, body = self.get("/readyz")
        return code, json.loads(body)

    def metrics(self) -> str:
        return self.get("/metrics")[1]

    def rows(self) -> list[dict[str, Any]]:
        return outbox(self.tmp / "state.sqlite")

    def posts(self) -> int:
        return len(self.slack.calls("chat.postMessage"))

    def cli(self, *args: str) -> str:
        result = CliRunner().invoke(cli, [*args, "--config", str(self.config)], catch_exceptions=False)
        return result.output


@pytest.fixture
def rig(tmp_path: Path, billing_db: Path) -> Iterator[Rig]:
    with FakeSlack(token=SENTINEL, private={"alerts"}) as slack:
        config = write_config(tmp_path, slack, billing_db)
        cfg = load_config(config)
        service = Service(cfg)  # SLACK_BOT_TOKEN from the environment: the sentinel
        clock = FixedClock(T0)
        service.deps.clock = clock
        token = slack_token(cfg.slack)
        assert token is not None and token.get_secret_value() == SENTINEL
        # The factory's notifier, with a client timeout the fake outwaits in a second, not 15.
        service.deps.notifier = make_notifier(cfg, timeout=CLIENT_TIMEOUT)
        assert isinstance(service.deps.notifier, SlackNotifier)
        service.sched = Scheduler(service.job_specs(), service.deps.metrics, misfire_grace=300, jitter=0)
        for poll in ("billing_poll", "utilization_poll"):  # fresh polls: /readyz is about delivery only
            assert service.sched.jobs[poll]() is True, service.sched.jobs[poll].last_error
        http = HealthServer("127.0.0.1", 0, service.deps.metrics.registry, service.ready)
        http.start()
        r = Rig(tmp_path, slack, config, service, clock, http)
        r.keys = enqueue_alerts(service.deps.store, service.deps.notifier)
        try:
            yield r
        finally:
            http.stop()
            service.close()


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory, billing_db: Path) -> set[tuple[str, str, str]]:
    """What Slack holds after a run without faults: the reference for every row."""
    tmp = tmp_path_factory.mktemp("fault_free")
    with FakeSlack(token=SENTINEL, private={"alerts"}) as slack:
        store = SQLiteStore(tmp / "state.sqlite")
        try:
            notifier = make_notifier(load_config(write_config(tmp, slack, billing_db)))
            enqueue_alerts(store, notifier)
            assert deliver_outbox(alert_deps(store, notifier), T0).sent == 2
        finally:
            store.close()
        got = delivered(slack)
    assert len(got) == 2
    return got


# -- the matrix -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[FakeSlack], Hold | None]  # a held answer is released once the client gave up
    error: str  # in the row's last_error and the log record
    permanent: bool = False
    fix: Callable[[FakeSlack], None] = lambda s: None
    retry_after: float | None = None  # the next attempt is due exactly then (else the backoff: 30 s)
    arrived: bool = False  # Slack stored the faulted post (the lookup must prevent a second one)

    def __str__(self) -> str:
        return self.name


def _fail(failure: Failure) -> Callable[[FakeSlack], None]:
    return lambda s: s.fail("chat.postMessage", failure)


def _no_answer(s: FakeSlack) -> Hold:
    """Stored, then no answer at all until the client's timeout has passed (no race with a sleep)."""
    return s.hold("chat.postMessage", process_first=True)


FAULTS = [
    Fault(
        "http_429_retry_after",
        _fail(Failure(status=429, retry_after=RETRY_AFTER)),
        "rate limited (HTTP 429)",
        retry_after=RETRY_AFTER,
    ),
    Fault("http_500", _fail(Failure(status=500)), "HTTP 500"),
    Fault(
        "connection_reset",
        _fail(Failure(reset=True, process_first=True)),
        "ConnectionResetError",
        arrived=True,
    ),
    Fault(
        "timeout",
        _no_answer,
        "TimeoutError",
        arrived=True,
    ),
    Fault(
        "unexpected_exception_in_delivery",  # slack-sdk cannot read the answer: a crash inside send()
        _fail(Failure(body=b"\x1f\x8b\x08 not json")),
        "binary data",
    ),
    Fault(
        "invalid_auth",
        lambda s: s.set_token("xoxb-the-token-Slack-now-expects"),  # revoked
        "chat.postMessage: invalid_auth",
        permanent=True,
        fix=lambda s: s.set_token(SENTINEL),  # the app reinstalled: the token works again
    ),
    Fault(
        "channel_not_found",
        lambda s: s.remove_bot("alerts"),  # a private channel the bot is not in does not exist to it
        "chat.postMessage: channel_not_found",
        permanent=True,
        fix=lambda s: s.invite_bot("alerts"),
    ),
    Fault(
        "is_archived",
        lambda s: s.archive_channel("alerts"),
        "chat.postMessage: is_archived",
        permanent=True,
        fix=lambda s: s.unarchive_channel("alerts"),
    ),
]


def assert_failure_logged(caplog: pytest.LogCaptureFixture, error: str, level: int) -> None:
    """A structured record (fields `channel` and `error`, not only prose) names the channel."""
    hits = [
        r
        for r in caplog.records
        if r.levelno >= level
        and getattr(r, "channel", None) == CHANNEL
        and error in str(getattr(r, "error", ""))
    ]
    assert hits, "no log record with channel and error fields:\n" + "\n".join(
        f"{r.levelname} {r.name}: {r.getMessage()} {sorted(set(vars(r)) - set(vars(logging.makeLogRecord({}))))}"
        for r in caplog.records
        if r.name.startswith("alerts")
    )


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_slack_fault(rig: Rig, fault: Fault, fault_free: set, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, slack-sdk's request dumps included
    held = fault.inject(rig.slack)
    try:
        rig.tick()
    finally:
        if held is not None:
            held.release()

    rows = rig.rows()
    faulted = rows[0]
    assert faulted["last_error"] and fault.error in faulted["last_error"], faulted["last_error"]
    metrics, (code, ready) = rig.metrics(), rig.readyz()
    assert code == 200, ready  # decision: Slack faults never make the pod unready
    assert fault.error in ready["delivery"]["last_error"], ready
    texts = [records_text(caplog), metrics, json.dumps(ready), json.dumps(rows, default=str)]

    if fault.permanent:
        assert [r["status"] for r in rows] == ["failed", "failed"]
        assert_failure_logged(caplog, fault.error, logging.ERROR)
        assert metric(metrics, "gpucost_delivery_failures_total", kind="permanent") == 2
        assert metric(metrics, "gpucost_outbox_messages", state="failed") == 2
        assert ready["delivery"]["failed"] == 2
        texts.append(rig.cli("check"))  # names the error, never the token
        assert fault.error.split(": ")[-1] in texts[-1]
        attempts = rig.posts()
        for _ in range(12):  # two hours of outbox ticks: a failed row is not retried
            rig.tick(minutes=10)
        assert rig.posts() == attempts and rig.slack.messages == []
        fault.fix(rig.slack)
        listing = rig.cli("outbox")
        assert listing.count("failed") >= 2 and fault.error in listing
        assert rig.cli("outbox", "--requeue-failed").startswith("re-queued 2 failed messages")
        texts += [listing]
        rig.tick(seconds=1)
    else:
        assert faulted["status"] == "pending"
        assert_failure_logged(caplog, fault.error, logging.WARNING)
        assert metric(metrics, "gpucost_delivery_failures_total", kind="retryable") >= 1
        assert metric(metrics, "gpucost_outbox_messages", state="pending") >= 1
        assert ready["delivery"]["pending"] >= 1
        due = fault.retry_after or 30.0  # Retry-After, else the first backoff step
        attempts = rig.posts()
        rig.tick(seconds=due - 1)  # not before it is due ...
        assert rig.posts() == attempts and rig.rows()[0]["status"] == "pending"
        rig.tick(seconds=1)  # ... and at once when it is
        if fault.arrived:  # found by its idempotency key instead of being posted again
            assert rig.posts() == attempts and rig.slack.calls("conversations.history")

    # Nothing lost, nothing doubled, and the daemon still serves.
    assert all(r["status"] == "sent" for r in rig.rows()), rig.rows()
    assert max(keys_in_slack(rig.slack).values()) == 1, keys_in_slack(rig.slack)
    assert delivered(rig.slack) == fault_free
    after = rig.metrics()
    assert metric(after, "gpucost_outbox_messages", state="pending") == 0
    assert metric(after, "gpucost_outbox_messages", state="failed") == 0
    assert rig.get("/healthz")[0] == 200 and rig.readyz()[0] == 200
    texts += [records_text(caplog), after, rig.get("/readyz")[1], json.dumps(rig.rows(), default=str)]
    assert_no_leak(*texts)


# -- the token sentinel where a token could be echoed ----------------------------------------------------


def test_a_token_that_cannot_be_sent_is_refused_without_echoing_it(
    tmp_path: Path, billing_db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A token file with two lines (rotation left the old one) reaches `http.client`, whose
    `Invalid header value b'Bearer xoxb-...'` carried the whole token into slack-sdk's ERROR line,
    the outbox row, `gpucost outbox` and the traceback. Now it is a one-line config error."""
    caplog.set_level(logging.DEBUG)
    bad = f"{SENTINEL}\nxoxb-the-old-token"
    with FakeSlack(token=SENTINEL) as slack:
        config = write_config(tmp_path, slack, billing_db)
        with pytest.raises(ConfigError, match=r"a line break at character 31 of") as err:
            make_notifier(load_config(config), {"SLACK_BOT_TOKEN": bad})
        monkeypatch.setenv("SLACK_BOT_TOKEN", bad)
        check = CliRunner().invoke(cli, ["check", "--config", str(config)])
        assert "slack        FAIL  ConfigError: the Slack bot token" in check.output
        run = subprocess.run(
            [sys.executable, "-m", "monitor", "run", "--config", str(config)],
            cwd=tmp_path,
            env={**os.environ, "SLACK_BOT_TOKEN": bad, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, run.stderr[-2000:]
        assert run.stderr.startswith("gpucost: error: the Slack bot token"), run.stderr[-2000:]
        assert slack.calls("chat.postMessage") == []
    assert_no_leak(str(err.value), check.output, run.stdout, run.stderr, records_text(caplog))


# -- SIGKILL while the post is in flight ------------------------------------------------------------------


def _is_digest(params: dict[str, Any]) -> bool:
    """A digest's post (its idempotency key in the message metadata starts with "digest-")."""
    meta = params.get("metadata") or {}
    meta = json.loads(meta) if isinstance(meta, str) else meta
    return str(meta.get("event_payload", {}).get("idempotency_key", "")).startswith("digest-")


def _alerts(counts: Counter[str]) -> Counter[str]:
    """The idempotency keys of `counts` that are not a digest's."""
    return Counter({k: n for k, n in counts.items() if not k.startswith("digest-")})


def _wait(cond: Callable[[], bool], timeout: float, what: str, tell: Callable[[], str] = str) -> None:
    """Wait for `cond`; on a timeout, fail with what `tell` says (the daemon's log, its /readyz)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{tell()}"
        time.sleep(0.1)


@pytest.mark.parametrize("arrived", [True, False], ids=["after_slack_stored_it", "before_slack_stored_it"])
def test_sigkill_during_delivery_posts_exactly_once(
    tmp_path: Path, billing_db: Path, fault_free: set, arrived: bool
) -> None:
    with FakeSlack(token=SENTINEL, private={"alerts"}) as slack:
        config = write_config(tmp_path, slack, billing_db)
        db = tmp_path / "state.sqlite"
        store = SQLiteStore(db)
        try:
            keys = enqueue_alerts(store, make_notifier(load_config(config)))
        finally:
            store.close()
        # the store first ran at T0, so yesterday's digest is due at start (`Service.digest_job`)
        # and goes out beside the alerts; the post held, and killed, is an alert's
        hold = slack.hold("chat.postMessage", process_first=arrived, only=lambda p: not _is_digest(p))

        first = DaemonProcess(tmp_path, config, 1, SENTINEL)
        try:
            assert hold.arrived.wait(60), f"no post reached Slack:\n{first.tail()}"
            assert len(_alerts(keys_in_slack(slack))) == int(arrived)
            first.proc.kill()  # SIGKILL while chat.postMessage is in flight
            first.proc.wait(10)
        finally:
            first.kill()
            hold.release()
        inflight = next(r for r in outbox(db) if r["idempotency_key"] in keys)
        assert inflight["status"] == "pending" and inflight["inflight"] == 1

        second = DaemonProcess(tmp_path, config, 2, SENTINEL)
        try:
            port = second.wait_log("serving /healthz /readyz /metrics", timeout=60)["port"]
            _wait(lambda: all(r["status"] == "sent" for r in outbox(db)), 30, "the outbox to drain")
            _wait(
                lambda: (
                    metric(http_get(port, "/metrics")[1], "gpucost_outbox_messages", state="sent")
                    == len(outbox(db))
                ),
                30,
                "the outbox gauge",
            )
            _wait(
                lambda: http_get(port, "/readyz")[0] == 200,
                30,
                "the first polls (readiness)",
                lambda: f"{http_get(port, '/readyz')[1]}\n{second.tail()}",
            )
            metrics = http_get(port, "/metrics")[1]
            code, ready = http_get(port, "/readyz")
            assert second.proc.poll() is None
            rc = second.stop()
        finally:
            second.kill()
        assert rc == 0, second.tail()

        counts = keys_in_slack(slack)
        assert max(counts.values()) == 1, counts  # each message exactly once, the digest too
        assert _alerts(counts) == Counter(dict.fromkeys(keys, 1)), counts
        assert {d for d in delivered(slack) if not d[0].startswith("digest-")} == fault_free
        # found by its idempotency key (no second post), or posted again because it never arrived
        posts = [c for c in slack.calls("chat.postMessage") if not _is_digest(c.params)]
        assert len(posts) == (2 if arrived else 3)
        assert slack.calls("conversations.history"), "the uncertain send was not looked up"
        assert metric(metrics, "gpucost_outbox_messages", state="pending") == 0
        assert code == 200 and json.loads(ready)["delivery"]["failed"] == 0, ready
        outputs = [p.read_text(errors="replace") for p in tmp_path.glob("daemon*.*")]
        assert_no_leak(metrics, ready, *outputs)


def test_readyz_metrics_check_and_outbox_never_show_the_token(rig: Rig) -> None:
    """The surfaces an operator reads, on a healthy daemon."""
    rig.tick()
    bodies = [rig.get(p)[1] for p in ("/metrics", "/readyz", "/healthz")]
    assert_no_leak(*bodies, rig.cli("check"), rig.cli("outbox", "--status", "sent"))
