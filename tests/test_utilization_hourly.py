"""Utilization per GPU and hour: the store's GROUP BY path equals the reduction of the samples.

`load_util_hours` keeps single-series GPUs in the store's engine and reads the samples of GPUs seen
through several series; `util_hours(load_samples(...))` is the reference. Hand-computed figures pin
the reference itself (mean, memory, idle-but-allocated, signal precedence, container duty cycles).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.state.store import SQLiteStore
from monitor.utilization import GpuSample, load_samples, load_util_hours, migrate, replace_window, util_hours
from monitor.utilization.hourly import UtilHours
from monitor.utilization.records import BUSY_EPSILON_PCT

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
H = timedelta(hours=1)
M5 = timedelta(minutes=5)


def sample(host: str, start: datetime, pct: float, *, gpu: str = "0", signal: str = "gpu_utilization",
           mem: float | None = None, node: str | None = None) -> GpuSample:  # fmt: skip
    if node is not None:  # a GKE node: no instance id, identified by cluster and node name
        return GpuSample("p1", "z1", None, None, "c1", node, gpu, "H100", start, start + M5, pct, signal, mem)
    return GpuSample(
        "p1", "z1", host, f"vm-{host}", None, None, gpu, "L4", start, start + M5, pct, signal, mem
    )


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "state.sqlite")
    migrate(s)
    yield s
    s.close()


def put(store, samples, *, preset: str = "gce_gpu_agent") -> None:
    replace_window(store, "p1", preset, T0 - H, T0 + 4 * H, samples, now=T0 + 4 * H)


def both(store, start=T0 - H, end=T0 + 4 * H):
    fast = load_util_hours(store, start, end).rows()
    assert fast == util_hours(load_samples(store, start, end))
    return fast


def test_one_series_is_reduced_per_hour_in_the_store(store) -> None:
    put(store, [sample("1", T0 + i * M5, float(i)) for i in range(15)])  # 12 windows in hour 1, 3 in hour 2
    first, second = both(store)
    assert (first.hour, first.samples, first.pct_sum, first.mean_pct) == (T0, 12, 66.0, 5.5)
    assert (second.hour, second.samples, second.mean_pct) == (T0 + H, 3, 13.0)
    assert first.signal == "gpu_utilization" and not first.container and first.memory_max is None


def test_columns_and_rows_are_the_same_hours(store) -> None:
    """`UtilHours` is what the GPU join reads as columns; `of` and `rows` move between the two forms
    without changing an hour, and an empty window is empty in both."""
    put(store, [sample("1", T0 + i * M5, float(i)) for i in range(15)] + [sample("2", T0, 3.0, gpu="1")])
    cols = load_util_hours(store, T0 - H, T0 + 4 * H)
    rows = cols.rows()
    assert len(cols) == len(rows) == 3
    assert cols["hour"] == [h.hour for h in rows] and cols["gpu"] == [h.gpu for h in rows]
    assert UtilHours.of(rows).columns == cols.columns and UtilHours.of(cols) is cols
    empty = load_util_hours(store, T0 + 10 * H, T0 + 11 * H)
    assert len(empty) == 0 and empty.rows() == [] and set(empty.columns) == set(UtilHours.names)


def test_memory_held_and_idle_but_allocated(store) -> None:
    put(
        store,
        [sample("1", T0, 0.5, mem=4e9), sample("1", T0 + M5, 50.0, mem=8e9), sample("2", T0, 0.5, mem=0.0)],
    )
    one, two = both(store)
    assert (one.memory_max, one.idle_allocated) == (8e9, True)  # memory held at 0.5% busy in one window
    assert (two.memory_max, two.idle_allocated) == (0.0, False)  # 0 bytes is not memory held


def test_a_gpu_seen_by_two_signals_takes_the_trusted_one_per_window(store) -> None:
    put(store, [sample("1", T0 + i * M5, 80.0, signal="gpu_utilization") for i in range(12)])
    put(store, [sample("1", T0 + i * M5, 10.0, signal="sm_active") for i in range(6)], preset="dcgm")
    (h,) = both(store, T0, T0 + H)
    # six windows from SM activity (trusted first), the other six filled from NVML utilization
    assert (h.samples, h.mean_pct, h.signal) == (12, 45.0, "sm_active")


def test_gke_node_with_container_duty_cycles_is_marked(store) -> None:
    node = "gke-c1-pool-1a2b3c4d-x9k2"
    put(store, [sample("", T0 + i * M5, 3.0, node=node, signal="node_duty_cycle") for i in range(12)]
        + [sample("", T0 + i * M5, 2.0, node=node, signal="container_duty_cycle") for i in range(12)]
        + [sample("", T0 + H, 3.0, node=node, signal="node_duty_cycle")])  # fmt: skip
    first, second = both(store)
    assert (first.signal, first.mean_pct, first.container) == ("node_duty_cycle", 3.0, True)
    assert (second.hour, second.container) == (T0 + H, False)  # no container metrics that hour


def test_a_node_seen_only_by_its_container_duty_cycle_is_marked_without_reading_samples(store) -> None:
    node = "gke-c1-pool-1a2b3c4d-x9k2"
    put(store, [sample("", T0 + i * M5, 7.0, node=node, signal="container_duty_cycle") for i in range(12)])
    (h,) = both(store, T0, T0 + H)
    assert (h.signal, h.container, h.samples) == ("container_duty_cycle", True, 12)


def test_the_window_bounds_are_hours_of_sample_starts(store) -> None:
    put(store, [sample("1", T0 + i * M5, 1.0) for i in range(36)])
    assert [h.hour for h in both(store, T0 + H, T0 + 2 * H)] == [T0 + H]
    assert both(store, T0 + 5 * H, T0 + 6 * H) == []


_PCT = st.floats(min_value=0, max_value=100, allow_nan=False).map(lambda x: round(x, 1))
_SAMPLE = st.tuples(
    st.sampled_from(["1", "2"]),  # host
    st.sampled_from(["0", "1"]),  # gpu
    st.integers(0, 35),  # 5-minute window in three hours
    _PCT,
    st.sampled_from(["gpu_utilization", "sm_active", "node_duty_cycle", "container_duty_cycle"]),
    st.sampled_from([None, 0.0, 1e9]),
    st.booleans(),  # a GKE node rather than a VM
)


def by_preset(drawn: list[tuple]) -> dict[str, list[GpuSample]]:
    """`_SAMPLE`s drawn, as samples per preset (the duty cycles one GKE preset, the others one each)."""
    out: dict[str, list[GpuSample]] = {}
    for host, gpu, k, pct, signal, mem, is_node in drawn:
        node = f"gke-c1-pool-1a2b3c4d-{host}" if is_node else None
        preset = "gke" if signal.endswith("duty_cycle") else signal
        out.setdefault(preset, []).append(sample(host, T0 + k * M5, pct, gpu=gpu, signal=signal, mem=mem, node=node))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_SAMPLE, max_size=40), st.integers(0, 2), st.integers(1, 3))
def test_the_store_path_equals_the_reduction_of_its_samples(tmp_path_factory, drawn, lo, span) -> None:
    """Any mix of hosts, GPUs, signals and presets: the same hours, figure for figure."""
    s = SQLiteStore(tmp_path_factory.mktemp("u") / "state.sqlite")
    try:
        migrate(s)
        for preset, samples in by_preset(drawn).items():
            replace_window(s, "p1", preset, T0, T0 + 3 * H, samples, now=T0 + 3 * H)
        start, end = T0 + lo * H, T0 + (lo + span) * H
        fast = load_util_hours(s, start, end).rows()
        ref = util_hours(load_samples(s, start, end))
        assert [h.ident for h in fast] == [h.ident for h in ref]
        for a, b in zip(fast, ref, strict=True):
            assert (a.hour, a.signal, a.samples, a.memory_max, a.idle_allocated, a.container) == (
                b.hour, b.signal, b.samples, b.memory_max, b.idle_allocated, b.container)  # fmt: skip
            assert a.pct_sum == pytest.approx(b.pct_sum, rel=1e-12, abs=1e-9)
    finally:
        s.close()


# -- the hours kept reduced by every write -------------------------------------------------------------

_FRESH = (
    "SELECT series, start - start % 3600, COUNT(*), SUM(utilization_pct), MAX(memory_used_bytes),"
    " MAX(CASE WHEN memory_used_bytes <> 0 AND utilization_pct < ? THEN 1 ELSE 0 END), MIN(start),"
    " MAX(start) FROM utilization_points GROUP BY series, start - start % 3600 ORDER BY 1, 2"
)
_KEPT = (
    "SELECT series, hour, points, pct_sum, memory_max, idle_held, first_start, last_start"
    " FROM utilization_hours ORDER BY series, hour"
)


def assert_hours_kept(store) -> None:
    """`utilization_hours` is the stored points reduced per series and hour, figure for figure."""
    with store.transaction() as conn:
        kept = [tuple(r) for r in conn.execute(_KEPT).fetchall()]
        fresh = [tuple(r) for r in conn.execute(_FRESH, (BUSY_EPSILON_PCT,)).fetchall()]
    assert [r[:3] + r[4:] for r in kept] == [r[:3] + r[4:] for r in fresh]
    assert [r[3] for r in kept] == pytest.approx([r[3] for r in fresh], rel=1e-12, abs=1e-9)


_WRITE = st.tuples(
    st.integers(0, 30),  # window start, in 5-minute steps from T0
    st.integers(1, 20),  # window length, in 5-minute steps: hours cut anywhere
    st.lists(_SAMPLE, max_size=12),  # samples; some start outside the window and replace stored ones
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_WRITE, min_size=1, max_size=4), st.integers(0, 3 * 3600))
def test_the_kept_hours_are_the_points_reduced_after_any_writes_and_retention(
    tmp_path_factory, writes, cut
) -> None:
    """Windows that overlap and cut hours anywhere, samples given outside their window, then a
    retention cut inside an hour: after each step the kept hours are the points reduced, and a read
    of whole hours (which reads them) equals the reduction of the samples."""
    from monitor.state.retention import prune

    s = SQLiteStore(tmp_path_factory.mktemp("k") / "state.sqlite")
    try:
        migrate(s)
        for a, n, drawn in writes:
            samples = [
                sample(host, T0 + k * M5, pct, gpu=gpu, signal=signal, mem=mem,
                       node=f"gke-c1-pool-1a2b3c4d-{host}" if is_node else None)
                for host, gpu, k, pct, signal, mem, is_node in drawn
            ]  # fmt: skip
            replace_window(s, "p1", "any", T0 + a * M5, T0 + (a + n) * M5, samples, now=T0 + 3 * H)
            assert_hours_kept(s)
            both(s, T0, T0 + 3 * H)
        prune(s, T0 + timedelta(seconds=cut))
        assert_hours_kept(s)
        both(s, T0, T0 + 3 * H)
    finally:
        s.close()


@pytest.mark.parametrize("done", [3, 4], ids=["without_hours", "without_last_start"])
def test_the_migration_reduces_the_points_already_stored(tmp_path, done) -> None:
    """A store written before `utilization_hours` existed, or before it kept the last start, gets it
    filled from its points."""
    from monitor.utilization.state import _MIGRATIONS, COMPONENT

    s = SQLiteStore(tmp_path / "state.sqlite")
    try:
        s.migrate(COMPONENT, _MIGRATIONS[:done])
        with s.transaction() as conn:
            conn.execute(
                "INSERT INTO utilization_series (id, scope, preset, project, host, gpu, signal)"
                " VALUES (1, 'p1', 'agent', 'p1', 'vm-1', '0', 'gpu_utilization')"
            )
            conn.executemany(
                'INSERT INTO utilization_points (start, series, "end", utilization_pct, memory_used_bytes)'
                " VALUES (?, 1, ?, ?, ?)",
                [
                    (t, t + 300, pct, mem)
                    for t, pct, mem in ((0, 0.5, 4e9), (300, 40.0, None), (3600, 7.0, 0.0))
                ],
            )
        migrate(s)
        assert_hours_kept(s)
        with s.transaction() as conn:
            assert [tuple(r) for r in conn.execute(_KEPT).fetchall()] == [
                (1, 0, 2, 40.5, 4e9, 1, 0, 300),
                (1, 3600, 1, 7.0, 0.0, 0, 3600, 3600),
            ]
    finally:
        s.close()
