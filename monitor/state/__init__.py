"""Persistent state: watermarks, hourly aggregates, findings, the notification log and the outbox."""

from monitor.state.store import SQLiteStore, StateStore, open_store

__all__ = ["SQLiteStore", "StateStore", "open_store"]
