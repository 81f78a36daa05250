"""Silences: matchers with an expiry time, applied before grouping.

A silenced finding is muted, not resolved: it produces no notification while the silence lasts, and
its disappearance from a group is not announced as a resolution. When the silence expires (`until`
passes), the finding notifies again like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from alerts.routing import matches
from monitor.config import AlertsConfig
from monitor.model import Finding
from monitor.timeutil import parse_timestamp

__all__ = ["ActiveSilence", "is_silenced", "silences_from_config"]


@dataclass(frozen=True)
class ActiveSilence:
    match: dict[str, str]
    until: datetime
    comment: str = ""

    def active(self, now: datetime) -> bool:
        return now < self.until


def silences_from_config(cfg: AlertsConfig) -> list[ActiveSilence]:
    """`[[alerts.silences]]` as `ActiveSilence`s (checked as the config loaded: `until` parses)."""
    return [ActiveSilence(dict(s.match), parse_timestamp(s.until), s.comment) for s in cfg.silences]


def is_silenced(finding: Finding, silences: Sequence[ActiveSilence], now: datetime) -> bool:
    return any(s.active(now) and matches(finding, s.match) for s in silences)
