"""The notifier interface and the classification of delivery outcomes.

A notifier sends one `Message` and answers with a `DeliveryResult` that says what the outbox must
do next: record it as sent (with Slack's `ts`), try again later (retryable: 429, 5xx, timeouts,
connection errors), or give up and surface the error (permanent: `invalid_auth`,
`channel_not_found`, other 4xx). Notifiers never retry on their own and never swallow an error: the
outbox owns retries, so a message is neither dropped nor sent twice.

An attempt whose outcome is unknown (a timeout after the request left, a 5xx) is `uncertain`: before
sending it again the outbox asks the notifier whether the message already arrived (`lookup`). That
search needs the channel's id (`resolve_channel`), which the outbox records before the first send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "AUTH_ERRORS",
    "TOKEN_REFUSED",
    "DeliveryResult",
    "Message",
    "Notifier",
    "Outcome",
]

#: Slack's error codes for a token it refuses, and what the operator should do about them.
AUTH_ERRORS = ("invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired")
TOKEN_REFUSED = "the Slack token was refused: set a valid bot token in SLACK_BOT_TOKEN (or slack.token_file)"


class Outcome(StrEnum):
    SENT = "sent"
    RETRY = "retry"
    FAILED = "failed"


@dataclass(frozen=True)
class Message:
    """One chat message as stored in the outbox.

    `idempotency_key` travels with the message (Slack message metadata, a JSON field in the console
    log) so a later attempt can tell whether an earlier, uncertain one arrived.
    """

    idempotency_key: str
    channel: str
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    thread_ts: str | None = None
    reply_broadcast: bool = False


@dataclass(frozen=True)
class DeliveryResult:
    """What happened to one send (or lookup).

    >>> DeliveryResult.retry("http 429", retry_after=30).retry_after
    30.0
    """

    outcome: Outcome
    ts: str | None = None
    channel: str | None = None
    error: str | None = None
    retry_after: float | None = None
    uncertain: bool = False

    @classmethod
    def sent(cls, ts: str | None, channel: str | None) -> DeliveryResult:
        return cls(Outcome.SENT, ts=ts, channel=channel)

    @classmethod
    def retry(
        cls, error: str, *, retry_after: float | None = None, uncertain: bool = False
    ) -> DeliveryResult:
        ra = None if retry_after is None else float(retry_after)
        return cls(Outcome.RETRY, error=error, retry_after=ra, uncertain=uncertain)

    @classmethod
    def failed(cls, error: str) -> DeliveryResult:
        return cls(Outcome.FAILED, error=error)


class Notifier(Protocol):
    """Where messages go: Slack bot, incoming webhook, or the console / file log."""

    name: str
    #: Whether `ts` values returned by `send` can be used as `thread_ts` for later messages.
    supports_threads: bool

    def resolve_channel(self, channel: str) -> str | None:
        """The stable id `lookup` can search for `channel` (a name or an id), or None if unknown.
        The outbox posts to it and persists it before the first send, so a restart searches the
        channel the message went to."""
        ...

    def send(self, message: Message) -> DeliveryResult: ...

    def lookup(self, message: Message) -> DeliveryResult | None:
        """After an uncertain attempt: SENT if the message is already there, None if it is not (or
        the notifier cannot tell), RETRY if the lookup itself hit a transient error."""
        ...

    def send_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult: ...

    def lookup_file(self, channel: str, path: Path, title: str, thread_ts: str | None) -> DeliveryResult | None:
        """`lookup` for an upload: SENT if a file of that name and title is already shared there
        (in the thread when `thread_ts`), None if not or if the notifier cannot tell."""
        ...
