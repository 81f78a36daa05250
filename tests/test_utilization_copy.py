"""The aggregate store's copy of the utilization hours (`monitor.utilization.mirror`): what the GPU
join reads from it is what it read from the state store, after any writes, backfills and retention;
a sync copies only the hours that changed; a copy it cannot trust is made again whole."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.gpus import util_tables
from monitor.state.analytics import AggregateStore
from monitor.state.retention import prune
from monitor.state.store import SQLiteStore
from monitor.utilization import load_util_hours, migrate, mirror, replace_window
from monitor.utilization.mirror import join_tables, sync
from tests.test_utilization_hourly import _SAMPLE, M5, T0, H, by_preset, sample

NODE = "gke-c1-pool-1a2b3c4d-x9k2"


def put(state, samples, *, preset: str = "gce_gpu_agent", start=T0, end=T0 + 3 * H) -> None:
    replace_window(state, "p1", preset, start, end, samples, now=end)


def same(state, aggregates, start=T0 - H, end=T0 + 4 * H) -> None:
    """The join's tables and the hours from the copy are those from the state store, row for row."""
    sync(state, aggregates)
    hours = load_util_hours(state, start, end)
    want, got = util_tables(hours), join_tables(state, aggregates, start, end)
    assert got.keys() == want.keys()
    for name, table in want.items():
        assert got[name].schema == table.schema, name
        assert got[name].to_pylist() == table.to_pylist(), name
    copied = mirror.util_hours(state, aggregates, start, end)
    assert copied.columns == hours.columns
    assert {n: list(map(type, c)) for n, c in copied.columns.items()} == {
        n: list(map(type, c)) for n, c in hours.columns.items()
    }


def test_gpus_of_one_series_and_of_several_read_as_from_the_state_store(stores) -> None:
    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 80.0) for i in range(24)])
    put(state, [sample("1", T0 + i * M5, 10.0, signal="sm_active") for i in range(6)], preset="dcgm")
    put(state, [sample("2", T0 + i * M5, 3.0, gpu=g) for i in range(30) for g in "01"])
    put(state, [sample("", T0 + i * M5, 3.0, node=NODE, signal="node_duty_cycle") for i in range(24)]
        + [sample("", T0 + i * M5, 2.0, node=NODE, signal="container_duty_cycle") for i in range(12)],
        preset="gke")  # fmt: skip
    put(state, [sample("", T0 + i * M5, 7.0, node=NODE + "z", signal="container_duty_cycle") for i in range(12)],
        preset="gke2")  # fmt: skip
    same(state, aggregates)
    same(state, aggregates, T0 + H, T0 + 2 * H)


def test_a_sync_copies_the_hours_that_changed_and_nothing_when_none_did(stores) -> None:
    state, aggregates = stores
    put(state, [sample(h, T0 + i * M5, 50.0) for h in "12" for i in range(36)])  # 3 hours, 2 GPUs
    assert sync(state, aggregates) == 6
    assert sync(state, aggregates) == 0
    put(state, [sample(h, T0 + 2 * H + i * M5, 5.0) for h in "12" for i in range(12)], start=T0 + 2 * H)
    assert sync(state, aggregates) == 2  # the rewritten hour, of both GPUs: nothing older
    same(state, aggregates)


def test_a_copy_of_another_state_store_is_made_again_whole(stores, tmp_path) -> None:
    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 50.0) for i in range(36)])
    assert sync(state, aggregates) == 3
    other = SQLiteStore(tmp_path / "other.sqlite")  # a new state store beside the old copy
    try:
        migrate(other)
        put(other, [sample("9", T0 + i * M5, 20.0) for i in range(12)])
        assert sync(other, aggregates) == 1
        same(other, aggregates)
    finally:
        other.close()


def test_a_copy_further_behind_than_the_changes_kept_is_made_again_whole(stores, monkeypatch) -> None:
    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 50.0) for i in range(36)])
    sync(state, aggregates)
    monkeypatch.setattr("monitor.utilization.state.KEPT_CHANGES", 1)
    with state.transaction() as conn:  # the changes the copy has not read are forgotten
        conn.execute("DELETE FROM utilization_changes WHERE seq > 0")
        for n in range(3):
            conn.execute("INSERT INTO utilization_changes (lo, hi) VALUES (?, ?)", (n, n))
        conn.execute(
            "DELETE FROM utilization_changes WHERE seq > 0 AND seq < (SELECT MAX(seq) FROM utilization_changes)"
        )
    assert sync(state, aggregates) == 3


def test_hours_retention_deleted_leave_the_copy(stores) -> None:
    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 50.0) for i in range(36)])
    sync(state, aggregates)
    prune(state, T0 + H + 30 * timedelta(minutes=1))  # the first hour gone, the second cut
    same(state, aggregates)
    with aggregates.read() as conn:
        assert conn.execute("SELECT min(hour) FROM util_hours").fetchone()[0] == int((T0 + H).timestamp())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_SAMPLE, max_size=30), min_size=1, max_size=3), st.integers(0, 2), st.integers(1, 3))
def test_the_copy_reads_as_the_state_store_after_any_writes(tmp_path_factory, rounds, lo, span) -> None:
    """Rounds of writes of any mix of hosts, GPUs, signals and presets, each synced: the same
    tables, row for row, in any window of whole hours."""
    path = tmp_path_factory.mktemp("u")
    state, aggregates = SQLiteStore(path / "state.sqlite"), AggregateStore()  # in memory: faster
    try:
        migrate(state)
        for drawn in rounds:
            for preset, samples in by_preset(drawn).items():
                first = min(s.start for s in samples).replace(minute=0)
                put(state, samples, preset=preset, start=first, end=T0 + 3 * H)
            same(state, aggregates, T0 + lo * H, T0 + (lo + span) * H)
    finally:
        state.close()
        aggregates.close()


def test_the_copy_is_a_cache_of_its_own_component(stores) -> None:
    """Its tables are migrated as the aggregate store's `utilization_copy` component."""
    state, aggregates = stores
    sync(state, aggregates)
    with aggregates.read() as conn:
        done = conn.execute("SELECT version FROM schema_migrations WHERE component = ?", (mirror.COMPONENT,))
        assert [r[0] for r in done.fetchall()] == [1]


def test_a_detection_run_reads_its_window_from_a_current_copy(stores) -> None:
    """`assemble_inputs` for the daemon (`defer=False`) syncs the copy before it reads the join's
    utilization there."""
    from monitor.assemble import assemble_inputs

    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 50.0) for i in range(36)])
    inputs = assemble_inputs(
        state, T0, T0 + 3 * H, T0 + 3 * H, aggregates=aggregates, provisional_days=1,
        idle_threshold_pct=10.0, prices=None,
    )  # fmt: skip
    inputs.hourly.close()
    assert sync(state, aggregates) == 0


def test_the_digest_joins_utilization_from_a_current_copy(stores) -> None:
    """`digest_data` syncs the copy before its GPU join reads a day's utilization there."""
    from monitor.digest_data import digest_data

    state, aggregates = stores
    put(state, [sample("1", T0 + i * M5, 50.0) for i in range(36)])
    digest_data(state, T0.date(), "UTC", T0 + 3 * H, 1, aggregates=aggregates)
    assert sync(state, aggregates) == 0
