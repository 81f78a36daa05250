"""The state store in PostgreSQL, for users who run gpucost beside an existing database.

Same surface as `SQLiteStore` (`transaction()`, `migrate()`, `close()`), so components keep one
dialect: the connection handed out by `transaction()` translates their SQLite SQL on the fly
(`monitor.state.dialect`) and returns rows that read like `sqlite3.Row` (`row["col"]`, `row[0]`,
`tuple(row)`, `dict(row)`).

Concurrency mimics SQLite's single writer: every transaction starts by taking one transaction-level
advisory lock (per schema), so gpucost's transactions run one at a time, as they do under
`BEGIN IMMEDIATE`. Components rely on that (read the notification log, decide, write; read the
outbox, send, mark), and SERIALIZABLE would instead need a retry loop around each of them. So every
transaction is READ COMMITTED whatever the server's default: under REPEATABLE READ (a database's
or role's `default_transaction_isolation`) the snapshot is taken by the statement that waits for
the lock, and the second of two read-modify-write steps read the state from before the first.

A store that cannot be written (the lock held past `lock_timeout_s`, the server gone mid-step, its
disk full) raises `StateStoreError` naming the store, as SQLite's does: the transaction is rolled
back and the step runs again next time. A session idle inside a transaction for
`idle_in_transaction_s` is ended by the server, so a holder that stopped answering without closing
its connection (its node vanished, SIGSTOP) frees the lock then, not when TCP keepalive gives up.

Needs psycopg 3 (`pip install "gpucost[postgres]"`); imported lazily so SQLite users do not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from monitor.errors import ConfigError, first_line
from monitor.state.dialect import UntranslatableSQL
from monitor.state.pg_conn import PgConnection, PgCursor, Row
from monitor.state.store import StateStoreError, redact_url, refuse_newer

__all__ = ["PgConnection", "PgCursor", "PostgresStore", "Row", "UntranslatableSQL"]

#: First half of the advisory lock key ("gpuc"); the second is a hash of the current schema.
LOCK_CLASS = 0x67707563
#: First half of the key of `exclusive`'s named locks ("gpud"); the second hashes schema and name.
NAMED_LOCK_CLASS = 0x67707564
#: How often `exclusive` asks again for a named lock another session holds.
_NAMED_POLL_S = 0.1
#: One round trip: open the transaction and wait for the store lock (see the module docstring).
_BEGIN = (
    "BEGIN ISOLATION LEVEL READ COMMITTED;"
    f" SELECT pg_advisory_xact_lock({LOCK_CLASS}, hashtext(current_schema()))"
)
#: SQLSTATEs with a fix to name: lock_not_available (lock_timeout ran out), disk_full.
_LOCK_TIMEOUT, _DISK_FULL = "55P03", "53100"
_MIGRATIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " component TEXT NOT NULL, version INTEGER NOT NULL,"
    " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),"
    " PRIMARY KEY (component, version))"
)


class PostgresStore:
    """PostgreSQL behind the `StateStore` surface; one connection per thread, opened on first use.

    `url` is a libpq URL (`postgresql://user:pass@host:port/db?options=-csearch_path%3Dgpucost`);
    tables live in the connection's current schema. Connections are in autocommit mode outside
    `transaction()`, use UTC, wait at most `lock_timeout_s` for the store lock, are ended by the
    server when idle inside a transaction for `idle_in_transaction_s` (minutes: a step computing
    between its statements keeps its session), and do not prepare statements server-side (a
    migration may change a table under a prepared `SELECT *`).
    """

    def __init__(
        self,
        url: str,
        *,
        lock_timeout_s: float = 30,
        connect_timeout_s: int = 10,
        idle_in_transaction_s: float = 300,
    ):
        try:
            import psycopg
        except ImportError:
            raise ConfigError(
                'state.url: a PostgreSQL store needs psycopg; install gpucost with the "postgres" extra'
                ' (pip install "gpucost[postgres]")'
            ) from None
        self._psycopg = psycopg
        self.url = url
        self._lock_timeout_ms = int(lock_timeout_s * 1000)
        self._idle_in_transaction_ms = int(idle_in_transaction_s * 1000)
        self._connect_timeout_s = connect_timeout_s
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock_sessions: list[Any] = []  # `exclusive`'s idle sessions, holding no lock
        self._lock = threading.Lock()
        self.sql_cache: dict[tuple[str, bool, bool], tuple[str, bool]] = {}
        self.catalog_cache: dict[tuple[str, str], Any] = {}
        self._migrated: dict[str, int] = {}
        try:
            with self.transaction() as conn:
                conn.execute(_MIGRATIONS_DDL)
        except psycopg.Error as e:  # the schema: missing, or not the user's to create tables in
            error = self._schema_error(e)
            self.close()
            raise error from None
        except BaseException:  # locked or gone (StateStoreError): the URL is fine, the step runs again
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.url)!r})"

    def _connect(self) -> Any:
        psycopg = self._psycopg
        try:
            raw = psycopg.connect(
                self.url,
                autocommit=True,
                prepare_threshold=None,
                connect_timeout=self._connect_timeout_s,
                application_name="gpucost",
            )
        except psycopg.Error as e:
            raise ConfigError(
                f"state.url: cannot connect to {redact_url(self.url)}: {first_line(e)}"
            ) from None
        raw.execute(
            "SELECT set_config('TimeZone', 'UTC', false), set_config('lock_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{self._lock_timeout_ms}ms", f"{self._idle_in_transaction_ms}ms"),
        )
        return raw

    def _schema_error(self, e: Any) -> ConfigError:
        """Why gpucost's first table could not be created in the URL's schema, with the fix."""
        where, first = redact_url(self.url), first_line(e)
        try:
            path, user, schema = (
                self._raw()
                .execute("SELECT current_setting('search_path'), current_user, current_schema()")
                .fetchone()
            )
        except self._psycopg.Error:
            return ConfigError(f"state.url: {where}: cannot create gpucost's tables ({first})")
        if e.sqlstate == "3F000":  # invalid_schema_name: no schema of the search_path exists
            name = path.split(",")[0].strip().replace('"$user"', user)
            return ConfigError(
                f"state.url: {where}: no schema to create gpucost's tables in (search_path: {path});"
                f" create it (CREATE SCHEMA {name}) or name an existing one in the URL"
                " (options=-csearch_path%3DSCHEMA)"
            )
        if e.sqlstate == "42501":  # insufficient_privilege: PostgreSQL 15 no longer grants CREATE on public
            return ConfigError(
                f"state.url: {where}: {first}; grant the user CREATE on it (GRANT CREATE ON SCHEMA"
                f" {schema} TO {user}) or name a schema it may create tables in"
            )
        return ConfigError(f"state.url: {where}: cannot create gpucost's tables ({first})")

    def _error(self, e: Any) -> StateStoreError:
        """`e` (a psycopg OperationalError) naming this store, as `SQLiteStore._error` does."""
        text = first_line(e)
        if e.sqlstate == _LOCK_TIMEOUT:
            text += f" (another process held the store lock for over {self._lock_timeout_ms / 1000:g} s)"
        elif e.sqlstate == _DISK_FULL:
            text += " (free disk space on the database server)"
        return StateStoreError(f"state store {redact_url(self.url)}: {text}; the step runs again next time")

    @contextmanager
    def exclusive(self, name: str, wait_s: float) -> Iterator[bool]:
        """`SQLiteStore.exclusive` for every process on this schema: a session-level advisory lock,
        on a connection of its own held for the work. The server releases it when that session ends,
        so a crashed process (its connection closed) never leaves it held.

        The connection is unlocked and kept for the next caller (a delivery pass every few seconds
        opened a session each time); a nested caller in this process takes another one, so it is
        refused as another process would be (a session's advisory locks are re-entrant)."""
        raw = self._lock_session()
        got = False
        try:
            deadline = time.monotonic() + max(wait_s, 0)
            while True:
                got = raw.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(current_schema() || '/' || %s))",
                    (NAMED_LOCK_CLASS, name),
                ).fetchone()[0]
                if got or time.monotonic() >= deadline:
                    break
                time.sleep(_NAMED_POLL_S)
            yield bool(got)
        finally:
            self._release(raw, name if got else None)

    def _lock_session(self) -> Any:
        with self._lock:
            while self._lock_sessions:
                raw = self._lock_sessions.pop()
                if not (raw.closed or raw.broken):
                    return raw
        return self._connect()

    def _release(self, raw: Any, held: str | None) -> None:
        """Unlock `held` and keep the session, or close it: ending the session releases the lock."""
        try:
            kept = (
                held is None
                or raw.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(current_schema() || '/' || %s))",
                    (NAMED_LOCK_CLASS, held),
                ).fetchone()[0]
            )
        except self._psycopg.Error:  # the server went away, and the lock with the session
            kept = False
        if not kept:
            raw.close()
            return
        with self._lock:
            self._lock_sessions.append(raw)

    def _raw(self) -> Any:
        raw = getattr(self._local, "raw", None)
        if raw is not None and (raw.closed or raw.broken):  # the server went away: reconnect
            self._local.raw = raw = None
        if raw is None:
            raw = self._connect()
            self._local.raw = raw
            with self._lock:
                self._all.append(raw)
        return raw

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        """All-or-nothing, one at a time (see the module docstring); nested use joins the outer one.

        A statement that failed aborts a PostgreSQL transaction (not so in SQLite): if the block
        swallowed such an error, committing raises instead of silently rolling back. The server's
        operational failures (lock timeout, connection lost, disk full) are `StateStoreError`s.
        """
        if getattr(self._local, "depth", 0):
            yield PgConnection(self._local.raw, self)
            return
        operational = self._psycopg.OperationalError
        try:
            raw = self._begin()
        except operational as e:
            raise self._error(e) from e
        self._local.depth = 1
        try:
            yield PgConnection(raw, self)
        except BaseException as e:
            self._local.depth = 0
            self._rollback(raw)
            if isinstance(e, operational):
                raise self._error(e) from e
            raise
        self._local.depth = 0
        if raw.info.transaction_status == self._psycopg.pq.TransactionStatus.INERROR:
            self._rollback(raw)
            raise self._psycopg.errors.InFailedSqlTransaction(
                "a statement failed inside transaction(); the transaction was rolled back"
            )
        try:
            raw.execute("COMMIT")
        except operational as e:
            self._rollback(raw)
            raise self._error(e) from e

    def _begin(self) -> Any:
        """BEGIN and take the store lock, on a new connection if this thread's one had died."""
        for attempt in (1, 2):
            raw = self._raw()
            try:
                raw.execute(_BEGIN)
                return raw
            except self._psycopg.OperationalError:
                if attempt == 1 and raw.broken:  # e.g. the server restarted: nothing ran yet, retry
                    continue
                self._rollback(raw)
                raise
        raise AssertionError("unreachable")

    @staticmethod
    def _rollback(raw: Any) -> None:
        if raw.broken or raw.closed:
            return
        try:
            raw.execute("ROLLBACK")
        except Exception:  # the caller's exception is the one worth seeing
            raw.close()

    def migrate(self, component: str, migrations: Sequence[str]) -> None:
        """Apply `migrations[i]` as version i+1 of `component` unless already applied.

        Each version is checked again inside its own (locked) transaction, so two processes
        starting together apply it once; DDL is transactional, so a failed script leaves nothing.
        """
        if self._migrated.get(component, 0) >= len(migrations):
            return
        with self.transaction() as conn:
            done = {
                r[0]
                for r in conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = ?", (component,)
                )
            }
        refuse_newer(redact_url(self.url), component, done, len(migrations))
        for version, script in enumerate(migrations, start=1):
            if version in done:
                continue
            with self.transaction() as conn:
                again = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE component = ? AND version = ?",
                    (component, version),
                ).fetchone()
                if again is None:
                    for stmt in (s.strip() for s in script.split(";")):
                        if stmt:
                            conn.execute(stmt)
                    conn.execute(
                        "INSERT INTO schema_migrations (component, version) VALUES (?, ?)",
                        (component, version),
                    )
            self.catalog_cache.clear()
            self.sql_cache.clear()
        self._migrated[component] = len(migrations)

    def close(self) -> None:
        with self._lock:
            for raw in [*self._all, *self._lock_sessions]:
                raw.close()
            self._all.clear()
            self._lock_sessions.clear()
        self._local = threading.local()
