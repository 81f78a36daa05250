"""Slack notifiers: the Web API with a bot token (`SlackNotifier`) and incoming webhooks.

Both use slack-sdk with its retry handlers switched off (`retry_handlers=[]`): the outbox owns
retries, and a client-side retry after a dropped connection could post the same message twice.
Errors are classified, never swallowed:

- HTTP 429 -> retry after `Retry-After`; 5xx, timeouts and connection errors -> retry (uncertain,
  since the request may have been processed);
- `ok: false` with a transient error (`ratelimited`, `internal_error`, ...) -> retry;
- any other `ok: false` (`invalid_auth`, `channel_not_found`, `not_in_channel`, ...) and other 4xx
  -> permanent failure.

Every message carries Slack message metadata `{"event_type": "gpucost_alert", "event_payload":
{"idempotency_key": ...}}` so `lookup` can find an earlier attempt that did arrive. The token is
held as a `SecretStr` and never logged (slack-sdk redacts the Authorization header in its own logs).

Channel names: `lookup` reads `conversations.history` / `conversations.replies`, which take only
channel ids, so a name (`#gpucost-alerts`) is resolved to its id with `conversations.list`
(`alerts.channels`, cached per notifier). `deliver_outbox` resolves before the first send, posts to
the id and persists it in the outbox row, so a restart after a crash searches the right channel.

Bot token scopes: `chat:write` (post), `channels:history` / `groups:history` (the lookup after an
uncertain send), `channels:read` / `groups:read` (resolve channel names; not needed when
`slack.channel` and every route name a channel id), `files:write` (the digest chart). Without the
`*:read` scopes a name cannot be resolved: one warning per name is logged, messages are posted by
name, and an alert interrupted by a timeout or crash may then be posted twice (never lost).
`check_channel(channel)` reports whether a channel resolves, for `gpucost check`.

The token never leaves this module in text. It must be one line of printable ASCII (`check_token`,
at construction: a `ConfigError` that does not echo it): otherwise `http.client` refuses the
`Authorization` header with `ValueError("Invalid header value b'Bearer xoxb-...'")`, an exception
that carries the whole token into slack-sdk's own ERROR log line, the outbox row's `last_error`,
`gpucost outbox` and the traceback. And every error text `SlackNotifier` returns has the token's
value replaced (`_Scrub`), whatever shape the token has (`monitor.logs.redact` only knows shapes).
"""

from __future__ import annotations

import http.client
import logging
import socket
import urllib.error
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError, SlackRequestError
from slack_sdk.webhook import WebhookClient

from alerts.channels import ChannelDirectory
from alerts.notifier import DeliveryResult, Message
from monitor.errors import ConfigError

__all__ = [
    "PERMANENT_ERRORS",
    "RETRYABLE_ERRORS",
    "SlackNotifier",
    "WebhookNotifier",
    "check_token",
    "classify",
]

log = logging.getLogger("alerts.slack")

EVENT_TYPE = "gpucost_alert"
#: `ok: false` errors worth retrying; every other error is permanent.
RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
#: Documented for readers and tests: the permanent errors seen most often.
PERMANENT_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "msg_too_long",
        "invalid_blocks",
        "no_text",
        "restricted_action",
    }
)
_NETWORK_ERRORS = (
    TimeoutError,
    socket.timeout,
    urllib.error.URLError,
    ConnectionError,
    http.client.HTTPException,
)


def _retry_after(headers: Any) -> float | None:
    if not headers:
        return None
    for k, v in dict(headers).items():
        if k.lower() == "retry-after":
            v = v[0] if isinstance(v, list) else v
            try:
                return max(float(v), 0.0)
            except (TypeError, ValueError):
                return None
    return None


def classify(err: BaseException, what: str = "request") -> DeliveryResult:
    """Turn a slack-sdk or network exception into retry / failed."""
    if isinstance(err, SlackApiError):
        resp = err.response
        status = getattr(resp, "status_code", 200)
        data = resp.data if isinstance(getattr(resp, "data", None), dict) else {}
        code = str(data.get("error") or "")
        if status == 429 or code in ("ratelimited", "rate_limited"):
            ra = _retry_after(getattr(resp, "headers", None))
            ra = 60.0 if ra is None else ra  # no header: wait a minute; `Retry-After: 0` means now
            return DeliveryResult.retry(f"{what}: rate limited (HTTP {status})", retry_after=ra)
        if status >= 500:
            return DeliveryResult.retry(f"{what}: HTTP {status} {code}".rstrip(), uncertain=True)
        if code in RETRYABLE_ERRORS:
            return DeliveryResult.retry(f"{what}: {code}", uncertain=True)
        return DeliveryResult.failed(f"{what}: {code or f'HTTP {status}'}")
    if isinstance(err, SlackRequestError):
        return DeliveryResult.failed(f"{what}: {err}")
    if isinstance(err, (*_NETWORK_ERRORS, SlackClientError, OSError)):
        return DeliveryResult.retry(f"{what}: {type(err).__name__}: {err}", uncertain=True)
    raise err


def check_token(token: str, what: str = "the Slack bot token (SLACK_BOT_TOKEN or slack.token_file)") -> None:
    """Refuse a token that cannot go in an HTTP header, saying where the bad character is, never
    what the token is.

    >>> check_token("xoxb-1-2-abc")
    >>> check_token("xoxb-1-2-abc\\nxoxb-old", "the token")
    Traceback (most recent call last):
    ...
    monitor.errors.ConfigError: the token: a line break at character 13 of 21; a Slack token is one line of printable ASCII (a token file with two lines, or a pasted line break?)
    """
    for i, ch in enumerate(token, 1):
        if not (ch.isascii() and ch.isprintable()) or ch.isspace():
            if ch in "\r\n":
                kind = "a line break"
            elif ch.isspace():
                kind = "whitespace"
            else:
                kind = "a non-printable or non-ASCII character"
            raise ConfigError(
                f"{what}: {kind} at character {i} of {len(token)}; a Slack token is one line of printable"
                " ASCII (a token file with two lines, or a pasted line break?)"
            )


class _Scrub:
    """Replaces one secret's value in text (the token, whatever its shape)."""

    def __init__(self, secret: str):
        self._secret = secret

    def text(self, text: str) -> str:
        return text.replace(self._secret, "[redacted]") if self._secret else text

    def result(self, r: DeliveryResult) -> DeliveryResult:
        return r if r.error is None else replace(r, error=self.text(r.error))


class SlackNotifier:
    """Posts with `chat.postMessage` (Block Kit, threads) using a bot token."""

    name = "slack"
    supports_threads = True

    def __init__(
        self,
        token: SecretStr,
        base_url: str | None = None,
        *,
        timeout: int = 15,
        channels: Callable[[WebClient], ChannelDirectory] = ChannelDirectory,
    ):
        secret = token.get_secret_value()
        check_token(secret)
        self._scrub = _Scrub(secret)
        kwargs: dict[str, Any] = {"token": secret, "timeout": timeout, "retry_handlers": []}
        if base_url:
            kwargs["base_url"] = base_url
        self._client = WebClient(**kwargs)
        self._channels = channels(self._client)

    def _classify(self, err: BaseException, what: str) -> DeliveryResult:
        """`classify`, with the token's value scrubbed from the reason (an exception it cannot
        classify is re-raised: the outbox logs it and retries)."""
        return self._scrub.result(classify(err, what))

    def __repr__(self) -> str:  # never show the token
        return f"SlackNotifier(base_url={self._client.base_url!r})"

    def auth_test(self) -> DeliveryResult:
        """For `gpucost check`: is the token valid? SENT means yes."""
        try:
            resp = self._client.auth_test()
        except Exception as e:
            return self._classify(e, "auth.test")
        return DeliveryResult.sent(None, resp.get("team_id"))

    def resolve_channel(self, channel: str) -> str | None:
        """The channel id for a name or id (cached `conversations.list`); None if unknown."""
        return self._channels.resolve(channel)

    def check_channel(self, channel: str) -> DeliveryResult:
        """For `gpucost check`: SENT with the channel id, or FAILED / RETRY saying why not
        (e.g. `missing_scope` naming channels:read and groups:read, or the name is not visible)."""
        return self._scrub.result(self._channels.check(channel))

    def send(self, message: Message) -> DeliveryResult:
        try:
            resp = self._client.chat_postMessage(
                channel=message.channel,
                text=message.text,
                blocks=message.blocks or None,
                thread_ts=message.thread_ts,
                reply_broadcast=message.reply_broadcast or None,
                unfurl_links=False,
                unfurl_media=False,
                metadata={
                    "event_type": EVENT_TYPE,
                    "event_payload": {"idempotency_key": message.idempotency_key},
                },
            )
        except Exception as e:
            return self._classify(e, "chat.postMessage")
        return DeliveryResult.sent(resp.get("ts"), resp.get("channel"))

    def lookup(self, message: Message) -> DeliveryResult | None:
        """Search recent channel history (or the thread) for our idempotency key.

        A channel name is resolved to its id first (history only takes ids); a name that does not
        resolve is a FAILED lookup, so the outbox sends again rather than lose the alert."""

        def ours(m: dict[str, Any]) -> bool:
            meta = m.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            return meta.get("event_type") == EVENT_TYPE and payload.get("idempotency_key") == message.idempotency_key

        found = self._search(message.channel, message.thread_ts, ours, metadata=True)
        return found if not isinstance(found, tuple) else DeliveryResult.sent(found[0].get("ts"), found[1])

    def lookup_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult | None:
        """Search the thread (or the channel's recent history) for the message a shared file shows
        as: one whose `files` hold a file of this name and title (message shape: `files` and
        `upload` in `conversations.replies` answers,
        https://deno.land/x/slack_web_api_client@0.2.7/client/generated-response/ConversationsRepliesResponse.ts).
        Uploads carry no metadata, so name and title are the key: the outbox gives each file row
        its own title within its thread (the digest's charts). Like `lookup`, a channel without a
        known id is a FAILED lookup, so the file is uploaded again rather than lost."""

        def ours(m: dict[str, Any]) -> bool:
            return any(f.get("name") == path.name and f.get("title") == title for f in m.get("files") or [])

        found = self._search(channel, thread_ts, ours)
        return found if not isinstance(found, tuple) else DeliveryResult.sent(thread_ts, found[1])

    def _search(
        self, channel: str, thread_ts: str | None, ours: Callable[[dict[str, Any]], bool], *, metadata: bool = False
    ) -> tuple[dict[str, Any], str] | DeliveryResult | None:
        """The first message of the thread (else of the channel's recent history) that is `ours`,
        with the channel id it was found in; None if none is; a FAILED result if the channel has no
        known id, else the classified error of a history call that failed."""
        resolved = self.resolve_channel(channel)
        if resolved is None:
            return DeliveryResult.failed(f"lookup: channel {channel} has no known id")
        extra = {"include_all_metadata": True} if metadata else {}
        try:
            if thread_ts:
                resp = self._client.conversations_replies(channel=resolved, ts=thread_ts, limit=200, **extra)
            else:
                resp = self._client.conversations_history(channel=resolved, limit=200, **extra)
        except Exception as e:
            return self._classify(e, "lookup")
        for m in resp.get("messages") or []:
            if ours(m):
                return m, resp.get("channel") or resolved
        return None

    def send_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult:
        """Upload with `files_upload_v2` (getUploadURLExternal, POST bytes, completeUploadExternal);
        the last step takes a channel id, so a name is resolved first."""
        channel = self.resolve_channel(channel) or channel
        try:
            self._client.files_upload_v2(
                channel=channel, file=str(path), filename=path.name, title=title, thread_ts=thread_ts
            )
        except Exception as e:
            return self._classify(e, "files_upload_v2")
        return DeliveryResult.sent(thread_ts, channel)


class WebhookNotifier:
    """Posts to an incoming webhook: no threads, no `ts`, no lookups, no files."""

    name = "webhook"
    supports_threads = False

    def __init__(self, url: str, *, timeout: int = 15):
        self._client = WebhookClient(url, timeout=timeout, retry_handlers=[])

    def __repr__(self) -> str:  # the URL is a secret
        return "WebhookNotifier(url=***)"

    def send(self, message: Message) -> DeliveryResult:
        try:
            resp = self._client.send(
                text=message.text, blocks=message.blocks or None, unfurl_links=False, unfurl_media=False
            )
        except Exception as e:
            return classify(e, "webhook")
        if resp.status_code == 200:
            return DeliveryResult.sent(None, message.channel)
        what = f"webhook: HTTP {resp.status_code} {resp.body}".strip()
        if resp.status_code == 429:
            ra = _retry_after(resp.headers)
            return DeliveryResult.retry(what, retry_after=60.0 if ra is None else ra)
        if resp.status_code >= 500:
            return DeliveryResult.retry(what, uncertain=True)
        return DeliveryResult.failed(what)

    def resolve_channel(self, channel: str) -> str | None:
        return channel  # a webhook posts to its own channel; there is nothing to look up

    def lookup(self, message: Message) -> DeliveryResult | None:
        return None

    def send_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult:
        return DeliveryResult.failed("incoming webhooks cannot upload files; use a bot token")

    def lookup_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult | None:
        return None
