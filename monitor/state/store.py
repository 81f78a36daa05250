"""The state store: one SQLite file (by default) shared by every component.

`open_store(url)` picks the backend: `sqlite:///PATH` (this module) or `postgresql://...`
(`monitor.state.postgres.PostgresStore`, which speaks the same SQLite dialect to components and
translates it). Components write SQLite SQL against the `StateConnection` surface below.

Each component (billing, utilization, findings, alerts, ...) owns its tables and declares its own
ordered list of migrations; `migrate(component, migrations)` applies the ones not yet recorded in
`schema_migrations`, each in its own transaction. Components never touch each other's tables, so
they evolve independently, and a `kill -9` at any moment leaves every table consistent because all
writes happen inside `transaction()`.

A store that cannot be written (another process holds the write lock past `busy_timeout_s`, the
disk is full: SQLITE_BUSY / SQLITE_FULL, https://www.sqlite.org/rescode.html) raises
`StateStoreError`, which names the file: the transaction is rolled back, so the step that failed
left nothing behind (no watermark moved, no alert half-queued) and simply runs again next time.
A `state.url` that cannot be opened at all (a directory, a file that is not SQLite, a directory
that cannot be created or written) is a `ConfigError` naming it, the path and the fix.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock, Timeout

from monitor.errors import ConfigError, GpucostError
from monitor.paths import file_in_the_way

__all__ = [
    "SQLiteStore",
    "StateConnection",
    "StateStore",
    "StateStoreError",
    "first_start",
    "last_detection",
    "open_store",
    "record_detection",
    "recorded_first_start",
    "redact_url",
    "refuse_newer",
]

_POSTGRES = ("postgresql://", "postgres://")


class StateConnection(Protocol):
    """What `transaction()` yields: the part of `sqlite3.Connection` components use. Cursors
    offer `fetchone` / `fetchall` / iteration / `rowcount` / `lastrowid`; rows read by index
    and by column name."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, seq: Any, /) -> Any: ...

    def cursor(self) -> Any: ...


class StateStore(Protocol):
    def migrate(self, component: str, migrations: Sequence[str]) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def exclusive(self, name: str, wait_s: float) -> AbstractContextManager[bool]: ...

    def close(self) -> None: ...


class StateStoreError(GpucostError, sqlite3.OperationalError):
    """The state store could not be read or written (locked, full, I/O error); names the store.
    Still a `sqlite3.OperationalError`, so code that caught that keeps working."""

    source = "state_store"


class SQLiteStore:
    """SQLite in WAL mode; one connection per thread, writes serialised by `BEGIN IMMEDIATE`.

    `busy_timeout_s`: how long a write waits for another connection's lock before failing;
    `pragmas`: extra `PRAGMA name = value` run on every new connection (e.g. `max_page_count`, a
    hard cap on the file's size, https://www.sqlite.org/pragma.html#pragma_max_page_count).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        pragmas: Mapping[str, int | str] | None = None,
    ):
        self.path = str(path)
        self._busy_timeout = busy_timeout_s
        self._pragmas = dict(pragmas or {})
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._named: dict[str, threading.Lock] = {}
        try:
            if self.path != ":memory:":
                _make_parent(Path(self.path))
            with self.transaction() as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " component TEXT NOT NULL, version INTEGER NOT NULL,"
                    " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),"
                    " PRIMARY KEY (component, version))"
                )
        except (OSError, sqlite3.DatabaseError) as e:
            self.close()
            if isinstance(e, StateStoreError) and not _cannot_open(e):
                raise  # locked or full: the step runs again, the path is fine
            raise _open_error(self.path, e) from None

    @contextmanager
    def exclusive(self, name: str, wait_s: float) -> Iterator[bool]:
        """Work that must not run twice at once across every process and thread on this store
        (sending the outbox: two deliverers reading the same pending row would both post it), held
        outside any transaction, for as long as the work takes. Yields False when another holder
        kept it for `wait_s`.

        An OS file lock beside the database (`<file>.<name>.lock`, `filelock`): the OS releases it
        when its process dies, so a crash never leaves it held and the restarted daemon does not wait.
        Each call opens its own lock, so threads of one process exclude each other too.
        """
        if self.path == ":memory:":  # one process by construction: a lock per store and name
            with self._lock:
                lock = self._named.setdefault(name, threading.Lock())
            got = lock.acquire(timeout=wait_s) if wait_s > 0 else lock.acquire(blocking=False)
            try:
                yield got
            finally:
                if got:
                    lock.release()
            return
        file_lock = FileLock(f"{self.path}.{name}.lock", timeout=max(wait_s, 0))
        try:
            file_lock.acquire()
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            file_lock.release()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            for name, value in self._pragmas.items():
                if not name.isidentifier() or not str(value).isalnum():
                    raise ValueError(f"bad pragma {name} = {value}")
                conn.execute(f"PRAGMA {name} = {value}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing: commits on success, rolls back on any exception (and re-raises it)."""
        conn = self._conn()
        if conn.in_transaction:  # nested use joins the outer transaction
            yield conn
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise self._error(e) from e
        try:
            yield conn
        except BaseException as e:
            if conn.in_transaction:  # SQLite may have rolled back already (SQLITE_FULL does)
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError) and not isinstance(e, StateStoreError):
                raise self._error(e) from e
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise self._error(e) from e

    def _error(self, e: sqlite3.OperationalError) -> StateStoreError:
        """`e` naming this store, with what to do about the two failures an operator can fix."""
        text = str(e)
        if "locked" in text or "busy" in text:
            text += f" (another process held the write lock for over {self._busy_timeout:g} s)"
        elif "full" in text:
            text += " (free disk space on the volume that holds it)"
        return StateStoreError(f"state store {self.path}: {text}; the step runs again next time")

    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply `migrations[i]` as version i+1 of `component` unless already applied; refuse a
        store a newer release migrated further (`refuse_newer`)."""
        with self.transaction() as conn:
            done = {
                r[0]
                for r in conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = ?", (component,)
                )
            }
        refuse_newer(str(self.path), component, done, len(migrations))
        for version, script in enumerate(migrations, start=1):
            if version in done:
                continue
            with self.transaction() as conn:  # BEGIN IMMEDIATE: one writer at a time
                # Another thread (the daemon's jobs start together) may have applied it since the
                # read above: applying it twice fails (e.g. DROP TABLE on what is now a view).
                if conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE component = ? AND version = ?", (component, version)
                ).fetchone():
                    continue
                for stmt in (s.strip() for s in script.split(";")):
                    if stmt:
                        conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations (component, version) VALUES (?, ?)",
                    (component, version),
                )

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


_OPEN_FAILURES = ("unable to open", "not a database", "readonly database", "disk i/o error")


def _cannot_open(e: BaseException) -> bool:
    return any(text in str(e).lower() for text in _OPEN_FAILURES)


def unusable_sqlite_path(path: Path) -> None:
    """Raise `ConfigError` (naming `state.url`, the path and the fix) if `path` cannot be a SQLite
    file: it is a directory, or one of its parents is a file. Never creates anything."""
    if path.is_dir():
        raise ConfigError(
            f"state.url: {path} is a directory, not a SQLite file; name a file in it, e.g."
            f' state.url = "sqlite:///{path / "state.sqlite"}"'
        )
    blocker = file_in_the_way(path.parent)
    if blocker is not None:
        raise ConfigError(
            f"state.url: {path}: {blocker} is a file, not a directory; point state.url at a path"
            " under a directory (it is created on first run)"
        )


def _make_parent(path: Path) -> None:
    """Create the directory the SQLite file `path` goes in, or say why it cannot be."""
    unusable_sqlite_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"state.url: {path}: cannot create the directory {path.parent} ({e.strerror or e}); create"
            " it writable by the user gpucost runs as, or point state.url at a writable path"
        ) from None


def _open_error(path: str, e: BaseException) -> ConfigError:
    """Why the SQLite file `path` could not be opened, as a `ConfigError` naming `state.url`."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).split("; ")[0]
    reason = reason.removeprefix(f"state store {path}: ")
    if "not a database" in reason:
        return ConfigError(
            f"state.url: {path} is not a SQLite database ({reason}); point state.url at gpucost's"
            " state file, or at a new path (created on first run)"
        )
    if not (isinstance(e, OSError) or _cannot_open(e)):
        return ConfigError(
            f"state.url: cannot open {path} ({reason}); point state.url at gpucost's state file, or at"
            " a new path (created on first run)"
        )
    return ConfigError(
        f"state.url: cannot open {path} ({reason}); make {Path(path).parent} writable by the user"
        " gpucost runs as, or point state.url at a writable path"
    )


def refuse_newer(store: str, component: str, done: Iterable[int], known: int) -> None:
    """Raise if a newer gpucost migrated `component` past the `known` versions. Its tables may keep
    figures derived from others (`utilization_hours` from the points): a release that does not know
    them would write the points and leave the derived figures wrong, also after upgrading again. So
    a rollback runs on a backup taken before the upgrade, not on the upgraded store."""
    newest = max(done, default=0)
    if newest > known:
        raise StateStoreError(
            f"state store {store}: its {component} tables are at version {newest}, written by a newer"
            f" gpucost (this one knows {known}); run that release or a newer one, or restore a backup"
            " taken before the upgrade"
        )


_META_MIGRATIONS = ["CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"]


def first_start(store: StateStore, now: datetime) -> datetime:
    """When gpucost first ran against this store: the first caller's `now`, recorded once (the
    daemon at start, else the first alert pipeline run), then only read. What ended before it is
    history, summarised once rather than alerted as news (`alerts.pipeline`)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    store.migrate("state", _META_MIGRATIONS)
    with store.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO state_meta (key, value) VALUES ('first_start', ?)",
            (now.astimezone(UTC).isoformat(),),
        )
        row = conn.execute("SELECT value FROM state_meta WHERE key = 'first_start'").fetchone()
    return datetime.fromisoformat(row[0])


def _recorded(store: StateStore, key: str) -> datetime | None:
    """The instant recorded under `key` in `state_meta`, if any (read only)."""
    store.migrate("state", _META_MIGRATIONS)
    with store.transaction() as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else datetime.fromisoformat(row[0])


def recorded_first_start(store: StateStore) -> datetime | None:
    """The first start, if one was recorded (read only)."""
    return _recorded(store, "first_start")


def _record(store: StateStore, key: str, when: datetime) -> None:
    """Record `when` under `key` in `state_meta`, replacing what was there."""
    store.migrate("state", _META_MIGRATIONS)
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO state_meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, when.astimezone(UTC).isoformat()),
        )


def record_detection(store: StateStore, now: datetime) -> None:
    """That a detection ran (its findings, none included, are what the store holds)."""
    _record(store, "last_detection", now)


def export_seen(store: StateStore, latest: datetime | None) -> datetime | None:
    """The newest load of the billing export any poll saw: `latest` (the aggregate store's, recorded
    when newer) or, once retention has pruned the partitions it was read from, the one recorded.
    None: no poll ever saw a load (`alerts.export_stale` tells that apart from a stopped export)."""
    seen = _recorded(store, "export_seen")
    if latest is not None and (seen is None or latest > seen):
        _record(store, "export_seen", latest)
        return latest
    return seen


def last_detection(store: StateStore) -> datetime | None:
    """When a detection last ran on this store; None before any: no findings then means none was
    looked for (`gpucost digest` before the daemon's first detection), not none found."""
    return _recorded(store, "last_detection")


def open_store(url: str) -> StateStore:
    """Open the store named by `state.url`: `sqlite:///relative/path`, `sqlite:////abs/path`, or a
    PostgreSQL URL (`postgresql://` / `postgres://`, needs the `postgres` extra)."""
    if url.startswith("sqlite:///"):
        return SQLiteStore(url.removeprefix("sqlite:///"))
    if url.startswith(_POSTGRES):
        from monitor.state.postgres import PostgresStore

        return PostgresStore(url)
    raise ConfigError(
        f'state.url: "{url.split("://")[0]}://" stores are not supported; use "sqlite:///PATH"'
        ' or "postgresql://USER@HOST:PORT/DB"'
    )


def redact_url(url: str) -> str:
    """`state.url` fit for messages and logs: a PostgreSQL URL loses its password.

    >>> redact_url("postgresql://gpucost:s3cret@db:5432/state")
    'postgresql://gpucost:***@db:5432/state'
    """
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
