"""Progress on long work (`simulate`, `load`, `analyze` at scale, the daemon's billing poll): a bar on
a terminal, a log line at most every 10 s elsewhere, so a multi-minute run is never silent.

    with progress("simulate", None, unit="rows") as p:
        write_fleet(out, seed=7, days=30, scale=5, progress=p)

Work code takes an optional `Progress` (`None` by default, so it costs one `is None` test) and
reports counts; this module decides how they are shown:

- On a terminal (`stream.isatty()`, not TERM=dumb), a rich bar that disappears when the work ends
  (the command prints its own summary). Its refresh thread keeps the elapsed time moving during a
  long call.
- Elsewhere (CI, cron, a pipe), a line on the `gpucost.progress` logger at most every `INTERVAL`
  seconds, e.g. `simulate: 1,234,000 of ~2,000,000 rows (61%), 18.0 s` (`~`: an estimated total;
  percentages round down, so 100% means done), and one final line
  `simulate: done in 74.0 s (utilization: 30 of 30 days)`. Work that ends within `INTERVAL` writes
  nothing at all: short commands and test output stay as they were. The lines go through the
  logging the process set up (JSON lines in production), else plain to stderr. Time is read from
  an injected clock, so the cadence is tested without sleeping.

A call that blocks for long without reporting (one DuckDB statement, one analysis) passes
`heartbeat`: a thread then checks the clock every `heartbeat` seconds, so the log still gets a
line (elapsed time only) at most every `INTERVAL` seconds.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "INTERVAL",
    "LOGGER",
    "Clock",
    "Count",
    "Progress",
    "command_stages",
    "context_clock",
    "final_line",
    "progress",
    "progress_line",
]

#: Seconds between two progress log lines off a terminal (and the length of work that stays quiet).
INTERVAL = 10.0
#: The logger progress lines go to off a terminal.
LOGGER = "gpucost.progress"

Clock = Callable[[], float]


class Progress(Protocol):
    """What long work reports to; every method is cheap (a line is written at most every 10 s)."""

    def advance(self, n: int = 1) -> None:
        """`n` more units done."""

    def update(
        self, completed: int, *, total: int | None = None, unit: str | None = None, approximate: bool = False
    ) -> None:
        """`completed` units done out of `total` (`None`: unknown); `approximate` marks an estimated
        total (shown as `~2,000,000`); `unit` (`rows`, `days`) changes the unit when given."""

    def describe(self, label: str) -> None:
        """What is being done now (`utilization`, a file name), shown after the task; "" clears it."""


@dataclass
class Count:
    """The state a line is formatted from (mutable: one per running task)."""

    completed: int = 0
    total: int | None = None
    unit: str = ""
    approximate: bool = False
    label: str = ""

    def text(self, *, percent: bool = True) -> str:
        """`1,234,000 of ~2,000,000 rows (61%)`, `1,234 rows`, or "" when there is nothing to count.

        >>> Count(1_234_000, 2_000_000, "rows", approximate=True).text()
        '1,234,000 of ~2,000,000 rows (61%)'
        >>> Count(3, None, "files").text()
        '3 files'
        """
        unit = f" {self.unit}" if self.unit else ""
        if self.total is None:
            return f"{self.completed:,}{unit}" if self.unit or self.completed else ""
        text = f"{self.completed:,} of {'~' if self.approximate else ''}{self.total:,}{unit}"
        if not percent:
            return text
        pct = min(100, int(100 * self.completed / self.total)) if self.total > 0 else 100
        return f"{text} ({pct}%)"


def progress_line(task: str, count: Count, elapsed: float) -> str:
    """One progress log line: `simulate (utilization): 12 of 30 days (40%), 48.0 s`."""
    head = f"{task} ({count.label})" if count.label else task
    text = count.text()
    return f"{head}: {text}, {elapsed:.1f} s" if text else f"{head}: {elapsed:.1f} s"


def final_line(task: str, count: Count, elapsed: float) -> str:
    """The line written when long work ends: `load: done in 74.0 s (3 of 3 files)`."""
    text = count.text(percent=False)
    detail = f"{count.label}: {text}" if count.label and text else (text or count.label)
    return f"{task}: done in {elapsed:.1f} s" + (f" ({detail})" if detail else "")


class _Counting:
    """The `Progress` methods over a `Count`; subclasses show it (`_changed`)."""

    count: Count

    def advance(self, n: int = 1) -> None:
        self.count.completed += n
        self._changed()

    def update(
        self, completed: int, *, total: int | None = None, unit: str | None = None, approximate: bool = False
    ) -> None:
        c = self.count
        c.completed, c.total, c.approximate = completed, total, approximate
        if unit is not None:
            c.unit = unit
        self._changed()

    def describe(self, label: str) -> None:
        self.count.label = label
        self._changed()

    def _changed(self) -> None:
        raise NotImplementedError


class _LogProgress(_Counting):
    """Off a terminal: a log line when `interval` seconds passed since the last (or the start)."""

    def __init__(self, task: str, count: Count, log: logging.Logger, clock: Clock, interval: float):
        self.task, self.count, self._log, self._clock, self._interval = task, count, log, clock, interval
        self._started = self._last = clock()
        self._lock = threading.Lock()

    def _changed(self) -> None:
        self.tick()

    def tick(self) -> None:
        """Write a line if `interval` has passed (also what the heartbeat thread calls). The line is
        written under the lock too, so the heartbeat's and the work's lines come in clock order."""
        with self._lock:
            now = self._clock()
            if now - self._last < self._interval:
                return
            self._last = now
            self._log.info(progress_line(self.task, self.count, now - self._started))

    def finish(self) -> None:
        """The final line, only for work that lasted at least `interval` (short work stays quiet)."""
        elapsed = self._clock() - self._started
        if elapsed >= self._interval:
            self._log.info(final_line(self.task, self.count, elapsed))


class _BarProgress(_Counting):
    """On a terminal: one rich task; the bar pulses while the total is unknown."""

    def __init__(self, task: str, count: Count, console: Console, clock: Clock):
        from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self.task, self.count = task, count
        self.bar = RichProgress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            get_time=clock,
            redirect_stdout=False,  # stdout may carry the report (`analyze --format json`)
        )
        self._id = self.bar.add_task(task, total=count.total, count=count.text())

    def _changed(self) -> None:
        c = self.count
        description = f"{self.task} ({c.label})" if c.label else self.task
        self.bar.update(self._id, completed=c.completed, description=description, count=c.text())
        rich_task = self.bar.tasks[0]
        rich_task.total = c.total  # `update(total=None)` would leave the old total in place


class _RootOrStream(logging.Handler):
    """The root logger's handlers when it has some at the time of the line (a command may set up
    logging after the work began: `analyze` does), else the last ones seen (its final line comes
    after it restored logging: one format throughout), else a plain line on the stream."""

    def __init__(self, stream: IO[str]):
        super().__init__()
        plain = logging.StreamHandler(stream)
        plain.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        self._handlers: list[logging.Handler] = [plain]

    def emit(self, record: logging.LogRecord) -> None:
        root = logging.getLogger().handlers
        if root:
            self._handlers = root[:]
        for handler in self._handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


@contextmanager
def _audible(log: logging.Logger, stream: IO[str]) -> Iterator[None]:
    """Make INFO lines of `log` reach someone for the length of one command, then restore it.

    A CLI command has often configured no logging (`simulate`, `load`) or only WARNING (`analyze`
    without --config): the logger is raised to INFO unless a level was set on it explicitly (set
    one to silence progress), and routed by `_RootOrStream` when no handler would see it.
    """
    saved_level, saved_propagate = log.level, log.propagate
    handler: logging.Handler | None = None
    if log.level == logging.NOTSET and log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    if not log.hasHandlers():
        handler = _RootOrStream(stream)
        log.addHandler(handler)
        log.propagate = False  # the handler reaches the root's handlers itself
    try:
        yield
    finally:
        if handler is not None:
            log.removeHandler(handler)
        log.setLevel(saved_level)
        log.propagate = saved_propagate


@contextmanager
def _heartbeat(reporter: _LogProgress, every: float | None) -> Iterator[None]:
    if every is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            reporter.tick()

    thread = threading.Thread(target=beat, name="gpucost-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def progress(
    task: str,
    total: int | None = None,
    *,
    unit: str = "",
    approximate: bool = False,
    stream: IO[str] | None = None,
    clock: Clock = time.monotonic,
    console: Console | None = None,
    logger: logging.Logger | None = None,
    interval: float = INTERVAL,
    heartbeat: float | None = None,
    bar: bool = True,
) -> Iterator[Progress]:
    """Report progress on `task` for the length of the `with` block.

    `stream` (default: `sys.stderr` when entered) chooses the display: a rich bar when it is a
    terminal, log lines on `logger` (default `gpucost.progress`) otherwise. `console` forces the bar
    onto a given rich Console when it is a terminal (tests render into a StringIO). `bar=False`:
    log lines even on a terminal, through the process's logging as it was set up (a daemon's job:
    its log is its output, a live bar would tear its lines, and its log level is the user's, not
    raised for a command's sake as `_audible` does). `heartbeat` (seconds of wall time) starts a
    thread that checks the clock, for work that blocks without reporting. On an exception no final
    line is written: the error says how it ended.
    """
    out = stream if stream is not None else sys.stderr
    count = Count(0, total, unit, approximate)
    if bar and console is None and _isatty(out):
        from rich.console import Console

        console = Console(file=out)
    # a live bar only where asked for, on a terminal that draws one (TERM=dumb does not)
    if bar and console is not None and console.is_terminal and not console.is_dumb_terminal:
        shown = _BarProgress(task, count, console, clock)
        with shown.bar:
            yield shown
        return
    log = logger or logging.getLogger(LOGGER)
    with _audible(log, out) if bar else nullcontext():
        reporter = _LogProgress(task, count, log, clock, interval)
        with _heartbeat(reporter, heartbeat):
            yield reporter
        reporter.finish()


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream
        return False


def context_clock() -> Clock:
    """The clock a CLI command's progress reads: `time.monotonic`, or the callable under
    `"monotonic"` in the click context's `obj` (how a test runs a command on a fake clock:
    `CliRunner().invoke(cli, args, obj={"monotonic": fake})`, no patching)."""
    import click

    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    clock = obj.get("monotonic") if isinstance(obj, dict) else None
    return clock if callable(clock) else time.monotonic


def command_stages(task: str) -> AbstractContextManager[Progress]:
    """A CLI command's progress through the analysis' named stages (`analyze`, `jobs`, `gpus`): no
    count, the command's clock (`context_clock`), and a heartbeat, as one stage (a DuckDB statement,
    the utilization files) can run for minutes in silence."""
    return progress(task, None, clock=context_clock(), heartbeat=1.0)
