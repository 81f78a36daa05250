"""`gpucost run`: build the dependencies from config, then one cycle (`--once`) or the daemon.

The always-on mode schedules the `monitor.cycle` steps with `monitor.daemon.Scheduler`, serves
/healthz, /readyz and /metrics, and shuts down within a fixed budget on SIGTERM / SIGINT:

1. stop scheduling and give a running job `JOB_GRACE_S` to finish (every step commits in
   transactions, so a job cut short leaves the state store consistent and is redone next start);
2. flush the outbox once, bounded by what is left of the budget (a hung Slack cannot hold us: an
   unconfirmed message stays pending and is checked for, not re-sent blindly, on the next start);
3. report whether anything had to be abandoned (`Service.abandoned`), so the CLI can exit at once
   instead of waiting for a stuck thread.

Detection runs after each poll, as its own job (own backoff, own metrics), and only once both sources
have been polled by this process, so a restart never judges fresh billing against stale utilization.
The utilization history (first start, downtime) is read by a job of its own, paced and after the
live windows, so the first detection and its alerts never wait for weeks of history; detection runs
again after each backfill step that read something.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from alerts.digest import digest_markdown
from alerts.outbox import clock_stepped
from alerts.pipeline import next_due
from monitor.attribution.compile import compile_rules
from monitor.clock import Clock, SystemClock
from monitor.config import Config
from monitor.cycle import (
    Cancelled,
    Deps,
    build_deps,
    digest_queued,
    history_read,
    run_billing_poll,
    run_cycle,
    run_delivery,
    run_detection,
    run_digest,
    run_price_refresh,
    run_retention,
    run_utilization_backfill,
    run_utilization_poll,
)
from monitor.daemon import JobSpec, Scheduler, wait_for_signal
from monitor.http import HealthServer
from monitor.logs import redact
from monitor.sources.base import BillingSource
from monitor.state.store import first_start, recorded_first_start

if TYPE_CHECKING:
    from monitor.demo import DemoFeeder

__all__ = ["JOB_GRACE_S", "SHUTDOWN_BUDGET_S", "Service"]

log = logging.getLogger("gpucost.service")

#: Everything after the signal must fit in this (the contract is "exit 0 within 10 s").
SHUTDOWN_BUDGET_S = 8.5
#: How long a running job may take to finish before it is abandoned.
JOB_GRACE_S = 5.0
_POLLS = ("billing", "utilization")
#: A woken outbox job runs this long after the timer's end, so the group is due when it looks.
_WAKE_LATE = timedelta(milliseconds=200)


class Service:
    """Holds the wiring for one `gpucost run` process."""

    def __init__(
        self,
        cfg: Config,
        *,
        stream: TextIO | None = None,
        environ: dict[str, str] | None = None,
        wall: Clock | None = None,
        feeder: DemoFeeder | None = None,
    ):
        self.cfg = cfg
        self.feeder = None
        self.wall = wall or SystemClock()  # real time: readiness ages, never the simulated clock
        self.abandoned = False
        self.sched: Scheduler | None = None
        self.http: HealthServer | None = None
        self._detect_due = threading.Event()
        self._demo_day: date | None = None  # the simulated day of the last demo digest
        self._digest_caught_up = False  # the due digest asked for once utilization was read
        self._billing_lock = threading.Lock()  # one poll at a time on the billing connection
        self._stopping = threading.Event()
        self._delivery: dict[str, Any] | None = None  # the last outbox tick (run_delivery's result)
        clock: Clock
        billing: BillingSource
        rules = compile_rules(cfg.attribution.rules)
        if cfg.demo.enabled:
            from monitor.demo import DemoFeeder
            from monitor.sources.billing_duckdb import DuckDBBillingSource

            self.feeder = feeder or DemoFeeder(cfg)  # injected: a soak test's feed starts earlier
            clock = self.feeder.clock
            billing = DuckDBBillingSource(self.feeder.conn, rules=rules)
        else:
            from monitor.sources.factory import billing_source_from_config

            clock = SystemClock()
            billing = billing_source_from_config(cfg.billing, google=cfg.google, rules=rules)
        self.deps: Deps = build_deps(cfg, clock, billing, stream=stream, environ=environ)

    # -- steps as the scheduler sees them -------------------------------------------------------
    def _now(self) -> datetime:
        return self.deps.clock.now()

    def billing_job(self) -> None:
        with self._billing_lock:
            if self.feeder is not None:
                self.feeder.advance()
            run_billing_poll(self.deps, self._now())
        self._request_detection()
        if self.feeder is not None and self.sched is not None:
            # Simulated days pass in minutes: digest each one as it ends, not at 09:00 real time.
            day = self._now().date()
            if day != self._demo_day:
                self._demo_day = day
                self.sched.run_soon("daily_digest")

    def utilization_job(self) -> None:
        """The live windows only: detection follows at once; history is the backfill job's."""
        run_utilization_poll(self.deps, self._now(), backfill=False)
        self._request_detection()
        if self.sched is not None and "utilization_backfill" in self.sched.jobs:
            self.sched.run_soon("utilization_backfill")  # no-op while it runs or has nothing left
        self._catch_up_digest()

    def backfill_job(self) -> None:
        """One paced step of the history backfill; detection judges what it read."""
        if "utilization" not in self.deps.last_success:
            return  # the live windows first: they set the watermarks the backfill reads behind
        if run_utilization_backfill(self.deps, self._now(), cancelled=self._stopping.is_set):
            self._request_detection()
        self._catch_up_digest()

    def _catch_up_digest(self) -> None:
        """Once this process has read the utilization of the whole window (the backfill done), run
        the digest job: a digest whose time passed while the daemon was down goes out then, with
        the hours it was down read, not "not read" as a digest run at start would have said."""
        if self.feeder is not None or self.sched is None or self._digest_caught_up:
            return
        if history_read(self.deps, self._now()):
            self._digest_caught_up = True
            self.sched.run_soon("daily_digest")

    def _request_detection(self) -> None:
        self._detect_due.set()
        if self.sched is not None:
            self.sched.run_soon("detection")  # if it is running, it sees the flag and goes again

    def detection_job(self) -> None:
        """Detect while new data arrived since the last run; a no-op until both sources polled."""
        if not all(p in self.deps.last_success for p in _POLLS):
            return
        while self._detect_due.is_set() and not self._stopping.is_set():
            self._detect_due.clear()
            try:
                run_detection(self.deps, self._now(), cancelled=self._stopping.is_set)
            except Cancelled:
                log.info("detection cancelled by shutdown; it runs again on the next start")
                return
            except Exception:
                self._detect_due.set()  # still to judge: the retry after the backoff detects again
                raise
            self._wake_delivery()

    def delivery_job(self) -> None:
        """The outbox tick; its outcome is kept for /readyz (which must not wait on the store)."""
        self._delivery = run_delivery(self.deps, self._now())
        self._wake_delivery()

    def _clock_stepped(self, step_s: float) -> None:
        """The wall clock was stepped back: the outbox's stored waits move with it
        (`alerts.outbox.clock_stepped`), and the outbox job is woken for the earliest. Not the
        demo's: its times are on its simulated clock, which no step of the wall clock moves."""
        if self.feeder is not None:
            return
        moved = clock_stepped(self.deps.store, timedelta(seconds=step_s), self._now())
        log.info("outbox waits moved with the clock", extra={"moved": moved, "step_s": round(step_s, 1)})
        self._wake_delivery()

    def _wake_delivery(self) -> None:
        """Have the outbox job run when the earliest group timer ends (`pipeline.next_due`), as
        Alertmanager flushes a group when its `group_wait` ends: a new finding reaches Slack
        `group_wait` after the detection that found it, not at the next tick after that (up to
        `outbox_seconds` + jitter later). Timers are on the daemon's clock, the scheduler on the wall
        clock: the wait left is carried over."""
        if self.sched is None:
            return
        due = next_due(self.deps.alert_deps)
        if due is not None:
            left = max(due - self._now(), timedelta(0))
            self.sched.run_at("outbox_delivery", datetime.now(UTC) + left + _WAKE_LATE)

    def digest_job(self) -> None:
        """The digest that is due (`_digest_day`), from billing polled by this process (never from
        an empty store). It runs at `digest.time` with no misfire limit, once more after a (re)start
        has read utilization (`_catch_up_digest`), and its retries may run past midnight: a day
        already done is not built again (`_digest_done`), and a digest whose time passed while the
        daemon was down, or was seen late, is sent rather than lost."""
        day = self._digest_day()
        if day is None or self._digest_done(day):
            return  # nothing due yet, or done by an earlier run (a restart): nothing to build
        with self._billing_lock:
            if "billing" not in self.deps.last_success:
                run_billing_poll(self.deps, self._now())
        run_digest(self.deps, self._now(), day=day, send=self.deps.notifier.name != "console")

    def _digest_done(self, day: date) -> bool:
        """Queued or sent (Slack), or written (the console, which queues nothing)."""
        if self.deps.notifier.name != "console":
            return digest_queued(self.deps, day)
        return digest_markdown(self.cfg.digest.out_dir, day).exists()

    def _digest_day(self) -> date | None:
        """The day whose digest is due: yesterday once today's `digest.time` has passed (in
        `digest.timezone`), else the day before. None when that time came before this store's first
        start: a new install sends its first digest at the next `digest.time`, not at once (before
        any utilization or detection was read). The demo's simulated days: yesterday."""
        tz = ZoneInfo(self.cfg.digest.timezone)
        local = self._now().astimezone(tz)
        if self.feeder is not None:
            return local.date() - timedelta(days=1)
        hh, mm = self.cfg.digest.hour_minute
        due = local.date() if (local.hour, local.minute) >= (hh, mm) else local.date() - timedelta(days=1)
        first = recorded_first_start(self.deps.store)
        if first is not None and first > datetime(due.year, due.month, due.day, hh, mm, tzinfo=tz):
            return None
        return due - timedelta(days=1)

    def once(self) -> dict[str, Any]:
        """One full cycle: advance the demo (if any), poll both sources, detect, deliver, digest."""
        if self.feeder is not None:
            self.feeder.advance()
        return run_cycle(self.deps, self._now())

    def job_specs(self) -> list[JobSpec]:
        d, cfg = self.cfg.daemon, self.cfg

        def every(seconds: float) -> IntervalTrigger:
            return IntervalTrigger(seconds=seconds, timezone=UTC)

        def step(f: Callable[[Deps, datetime], Any]) -> Callable[[], Any]:
            return lambda: f(self.deps, self._now())

        hh, mm = self.cfg.digest.hour_minute
        fastest_poll = min(d.billing_poll_minutes, d.utilization_poll_minutes) * 60
        u = cfg.utilization
        backfill = (
            [
                JobSpec(
                    "utilization_backfill",
                    self.backfill_job,
                    every(u.backfill_interval_seconds),
                    run_at_start=False,
                )
            ]
            if u.source == "cloud_monitoring" and u.backfill_chunks_per_run > 0
            else []
        )
        return [
            JobSpec("billing_poll", self.billing_job, every(d.billing_poll_minutes * 60)),
            JobSpec("utilization_poll", self.utilization_job, every(d.utilization_poll_minutes * 60)),
            *backfill,  # kicked after each live poll, then paced by its interval until done
            # Kicked after each poll; the interval only catches a kick lost to a race.
            JobSpec("detection", self.detection_job, every(fastest_poll), run_at_start=False),
            # Also the alert groups' timers: a group whose group_wait ended is sent from here.
            JobSpec("outbox_delivery", self.delivery_job, every(d.outbox_seconds)),
            JobSpec(
                "daily_digest",
                self.digest_job,
                CronTrigger(hour=hh, minute=mm, timezone=cfg.digest.timezone),
                # not at start: once utilization is read (`_catch_up_digest`); the demo's billing
                # job kicks it once per simulated day
                run_at_start=False,
                catch_up=True,
            ),
            JobSpec("price_refresh", step(run_price_refresh), every(d.price_refresh_hours * 3600)),
            JobSpec("retention", step(run_retention), every(24 * 3600)),
        ]

    # -- the always-on loop ---------------------------------------------------------------------
    def ready(self) -> tuple[bool, dict[str, object]]:
        """Ready when each source's poll succeeded within `http.ready_max_age_minutes`.

        Every job whose last run failed is listed under `failing` with the system it failed on and
        the error, ready or not: a Catalog API outage (prices from the cache or the bundled
        snapshot) or a failed detection is visible here before it is old enough to page on.
        `delivery` is the outbox after its last tick (pending, failed, last error), ready or not."""
        max_age = timedelta(minutes=self.cfg.http.ready_max_age_minutes)
        now = self.wall.now()
        detail: dict[str, object] = {}
        ok = self.sched is not None
        for name in ("billing_poll", "utilization_poll"):
            job = self.sched.jobs[name] if self.sched is not None else None
            last = job.last_success if job is not None else None
            fresh = last is not None and now - last <= max_age
            ok = ok and fresh
            detail[name] = {
                "fresh": fresh,
                "last_success": last.isoformat() if last else None,
                "last_error": redact(job.last_error) if job is not None and job.last_error else None,
                "source": job.last_source if job is not None else None,
            }
        if self.sched is not None:
            detail["failing"] = {
                name: {"source": job.last_source, "error": redact(job.last_error), "failures": job.failures}
                for name, job in self.sched.jobs.items()
                if job.last_error is not None
            }
        # Slack faults are listed, never unready: a restart cannot fix Slack, and a failed row
        # persists until re-queued (a 503 would hold back the rollout that fixes the token).
        # Page on gpucost_outbox_messages{state="failed"} > 0.
        if (last := self._delivery) is not None:
            error = last.get("last_error")
            detail["delivery"] = {
                "pending": last["pending"],
                "failed": last["failed"],
                "last_error": redact(error) if error else None,
            }
        return ok, detail

    def start(self) -> None:
        """Start the HTTP server and the scheduler (returns at once)."""
        d = self.cfg.daemon
        # What ended before the very first start is history (one summary, not a flood of alerts).
        started = first_start(self.deps.store, self._now())
        log.info("first started", extra={"first_start": started.isoformat()})
        self.sched = Scheduler(
            self.job_specs(),
            self.deps.metrics,
            misfire_grace=d.misfire_grace_seconds,
            jitter=d.jitter_seconds,
            wall=self.wall.now,
            on_step=self._clock_stepped,
        )
        if self.cfg.http.enabled:
            self.http = HealthServer(
                self.cfg.http.host, self.cfg.http.port, self.deps.metrics.registry, self.ready
            )
            self.http.start()
            log.info(
                "serving /healthz /readyz /metrics",
                extra={"host": self.cfg.http.host, "port": self.http.port},
            )
        self.sched.start()
        log.info("gpucost daemon started", extra={"jobs": ",".join(self.sched.jobs)})

    def shutdown(self, budget_s: float = SHUTDOWN_BUDGET_S) -> bool:
        """Stop jobs, flush the outbox once, stop HTTP; True if nothing had to be abandoned."""
        began = time.monotonic()
        assert self.sched is not None, "shutdown() before start()"
        self._stopping.set()  # long steps stop at their next safe point
        running = self.sched.running()
        finished = self.sched.stop(timeout=min(JOB_GRACE_S, budget_s / 2))
        if not finished:
            log.warning(
                "abandoning a running job; its open transaction rolls back and it runs again next start",
                extra={"jobs": ",".join(self.sched.running() or running)},
            )
        flushed = self._bounded(
            lambda: run_delivery(self.deps, self._now()), budget_s - (time.monotonic() - began) - 0.5
        )
        if self.http is not None:
            self.http.stop()
        self.abandoned = not (finished and flushed)
        log.info(
            "gpucost daemon stopped",
            extra={"clean": not self.abandoned, "shutdown_s": round(time.monotonic() - began, 2)},
        )
        return not self.abandoned

    def _bounded(self, fn: Callable[[], Any], timeout: float) -> bool:
        """Run `fn` in a daemon thread for at most `timeout` s; True if it finished without error."""
        outcome: dict[str, bool] = {}

        def _run() -> None:
            try:
                result = fn()
                outcome["ok"] = True
                log.info("outbox flushed", extra={k: v for k, v in result.items() if k != "report"})
            except Exception:
                outcome["ok"] = False
                log.exception("final outbox flush failed; pending messages stay queued for the next start")

        t = threading.Thread(target=_run, name="final-flush", daemon=True)
        t.start()
        t.join(max(timeout, 0.1))
        if t.is_alive():
            log.warning("final outbox flush timed out; unconfirmed messages are checked on the next start")
            return False
        return outcome.get("ok", False)

    def serve(self, stop: threading.Event | None = None) -> int:
        """Run until SIGTERM / SIGINT (or `stop` is set); always 0: a shutdown is not a failure."""
        stop = stop or threading.Event()
        self.start()
        wait_for_signal(stop)
        self.shutdown()
        return 0

    def close(self) -> None:
        self.deps.store.close()
        self.deps.aggregates.close()
        if self.feeder is not None:
            self.feeder.close()
