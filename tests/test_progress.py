"""Progress on long work: the log cadence on an injected clock, the rich bar on a forced terminal,
and the CLI commands reporting through it."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from monitor.cli import cli
from monitor.progress import Count, final_line, progress, progress_line


class ManualClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SteppingClock:
    """Each reading is `step` seconds after the previous one: every report is 'long enough'."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.t += self.step
            return self.t


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.seen.set()


@pytest.fixture
def log() -> Iterator[tuple[logging.Logger, Lines]]:
    logger = logging.getLogger("tests.progress")
    handler = Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


# --- formatting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "elapsed", "line"),
    [
        (
            Count(1_234_000, 2_000_000, "rows", True),
            18.0,
            "simulate: 1,234,000 of ~2,000,000 rows (61%), 18.0 s",
        ),
        (Count(2, 3, "files", label="b.parquet"), 12.34, "simulate (b.parquet): 2 of 3 files (66%), 12.3 s"),
        (Count(42, None, "rows"), 10.0, "simulate: 42 rows, 10.0 s"),
        (Count(), 20.0, "simulate: 20.0 s"),
        (Count(5, 0, "rows"), 10.0, "simulate: 5 of 0 rows (100%), 10.0 s"),
    ],
)
def test_progress_line(count: Count, elapsed: float, line: str) -> None:
    assert progress_line("simulate", count, elapsed) == line


@pytest.mark.parametrize(
    ("count", "line"),
    [
        (Count(3, 3, "files"), "load: done in 74.0 s (3 of 3 files)"),
        (Count(30, 30, "days", label="utilization"), "load: done in 74.0 s (utilization: 30 of 30 days)"),
        (Count(), "load: done in 74.0 s"),
    ],
)
def test_final_line(count: Count, line: str) -> None:
    assert final_line("load", count, 74.0) == line


# --- off a terminal: log lines on the clock ---------------------------------------------------


def test_log_lines_at_most_every_interval_then_a_final_line(log) -> None:
    logger, seen = log
    clock = ManualClock()
    with progress("simulate", 100, unit="rows", stream=io.StringIO(), clock=clock, logger=logger) as p:
        for _ in range(40):  # 40 units, 1 s apart: lines at 10 s, 20 s, 30 s, 40 s
            clock.now += 1.0
            p.advance(1)
        clock.now += 9.5  # less than 10 s after the last line: none
        p.update(60, total=100, unit="rows")
        clock.now += 0.5
        p.advance(5)
    assert seen.lines == [
        "simulate: 10 of 100 rows (10%), 10.0 s",
        "simulate: 20 of 100 rows (20%), 20.0 s",
        "simulate: 30 of 100 rows (30%), 30.0 s",
        "simulate: 40 of 100 rows (40%), 40.0 s",
        "simulate: 65 of 100 rows (65%), 50.0 s",
        "simulate: done in 50.0 s (65 of 100 rows)",
    ]


def test_estimated_totals_and_labels_show_in_the_line(log) -> None:
    logger, seen = log
    clock = ManualClock()
    with progress("simulate", None, unit="rows", stream=io.StringIO(), clock=clock, logger=logger) as p:
        clock.now += 12
        p.update(500, total=2000, approximate=True)
        p.describe("utilization")
        clock.now += 10
        p.update(1, total=3, unit="days")
    assert seen.lines == [
        "simulate: 500 of ~2,000 rows (25%), 12.0 s",
        "simulate (utilization): 1 of 3 days (33%), 22.0 s",
        "simulate: done in 22.0 s (utilization: 1 of 3 days)",
    ]


def test_short_work_writes_nothing(log) -> None:
    logger, seen = log
    clock = ManualClock()
    with progress("load", 3, unit="files", stream=io.StringIO(), clock=clock, logger=logger) as p:
        for _ in range(3):
            clock.now += 3.0
            p.advance()
    assert seen.lines == []


def test_failed_work_writes_no_final_line(log) -> None:
    logger, seen = log
    clock = ManualClock()
    running = progress("load", 3, unit="files", stream=io.StringIO(), clock=clock, logger=logger)
    with pytest.raises(RuntimeError), running as p:
        clock.now += 15
        p.advance()
        clock.now += 15
        raise RuntimeError("bad row")
    assert seen.lines == ["load: 1 of 3 files (33%), 15.0 s"]


def test_heartbeat_writes_a_line_while_the_work_blocks(log) -> None:
    logger, seen = log
    with progress("analyze", stream=io.StringIO(), clock=SteppingClock(11.0), logger=logger, heartbeat=0.005):
        assert seen.seen.wait(60), "no heartbeat line while the work reported nothing"
    assert seen.lines[0].startswith("analyze: ") and seen.lines[0].endswith(".0 s")
    assert seen.lines[-1].startswith("analyze: done in ")


def test_without_any_handler_lines_go_to_the_stream_and_the_logger_is_restored() -> None:
    """A plain `gpucost simulate` configures no logging: the line must still reach stderr."""
    root = logging.getLogger()
    saved = root.handlers[:]
    logger = logging.getLogger("tests.progress.bare")
    root.handlers[:] = []  # as in a fresh process (pytest installs its own capture handlers)
    try:
        out = io.StringIO()
        with progress("simulate", 4, unit="rows", stream=out, clock=SteppingClock(11.0), logger=logger) as p:
            p.advance(2)
    finally:
        root.handlers[:] = saved
    text = out.getvalue()
    assert "tests.progress.bare: simulate: 2 of 4 rows (50%)" in text
    assert "tests.progress.bare: simulate: done in" in text
    assert (logger.level, logger.propagate, logger.handlers) == (logging.NOTSET, True, [])


# --- on a terminal: a rich bar ----------------------------------------------------------------


def test_terminal_renders_a_bar_and_no_log_line(log) -> None:
    logger, seen = log
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    clock = ManualClock()
    with progress("simulate", 10, unit="rows", console=console, clock=clock, logger=logger) as p:
        clock.now += 30
        p.advance(5)
        p.describe("utilization")
    text = out.getvalue()
    assert "━" in text
    assert "simulate (utilization)" in text
    assert "5 of 10 rows (50%)" in text
    assert seen.lines == []


def test_a_stream_that_is_not_a_terminal_gets_no_bar(log) -> None:
    logger, _ = log
    out = io.StringIO()
    with progress("simulate", 10, unit="rows", stream=out, clock=ManualClock(), logger=logger) as p:
        p.advance(5)
    assert out.getvalue() == ""


def test_without_a_bar_a_terminal_gets_log_lines_at_the_level_set_up(log) -> None:
    """`bar=False` (a daemon's job): lines even on a terminal, and a logger set above INFO is left so
    (the daemon's log level is the user's; a command's is raised for its progress)."""
    logger, seen = log
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with progress("billing poll", console=console, clock=SteppingClock(11.0), logger=logger, bar=False) as p:
        p.describe("hourly")
    assert out.getvalue() == ""
    assert seen.lines == ["billing poll (hourly): 11.0 s", "billing poll: done in 22.0 s (hourly)"]
    seen.lines.clear()
    logger.setLevel(logging.WARNING)  # the process's logging, set above INFO
    child = logging.getLogger("tests.progress.daemon")  # no level of its own: its parent's
    with progress("billing poll", stream=out, clock=SteppingClock(11.0), logger=child, bar=False) as p:
        p.describe("hourly")
    assert seen.lines == [] and child.level == logging.NOTSET


def test_the_daemons_billing_poll_logs_its_queries_when_it_runs_long(tmp_path_factory, tmp_path) -> None:
    """A daemon's first poll reads weeks of export (minutes of queries on BigQuery at scale): on a
    clock that steps 11 s a reading, its log gets a line at each query and a final one; a poll
    that takes milliseconds (nothing new) writes none."""
    from datetime import UTC, datetime

    from monitor.cycle import run_billing_poll
    from tests.shared_fleets import shared_fleet
    from tests.test_digest_jobs import daemon_on_fleet

    deps = daemon_on_fleet(tmp_path, shared_fleet(tmp_path_factory, 7, 2)[0])
    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    handler, logger = Lines(), logging.getLogger("gpucost.progress")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # the daemon's logging, at its default level
    try:
        deps.monotonic = SteppingClock(11.0)
        run_billing_poll(deps, now)
        first = handler.lines[:]
        handler.lines.clear()
        deps.monotonic = ManualClock()
        run_billing_poll(deps, now)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    stages = [line.split("(", 1)[1].split(")")[0] for line in first[:-1]]
    assert stages[0] == "partitions", first
    assert any(s.startswith("changed hours of ") for s in stages), first
    assert any(s.startswith("hourly 2026-") for s in stages), first
    assert stages[-1] == "storing", first
    assert first[-1].startswith("billing poll: done in ")
    assert handler.lines == []


# --- the commands -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> tuple[Path, list[str]]:
    """One tiny `gpucost simulate` on a clock that jumps 11 s per reading, its progress lines."""
    out = tmp_path_factory.mktemp("fleet")
    handler = Lines()
    logging.getLogger("gpucost.progress").addHandler(handler)
    try:
        result = CliRunner().invoke(
            cli, ["simulate", "--out", str(out), "--days", "1"], obj={"monotonic": SteppingClock(11.0)}
        )
    finally:
        logging.getLogger("gpucost.progress").removeHandler(handler)
    assert result.exit_code == 0, result.output
    return out, handler.lines


def test_simulate_reports_rows_then_utilization(fleet) -> None:
    _, lines = fleet
    rows = [line for line in lines if line.startswith("simulate: ") and " rows (" in line]
    assert rows, lines
    assert rows[-1].startswith("simulate: ") and " of " in rows[-1]
    assert any(line.startswith("simulate (utilization): ") and " days (" in line for line in lines)
    assert lines[-1].startswith("simulate: done in ") and lines[-1].endswith("(utilization: 1 of 1 days)")


def _reported(args: list[str]) -> tuple[Result, list[str]]:
    """A command run on a clock that steps 11 s a reading (every report gets its line), and the
    progress lines it wrote."""
    handler = Lines()
    logging.getLogger("gpucost.progress").addHandler(handler)
    try:
        result = CliRunner().invoke(cli, args, obj={"monotonic": SteppingClock(11.0)})
    finally:
        logging.getLogger("gpucost.progress").removeHandler(handler)
    assert result.exit_code == 0, result.output
    return result, handler.lines


def test_load_reports_files(fleet, tmp_path) -> None:
    out, _ = fleet
    _, lines = _reported(
        ["load", "--billing", str(out / "billing" / "export.parquet"), "--db", str(tmp_path / "b.duckdb")]
    )
    assert any(line.startswith("load (export.parquet): 0 of 1 files (0%), ") for line in lines)
    assert lines[-1].startswith("load: done in ") and lines[-1].endswith("(1 of 1 files)")


@pytest.mark.parametrize(
    ("command", "stages"),
    [
        ("analyze", ("reading billing", "reading utilization", "assembling", "detecting")),
        ("jobs", ("reading billing", "assembling", "reading jobs", "building jobs")),
        ("gpus", ("reading billing", "assembling")),
    ],
)
def test_the_analysis_commands_report_their_stages_on_stderr_and_keep_stdout_the_report(
    fleet, command: str, stages: tuple[str, ...]
) -> None:
    """`jobs` and `gpus` run the analysis (`jobs` its own query and build after it): `gpucost jobs`
    ran 95 s in silence at 5 M export rows a month before they reported as `analyze` does."""
    out, _ = fleet
    result, lines = _reported(
        [command, "--billing", str(out / "billing" / "export.parquet"), "--format", "json"]
    )
    assert json.loads(result.stdout)
    assert lines[-1].startswith(f"{command}: done in ")
    seen = [line.split("(")[1].split(")")[0] for line in lines[:-1] if "(" in line]
    for stage in stages:
        assert stage in seen, lines


def test_logging_set_up_during_the_work_carries_every_line_final_included() -> None:
    """`analyze` configures stderr logging inside the work and restores it before the final line."""
    root = logging.getLogger()
    saved = root.handlers[:]
    configured = Lines()
    logger = logging.getLogger("tests.progress.late")
    out = io.StringIO()
    root.handlers[:] = []
    try:
        with progress("analyze", stream=out, clock=SteppingClock(11.0), logger=logger) as p:
            root.handlers[:] = [configured]  # the command sets up its logging ...
            p.advance()
            root.handlers[:] = []  # ... and puts it back before the work ends
    finally:
        root.handlers[:] = saved
    assert configured.lines == ["analyze: 1, 11.0 s", "analyze: done in 22.0 s (1)"]
    assert out.getvalue() == ""
