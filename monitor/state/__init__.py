"""Persistent state: watermarks, hourly aggregates, findings, the notification log and the outbox.

SQLite by default; `open_store("postgresql://...")` returns a `monitor.state.postgres.PostgresStore`
(imported lazily: it needs psycopg, the `postgres` extra).
"""

from monitor.state.store import SQLiteStore, StateConnection, StateStore, open_store, redact_url

__all__ = ["SQLiteStore", "StateConnection", "StateStore", "open_store", "redact_url"]
