"""Keyed, stateless randomness: every draw is a pure function of (seed, keys).

Why not one shared `random.Random`: the demo daemon appends hours one at a time on a fast clock,
and an hour generated alone must equal the same hour generated inside a 14-day run. Deriving each
entity-hour's draws from a hash of (seed, entity, hour, purpose) makes generation order irrelevant.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["digits", "hexid", "rng", "unit"]

_SCALE = float(1 << 64)


def _digest(seed: int, keys: tuple[object, ...]) -> bytes:
    text = "\x1f".join([str(seed), *map(str, keys)])
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def unit(seed: int, *keys: object) -> float:
    """A uniform draw in [0, 1) fixed by its keys.

    >>> unit(7, "vm-a", 3) == unit(7, "vm-a", 3)
    True
    """
    return int.from_bytes(_digest(seed, keys)[:8], "big") / _SCALE


def rng(seed: int, *keys: object) -> random.Random:
    """A private generator for a burst of draws (e.g. the 12 utilization points of one hour)."""
    return random.Random(int.from_bytes(_digest(seed, keys), "big"))


def digits(seed: int, n: int, *keys: object) -> str:
    """`n` decimal digits, never starting with 0 (project numbers, instance ids)."""
    value = int.from_bytes(hashlib.blake2b(_digest(seed, keys), digest_size=16).digest(), "big")
    low = 10 ** (n - 1)
    return str(low + value % (9 * low))


def hexid(*keys: object, groups: int = 3) -> str:
    """Seed-independent `XXXX-XXXX-XXXX` ids (SKU ids are the same for every customer)."""
    h = hashlib.blake2b("\x1f".join(map(str, keys)).encode(), digest_size=8).hexdigest().upper()
    return "-".join(h[i * 4 : i * 4 + 4] for i in range(groups))
