"""When rows reach the export: a load every 4 hours, each entity-hour landing 1-30 h after usage,
a few days late now and then.

Real exports are loaded "at regular intervals" with no latency guarantee and keep changing past
hours for days (gcp.md section 2). The lateness of an entity-hour is a keyed draw, so the export
time of a row never depends on what else was generated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from monitor.simulate.rand import unit

__all__ = ["LOAD_EVERY", "MAX_LATENESS", "Delivery"]

LOAD_EVERY = timedelta(hours=4)
#: No row arrives later than this after its usage ended (corrections included).
MAX_LATENESS = timedelta(days=7, hours=6)
_VERY_LATE_SHARE = 0.004
CORRECTION_DELAY = timedelta(days=6)


@lru_cache(maxsize=4096)
def _load_offset(seed: int, k: int) -> timedelta:
    u = unit(seed, "load", k)
    return timedelta(minutes=20) + timedelta(milliseconds=int(u * 100 * 60 * 1000))


@dataclass(frozen=True)
class Delivery:
    seed: int
    origin: datetime  # the first load slot starts here

    def load_time(self, k: int) -> datetime:
        """The k-th load: somewhere in the first half of its 4-hour slot, to the millisecond."""
        return self.origin + k * LOAD_EVERY + _load_offset(self.seed, k)

    def first_load_after(self, ready: datetime) -> datetime:
        """The export_time of a row that is ready at `ready`: the next load at or after it."""
        k = max(0, math.floor((ready - self.origin) / LOAD_EVERY))
        t = self.load_time(k)
        return t if t >= ready else self.load_time(k + 1)

    def lateness(self, key: str, h: int) -> timedelta:
        """How long after usage_end an entity-hour's rows are ready: mostly a few hours, a long
        tail to 30 h, and a small share days later."""
        u = unit(self.seed, "late", key, h)
        late = timedelta(hours=1) + timedelta(seconds=int(29 * 3600 * u**2.2))
        if unit(self.seed, "very-late", key, h) < _VERY_LATE_SHARE:
            late += timedelta(hours=48 + int(72 * unit(self.seed, "days-late", key, h)))
        return late

    def export_time(self, key: str, h: int, usage_end: datetime) -> datetime:
        return self.first_load_after(usage_end + self.lateness(key, h))

    def correction_time(self, usage_end: datetime) -> datetime:
        return self.first_load_after(usage_end + CORRECTION_DELAY)
