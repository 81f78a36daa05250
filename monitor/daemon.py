"""APScheduler wiring, and nothing else: *when* each `run_*` step runs, never *what* it does.

Every job is a thin wrapper around a pure-ish `run_*(deps, now)` from `monitor.cycle`. A failing job
is logged with context, counted, and backed off (exponentially, capped) without touching the others.
SIGTERM / SIGINT stop the scheduler, let a running job finish for a few seconds (each job commits in
transactions, so abandoning one is safe), flush the outbox once, and exit 0 within 10 s.
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

from monitor.metrics import Metrics

__all__ = ["GuardedJob", "JobSpec", "Scheduler"]

log = logging.getLogger("gpucost.daemon")


@dataclass(frozen=True)
class JobSpec:
    name: str
    func: Callable[[], Any]
    trigger: BaseTrigger
    run_at_start: bool = True


@dataclass
class GuardedJob:
    """Runs one job, records success or failure, and backs off after consecutive failures.

    Backoff is tracked in wall-clock seconds: the first failure waits `base` seconds before the job
    may run again, doubling up to `cap`. A success resets it.
    """

    spec: JobSpec
    metrics: Metrics
    base: float = 5.0
    cap: float = 600.0
    failures: int = 0
    next_allowed: float = 0.0
    last_success: datetime | None = None
    last_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> bool:
        if time.monotonic() < self.next_allowed:
            return False
        if not self._lock.acquire(blocking=False):  # belt and braces over max_instances=1
            return False
        name = self.spec.name
        started = time.monotonic()
        try:
            self.spec.func()
        except Exception as e:  # a job's failure must never stop the scheduler or the other jobs
            self.failures += 1
            delay = min(self.cap, self.base * 2 ** (self.failures - 1))
            self.next_allowed = time.monotonic() + delay
            self.last_error = f"{type(e).__name__}: {e}"
            self.metrics.job_failures.labels(name).inc()
            log.error(
                "job failed; backing off",
                exc_info=True,
                extra={"job": name, "failures": self.failures, "retry_in_s": round(delay, 1)},
            )
            return False
        else:
            self.failures, self.next_allowed, self.last_error = 0, 0.0, None
            self.last_success = datetime.now(UTC)
            self.metrics.job_last_success.labels(name).set(time.time())
            return True
        finally:
            self.metrics.job_duration.labels(name).observe(time.monotonic() - started)
            self._lock.release()


class Scheduler:
    """A BackgroundScheduler with coalescing, one instance per job, grace for misfires, jitter."""

    def __init__(self, specs: list[JobSpec], metrics: Metrics, *, misfire_grace: int, jitter: int):
        self.jobs = {s.name: GuardedJob(s, metrics) for s in specs}
        self._sched = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": misfire_grace},
        )
        for spec in specs:
            if jitter and hasattr(spec.trigger, "jitter"):
                spec.trigger.jitter = jitter
            first = datetime.now(UTC) + timedelta(milliseconds=50) if spec.run_at_start else None
            kwargs = {"next_run_time": first} if first else {}
            self._sched.add_job(self.jobs[spec.name], spec.trigger, id=spec.name, name=spec.name, **kwargs)

    def start(self) -> None:
        self._sched.start()

    def stop(self, timeout: float = 6.0) -> bool:
        """Stop scheduling; wait up to `timeout` s for a running job. True if all finished."""
        done = threading.Event()

        def _shutdown() -> None:
            self._sched.shutdown(wait=True)
            done.set()

        threading.Thread(target=_shutdown, daemon=True).start()
        return done.wait(timeout)


def wait_for_signal(stop: threading.Event) -> None:
    """Block the main thread until SIGTERM or SIGINT."""

    def _handler(signum: int, _frame: object) -> None:
        log.info("signal received; shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop.wait(0.5):
        pass
