"""Channel names -> channel ids, because Slack's read methods only take ids.

`chat.postMessage` accepts `#alerts`, but `conversations.history` / `conversations.replies` (the
outbox's check whether an uncertain send arrived) answer `channel_not_found` for a name. Without an
id, a timeout, a 5xx or a crash after the send would post the alert a second time. So a name is
resolved with `conversations.list` (every page, `types=public_channel,private_channel`,
`exclude_archived`), and the directory is cached per notifier.

Scopes: `channels:read` (public channels) and `groups:read` (private channels the bot is in). With
only `channels:read` the listing is retried for public channels alone; with neither, or for a name
that is not listed, `resolve` logs one warning per name and returns None: the caller then posts by
name and, after an uncertain failure, may post twice (a duplicate rather than a lost alert).
Configuring the channel id (`C0123ABCD`) needs no scope at all.

The cache is refreshed on a miss at most every `refresh_after` seconds (a channel created or
renamed while the daemon runs), measured with an injected monotonic clock.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from alerts.notifier import AUTH_ERRORS, TOKEN_REFUSED, DeliveryResult, Outcome

__all__ = ["CHANNEL_TYPES", "REQUIRED_SCOPES", "ChannelDirectory", "is_conversation_id", "list_channels"]

log = logging.getLogger("alerts.slack")

CHANNEL_TYPES = ("public_channel", "private_channel")
#: Scopes `conversations.list` needs for `CHANNEL_TYPES`; `gpucost check` can name them.
REQUIRED_SCOPES = ("channels:read", "groups:read")
PAGE_LIMIT = 1000  # Slack's maximum page size
MAX_PAGES = 200  # 200k channels; a guard against a server that repeats its cursor

# Public (C), private (G, or C since 2021) and direct-message (D) conversation ids. Channel names
# are lower case, so an all-capitals token is never a name.
_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")


def is_conversation_id(channel: str) -> bool:
    """True for a conversation id, which needs no resolution.

    >>> [is_conversation_id(c) for c in ("C0ALERTS", "#alerts", "alerts", "U0BOT")]
    [True, False, False, False]
    """
    return bool(_ID.match(channel))


def _key(name: str) -> str:
    return name.strip().removeprefix("#").lower()


def list_channels(client: WebClient, types: tuple[str, ...] = CHANNEL_TYPES) -> dict[str, str]:
    """Every visible, unarchived channel as `{name: id}`, following `response_metadata.next_cursor`.

    Raises what slack-sdk raises (`SlackApiError` for `ok: false` / HTTP errors, network errors).
    """
    names: dict[str, str] = {}
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        resp = client.conversations_list(
            types=",".join(types), exclude_archived=True, limit=PAGE_LIMIT, cursor=cursor
        )
        for ch in resp.get("channels") or []:
            if ch.get("id") and ch.get("name"):
                names[_key(str(ch["name"]))] = str(ch["id"])
        cursor = (resp.get("response_metadata") or {}).get("next_cursor") or None
        if cursor is None:
            return names
    log.warning("conversations.list: stopped after %d pages; some channels were not listed", MAX_PAGES)
    return names


def _missing_scope(err: BaseException) -> bool:
    data: Any = getattr(getattr(err, "response", None), "data", None)
    return isinstance(err, SlackApiError) and isinstance(data, dict) and data.get("error") == "missing_scope"


def _classify(err: BaseException) -> DeliveryResult:
    from alerts.slack import classify  # late: alerts.slack imports this module

    try:
        return classify(err, "conversations.list")
    except Exception:  # not a Slack or network error: still a reason, never a crash of delivery
        return DeliveryResult.failed(f"conversations.list: {type(err).__name__}: {err}")


def _describe(err: BaseException) -> str:
    text = _classify(err).error or type(err).__name__
    if _missing_scope(err):
        text += f" (the bot token needs the {' and '.join(REQUIRED_SCOPES)} scopes)"
    return text


class ChannelDirectory:
    """`resolve("#alerts") -> "C0ALERTS"`, cached; one instance per notifier (per token)."""

    def __init__(
        self,
        client: WebClient,
        *,
        refresh_after: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._client = client
        self._refresh_after = refresh_after
        self._clock = clock
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        self._fetched_at: float | None = None  # last listing attempt, successful or not
        self._error: str | None = None  # why the last listing failed
        self._warned: set[str] = set()

    def resolve(self, channel: str) -> str | None:
        """The id for `channel` (an id is returned as is); None, with one warning, if unknown."""
        if is_conversation_id(channel):
            return channel
        key = _key(channel)
        with self._lock:
            if key not in self._names and self._stale():
                self._refresh()
            found = self._names.get(key)
            if found is None and key not in self._warned:
                self._warned.add(key)
                why = self._error or "no such channel visible to the bot"
                # a refused token is not a missing scope (a revoked token read "grant channels:read")
                refused = why.rsplit(": ", 1)[-1] in AUTH_ERRORS
                fix = (
                    TOKEN_REFUSED
                    if refused
                    else f"Configure the channel id or grant {', '.join(REQUIRED_SCOPES)}"
                )
                log.warning(
                    "cannot resolve Slack channel %r to an id (%s); posting by name, so after a timeout"
                    " or crash an alert may be posted twice. %s",
                    channel,
                    why,
                    fix[0].upper() + fix[1:],
                )
            return found

    def check(self, channel: str) -> DeliveryResult:
        """For `gpucost check`: SENT with the id, FAILED with the reason, RETRY if Slack was down.

        Always lists afresh (no cache), so a scope granted since start-up shows at once.
        """
        if is_conversation_id(channel):
            return DeliveryResult.sent(None, channel)
        try:
            names = self._list()
        except Exception as e:
            result = _classify(e)
            return DeliveryResult.failed(_describe(e)) if result.outcome is Outcome.FAILED else result
        with self._lock:
            self._names, self._fetched_at, self._error = names, self._clock(), None
        found = names.get(_key(channel))
        if found is None:
            return DeliveryResult.failed(
                f"channel {channel} not found among {len(names)} channels visible to the bot"
                " (invite the bot to a private channel)"
            )
        return DeliveryResult.sent(None, found)

    # -- internals -----------------------------------------------------------------------------------
    def _stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self._refresh_after

    def _list(self) -> dict[str, str]:
        try:
            return list_channels(self._client)
        except SlackApiError as e:
            if not _missing_scope(e):
                raise
            # groups:read missing: public channels can still be resolved with channels:read alone
            return list_channels(self._client, ("public_channel",))

    def _refresh(self) -> None:
        self._fetched_at = self._clock()
        try:
            self._names = self._list()
            self._error = None
        except Exception as e:  # resolution is best effort: the caller falls back to the name
            self._error = _describe(e)
