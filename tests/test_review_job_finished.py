"""Review of the settled finished-job message (262381f, c01936b; helper 78): the cases the audit's
tests (tests/test_job_finished_audit.py) leave open, on the same daemon path (`announce_jobs` over
`DetectorInputs`, a real SQLite state store, the real jobs engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alerts.job_message import job_message_key
from alerts.outbox import ensure_schema
from monitor.state.store import first_start, open_store
from tests.test_job_finished_audit import (
    T0,
    H,
    _bucket,
    _rest,
    _tell,
    _told,
    _train,
    told_by_the_previous_release,
)


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    ensure_schema(s)
    first_start(s, T0 - 24 * H)
    yield s
    s.close()


def test_last_hours_straddling_the_provisional_boundary_wait(store) -> None:
    """Hours 20 to 25: at hour 73 the first provisional hour is 24, so hours 24 and 25 may grow."""
    billed = _train(20, 25) + _rest(100)
    assert _tell(store, billed, 73) == []
    (key,) = _tell(store, billed, 97)
    assert key == job_message_key("llm", "#ml", T0 + 25 * H)
    (msg,) = _told(store)
    assert msg["text"].startswith("Job finished: llm: $630.00 over 6 h;")


def test_a_told_job_whose_compute_left_the_read_window_is_not_told_again(store) -> None:
    """Told at hour 73; weeks on, its compute rows are before the read window while its checkpoints
    bucket billed on, then was deleted: the bucket is not a run of the job (no compute)."""
    (_a,) = _tell(store, _train(0, 9) + _bucket(400) + _rest(400), 73)
    later = [r for r in _bucket(400) + _rest(500) if r.hour >= T0 + 100 * H]
    # was told "Job finished: llm: $150.50 over 301 h": the bucket's hours 100 to 400
    assert _tell(store, later, 501, window_start=T0 + 100 * H) == []
    assert len(_told(store)) == 1


def test_an_old_row_told_off_the_hour_counts_the_next_run_once(store) -> None:
    """A row of the previous release told at 17:23 (`announced_at`, the clock): the next run is
    counted from there, its bucket from 18:00 (hour 17 may be in the told message)."""
    told_by_the_previous_release(store, "2026-11-01T17:23:00.000000Z")
    billed = _train(0, 9) + _train(100, 109, instance="llm-vm2") + _bucket(200) + _rest(200)
    (_key,) = _tell(store, billed, 170)
    (msg,) = _told(store)  # $1,050 + the bucket's hours 18 to 119
    assert msg["text"].startswith("Job finished: llm: $1,101.00 over 10 h;")
    assert "started before" not in json.dumps(msg["blocks"])
