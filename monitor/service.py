"""`gpucost run`: build the dependencies from config, then one cycle (`--once`) or the daemon.

The always-on mode schedules the `monitor.cycle` steps with `monitor.daemon.Scheduler`, serves
/healthz, /readyz and /metrics, and shuts down cleanly on SIGTERM / SIGINT (outbox flushed once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from monitor.attribution.compile import compile_rules
from monitor.clock import Clock, SystemClock
from monitor.config import Config
from monitor.cycle import (
    Deps,
    build_deps,
    run_billing_poll,
    run_cycle,
    run_delivery,
    run_detection,
    run_digest,
    run_price_refresh,
    run_utilization_poll,
)
from monitor.daemon import JobSpec, Scheduler, wait_for_signal
from monitor.http import HealthServer
from monitor.sources.base import BillingSource

__all__ = ["Service"]

log = logging.getLogger("gpucost.service")


class Service:
    """Holds the wiring for one `gpucost run` process."""

    def __init__(self, cfg: Config, *, stream: TextIO | None = None, environ: dict[str, str] | None = None):
        self.cfg = cfg
        self.feeder = None
        clock: Clock
        billing: BillingSource
        rules = compile_rules(cfg.attribution.rules)
        if cfg.demo.enabled:
            from monitor.demo import DemoFeeder
            from monitor.sources.billing_duckdb import DuckDBBillingSource

            self.feeder = DemoFeeder(cfg)
            clock = self.feeder.clock
            billing = DuckDBBillingSource(self.feeder.conn, rules=rules)
        else:
            from monitor.sources.factory import billing_source_from_config

            clock = SystemClock()
            billing = billing_source_from_config(cfg.billing, google=cfg.google, rules=rules)
        self.deps: Deps = build_deps(cfg, clock, billing, stream=stream, environ=environ)
        self._detect_lock = threading.Lock()

    # -- steps as the scheduler sees them -------------------------------------------------------
    def _now(self) -> datetime:
        return self.deps.clock.now()

    def billing_job(self) -> None:
        if self.feeder is not None:
            self.feeder.advance()
        run_billing_poll(self.deps, self._now())
        self.detection_job()

    def utilization_job(self) -> None:
        run_utilization_poll(self.deps, self._now())
        self.detection_job()

    def detection_job(self) -> None:
        with self._detect_lock:  # both polls trigger detection; never run it twice at once
            run_detection(self.deps, self._now())

    def once(self) -> dict[str, Any]:
        """One full cycle: advance the demo (if any), poll both sources, detect, deliver, digest."""
        if self.feeder is not None:
            self.feeder.advance()
        return run_cycle(self.deps, self._now())

    def job_specs(self) -> list[JobSpec]:
        d, cfg = self.cfg.daemon, self.cfg

        def every(**kw: float) -> IntervalTrigger:
            return IntervalTrigger(**kw, timezone=UTC)

        hh, mm = (int(x) for x in cfg.digest.time.split(":"))

        def step(f: Callable[[Deps, datetime], Any]) -> Callable[[], Any]:
            return lambda: f(self.deps, self._now())

        return [
            JobSpec("billing_poll", self.billing_job, every(seconds=d.billing_poll_minutes * 60)),
            JobSpec("utilization_poll", self.utilization_job, every(seconds=d.utilization_poll_minutes * 60)),
            JobSpec("outbox_delivery", step(run_delivery), every(seconds=d.outbox_seconds)),
            JobSpec(
                "daily_digest",
                step(lambda deps, now: run_digest(deps, now, send=self._slack_configured())),
                CronTrigger(hour=hh, minute=mm, timezone=cfg.digest.timezone),
                run_at_start=self.feeder is not None,
            ),
            JobSpec("price_refresh", step(run_price_refresh), every(seconds=d.price_refresh_hours * 3600)),
        ]

    def _slack_configured(self) -> bool:
        return type(self.deps.notifier).__name__ != "ConsoleNotifier"

    # -- the always-on loop ---------------------------------------------------------------------
    def ready(self, sched: Scheduler) -> tuple[bool, dict[str, object]]:
        """Ready when each source's poll succeeded within `http.ready_max_age_minutes`."""
        max_age = timedelta(minutes=self.cfg.http.ready_max_age_minutes)
        now = datetime.now(UTC)
        detail: dict[str, object] = {}
        ok = True
        for name in ("billing_poll", "utilization_poll"):
            job = sched.jobs[name]
            fresh = job.last_success is not None and now - job.last_success <= max_age
            ok &= fresh
            detail[name] = {
                "last_success": job.last_success.isoformat() if job.last_success else None,
                "last_error": job.last_error,
            }
        return ok, detail

    def serve(self, stop: threading.Event | None = None) -> int:
        stop = stop or threading.Event()
        d = self.cfg.daemon
        sched = Scheduler(
            self.job_specs(),
            self.deps.metrics,
            misfire_grace=d.misfire_grace_seconds,
            jitter=d.jitter_seconds,
        )
        http = None
        if self.cfg.http.enabled:
            http = HealthServer(
                self.cfg.http.host, self.cfg.http.port, self.deps.metrics.registry, lambda: self.ready(sched)
            )
            http.start()
            log.info(
                "serving /healthz /readyz /metrics", extra={"host": self.cfg.http.host, "port": http.port}
            )
        sched.start()
        log.info("gpucost daemon started", extra={"jobs": ",".join(sched.jobs)})
        wait_for_signal(stop)
        began = time.monotonic()
        finished = sched.stop(timeout=6.0)
        try:
            run_delivery(self.deps, self._now())  # flush the outbox once before leaving
        except Exception:
            log.exception("final outbox flush failed; pending messages stay queued for the next start")
        if http is not None:
            http.stop()
        log.info(
            "gpucost daemon stopped",
            extra={"clean": finished, "shutdown_s": round(time.monotonic() - began, 2)},
        )
        return 0

    def close(self) -> None:
        self.deps.store.close()
        if self.feeder is not None:
            self.feeder.close()
