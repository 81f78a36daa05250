"""Channel names vs ids: an alert sent to `#alerts` is still delivered exactly once after a crash.

Slack's `conversations.history` only takes channel ids, so before this was fixed a crash between
"sent to Slack" and "recorded sent" made the restart's lookup fail for a named channel and post the
alert again. Real slack-sdk client, fake Slack on 127.0.0.1, real SQLite.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from alerts.channels import ChannelDirectory, is_conversation_id, list_channels
from alerts.delivery import deliver_outbox
from alerts.notifier import Message, Outcome
from alerts.outbox import MIGRATIONS, enqueue, ensure_schema, get_row, known_channel_id
from alerts.pipeline import Deps
from alerts.slack import SlackNotifier
from monitor.state.store import SQLiteStore
from tests.fakes.slack_server import Failure, FakeSlack

pytestmark = pytest.mark.integration

T = "xoxb-t"
NOW = datetime(2026, 11, 3, tzinfo=UTC)
NO_READ_SCOPES = {"chat:write", "channels:history", "groups:history"}


class Crash(Exception):
    """Stands in for `kill -9` at a fault point."""


def crash_after_send(point: str) -> None:
    if point == "after_send":
        raise Crash(point)


def put(store: SQLiteStore, key: str, channel: str) -> None:
    ensure_schema(store)
    with store.transaction() as conn:
        enqueue(
            conn,
            key=key,
            group_key="g",
            receiver=channel,
            sequence=1,
            reason="new_group",
            root_key=None,
            message=Message(key, channel, f"alert {key}"),
            now=NOW,
        )


def keys(slack: FakeSlack) -> list[str]:
    return [m["metadata"]["event_payload"]["idempotency_key"] for m in slack.messages]


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "s.sqlite")


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(token=T) as s:
        yield s


# -- the reported bug (from the colleague's failing test) -------------------------------------------


@pytest.mark.parametrize("channel", ["C0ALERTS", "#alerts", "alerts"])
def test_crash_after_send_then_restart_delivers_once(store, slack, channel) -> None:
    n = SlackNotifier(SecretStr(T), slack.base_url)
    put(store, "k", channel)
    with pytest.raises(Crash):
        deliver_outbox(Deps(store, n, fault=crash_after_send), NOW)
    report = deliver_outbox(Deps(store, n), NOW)  # the restart
    assert (report.recovered, report.sent) == (1, 0)
    assert keys(slack) == ["k"]
    assert [m["channel"] for m in slack.messages] == ["C0ALERTS"]
    row = get_row(store, "k")
    assert (row.status, row.channel_id, row.slack_ts) == ("sent", "C0ALERTS", slack.messages[0]["ts"])


def test_restart_uses_the_persisted_id_even_if_the_channel_cannot_be_listed_now(store, slack) -> None:
    """The id is stored before the send: a fresh process needs no conversations.list to find it."""
    put(store, "k", "#alerts")
    with pytest.raises(Crash):
        deliver_outbox(Deps(store, SlackNotifier(SecretStr(T), slack.base_url), fault=crash_after_send), NOW)
    assert len(slack.calls("conversations.list")) == 1
    slack.fail("conversations.list", Failure(status=500), times=5)
    slack.rename_channel("alerts", "alerts-archive")  # "#alerts" now names nothing
    report = deliver_outbox(Deps(store, SlackNotifier(SecretStr(T), slack.base_url)), NOW)
    assert report.recovered == 1 and keys(slack) == ["k"]
    assert len(slack.calls("conversations.list")) == 1  # the new process did not need to list


def test_names_are_resolved_once_per_notifier_and_posts_go_to_the_id(store, slack) -> None:
    n = SlackNotifier(SecretStr(T), slack.base_url)
    for i, channel in enumerate(["#alerts", "#ml-team", "alerts", "#digest"]):
        put(store, f"k{i}", channel)
    assert deliver_outbox(Deps(store, n), NOW).sent == 4
    assert [m["channel"] for m in slack.messages] == ["C0ALERTS", "C0MLTEAM", "C0ALERTS", "C0DIGEST"]
    assert [c.params["channel"] for c in slack.calls("chat.postMessage")] == [
        "C0ALERTS",
        "C0MLTEAM",
        "C0ALERTS",
        "C0DIGEST",
    ]
    assert len(slack.calls("conversations.list")) == 1  # one listing, then the cache


def test_private_channel_resolves(store) -> None:
    with FakeSlack(token=T, channels={"alerts": "C0ALERTS", "finops": "G0FINOPS"}, private={"finops"}) as s:
        n = SlackNotifier(SecretStr(T), s.base_url)
        put(store, "k", "#finops")
        with pytest.raises(Crash):
            deliver_outbox(Deps(store, n, fault=crash_after_send), NOW)
        assert deliver_outbox(Deps(store, n), NOW).recovered == 1
        assert keys(s) == ["k"] and s.messages[0]["channel"] == "G0FINOPS"


# -- without channels:read / groups:read -------------------------------------------------------------


def test_without_read_scopes_the_id_slack_confirmed_for_the_name_is_reused(store, caplog) -> None:
    caplog.set_level(logging.WARNING, "alerts")
    with FakeSlack(token=T, scopes=NO_READ_SCOPES) as s:
        n = SlackNotifier(SecretStr(T), s.base_url)
        put(store, "first", "#alerts")
        assert deliver_outbox(Deps(store, n), NOW).sent == 1  # posted by name; Slack says C0ALERTS
        assert known_channel_id(store, "#alerts") == "C0ALERTS"
        put(store, "second", "#alerts")
        with pytest.raises(Crash):
            deliver_outbox(Deps(store, n, fault=crash_after_send), NOW)
        fresh = SlackNotifier(SecretStr(T), s.base_url)
        assert deliver_outbox(Deps(store, fresh), NOW).recovered == 1
        assert keys(s) == ["first", "second"]
        assert s.calls("chat.postMessage")[1].params["channel"] == "C0ALERTS"
    warnings = [r.getMessage() for r in caplog.records if "cannot resolve" in r.getMessage()]
    assert len(warnings) == 1  # once per name, not once per message; the restart had the id
    assert "missing_scope" in warnings[0] and "channels:read and groups:read" in warnings[0]


def test_unresolvable_first_message_falls_back_to_a_duplicate_never_a_loss(store, caplog) -> None:
    """The documented fallback: no scope to list, nothing confirmed yet -> posted twice."""
    caplog.set_level(logging.WARNING, "alerts")
    with FakeSlack(token=T, scopes=NO_READ_SCOPES) as s:
        n = SlackNotifier(SecretStr(T), s.base_url)
        put(store, "k", "#alerts")
        with pytest.raises(Crash):
            deliver_outbox(Deps(store, n, fault=crash_after_send), NOW)
        assert get_row(store, "k").channel_id is None  # nothing trustworthy to persist
        assert deliver_outbox(Deps(store, n), NOW).sent == 1
        assert keys(s) == ["k", "k"]
        assert len(s.calls("conversations.list")) == 2  # the first listing, public-only retry; cached
    resolve = [r for r in caplog.records if "cannot resolve" in r.getMessage()]
    check = [r for r in caplog.records if "cannot check whether k arrived" in r.getMessage()]
    assert len(resolve) == 1 and len(check) == 1


def test_groups_read_missing_still_resolves_public_channels(caplog) -> None:
    caplog.set_level(logging.WARNING, "alerts")
    scopes = NO_READ_SCOPES | {"channels:read"}
    channels = {"alerts": "C0ALERTS", "finops": "C0FINOPS"}
    with FakeSlack(token=T, channels=channels, private={"finops"}, scopes=scopes) as s:
        n = SlackNotifier(SecretStr(T), s.base_url)
        assert n.resolve_channel("#alerts") == "C0ALERTS"
        assert n.resolve_channel("#finops") is None
        types = [c.params["types"] for c in s.calls("conversations.list")]
        assert types == ["public_channel,private_channel", "public_channel"]
    [warning] = [r.getMessage() for r in caplog.records if "cannot resolve" in r.getMessage()]
    assert "'#finops'" in warning and "no such channel visible to the bot" in warning


# -- the directory: pagination, cache, refresh --------------------------------------------------------


def test_pagination_follows_next_cursor_and_the_cache_refreshes_on_a_miss() -> None:
    names = {f"team-{i}": f"C0TEAM{i}" for i in range(5)}
    t = [0.0]
    with FakeSlack(token=T, channels=names, page_size=2) as s:
        client = WebClient(token=T, base_url=s.base_url, retry_handlers=[])
        d = ChannelDirectory(client, refresh_after=300, clock=lambda: t[0])
        assert d.resolve("#team-4") == "C0TEAM4"
        calls = s.calls("conversations.list")
        assert len(calls) == 3
        assert [c.params.get("cursor") for c in calls] == [
            None,
            base64.b64encode(b"offset:2").decode(),
            base64.b64encode(b"offset:4").decode(),
        ]
        assert {(c.params["types"], c.params["exclude_archived"], c.params["limit"]) for c in calls} == {
            ("public_channel,private_channel", "1", "1000")
        }
        assert d.resolve("team-0") == "C0TEAM0" and len(s.calls("conversations.list")) == 3  # cached
        s.add_channel("team-new", "C0TEAMNEW")
        assert d.resolve("#team-new") is None  # a miss within refresh_after does not list again
        t[0] = 299.0
        assert d.resolve("#team-new") is None and len(s.calls("conversations.list")) == 3
        t[0] = 300.0
        assert d.resolve("#team-new") == "C0TEAMNEW" and len(s.calls("conversations.list")) == 6


def test_ids_need_no_listing(slack) -> None:
    n = SlackNotifier(SecretStr(T), slack.base_url)
    assert [is_conversation_id(c) for c in ("C0ALERTS", "G0PRIV", "D0DM", "#C0", "alerts", "U0BOT")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert n.resolve_channel("C0ALERTS") == "C0ALERTS"
    assert n.check_channel("C0ALERTS").channel == "C0ALERTS"
    assert slack.calls("conversations.list") == []


def test_check_channel_for_gpucost_check() -> None:
    with FakeSlack(token=T) as s:
        n = SlackNotifier(SecretStr(T), s.base_url)
        ok = n.check_channel("#ml-team")
        assert (ok.outcome, ok.channel) == (Outcome.SENT, "C0MLTEAM")
        missing = n.check_channel("#nope")
        assert missing.outcome is Outcome.FAILED
        assert missing.error == (
            "channel #nope not found among 3 channels visible to the bot (invite the bot to a private channel)"
        )
        s.fail("conversations.list", Failure(status=503))
        assert n.check_channel("#alerts").outcome is Outcome.RETRY
    with FakeSlack(token=T, scopes=NO_READ_SCOPES) as s:
        denied = SlackNotifier(SecretStr(T), s.base_url).check_channel("#alerts")
        assert denied.outcome is Outcome.FAILED
        assert denied.error == (
            "conversations.list: missing_scope (the bot token needs the channels:read and groups:read scopes)"
        )


def test_send_file_to_a_channel_name(slack, tmp_path: Path) -> None:
    png = tmp_path / "c.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    r = SlackNotifier(SecretStr(T), slack.base_url).send_file("#digest", png, "chart", None)
    assert r.outcome is Outcome.SENT
    assert [f["channel"] for f in slack.files] == ["C0DIGEST"]


# -- the fake's conversations.list speaks Slack's shape -----------------------------------------------


def test_fake_conversations_list_shape_and_errors() -> None:
    with FakeSlack(token=T, page_size=2) as s:
        client = WebClient(token=T, base_url=s.base_url, retry_handlers=[])
        s.archive_channel("digest")
        page = client.conversations_list(limit=1)
        assert page["channels"][0]["id"] == "C0ALERTS" and page["channels"][0]["is_private"] is False
        assert page["response_metadata"]["next_cursor"]
        assert list_channels(client) == {"alerts": "C0ALERTS", "ml-team": "C0MLTEAM"}  # archived left out
        everything = client.conversations_list()  # default: public, archived included, page capped
        assert [c["name"] for c in everything["channels"]] == ["alerts", "digest"]
        with pytest.raises(SlackApiError) as e:
            client.conversations_list(cursor="not-a-cursor")
        assert e.value.response["error"] == "invalid_cursor"
        with pytest.raises(SlackApiError) as e:
            client.conversations_list(limit=5000)
        assert e.value.response["error"] == "invalid_limit"
    with FakeSlack(token=T, scopes={"chat:write"}) as s:
        client = WebClient(token=T, base_url=s.base_url, retry_handlers=[])
        with pytest.raises(SlackApiError) as e:
            client.conversations_list(types="public_channel,private_channel")
        assert (e.value.response["error"], e.value.response["needed"]) == (
            "missing_scope",
            "channels:read,groups:read",
        )


# -- upgrade: a row left in flight by the previous version ---------------------------------------------


def test_row_left_inflight_by_the_previous_schema_is_found_by_name(tmp_path: Path, slack) -> None:
    store = SQLiteStore(tmp_path / "old.sqlite")
    store.migrate("alerts", MIGRATIONS[:1])  # the v1 schema: no channel_id column
    n = SlackNotifier(SecretStr(T), slack.base_url)
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO alerts_outbox (idempotency_key, group_key, receiver, sequence, reason, channel,"
            " text, blocks, status, attempts, inflight, created_at, next_attempt_at)"
            " VALUES ('old', 'g', '#alerts', 1, 'new_group', '#alerts', 'hi', '[]', 'pending', 1, 1, ?, ?)",
            ("2026-11-03T00:00:00.000000Z", "2026-11-03T00:00:00.000000Z"),
        )
    assert n.send(Message("old", "#alerts", "hi")).outcome is Outcome.SENT  # it did arrive, then kill -9
    report = deliver_outbox(Deps(store, n), NOW + timedelta(minutes=1))
    assert report.recovered == 1 and keys(slack) == ["old"]
    assert get_row(store, "old").slack_channel == "C0ALERTS"


def test_a_refused_token_is_not_reported_as_a_missing_scope(caplog) -> None:
    """A revoked token made `conversations.list` fail with invalid_auth, and the warning advised
    granting channels:read (a helper's run with a revoked token): the fix is the token."""
    caplog.set_level(logging.WARNING, "alerts")
    with FakeSlack(token=T, channels={"alerts": "C0ALERTS"}) as s:
        n = SlackNotifier(SecretStr("xoxb-revoked"), s.base_url)
        assert n.resolve_channel("#alerts") is None
    [warning] = [r.getMessage() for r in caplog.records if "cannot resolve" in r.getMessage()]
    assert "invalid_auth" in warning and "SLACK_BOT_TOKEN" in warning and "channels:read" not in warning
