"""The daily digest goes through the persistent outbox like any alert.

Real slack-sdk client (`SlackNotifier`, built from config by `monitor.cycle.build_deps`) against the
local Slack server (`tests.fakes.slack_server`), a real SQLite state store, and an injected clock:
the outbox job (`run_delivery`) is called at chosen instants, never raced against the wall clock.

What Slack does that these rely on (https://api.slack.com/docs/rate-limits: "Slack will return a
HTTP 429 Too Many Requests error, and a Retry-After HTTP header containing the number of seconds until
you can retry"; https://api.slack.com/methods/chat.postMessage: `fatal_error` / `internal_error`
"It's possible some aspect of the operation succeeded before the error was raised", so a 5xx or a
timeout is an uncertain outcome, looked up with the message metadata before any re-send).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.outbox import backoff, get_row
from alerts.outbox_admin import list_outbox
from alerts.slack import SlackNotifier
from monitor.clock import FixedClock
from monitor.config import Config, parse_config
from monitor.cycle import Deps, _digest_sent, build_deps, run_delivery, run_digest
from tests.fakes.slack_server import Failure, FakeSlack
from tests.test_digest import _stored

pytestmark = pytest.mark.integration

TOKEN = "xoxb-digest-outbox-token"
DAY = date(2026, 11, 2)
T0 = datetime(2026, 11, 3, 9, tzinfo=UTC)  # the digest job's hour, the day after
KEY = "digest-2026-11-02-#digest"


def _config(tmp: Path, slack: FakeSlack, channel: str = "#digest") -> Config:
    (tmp / "util").mkdir(exist_ok=True)
    return parse_config(
        {
            "utilization": {"source": "files", "files": [str(tmp / "util")]},
            "state": {"url": f"sqlite:///{tmp / 'state.sqlite'}"},
            "digest": {"out_dir": str(tmp / "out")},
            "alerts": {"console_dir": str(tmp / "console")},
            "slack": {"channel": channel, "api_base_url": slack.base_url},
        }
    )


def start(cfg: Config, at: datetime = T0, timeout: int = 15) -> Deps:
    """One gpucost process: its own store connection and Slack client (a restart is another call)."""
    deps = build_deps(cfg, FixedClock(at), billing=None, environ={"SLACK_BOT_TOKEN": TOKEN})  # type: ignore[arg-type]
    deps.notifier = SlackNotifier(SecretStr(TOKEN), cfg.slack.api_base_url, timeout=timeout)
    return deps


@pytest.fixture
def slack():
    with FakeSlack(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def cfg(tmp_path: Path, slack: FakeSlack) -> Config:
    c = _config(tmp_path, slack)
    deps = start(c)
    hours = [datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(48)]
    _stored(deps.aggregates, [(h, "202611", "12.5", "a3-1") for h in hours])
    deps.store.close()
    return c


def posts(slack: FakeSlack) -> list[dict]:
    return [m for m in slack.messages if m["text"].startswith("GPU cost digest")]


def test_a_500_is_retried_on_the_outbox_schedule_and_posted_once(cfg: Config, slack: FakeSlack) -> None:
    slack.fail("chat.postMessage", Failure(status=500))
    deps = start(cfg)
    result = run_digest(deps, T0, send=True)
    assert (result["sent"], result["queued"]) == (False, True)  # queued: the outbox job sends it
    run_delivery(deps, T0)
    assert posts(slack) == [] and len(slack.calls("chat.postMessage")) == 1
    row = get_row(deps.store, KEY)
    assert row is not None and row.status == "pending" and row.next_attempt_at == T0 + backoff(1)
    assert [(e.reason, e.status) for e in list_outbox(deps.store)] == [
        ("digest", "pending"),
        ("digest_chart", "pending"),
    ]  # `gpucost outbox` shows the digest like any alert

    run_delivery(deps, T0 + backoff(1) - timedelta(seconds=1))
    assert len(slack.calls("chat.postMessage")) == 1  # not before its time
    run_delivery(deps, T0 + backoff(1))  # 30 s later, not a day
    (post,) = posts(slack)
    (chart,) = slack.files
    assert post["text"].startswith("GPU cost digest for 2026-11-02: $300.00 yesterday, $600.00 month to date")
    assert chart["thread_ts"] == post["ts"] and chart["channel"] == "C0DIGEST"
    assert _digest_sent(deps, DAY, "#digest")

    later = T0 + timedelta(hours=2)  # the digest job again (a restart, a second run): nothing new
    assert run_digest(deps, later, DAY, send=True)["already"] is True
    run_delivery(deps, later)
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    deps.store.close()


def test_429_waits_for_retry_after(cfg: Config, slack: FakeSlack) -> None:
    slack.fail("chat.postMessage", Failure(status=429, retry_after=120))
    deps = start(cfg)
    run_digest(deps, T0, send=True)
    run_delivery(deps, T0)
    assert posts(slack) == []
    run_delivery(deps, T0 + timedelta(seconds=119))
    assert len(slack.calls("chat.postMessage")) == 1  # Retry-After honoured, not the 30 s backoff
    run_delivery(deps, T0 + timedelta(seconds=120))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    deps.store.close()


def test_a_crash_between_enqueue_and_send_sends_it_once_after_restart(cfg: Config, slack: FakeSlack) -> None:
    first = start(cfg)
    run_digest(first, T0, send=True)
    first.store.close()  # killed before the outbox job ran: nothing was sent, nothing is lost
    assert posts(slack) == []

    second = start(cfg, T0 + timedelta(minutes=5))
    assert [e.reason for e in list_outbox(second.store)] == ["digest", "digest_chart"]
    run_delivery(second, T0 + timedelta(minutes=5))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    run_digest(second, T0 + timedelta(minutes=6), DAY, send=True)  # the day again: not re-queued
    run_delivery(second, T0 + timedelta(minutes=6))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    second.store.close()


def _killed_then_restarted(cfg: Config, slack: FakeSlack, killed_after: Callable[[], bool]) -> Deps:
    """Queue the day's digest and deliver it in a process killed at the first "after_send" point
    where `killed_after()` holds (Slack has answered, the outbox has not recorded it); then the next
    process, a minute later."""
    from alerts.delivery import deliver_outbox

    def killed(point: str) -> None:
        if point == "after_send" and killed_after():
            raise SystemExit("killed")

    first = start(cfg)
    run_digest(first, T0, send=True)
    with pytest.raises(SystemExit):
        deliver_outbox(replace(first.alert_deps, fault=killed), T0)
    first.store.close()
    return start(cfg, T0 + timedelta(minutes=1))


def test_a_crash_after_slack_took_the_post_does_not_post_it_twice(cfg: Config, slack: FakeSlack) -> None:
    """Killed after Slack answered, before the outbox recorded it: the next process looks the
    post up by its idempotency key (message metadata) and uploads only the chart."""
    second = _killed_then_restarted(cfg, slack, lambda: True)
    assert len(posts(slack)) == 1 and slack.files == []
    run_delivery(second, T0 + timedelta(minutes=1))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    assert _digest_sent(second, DAY, "#digest")
    second.store.close()


def test_a_crash_after_slack_took_the_chart_does_not_upload_it_twice(cfg: Config, slack: FakeSlack) -> None:
    """Killed after the upload completed, before the outbox recorded it: the next process finds the
    chart in the digest's thread (a file of that name and title) and records it, uploading nothing."""
    second = _killed_then_restarted(cfg, slack, lambda: bool(slack.files))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    run_delivery(second, T0 + timedelta(minutes=1))
    assert len(slack.files) == 1, "the chart was uploaded again"
    assert len(slack.calls("conversations.replies")) == 1  # looked up in the digest's thread
    chart = [e for e in list_outbox(second.store, ("sent",)) if e.reason == "digest_chart"]
    assert len(chart) == 1
    second.store.close()


@pytest.mark.parametrize("method", ["chat.postMessage", "files.completeUploadExternal"])
def test_a_timeout_after_slack_took_it_is_found_not_sent_again(
    cfg: Config, slack: FakeSlack, method: str
) -> None:
    # Slack stores the post (or shares the chart), then stalls 4 s past the client's 1 s timeout:
    # an uncertain outcome, looked up (message metadata; the chart's name and title) before a re-send
    slack.fail(method, Failure(delay=4, process_first=True))
    deps = start(cfg, timeout=1)
    run_digest(deps, T0, send=True)
    run_delivery(deps, T0)
    assert len(slack.calls(method)) == 1
    run_delivery(deps, T0 + backoff(1))
    assert len(posts(slack)) == 1 and len(slack.files) == 1
    assert len(slack.calls(method)) == 1, f"{method} was called again"
    assert _digest_sent(deps, DAY, "#digest")
    assert all(e.status == "sent" for e in list_outbox(deps.store, ("pending", "failed", "sent")))
    deps.store.close()


def test_charts_of_failed_digests_never_hold_back_the_rows_behind_them(cfg: Config, slack: FakeSlack) -> None:
    """A digest that failed for good leaves its charts pending (they belong under it, and a
    re-queue brings them along). The outbox read its due rows oldest first, `batch_size` at a
    time, then skipped those charts: once a batch of them piled up (50 days of an archived
    digest channel), no later row of any channel was tried again (helper 51's audit). Here the
    batch is 1, the chart of one day."""
    from alerts.pipeline import deliver_outbox
    from tests.test_delivery_failure import queue_alert

    slack.archive_channel("digest")
    deps = start(cfg)
    run_digest(deps, T0, DAY, send=True)
    run_delivery(deps, T0)  # is_archived: the digest fails for good
    charts = [e for e in list_outbox(deps.store, ("pending",)) if e.reason == "digest_chart"]
    assert len(charts) == 1  # waiting under it
    queue_alert(deps, "#alerts", key="alert-behind-the-charts")
    deliver_outbox(replace(deps.alert_deps, batch_size=1), T0 + timedelta(minutes=1))
    assert get_row(deps.store, "alert-behind-the-charts").status == "sent"
    assert [m for m in slack.messages if m["text"] == "GPU idle: a3-1"]
    deps.store.close()
