"""Matchers over findings, and routing a finding to a channel.

A matcher is a mapping of keys to exact values; every pair must match. Keys: `kind`, `severity`,
`project`, `zone`, `region`, `cluster`, `instance`, and `label.<key>` for a scope label. The same
matcher language serves routes (`[[slack.routes]]`) and silences (`[[alerts.silences]]`), so an
operator learns it once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from monitor.config import MATCH_KEYS, SlackConfig
from monitor.model import Finding

__all__ = [
    "MATCH_KEYS",
    "finding_value",
    "matches",
    "route",
    "routes_from_config",
]


def finding_value(finding: Finding, key: str) -> str | None:
    """The value of matcher / group-by `key` for `finding` (None when the finding has none)."""
    if key.startswith("label."):
        return finding.scope.labels.get(key.removeprefix("label."))
    if key == "kind":
        return finding.kind
    if key == "severity":
        return finding.severity.value
    if key in MATCH_KEYS:
        return getattr(finding.scope, key)
    raise KeyError(key)


def matches(finding: Finding, match: Mapping[str, str]) -> bool:
    """True when every key of `match` has exactly that value on `finding`."""
    return all(finding_value(finding, k) == v for k, v in match.items())


def route(finding: Finding, routes: Sequence[tuple[Mapping[str, str], str]], default: str) -> str:
    """The channel of the first route whose matcher matches, else `default`."""
    for match, channel in routes:
        if matches(finding, match):
            return channel
    return default


def routes_from_config(cfg: SlackConfig) -> list[tuple[dict[str, str], str]]:
    """`(match, channel)` pairs from `[[slack.routes]]` (validated as the config loaded)."""
    return [(dict(r.match), r.channel) for r in cfg.routes]
