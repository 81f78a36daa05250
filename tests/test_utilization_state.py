"""The utilization state: narrow storage, the v1 -> v2 migration, windows replaced, signals chosen."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, replace
from datetime import UTC, datetime, timedelta

import pytest

from monitor.state.store import SQLiteStore
from monitor.utilization import GpuSample, load_samples, migrate, read_watermark, replace_window
from monitor.utilization.records import SampleDraft, freeze, make_sample
from monitor.utilization.state import _V1  # the schema a store of the previous release holds

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
M5 = timedelta(minutes=5)


def gce(instance: str, start: datetime, pct: float, *, signal: str = "gpu_utilization", **over) -> GpuSample:
    s = GpuSample(
        "p1", "z1", instance, f"vm-{instance}", None, None, "0", "L4", start, start + M5, pct, signal, None
    )
    return replace(s, **over) if over else s


def gke(node: str, start: datetime, pct: float, *, signal: str = "node_duty_cycle") -> GpuSample:
    return GpuSample("p1", "z1", None, None, "c1", node, "0", "L4", start, start + M5, pct, signal, None)


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "state.sqlite")
    migrate(s)
    yield s
    s.close()


def stored(store) -> list[tuple]:
    with store.transaction() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                "SELECT scope, preset, host, start, utilization_pct FROM utilization_samples ORDER BY 1, 2, 3, 4"
            )
        ]


def test_samples_round_trip_exactly(store):
    sample = GpuSample(
        "p1", "z1", "42", "vm-42", "c1", "node-1", "3", "H100", T0, T0 + M5, 12.345678901, "sm_active", 7.5e9
    )
    assert replace_window(store, "p1", "x", T0, T0 + M5, [sample], now=T0) == 1
    assert load_samples(store, T0, T0 + M5) == [sample]
    assert read_watermark(store, "p1", "x") == T0 + M5


def test_re_read_window_replaces_late_points_and_nothing_doubles(store):
    replace_window(store, "p1", "x", T0, T0 + 2 * M5, [gce("a", T0, 40.0), gce("a", T0 + M5, 5.0)], now=T0)
    replace_window(
        store, "p1", "x", T0 + M5, T0 + 3 * M5, [gce("a", T0 + M5, 50.0), gce("a", T0 + 2 * M5, 60.0)], now=T0
    )
    got = [(s.start, s.utilization_pct) for s in load_samples(store, T0, T0 + 3 * M5)]
    assert got == [(T0, 40.0), (T0 + M5, 50.0), (T0 + 2 * M5, 60.0)]
    assert len(stored(store)) == 3


def test_a_window_of_one_scope_leaves_the_others_alone(store):
    replace_window(store, "p1", "x", T0, T0 + M5, [gce("a", T0, 1.0)], now=T0)
    replace_window(store, "p2", "x", T0, T0 + M5, [gce("b", T0, 2.0)], now=T0)
    replace_window(store, "p1", "y", T0, T0 + M5, [gce("c", T0, 3.0)], now=T0)
    replace_window(store, "p1", "x", T0, T0 + M5, [], now=T0)  # re-read: the samples are gone
    assert [r[:3] for r in stored(store)] == [("p1", "y", "c"), ("p2", "x", "b")]


def test_same_identity_twice_keeps_the_last_and_outside_the_window_replaces(store):
    replace_window(store, "p1", "x", T0, T0 + M5, [gce("a", T0, 1.0)], now=T0)
    # a sample outside [T0 + M5, T0 + 2*M5) still replaces the stored one it identifies, labels aside
    late = [gce("a", T0, 7.0, model="L4-24GB"), gce("a", T0 + M5, 2.0), gce("a", T0 + M5, 3.0)]
    assert replace_window(store, "p1", "x", T0 + M5, T0 + 2 * M5, late, now=T0) == 3
    got = [(s.start, s.utilization_pct, s.model) for s in load_samples(store, T0, T0 + 2 * M5)]
    assert got == [(T0, 7.0, "L4-24GB"), (T0 + M5, 3.0, "L4")]


def test_load_window_is_start_inclusive_end_exclusive(store):
    replace_window(
        store, "p1", "x", T0 - M5, T0 + 2 * M5, [gce("a", T0 + i * M5, i) for i in (-1, 0, 1)], now=T0
    )
    assert [s.start for s in load_samples(store, T0, T0 + M5)] == [T0]
    assert load_samples(store, T0 + 2 * M5, T0 + 3 * M5) == []


def test_best_signal_across_presets_with_host_aliases_and_gap_filling(store):
    """GKE sees node "vm-a" (no id); the agent sees instance "a" named "vm-a": one GPU, best signal wins."""
    replace_window(
        store, "p1", "gke", T0, T0 + 2 * M5, [gke("vm-a", T0, 90.0), gke("vm-a", T0 + M5, 80.0)], now=T0
    )
    nvml = [gce("a", T0, 70.0, memory_used_bytes=1e9)]
    replace_window(store, "p1", "nvml", T0, T0 + 2 * M5, nvml, now=T0)
    replace_window(store, "p1", "dcgm", T0, T0 + 2 * M5, [gce("a", T0, 0.5, signal="sm_active")], now=T0)

    got = load_samples(store, T0, T0 + 2 * M5)

    assert [(s.start, s.signal, s.utilization_pct) for s in got] == [
        (T0, "sm_active", 0.5),  # SM activity beats NVML beats the duty cycle
        (T0 + M5, "node_duty_cycle", 80.0),  # the only signal there
    ]
    first = got[0]
    assert (first.memory_used_bytes, first.cluster, first.node_name) == (1e9, "c1", "vm-a")  # gaps filled
    assert first.idle_but_allocated


def test_results_are_sorted_by_gpu_then_start(store):
    samples = [gce(i, T0 + k * M5, 1.0) for i in ("b", "a", "c") for k in (2, 0, 1)]
    replace_window(store, "p1", "x", T0, T0 + 3 * M5, samples, now=T0)
    got = [(s.instance_id, s.start) for s in load_samples(store, T0, T0 + 3 * M5)]
    assert got == sorted(got)
    assert len(got) == 9


def test_migration_from_iso_rows_drops_the_cache_and_its_watermarks(tmp_path):
    old = SQLiteStore(tmp_path / "state.sqlite")
    old.migrate("utilization", (_V1,))  # a store written by the previous release
    with old.transaction() as conn:
        conn.execute(
            "INSERT INTO utilization_samples VALUES ('p1', 'x', 'p1', 'a', 'z', 'a', 'vm-a', NULL, NULL,"
            " '0', 'L4', '2026-11-01T10:00:00Z', '2026-11-01T10:05:00Z', 42.0, 'gpu_utilization', NULL)"
        )
        conn.execute("INSERT INTO utilization_windows VALUES ('p1', 'x', '2026-11-01T10:05:00Z', 'now')")
    assert read_watermark(old, "p1", "x") == T0 + M5

    migrate(old)

    assert read_watermark(old, "p1", "x") is None  # the next poll reads its full initial window
    assert load_samples(old, T0 - M5, T0 + M5) == []
    replace_window(old, "p1", "x", T0, T0 + M5, [gce("a", T0, 42.0)], now=T0)
    assert stored(old) == [("p1", "x", "a", "2026-11-01T10:00:00Z", 42.0)]  # the view keeps ISO text
    old.close()


def test_make_sample_is_a_gpu_sample_in_every_respect():
    values = ("p", "z", "1", "vm", None, None, "0", "L4", T0, T0 + M5, 3.5, "sm_active", None)
    made, built = make_sample(*values), GpuSample(*values)
    assert type(made) is GpuSample and made == built and hash(made) == hash(built)
    assert pickle.loads(pickle.dumps(made)) == built and repr(made) == repr(built)
    assert replace(made, gpu="1").gpu == "1"
    with pytest.raises(FrozenInstanceError):
        made.gpu = "2"  # type: ignore[misc]
    drafts = [SampleDraft(*values), SampleDraft(*values[:10], 4.0, *values[11:])]
    assert [s.utilization_pct for s in freeze(drafts)] == [3.5, 4.0]
    assert all(type(s) is GpuSample for s in drafts)
