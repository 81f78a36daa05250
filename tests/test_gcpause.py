"""`monitor.gcpause`: a detection run and `analyze` build their objects with the cyclic collector
off, and it is back on after them, whatever happened inside."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.gcpause import collector_paused


class _Seen(Exception):
    """Raised by a step wrapped to report whether the collector ran while it did."""

    def __init__(self, enabled: bool) -> None:
        super().__init__(enabled)
        self.enabled = enabled


def _report(*_args: object, **_kw: object) -> None:
    raise _Seen(gc.isenabled())


def test_the_collector_is_off_inside_and_back_on_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a step failed")
    assert gc.isenabled()


def test_a_collector_turned_off_before_is_left_to_whoever_turned_it_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_detection_run_assembles_without_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor import cycle

    monkeypatch.setattr(cycle, "detection_inputs", _report)
    with pytest.raises(_Seen) as seen:
        cycle.run_detection(None, datetime(2026, 11, 5, tzinfo=UTC))  # type: ignore[arg-type]
    assert seen.value.enabled is False and gc.isenabled()


def test_analyze_reads_and_assembles_without_the_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from monitor import analysis
    from monitor.config import Config
    from tests.export_rows import export_row, write_ndjson

    path = write_ndjson(tmp_path / "export.ndjson", [export_row()])
    monkeypatch.setattr(analysis, "assemble_inputs", _report)
    with pytest.raises(_Seen) as seen:
        analysis.analyze_once(
            Config(), now=datetime(2026, 11, 5, tzinfo=UTC), billing_paths=[path], with_budgets=False
        )
    assert seen.value.enabled is False and gc.isenabled()
