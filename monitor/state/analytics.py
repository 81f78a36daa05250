"""The aggregate store: the billing export's hourly aggregates, in DuckDB, beside the state store.

Transactional state (watermarks of utilization, findings, the notification log, the outbox) stays in
SQLite / PostgreSQL (`monitor.state.store`). What the billing poll reads from the export is a cache
of the export: columnar data that detectors, digests and reports sum over. It lives here, in one
DuckDB file (`state.aggregates_path`, by default `aggregates.duckdb` beside a SQLite state file), with
the partition watermarks that describe it, so the poll's "aggregates and watermarks in one
transaction" holds inside one database. Losing the file loses nothing: the next poll finds no
watermark and rebuilds the aggregates from the export.

Why DuckDB: the poll moves query results in as Arrow tables (no Python object per row), a stored
aggregate row takes tens of bytes instead of hundreds, and sums over weeks of hours run in the engine.

A DuckDB file admits one writing process at a time, and it is locked while a process has it open.
The daemon holds it only for the length of each read or write (`read()` / `transaction()` open and
close it; a detection run's costs are one read, from its start to its end: `connect()`, and its GPU
node-hours are read in that same read transaction: `pinned()`), so
`gpucost digest` beside a running daemon waits at most one such step (`lock_timeout_s`); within a
process, writes are serialised by a lock. `path=None` keeps the store
in memory (`gpucost analyze`'s throwaway store).
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from monitor.errors import ConfigError
from monitor.state.store import StateStoreError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AggregateStore", "aggregates_path", "registered"]

#: What a file store's reads and writes may hold before they spill to disk. Its reads are windows of
#: stored aggregates (a detection run's 45 days of costs, read in place by the detectors' engine, and
#: 14 of GPU node-hours): at bench scale 48 (7.4 M export rows) a detection run peaked at 1,041 MB
#: under 512 MB, 808 MB under 384 MB and 694 MB under 256 MB, where its GPU node-hours query (as it
#: was then) took 1.2, 1.8 and 2.4 s.
MEMORY_LIMIT = "384MB"

_LOCKED = re.compile(r"Could not set lock on file|Conflicting lock", re.IGNORECASE)


def aggregates_path(state_url: str, configured: str | None) -> Path | None:
    """Where the aggregate store lives: `configured` when set; else beside a SQLite state file
    (`aggregates.duckdb` in its directory); in memory beside an in-memory SQLite store. Beside
    PostgreSQL the config requires `configured` (`StateConfig`); the working directory is only a
    last resort for callers that bypass it.

    >>> str(aggregates_path("sqlite:///out/demo/state.sqlite", None))
    'out/demo/aggregates.duckdb'
    >>> str(aggregates_path("postgresql://gpucost@db/state", "/data/agg.duckdb"))
    '/data/agg.duckdb'
    """
    if configured:
        return None if configured == ":memory:" else Path(configured)
    if state_url.startswith("sqlite:///"):
        db = state_url.removeprefix("sqlite:///")
        return None if db == ":memory:" else Path(db).parent / "aggregates.duckdb"
    return Path("aggregates.duckdb")


class AggregateStore:
    """A DuckDB database for aggregates: `transaction()` to write, `read()` to read, `migrate()` per
    component as the state store does. Session time zone UTC: stored TIMESTAMPs are UTC."""

    #: A `pinned` view's connection (None: connections of the store's own).
    _pinned: tuple[duckdb.DuckDBPyConnection, threading.Lock] | None = None

    def __init__(self, path: str | Path | None = None, *, lock_timeout_s: float = 60.0):
        self.path = None if path in (None, ":memory:") else Path(path)
        self._lock_timeout = lock_timeout_s
        self._write = threading.RLock()
        self._local = threading.local()  # a `session()`'s connection, per thread
        self._migrated: set[tuple[str, int]] = set()
        self._memory: duckdb.DuckDBPyConnection | None = None
        if self.path is None:
            self._memory = self._configure(duckdb.connect(":memory:"))
        else:  # the file itself is created by the first migration: constructing the store does no I/O
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                in_the_way = isinstance(e, FileExistsError | NotADirectoryError)
                why = "a file is in the way" if in_the_way else e.strerror
                raise ConfigError(
                    f"aggregate store {self.path}: cannot create the directory {self.path.parent}"
                    f" ({why or e}); point state.aggregates_path (by default beside state.url's"
                    " file) at a writable directory"
                ) from None

    @property
    def name(self) -> str:
        return str(self.path) if self.path is not None else ":memory:"

    def _configure(self, conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET enable_progress_bar = false")
        # Stored aggregates have no order to keep: every reader sorts what it reads. Without it,
        # DuckDB inserts from every core: a first poll's 2.28 M aggregates (bench scale 48, 7.4 M
        # export rows) went in in 2.3 s instead of 5.7 s, into 73 MB instead of 83.
        conn.execute("SET preserve_insertion_order = false")
        if self.path is not None:
            # DuckDB's default is 80% of RAM; past `MEMORY_LIMIT` it spills beside the file
            # (`<file>.tmp`). The readers' ordered scan of a 45-day window (3.1 M aggregates at 7.4 M
            # export rows) held 4 GB in its sort without a limit, 1.4 GB at 1 GB.
            conn.execute("SET memory_limit = ?", [MEMORY_LIMIT])
        return conn

    def _open(self) -> duckdb.DuckDBPyConnection:
        """A connection to the file, waiting while another process holds it (see the module docstring)."""
        if self._memory is not None:
            # a cursor is a session of its own: it does not inherit the session's TimeZone (it
            # took the machine's, and a window's hours moved by its offset)
            return self._configure(self._memory.cursor())
        deadline = time.monotonic() + self._lock_timeout
        while True:
            try:
                return self._configure(duckdb.connect(str(self.path)))
            except duckdb.Error as e:
                if not _LOCKED.search(str(e)) or time.monotonic() >= deadline:
                    raise self._error(e) from e
                time.sleep(0.05)

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A connection of the caller's own, to close when done (a detection run's costs engine
        reads its window through one: `monitor.detectors.costs.Costs.over`). While it is open,
        another process waits for the file as it waits for any read."""
        if self._pinned is not None:
            raise RuntimeError(f"aggregate store {self.name}: a pinned view has one connection, its owner's")
        return self._open()

    def pinned(self, conn: duckdb.DuckDBPyConnection, lock: threading.Lock) -> AggregateStore:
        """This store, its reads run on `conn` under `lock`: a detection run's read transaction
        (`monitor.detectors.costs.Costs.snapshot`), so that what it reads after its costs (the GPU
        node-hours, read as far as the detectors read them) is of the same snapshot, however many
        billing polls commit meanwhile. Read-only: it cannot write, and `close()` leaves `conn` to its
        owner."""
        view = copy.copy(self)  # the same file, write lock and migrations done
        view._local = threading.local()
        view._pinned = (conn, lock)
        return view

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep one connection open for the `read()`s and `transaction()`s inside (this thread): a
        step of several statements opens the file once (an open costs milliseconds; an idle billing
        poll is a few statements)."""
        if self._pinned is not None or getattr(self._local, "conn", None) is not None:
            yield
            return
        self._local.conn = self._open()
        try:
            yield
        finally:
            conn, self._local.conn = self._local.conn, None
            conn.close()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store for a step of several transactions that no other step may interleave
        with (`monitor.utilization.mirror.sync`): this process's write lock, so its other threads
        wait to write, and one connection, so other processes wait for the file."""
        with self._write, self.session():
            yield

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._pinned is not None:
            conn, lock = self._pinned
            with lock:
                yield conn
            return
        shared = getattr(self._local, "conn", None)
        if shared is not None:
            yield shared
            return
        conn = self._open()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for reads (DuckDB reads a consistent snapshot per statement)."""
        with self._connection() as conn:
            try:
                yield conn
            except duckdb.Error as e:
                raise self._error(e) from e

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All-or-nothing: commits on success, rolls back on any exception (and re-raises it)."""
        if self._pinned is not None:
            raise RuntimeError(f"aggregate store {self.name}: a pinned view reads only")
        with self._write, self._connection() as conn:
            try:
                conn.execute("BEGIN TRANSACTION")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except duckdb.Error as e:
                raise self._error(e) from e

    def _error(self, e: duckdb.Error) -> StateStoreError:
        text = str(e).strip().splitlines()[0]
        if _LOCKED.search(text):
            text += f" (another process held it for over {self._lock_timeout:g} s)"
        elif "No space left" in text or "disk" in text.lower():
            text += " (free disk space on the volume that holds it)"
        return StateStoreError(f"aggregate store {self.name}: {text}; the step runs again next time")

    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply `migrations[i]` as version i+1 of `component` unless already applied (checked once
        per store object: only gpucost migrates its own file)."""
        if (component, len(migrations)) in self._migrated:
            return
        with self.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (component VARCHAR NOT NULL, version INTEGER NOT NULL,"
                " applied_at TIMESTAMP NOT NULL DEFAULT current_localtimestamp(), PRIMARY KEY (component, version))"
            )
            done = {
                r[0]
                for r in conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = ?", (component,)
                ).fetchall()
            }
            for version, script in enumerate(migrations, start=1):
                if version in done:
                    continue
                for stmt in (s.strip() for s in script.split(";")):
                    if stmt:
                        conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations (component, version) VALUES (?, ?)", (component, version)
                )
        self._migrated.add((component, len(migrations)))

    def close(self) -> None:
        if self._pinned is not None:  # the connection is its owner's
            return
        if self._memory is not None:
            self._memory.close()
            self._memory = None


@contextmanager
def registered(conn: Any, tables: Mapping[str, pa.Table | pa.RecordBatchReader]) -> Iterator[None]:
    """`tables` registered on the DuckDB connection `conn` by their names while the block runs, for
    SQL beside the stored tables to read; unregistered after, as the connection lives on."""
    for name, table in tables.items():
        conn.register(name, table)
    try:
        yield
    finally:
        for name in tables:
            conn.unregister(name)
