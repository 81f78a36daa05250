"""Shared fixtures: the repository root, the optional real data beside the project, a state and an
aggregate store."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from monitor.utilization import migrate

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data" / "external"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SQLiteStore, AggregateStore]]:
    """A SQLite state store with the utilization tables, and an aggregate store beside it (the
    utilization copy's tests)."""
    state, aggregates = SQLiteStore(tmp_path / "state.sqlite"), AggregateStore(tmp_path / "aggregates.duckdb")
    migrate(state)
    yield state, aggregates
    state.close()
    aggregates.close()


#: Modules that take the longest on one worker (seconds measured by `pytest --durations`), longest
#: first. With `--dist loadfile` a module runs whole on one worker, so the suite's wall time is at
#: least its longest module: starting the long ones first lets the short ones fill in beside them
#: instead of leaving one worker alone at the end (`make test` passes `--no-loadscope-reorder`, which
#: keeps this order instead of xdist's default of most tests first).
LONGEST_FIRST = (
    "test_daemon_production.py",
    "test_ground_truth.py",
    "test_soak.py",
    "test_fault_matrix.py",
    "test_fault_matrix_delivery.py",
    "test_real_shapes.py",
    "test_e2e_daemon.py",
    "test_analyze_bigquery.py",
    "test_jobs_cli.py",
    "test_bigquery_source.py",
    "test_demo.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection made (the imported libraries, the test modules) out of the cyclic GC's
    reach: it lives until the worker exits, and every full collection traversed it again. Measured
    on 2026-12-07 with a `gc.callbacks` timer: the three workers spent 37.5 s in the GC in a suite of
    about 470 s of their CPU, 29 s of it in 120 full collections."""
    gc.freeze()
