"""Choosing the notifier from config: Slack when a token and a channel are present, an incoming
webhook when `slack.webhook_url_env` names a set variable, otherwise the console / file notifier."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from alerts.console import ConsoleNotifier
from alerts.notifier import Notifier
from alerts.slack import SlackNotifier, WebhookNotifier
from monitor.config import Config, slack_token
from monitor.errors import ConfigError

__all__ = ["make_notifier"]


def make_notifier(
    cfg: Config,
    environ: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    *,
    timeout: int = 15,
) -> Notifier:
    """`timeout`: seconds a Slack request may take (a test's stand-in outwaits a short one).
    A token that cannot be sent (a line break, whitespace) is a `ConfigError` that does not echo it."""
    env = dict(os.environ if environ is None else environ)
    token = slack_token(cfg.slack, env)
    if token is not None and cfg.slack.channel:
        return SlackNotifier(token, cfg.slack.api_base_url, timeout=timeout)
    if cfg.slack.webhook_url_env:
        url = env.get(cfg.slack.webhook_url_env, "").strip()
        if url:
            return WebhookNotifier(url, timeout=timeout)
        raise ConfigError(
            f"slack.webhook_url_env: environment variable {cfg.slack.webhook_url_env} is not set or empty; "
            "set it to the incoming-webhook URL or remove the key"
        )
    return ConsoleNotifier(cfg.alerts.console_dir, stream)
