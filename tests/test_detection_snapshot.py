"""Every GPU hour a detection run reads is of its costs' snapshot (`AggregateStore.pinned`, the
read transaction of `monitor.detectors.costs.Costs.over`): the daemon's billing poll may commit while
the run still reads GPU hours it reads late (those before the detection window, for a job budget or a
finished job's message; or, deferred, as far as the detectors read them), and those reads must not
see it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.cycle import detection_inputs
from monitor.detectors.inputs import DetectorInputs, JudgedGpuHours, TableGpuHours, with_on_demand_part
from monitor.state.analytics import AggregateStore

NOW = datetime(2026, 11, 5, 9, tzinfo=UTC)  # 4 days billed: the first settled
WINDOW = NOW - timedelta(days=2)  # a detection window inside the data: earlier GPU hours are read late


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_digest_jobs import polled_daemon

    deps = polled_daemon(tmp_path_factory, "detection-snapshot", seed=7, days=4, now=NOW)
    yield deps
    deps.store.close()


def _everything(inputs: DetectorInputs) -> tuple:
    """What a run can read of its GPU hours, each built whole."""
    return (
        inputs.idle_node_gpu_table().rows(),
        inputs.unmonitored_gpu_table().rows(),
        with_on_demand_part(inputs.on_demand_gpu_table().rows()),
        inputs.all_gpu_hour_table().rows(),
    )


def _deferred(deps: Any) -> DetectorInputs:
    """The daemon's inputs, their GPU hours read as far as the detectors read them (as `analyze`'s)."""
    from tests.test_digest_jobs import assembled

    return assembled(
        deps, NOW, defer=True, provisional_days=deps.cfg.billing.provisional_days, gpu_from=WINDOW
    )


@contextmanager
def _emptied_meanwhile(deps: Any) -> Iterator[None]:
    """A billing poll's transaction that deletes every aggregate commits; put back after."""
    with deps.aggregates.transaction() as conn:
        conn.execute("CREATE TABLE kept AS SELECT * FROM billing_hourly")
        conn.execute("DELETE FROM billing_hourly")
    try:
        yield
    finally:
        with deps.aggregates.transaction() as conn:
            conn.execute("INSERT INTO billing_hourly SELECT * FROM kept")
            conn.execute("DROP TABLE kept")


@pytest.mark.parametrize(
    "build", [lambda d: detection_inputs(d, NOW, WINDOW), _deferred], ids=["daemon", "deferred"]
)
def test_a_billing_poll_committing_during_a_run_does_not_change_its_gpu_hours(
    daemon: Any, build: Any
) -> None:
    before = build(daemon)
    expected = _everything(before)
    before.hourly.close()
    assert all(expected) and len(expected[-1]) > len(build_window_hours(daemon, build))
    inputs = build(daemon)
    try:
        with _emptied_meanwhile(daemon):  # after the run's costs were read, before its late reads
            assert _everything(inputs) == expected
    finally:
        inputs.hourly.close()
    after = build(daemon)
    try:
        assert _everything(after) == expected
    finally:
        after.hourly.close()


def build_window_hours(deps: Any, build: Any) -> list:
    """The window's GPU hours alone (read at assembly by the daemon)."""
    inputs = build(deps)
    try:
        return list(inputs.gpu_hours)
    finally:
        inputs.hourly.close()


def test_the_deferred_hours_are_judged_and_the_daemons_read_whole(daemon: Any) -> None:
    lean, whole = _deferred(daemon), detection_inputs(daemon, NOW, WINDOW)
    try:
        # the daemon's are every hour, held as a table (`TableGpuHours`)
        assert isinstance(lean.gpu_hours, JudgedGpuHours) and isinstance(whole.gpu_hours, TableGpuHours)
        assert list(lean.gpu_hours) == list(whole.gpu_hours)
    finally:
        lean.hourly.close()
        whole.hourly.close()


def test_a_pinned_view_reads_on_its_owners_connection_and_never_writes(tmp_path: Path) -> None:
    store = AggregateStore(tmp_path / "aggregates.duckdb")
    with store.transaction() as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    owner = store.connect()
    owner.execute("BEGIN TRANSACTION")
    assert owner.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
    view = store.pinned(owner, threading.Lock())
    with store.transaction() as conn:
        conn.execute("INSERT INTO t VALUES (2)")
    with view.session(), view.read() as conn:
        assert conn is owner and conn.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
    with pytest.raises(RuntimeError, match="reads only"), view.transaction():
        pass
    with pytest.raises(RuntimeError, match="its owner's"):
        view.connect()
    view.close()  # the owner's connection stays open
    assert owner.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
    owner.execute("COMMIT")
    assert owner.execute("SELECT count(*) FROM t").fetchall() == [(2,)]
    owner.close()
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchall() == [(2,)]
