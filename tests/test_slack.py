"""Slack notifiers against the fake Slack: error classification, escaping, no token leaks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.escape import escape_mrkdwn, truncate
from alerts.factory import make_notifier
from alerts.notifier import Message, Outcome
from alerts.slack import SlackNotifier, WebhookNotifier
from monitor.config import Config, SlackConfig
from monitor.errors import ConfigError
from tests.fakes.slack_server import Failure, FakeSlack

TOKEN = "xoxb-secret-123"


@pytest.fixture
def slack():
    with FakeSlack(token=TOKEN) as s:
        yield s


def msg(channel: str = "#alerts", key: str = "k1", thread_ts: str | None = None) -> Message:
    return Message(
        key, channel, "hello", [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}], thread_ts
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<!channel>", "&lt;!channel&gt;"),
        ("<http://evil|click>", "&lt;http://evil|click&gt;"),
        ("a & b", "a &amp; b"),
        ("&lt;", "&amp;lt;"),  # already-escaped text is escaped again, never trusted
        ("plain *bold* _it_", "plain *bold* _it_"),
        (None, ""),
    ],
)
def test_escape_mrkdwn(text, expected) -> None:
    assert escape_mrkdwn(text) == expected


def test_truncate_never_splits_an_entity() -> None:
    assert truncate("abc&lt;def", 6) == "abc…"
    assert truncate("short", 10) == "short"


@pytest.mark.parametrize(
    ("failure", "outcome", "retry_after", "error"),
    [
        (
            Failure(status=429, retry_after=42),
            Outcome.RETRY,
            42.0,
            "chat.postMessage: rate limited (HTTP 429)",
        ),
        (Failure(status=503), Outcome.RETRY, None, "chat.postMessage: HTTP 503 fatal_error"),
        (Failure(error="internal_error"), Outcome.RETRY, None, "chat.postMessage: internal_error"),
        (Failure(error="not_in_channel"), Outcome.FAILED, None, "chat.postMessage: not_in_channel"),
        (Failure(error="is_archived"), Outcome.FAILED, None, "chat.postMessage: is_archived"),
        (
            Failure(status=404, error="unknown_method"),
            Outcome.FAILED,
            None,
            "chat.postMessage: unknown_method",
        ),
    ],
)
def test_classification(slack: FakeSlack, failure, outcome, retry_after, error) -> None:
    slack.fail("chat.postMessage", failure)
    r = SlackNotifier(SecretStr(TOKEN), slack.base_url).send(msg())
    assert (r.outcome, r.retry_after, r.error) == (outcome, retry_after, error)
    assert len(slack.calls("chat.postMessage")) == 1  # slack-sdk itself did not retry
    assert slack.messages == []


@pytest.mark.parametrize(("header", "expected"), [(0, 0.0), (7, 7.0), (None, 60.0)])
def test_retry_after_is_honoured_as_sent(slack: FakeSlack, header, expected) -> None:
    """`Retry-After: 0` means now, not the one-minute default for a 429 without the header."""
    slack.fail("chat.postMessage", Failure(status=429, retry_after=header))
    assert SlackNotifier(SecretStr(TOKEN), slack.base_url).send(msg()).retry_after == expected


@pytest.mark.parametrize(
    ("token", "where"),
    [
        ("xoxb-1-2\nxoxb-old", "a line break at character 9 of 17"),
        ("xoxb-1-2 x", "whitespace at character 9 of 10"),
        ("xoxb-1-2\x00", "a non-printable or non-ASCII character at character 9 of 9"),
        ("xoxb-1-2\u2010", "a non-printable or non-ASCII character at character 9 of 9"),
    ],
)
def test_a_token_that_cannot_be_a_header_is_refused_without_echoing_it(token: str, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        SlackNotifier(SecretStr(token), "http://127.0.0.1:1/api/")
    assert where in str(err.value) and "xoxb-1-2" not in str(err.value)


def test_an_error_naming_the_token_is_scrubbed(slack: FakeSlack) -> None:
    """Whatever its shape: the token's value is replaced in every reason a notifier returns."""
    odd = "plain-secret-123"  # not xox*-shaped, so `monitor.logs.redact` would not know it
    slack.fail("chat.postMessage", Failure(status=400, error=f"bad token {odd}"))
    r = SlackNotifier(SecretStr(odd), slack.base_url).send(msg())
    assert r.error == "chat.postMessage: bad token [redacted]"


def test_connection_refused_is_retryable() -> None:
    with FakeSlack() as s:
        url = s.base_url
    r = SlackNotifier(SecretStr(TOKEN), url, timeout=1).send(msg())
    assert r.outcome is Outcome.RETRY and r.uncertain


def test_bearer_token_sent_and_never_logged(slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    n = SlackNotifier(SecretStr(TOKEN), slack.base_url)
    assert n.auth_test().outcome is Outcome.SENT
    assert n.send(msg()).outcome is Outcome.SENT
    assert slack.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in caplog.text and TOKEN not in repr(n)


def test_lookup_finds_by_metadata_in_history_and_thread(slack: FakeSlack) -> None:
    n = SlackNotifier(SecretStr(TOKEN), slack.base_url)
    root = n.send(msg(key="root"))
    n.send(msg(channel=root.channel, key="reply", thread_ts=root.ts))
    assert n.lookup(msg(channel="C0ALERTS", key="root")).ts == root.ts
    assert n.lookup(msg(channel="C0ALERTS", key="reply", thread_ts=root.ts)).outcome is Outcome.SENT
    assert n.lookup(msg(channel="C0ALERTS", key="other")) is None
    # Slack needs a channel id for history: a name is resolved first (conversations.list) ...
    assert n.lookup(msg(channel="#alerts", key="root")).ts == root.ts
    assert len(slack.calls("conversations.list")) == 1
    # ... and a name that resolves to nothing cannot be checked (the outbox then resends)
    assert n.lookup(msg(channel="#gone", key="root")).outcome is Outcome.FAILED


def test_webhook_classification(slack: FakeSlack) -> None:
    w = WebhookNotifier(slack.webhook_url)
    assert w.send(msg()).outcome is Outcome.SENT
    slack.fail("webhook", Failure(status=429, retry_after=5))
    assert w.send(msg()).retry_after == 5.0
    slack.fail("webhook", Failure(status=500))
    assert w.send(msg()).outcome is Outcome.RETRY
    slack.fail("webhook", Failure(status=404, error="no_service"))
    assert w.send(msg()).outcome is Outcome.FAILED
    assert "secret" not in repr(w)


def test_make_notifier_choices(tmp_path: Path) -> None:
    cfg = Config(slack=SlackConfig(channel="C1", api_base_url="http://127.0.0.1:1/api/"))
    assert make_notifier(cfg, {"SLACK_BOT_TOKEN": "xoxb-1"}).name == "slack"
    assert make_notifier(cfg, {}).name == "console"
    hook = Config(slack=SlackConfig(webhook_url_env="HOOK"))
    assert make_notifier(hook, {"HOOK": "http://127.0.0.1:1/hooks/x"}).name == "webhook"
    with pytest.raises(ConfigError, match=r"^slack\.webhook_url_env: environment variable HOOK is not set"):
        make_notifier(hook, {})
