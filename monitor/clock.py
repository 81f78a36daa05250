"""Time is injected: logic asks a Clock, never `datetime.now()`.

`SystemClock` for production, `FixedClock` for tests and `analyze --end`, and `DemoClock` for the
embedded default, where simulated hours pass much faster than real ones.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "DemoClock", "FixedClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    def __init__(self, at: datetime):
        self._at = at

    def now(self) -> datetime:
        return self._at

    def advance(self, delta: timedelta) -> None:
        self._at += delta


class DemoClock:
    """Simulated time that only moves when the demo feeder advances it (thread-safe)."""

    def __init__(self, start: datetime, end: datetime):
        self._now, self.end = start, end
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> tuple[datetime, datetime]:
        """Move forward (never past `end`); returns the (previous, new) instants."""
        with self._lock:
            prev = self._now
            self._now = self.next(delta)
            return prev, self._now

    def next(self, delta: timedelta) -> datetime:
        """Where `advance(delta)` would move to, without moving."""
        return min(self._now + delta, self.end)

    def move_to(self, at: datetime) -> None:
        """Set the instant (forward only), once what it makes visible is in place."""
        with self._lock:
            self._now = max(self._now, min(at, self.end))

    @property
    def exhausted(self) -> bool:
        return self.now() >= self.end
