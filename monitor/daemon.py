"""APScheduler wiring, and nothing else: *when* each `run_*` step runs, never *what* it does.

Every job is a thin wrapper around a `run_*(deps, now)` from `monitor.cycle`. A failing job is
logged with context, counted, and backed off (exponentially, capped) without touching the others.
On SIGTERM / SIGINT the service stops the scheduler, gives a running job a few seconds to finish
(each job commits in transactions, so abandoning one is safe), flushes the outbox once, and exits 0
within 10 s.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.errors import UserError
from monitor.metrics import Metrics

__all__ = [
    "GuardedJob",
    "JobSpec",
    "Scheduler",
    "failing_source",
    "install_signal_handlers",
    "wait_for_signal",
]

log = logging.getLogger("gpucost.daemon")
#: A failed job's retry runs this long after its backoff ends, so it is not itself refused as early.
_RETRY_MARGIN_S = 0.25
#: How often the scheduler compares the wall clock's advance with the monotonic clock's, and the
#: difference that counts as a step of the wall clock (NTP's step, a restored VM, `date -s`; chrony
#: and ntpd slew smaller offsets, at most half a millisecond a second).
CLOCK_WATCH_S = 5.0
CLOCK_STEP_S = 30.0


def failing_source(exc: BaseException) -> str:
    """The system a job failure came from, for the log line an operator filters on: the error's
    own `source` when it names one, else the state store for database errors, else "gpucost"."""
    import sqlite3

    named = getattr(exc, "source", None)
    if isinstance(named, str) and named:
        return named
    if isinstance(exc, sqlite3.Error):
        return "state_store"
    return "gpucost"


@dataclass(frozen=True)
class JobSpec:
    name: str
    func: Callable[[], Any]
    trigger: BaseTrigger
    run_at_start: bool = True
    #: run however late its time was seen (a daily job must not lose its day to a stalled
    #: scheduler or a clock stepped forward past `misfire_grace`); coalesced, so once
    catch_up: bool = False


@dataclass
class GuardedJob:
    """Runs one job, records success or failure, and backs off after consecutive failures.

    Backoff is tracked in monotonic seconds (`clock`, injectable so tests never race the wall
    clock): the first failure waits `base` seconds before the job may run again, doubling up to
    `cap`, and `retry` (the scheduler's) runs it then, unless its trigger comes sooner: before, a
    30-minute poll that failed once at start left /readyz at 503 for 30 minutes. A success resets
    it. `last_success` is wall-clock UTC (it is shown on /readyz and compared with the readiness
    threshold).
    """

    spec: JobSpec
    metrics: Metrics
    base: float = 5.0
    cap: float = 600.0
    failures: int = 0
    next_allowed: float = 0.0
    last_success: datetime | None = None
    last_error: str | None = None
    last_source: str | None = None  # the system the last failure came from (`failing_source`)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    #: told the backoff's delay after a failure (the scheduler runs the job again then, if sooner
    #: than its next trigger: a 30-minute poll that failed once retries in `base` s, not in 30 min)
    retry: Callable[[float], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def __call__(self) -> bool:
        if (wait := self.next_allowed - self.clock()) > 0:
            # refused (a kick from another job, its trigger, a wall clock stepped forward): the
            # scheduler has just replaced the pending retry with the next trigger, so ask again
            if self.retry is not None:
                self.retry(wait)
            return False
        if not self._lock.acquire(blocking=False):  # belt and braces over max_instances=1
            return False
        name = self.spec.name
        started = self.clock()
        try:
            self.spec.func()
        except Exception as e:  # a job's failure must never stop the scheduler or the other jobs
            self.failures += 1
            delay = min(self.cap, self.base * 2 ** (self.failures - 1))
            self.next_allowed = self.clock() + delay
            self.last_error = f"{type(e).__name__}: {e}"
            self.last_source = failing_source(e)
            self.metrics.job_failures.labels(name).inc()
            log.error(
                "job failed; backing off",
                # a user's mistake (an empty utilization directory) says what and the fix in one
                # line; its traceback, on every retry, said nothing more
                exc_info=not isinstance(e, UserError),
                extra={
                    "job": name,
                    "source": self.last_source,
                    "error": self.last_error,
                    "failures": self.failures,
                    "retry_in_s": round(delay, 1),
                },
            )
            if self.retry is not None:
                self.retry(delay)
            return False
        else:
            self.failures, self.next_allowed, self.last_error, self.last_source = 0, 0.0, None, None
            # the gauge first: once /readyz sees this success (`last_success`), /metrics shows it
            self.metrics.job_last_success.labels(name).set(time.time())
            self.last_success = self.wall()
            return True
        finally:
            self.metrics.job_duration.labels(name).observe(self.clock() - started)
            self._lock.release()


class Scheduler:
    """A BackgroundScheduler with coalescing, one instance per job, grace for misfires, jitter.

    APScheduler times its jobs on the wall clock. A wall clock stepped back an hour would hold
    every interval job for that hour (their next times an hour ahead of the new clock) while
    `/readyz` still answered 200, so a watch thread moves them back by the step (`clock_moved`),
    and `on_step` the times the jobs keep in their store. `mono` and `clock` (the wall clock the
    watch reads) are injectable for tests.
    """

    def __init__(
        self,
        specs: list[JobSpec],
        metrics: Metrics,
        *,
        misfire_grace: int,
        jitter: int,
        wall: Callable[[], datetime] | None = None,
        mono: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        watch_s: float = CLOCK_WATCH_S,
        on_step: Callable[[float], None] | None = None,
    ):
        self._mono, self._clock, self._watch_s, self._on_step = mono, clock, watch_s, on_step
        self._stopping = threading.Event()
        stamp = {"wall": wall} if wall is not None else {}
        self.jobs = {s.name: GuardedJob(s, metrics, **stamp) for s in specs}
        self._sched = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": misfire_grace},
        )
        for job in self.jobs.values():
            job.retry = lambda delay, name=job.spec.name: self._retry(name, delay)
        for spec in specs:
            if jitter and hasattr(spec.trigger, "jitter"):
                spec.trigger.jitter = jitter
            first = datetime.now(UTC) + timedelta(milliseconds=50) if spec.run_at_start else None
            kwargs: dict[str, Any] = {"next_run_time": first} if first else {}
            if spec.catch_up:
                kwargs["misfire_grace_time"] = None
            self._sched.add_job(self.jobs[spec.name], spec.trigger, id=spec.name, name=spec.name, **kwargs)

    def start(self) -> None:
        self._sched.start()
        threading.Thread(target=self._watch_clock, name="clock-watch", daemon=True).start()

    def _watch_clock(self) -> None:
        mono, wall = self._mono(), self._clock()
        while not self._stopping.wait(self._watch_s):
            m, w = self._mono(), self._clock()
            self.clock_moved((w - wall).total_seconds() - (m - mono))
            mono, wall = m, w

    def clock_moved(self, step: float) -> None:
        """The wall clock moved `step` s more than the monotonic clock since the last look.

        Back (`step` < 0): each interval job's next time goes back by as much, so it runs when it
        would have; a daily time (the digest's cron) is a time of the wall clock and stays. Forward
        (a paused VM, a step): nothing is held; the scheduler runs each job once, late (coalesced),
        or, seen over `misfire_grace` late, at its next time. Both are logged.
        """
        if abs(step) < CLOCK_STEP_S:
            return
        log.warning(
            "the wall clock was stepped" + ("; interval jobs moved back with it" if step < 0 else ""),
            extra={"step_s": round(step, 1)},
        )
        if step > 0 or not self._sched.running:
            return
        try:
            for job in self._sched.get_jobs():
                if isinstance(job.trigger, IntervalTrigger) and job.next_run_time is not None:
                    self._sched.modify_job(job.id, next_run_time=job.next_run_time + timedelta(seconds=step))
        except Exception:  # the scheduler is shutting down: nothing more will run anyway
            return
        if self._on_step is not None:  # what the jobs wait for in their own store moves too
            try:
                self._on_step(step)
            except Exception:
                log.exception("moving the stored times by the clock's step failed")

    def _retry(self, name: str, delay: float) -> None:
        """Run a failed job once its backoff has passed, if that is before its next trigger (a
        margin past it: the backoff is on the monotonic clock, the scheduler on the wall clock)."""
        self.run_at(name, datetime.now(UTC) + timedelta(seconds=delay + _RETRY_MARGIN_S))

    def run_soon(self, name: str) -> bool:
        """Run `name` now instead of at its next trigger time; False if it is running already (the
        caller then leaves a flag the running instance picks up) or the scheduler has stopped."""
        if self.jobs[name].running:
            return False
        return self.run_at(name, datetime.now(UTC))

    def run_at(self, name: str, when: datetime) -> bool:
        """Run `name` at `when` (UTC, wall clock) if that is before its next trigger time; its
        interval goes on from there. False if the scheduler has stopped or `name` is not scheduled."""
        if not self._sched.running:
            return False
        try:
            job = self._sched.get_job(name)
            if job is None or job.next_run_time is None:
                return False
            if when < job.next_run_time:
                self._sched.modify_job(name, next_run_time=max(when, datetime.now(UTC)))
        except Exception:  # the scheduler is shutting down: nothing more will run anyway
            return False
        return True

    def running(self) -> list[str]:
        return [name for name, job in self.jobs.items() if job.running]

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop scheduling; wait up to `timeout` s for a running job. True if all finished."""
        done = threading.Event()
        self._stopping.set()

        def _shutdown() -> None:
            self._sched.shutdown(wait=True)
            done.set()

        threading.Thread(target=_shutdown, name="scheduler-shutdown", daemon=True).start()
        return done.wait(timeout)


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM / SIGINT set `stop` (main thread only). Installed before the slow start-up, so a
    signal during it still ends in a clean exit 0 rather than the default abrupt death."""

    def _handler(signum: int, _frame: object) -> None:
        log.info("signal received; shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def wait_for_signal(stop: threading.Event) -> None:
    """Block the main thread until SIGTERM or SIGINT (or until `stop` is set by someone else)."""
    if threading.current_thread() is threading.main_thread():
        install_signal_handlers(stop)
    while not stop.wait(0.5):
        pass
