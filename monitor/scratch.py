"""In-memory DuckDB for a step's own work: connections to one database per process, not a database each.

`duckdb.connect()` makes a new database, and a new database registers DuckDB's built-in functions
(core_functions, icu, json, parquet) before its first query: 17-20 ms a connect against 0.01 ms for a
cursor of a database already open (DuckDB 2.0.1, measured 2026-12-06; the profile is catalog inserts
and allocations). The GPU join made one per call, the detectors' engine over rows one per engine: a
detection run and the digest paid it on every join, and the test suite about 930 times (19 s).

A `scratch()` connection is a session of its own on a database shared by the process (one per thread
count, `threads` being a setting of the database, not of a session). What a session registers
(Arrow tables) and its TEMP tables are its own and go when it closes; it must create nothing else,
since plain tables would be seen, and collide, across sessions. The database holds nothing between
sessions, so sharing it shares no state, only the built-in catalog. Keyed by process id too: a child
made by `fork` must not use its parent's database.
"""

from __future__ import annotations

import os
import threading

import duckdb

__all__ = ["scratch"]

_lock = threading.Lock()
_databases: dict[tuple[int, int | None], duckdb.DuckDBPyConnection] = {}


def scratch(*, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A new session (close it when done) on the process's in-memory database with `threads` threads
    (None: DuckDB's default, one per core), its time zone UTC and no progress bar."""
    key = (os.getpid(), threads)
    with _lock:
        db = _databases.get(key)
        if db is None:
            db = _databases[key] = duckdb.connect(config={} if threads is None else {"threads": threads})
        conn = db.cursor()
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET enable_progress_bar = false")
    return conn
