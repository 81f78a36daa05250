"""Migrations applied by several threads at once: the daemon's jobs start together and each
migrates the tables it uses (a first start failed `utilization_poll` with "use DROP VIEW to delete
view utilization_samples" when retention migrated the same component at the same moment)."""

from __future__ import annotations

import threading

from monitor.state.store import SQLiteStore

# Each version fails if applied twice, as the real ones do (CREATE TABLE, DROP TABLE of a view).
MIGRATIONS = ["CREATE TABLE t (x INTEGER)", "CREATE TABLE u (y INTEGER)", "CREATE VIEW v AS SELECT x FROM t"]


def test_concurrent_migrations_apply_each_version_once(tmp_path) -> None:
    for attempt in range(10):
        store = SQLiteStore(tmp_path / f"state{attempt}.sqlite")
        start, errors = threading.Barrier(6), []

        def migrate(store: SQLiteStore, start: threading.Barrier, errors: list[Exception]) -> None:
            start.wait()
            try:
                store.migrate("race", MIGRATIONS)
            except Exception as e:  # any failure is the defect
                errors.append(e)

        threads = [threading.Thread(target=migrate, args=(store, start, errors)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        with store.transaction() as conn:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations WHERE component = 'race'")]
        assert sorted(versions) == [1, 2, 3]
        store.close()


def test_exclusive_on_an_in_memory_store_is_one_holder_at_a_time() -> None:
    """No file to lock beside: a lock per store and name (one process by construction)."""
    store = SQLiteStore(":memory:")
    with store.exclusive("outbox", 0) as held, store.exclusive("outbox", 0.05) as second:
        assert held and not second
    with store.exclusive("outbox", 0) as after:
        assert after
