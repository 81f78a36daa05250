"""Timestamps as the export and users write them, always timezone-aware UTC."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

__all__ = ["aware_utc", "floor_hour", "from_naive_utc", "naive_utc", "parse_timestamp", "to_iso"]

_UTC_SUFFIX = re.compile(r"\s*(UTC|Z)$", re.IGNORECASE)


def parse_timestamp(text: str, *, require_zone: bool = False) -> datetime:
    """Parse `2026-11-01 10:00:00 UTC`, `2026-11-01 10:00:00+00:00`, RFC 3339 or a bare date.

    Naive inputs are taken as UTC (what a user types for `--start`), unless `require_zone`: data
    files (the billing export, Cloud Monitoring JSON) always write a zone, so a naive time there
    means another tool wrote the file, and guessing its zone could shift every hour. Raises
    ValueError with the accepted forms (or, for a naive time with `require_zone`, the fix).

    >>> parse_timestamp("2026-11-01 10:00:00 UTC").isoformat()
    '2026-11-01T10:00:00+00:00'
    """
    raw = text.strip()
    s = _UTC_SUFFIX.sub("+00:00", raw) if _UTC_SUFFIX.search(raw) else raw
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(
            f'bad timestamp "{text}": use 2026-11-01T10:00:00Z, "2026-11-01 10:00:00 UTC" '
            "or 2026-11-01 10:00:00+00:00"
        ) from None
    if dt.tzinfo is None:
        if require_zone:
            raise ValueError(
                f'no time zone in "{text}": the export always writes one ("2026-11-01 10:00:00 UTC"), so'
                ' another tool wrote this file; if its times are UTC, end each with " UTC" or "+00:00"'
            )
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def to_iso(dt: datetime | date | None) -> str | None:
    if dt is None:
        return None
    if isinstance(dt, datetime):
        return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return dt.isoformat()


def floor_hour(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def floor_day(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


ONE_HOUR = timedelta(hours=1)


def naive_utc(dt: datetime) -> datetime:
    """A time as DuckDB's TIMESTAMP columns (the aggregate store, the cost engine) hold it: UTC,
    without a zone. The one place aware times leave for the engines.

    >>> naive_utc(parse_timestamp("2026-11-01T10:00:00+02:00")).isoformat()
    '2026-11-01T08:00:00'
    """
    return dt.astimezone(UTC).replace(tzinfo=None)


def aware_utc(dt: datetime) -> datetime:
    """A time an engine returned, naive (UTC, as DuckDB's TIMESTAMP) or aware, as aware UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def from_naive_utc(dt: datetime) -> datetime:
    """A DuckDB TIMESTAMP read back (`naive_utc`'s inverse): the same instant, as aware UTC."""
    return dt.replace(tzinfo=UTC)
