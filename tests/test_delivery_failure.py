"""A message that fails for good is an alert about gpucost itself, told once, never via Slack.

Real slack-sdk client against the local Slack server, a real SQLite store, the outbox job
(`monitor.cycle.run_delivery`) run at injected instants. Slack's permanent errors are HTTP 200 with
`ok: false` (https://api.slack.com/methods/chat.postMessage: `channel_not_found` "Value passed for
channel was invalid", `is_archived` "Channel has been archived", `invalid_auth` "Some aspect of
authentication cannot be validated"); the server produces them from the workspace's state (a
missing channel, an archived one, a token it does not know), as Slack does.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from pydantic import SecretStr

from alerts.notifier import Message
from alerts.outbox import MAX_ATTEMPTS, enqueue, ensure_schema, get_row
from alerts.slack import SlackNotifier
from monitor.cli import main
from monitor.config import Config
from monitor.cycle import Deps, run_delivery, run_digest
from tests.fakes.slack_server import Failure, FakeSlack
from tests.test_digest_outbox import TOKEN, _config, posts, start

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 3, 9, tzinfo=UTC)


def queue_alert(deps: Deps, channel: str, key: str = "alert-1") -> None:
    ensure_schema(deps.store)
    with deps.store.transaction() as conn:
        enqueue(
            conn,
            key=key,
            group_key="g",
            receiver=channel,
            sequence=1,
            reason="new_group",
            root_key=None,
            message=Message(key, channel, "GPU idle: a3-1", []),
            now=T0,
        )


def console_alerts(cfg: Config) -> list[dict]:
    path = Path(cfg.alerts.console_dir) / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def metric(deps: Deps, line: str) -> bool:
    return line in generate_latest(deps.metrics.registry).decode()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture
def slack():
    with FakeSlack(token=TOKEN) as fake:
        yield fake


@pytest.mark.parametrize(
    ("breakage", "code", "fix"),
    [
        ("missing", "channel_not_found", "channel #alerts does not exist or the bot cannot see it"),
        ("archived", "is_archived", "channel #alerts is archived: unarchive it"),
        ("revoked", "invalid_auth", "set a valid bot token in SLACK_BOT_TOKEN"),
    ],
)
def test_a_permanent_failure_is_told_once_on_the_console_and_in_metrics_and_not_retried(
    tmp_path: Path, slack: FakeSlack, caplog, capsys, breakage: str, code: str, fix: str
) -> None:
    cfg = _config(tmp_path, slack, channel="#alerts")
    if breakage == "missing":  # deleted, or renamed: the name no longer leads anywhere
        slack.rename_channel("alerts", "alerts-old")
    elif breakage == "archived":
        slack.archive_channel("alerts")
    deps = start(cfg)
    if breakage == "revoked":
        deps.notifier = SlackNotifier(SecretStr("xoxb-revoked-sentinel"), slack.base_url)
    queue_alert(deps, "#alerts")

    with caplog.at_level(logging.INFO):
        for minutes in (0, 1, 30, 24 * 60):  # the outbox job keeps ticking for a day
            run_delivery(deps, T0 + timedelta(minutes=minutes))

    row = get_row(deps.store, "alert-1")
    assert row is not None and (row.status, row.last_error) == ("failed", f"chat.postMessage: {code}")
    assert len(slack.calls("chat.postMessage")) == 1  # no retry loop, and nothing else via Slack
    (told,) = console_alerts(cfg)  # one console alert, not one per tick
    assert told["channel"] == "gpucost (operator)" and f"#alerts: chat.postMessage: {code}" in told["text"]
    assert fix in told["text"] and "--requeue 1" in told["text"]
    assert fix in capsys.readouterr().out  # printed where console alerts go
    (line,) = [e for e in errors(caplog) if "failed permanently" in e]
    assert "#alerts" in line and code in line and fix in line
    assert metric(deps, 'gpucost_outbox_messages{state="failed"} 1.0')
    assert metric(deps, 'gpucost_delivery_failures_total{kind="permanent"} 1.0')
    assert "sentinel" not in caplog.text + json.dumps(told)
    deps.store.close()


def test_retries_exhausted_is_a_permanent_failure_told_once(tmp_path: Path, slack: FakeSlack, caplog) -> None:
    """Slack answering 500 for a day: the message fails for good after MAX_ATTEMPTS (a bounded
    number of tries on the backoff schedule), and the operator hears of it once."""
    cfg = _config(tmp_path, slack, channel="C0ALERTS")
    slack.fail("chat.postMessage", Failure(status=500), times=MAX_ATTEMPTS)
    deps = start(cfg)
    queue_alert(deps, "C0ALERTS")
    now = T0
    with caplog.at_level(logging.INFO):
        for _ in range(MAX_ATTEMPTS):
            run_delivery(deps, now)
            row = get_row(deps.store, "alert-1")
            assert row is not None
            now = max(now, row.next_attempt_at)
        span = now - T0
        run_delivery(deps, now + timedelta(days=1))
    assert (row.status, row.attempts) == ("failed", MAX_ATTEMPTS)
    assert timedelta(hours=23) <= span <= timedelta(hours=25)  # about a day of retries, then give up
    assert (
        row.last_error
        == f"retries exhausted after {MAX_ATTEMPTS} attempts (last: chat.postMessage: HTTP 500 fatal_error)"
    )
    assert len(slack.calls("chat.postMessage")) == MAX_ATTEMPTS and posts(slack) == []
    assert len(console_alerts(cfg)) == 1
    assert len([e for e in errors(caplog) if "failed permanently" in e]) == 1
    assert metric(deps, 'gpucost_outbox_messages{state="failed"} 1.0')
    deps.store.close()


def test_requeue_failed_after_fixing_the_channel_delivers_the_digest_once(
    tmp_path: Path, slack: FakeSlack, capsys
) -> None:
    """The digest to a channel that does not exist yet: the post fails for good (told once), its
    chart waits under it instead of going out alone; `gpucost outbox --requeue-failed` once the
    channel exists delivers both, once."""
    from tests.test_digest import _stored

    cfg = _config(tmp_path, slack, channel="#costs")
    config_file = tmp_path / "gpucost.toml"
    config_file.write_text(f'[state]\nurl = "{cfg.state.url}"\n')
    deps = start(cfg)
    _stored(deps.aggregates, [(T0 - timedelta(hours=h), "202611", "10", "a3-1") for h in range(10, 40)])
    run_digest(deps, T0, send=True)
    for minutes in (0, 1, 60):
        run_delivery(deps, T0 + timedelta(minutes=minutes))
    post_row, chart_row = (get_row(deps.store, "digest-2026-11-02-#costs" + s) for s in ("", "-chart"))
    assert post_row is not None and chart_row is not None
    assert (post_row.status, chart_row.status) == ("failed", "pending")
    assert slack.files == [] and len(console_alerts(cfg)) == 1
    assert "channel #costs does not exist" in console_alerts(cfg)[0]["text"]

    slack.add_channel("costs", "C0COSTS")  # the operator created the channel
    capsys.readouterr()
    assert main(["outbox", "--config", str(config_file), "--requeue-failed"]) == 0
    assert "re-queued 1 failed message" in capsys.readouterr().out
    for minutes in (61, 62, 24 * 60):
        run_delivery(deps, T0 + timedelta(minutes=minutes))
    (post,) = posts(slack)
    (chart,) = slack.files
    assert post["channel"] == "C0COSTS" and chart["thread_ts"] == post["ts"]
    assert len(console_alerts(cfg)) == 1  # delivered: nothing more to tell
    assert metric(deps, 'gpucost_outbox_messages{state="failed"} 0.0')
    deps.store.close()


def test_a_requeued_message_that_fails_again_is_told_again(tmp_path: Path, slack: FakeSlack) -> None:
    """Once per failure, not once per row for ever: re-queued before the cause was fixed, it fails
    again and the operator hears of it again (once)."""
    from alerts.outbox_admin import requeue_failed

    cfg = _config(tmp_path, slack, channel="#alerts")
    slack.archive_channel("alerts")
    deps = start(cfg)
    queue_alert(deps, "#alerts")
    run_delivery(deps, T0)
    assert requeue_failed(deps.store, T0 + timedelta(minutes=1)) == [1]
    for minutes in (2, 3, 60):
        run_delivery(deps, T0 + timedelta(minutes=minutes))
    assert len(console_alerts(cfg)) == 2 and len(slack.calls("chat.postMessage")) == 2
    deps.store.close()
