"""The PostgreSQL state store as a second process, an unusual server and a stuck holder meet it.

Found by running gpucost against a real server (two daemons on one schema; a `psql` session holding
the store lock; databases whose default isolation is not PostgreSQL's own; schemas the URL's user
cannot create in): the store must keep SQLite's single-writer meaning, and fail in one line naming
`state.url` where SQLite would. Each test starts from a schema of its own on the session's server
(`tests/test_state_postgres.py`); without PostgreSQL they skip as those do.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from monitor.daemon import failing_source
from monitor.errors import ConfigError
from monitor.state.postgres import PostgresStore
from monitor.state.store import StateStoreError, open_store
from tests.test_state_postgres import pg_server, pg_url  # noqa: F401 (fixtures)


def _with_option(url: str, option: str) -> str:
    """`url` whose session also runs `-c option` (libpq's `options`, as a DBA's role setting would)."""
    return url + "%20-c" + option.replace(" ", "%5C%20").replace("=", "%3D")


def _holder(url: str, *extra: str) -> subprocess.Popen[str]:
    """Another gpucost process inside a transaction (holding the store lock) until killed."""
    code = (
        "import sys, time\n"
        "from monitor.state.postgres import PostgresStore\n"
        f"s = PostgresStore(sys.argv[1]{''.join(', ' + e for e in extra)})\n"
        "with s.transaction() as conn:\n"
        "    conn.execute('SELECT 1')\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait(10)


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_a_stricter_default_isolation_reads_what_the_lock_holder_committed(pg_url: str, level: str) -> None:  # noqa: F811
    """A database or role whose default_transaction_isolation is stricter (a DBA's choice): the
    transaction's snapshot was taken by the statement that waited for the store lock, so the
    second of two read-modify-write blocks read the state from before the first committed. Two
    increments of 0 gave 1 and a SerializationFailure; read committed, as SQLite's single writer
    reads, gives 2."""
    url = _with_option(pg_url, f"default_transaction_isolation={level}")
    a, b = PostgresStore(url), PostgresStore(url)
    try:
        a.migrate("t", ["CREATE TABLE t (n INTEGER NOT NULL)"])
        with a.transaction() as conn:
            assert conn.execute("SHOW default_transaction_isolation").fetchone()[0] == level
            conn.execute("INSERT INTO t VALUES (0)")
        inside, errors = threading.Event(), []

        def bump(store: Any, hold: float) -> None:
            try:
                with store.transaction() as conn:
                    inside.set()
                    (n,) = conn.execute("SELECT n FROM t").fetchone()
                    time.sleep(hold)
                    conn.execute("UPDATE t SET n = ?", (n + 1,))
            except Exception as e:
                errors.append(e)

        first = threading.Thread(target=bump, args=(a, 0.3))
        first.start()
        assert inside.wait(60)
        bump(b, 0)  # waits for the store lock, then must read the committed 1
        first.join()
        assert errors == []
        with a.transaction() as conn:
            assert conn.execute("SELECT n FROM t").fetchone()[0] == 2
    finally:
        a.close()
        b.close()


def test_a_lock_held_past_lock_timeout_is_a_state_store_error_naming_the_store(pg_url: str) -> None:  # noqa: F811
    """Another process holding the store lock (a `psql` session, a stuck daemon) past the wait: a
    traceback ending in `psycopg.errors.LockNotAvailable: canceling statement due to lock timeout`
    from `gpucost outbox`, and a daemon job failure blamed on "gpucost". SQLite says which store,
    why and that the step runs again; so does PostgreSQL now, as a `StateStoreError`."""
    url = pg_url.replace("gpucost@", "gpucost:s3cret@")
    other = PostgresStore(url)
    inside, done = threading.Event(), threading.Event()

    def hold() -> None:
        with other.transaction():
            inside.set()
            done.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(60)
        with pytest.raises(StateStoreError) as info:
            PostgresStore(url, lock_timeout_s=0.2)  # its first transaction creates schema_migrations
    finally:
        done.set()
        holder.join()
        other.close()
    text = str(info.value)
    assert text.startswith("state store postgresql://gpucost:***@127.0.0.1:"), text
    assert text.endswith(
        ": canceling statement due to lock timeout (another process held the store lock for over"
        " 0.2 s); the step runs again next time"
    ), text
    assert "s3cret" not in text
    assert failing_source(info.value) == "state_store"


def test_a_killed_lock_holder_frees_the_store_lock(pg_url: str) -> None:  # noqa: F811
    """SIGKILL inside a transaction (a crash mid-step): the server ends its session and with it the
    transaction's lock, so the next process writes at once, not after lock_timeout."""
    store = PostgresStore(pg_url, lock_timeout_s=0.2)
    holder = _holder(pg_url)
    try:
        with pytest.raises(StateStoreError), store.transaction():
            pass
        holder.kill()
        holder.wait(10)
        with store.transaction() as conn:  # the server noticed the closed socket at once
            assert conn.execute("SELECT 1").fetchone()[0] == 1
    finally:
        _stop(holder)
        store.close()


def test_a_holder_that_stopped_answering_mid_transaction_loses_the_lock(pg_url: str) -> None:  # noqa: F811
    """A holder that stopped without closing its connection (a node that vanished, SIGSTOP): the
    server kept its session idle in the transaction, holding the store lock, until TCP keepalive
    gave up (Linux: 2 h 11 min), and every other gpucost transaction failed meanwhile. The store's
    sessions end an idle transaction after `idle_in_transaction_s`, so the lock is freed then."""
    store = PostgresStore(pg_url, lock_timeout_s=5)
    holder = _holder(pg_url, "idle_in_transaction_s=0.3")
    try:
        holder.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        with store.transaction() as conn:
            assert conn.execute("SELECT 1").fetchone()[0] == 1
        assert time.monotonic() - began < 3
    finally:
        _stop(holder)
        store.close()


def test_the_default_idle_transaction_limit_leaves_room_for_slow_steps(pg_url: str) -> None:  # noqa: F811
    """Minutes, not seconds: a step computing between its statements must not lose its session."""
    store = PostgresStore(pg_url)
    try:
        with store.transaction() as conn:
            assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "5min"
    finally:
        store.close()


def test_a_schema_that_does_not_exist_is_a_config_error(pg_url: str) -> None:  # noqa: F811
    """A search_path naming no existing schema (a typo, a schema not created yet): PostgreSQL has no
    schema to create the tables in, and `gpucost outbox` ended in a psycopg traceback."""
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    url = pg_url.rsplit("%3D", 1)[0] + f"%3D{missing}"
    with pytest.raises(ConfigError) as info:
        open_store(url)
    assert str(info.value) == (
        f"state.url: {url}: no schema to create gpucost's tables in (search_path: {missing}); create it"
        f" (CREATE SCHEMA {missing}) or name an existing one in the URL (options=-csearch_path%3DSCHEMA)"
    )


def test_a_schema_the_user_may_not_create_in_is_a_config_error(pg_server: Any) -> None:  # noqa: F811
    """PostgreSQL 15 and later no longer let every user create tables in `public`: a gpucost user
    that is not the schema's owner failed with a traceback (InsufficientPrivilege)."""
    import psycopg

    role, schema = f"r_{uuid.uuid4().hex[:8]}", f"s_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    url = pg_server.url(schema).replace(f"{pg_server.user}@", f"{role}@")
    with pytest.raises(ConfigError) as info:
        open_store(url)
    assert str(info.value) == (
        f"state.url: {url}: permission denied for schema {schema}; grant the user CREATE on it"
        f" (GRANT CREATE ON SCHEMA {schema} TO {role}) or name a schema it may create tables in"
    )
