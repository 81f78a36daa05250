"""The embedded default, alive: a simulated fleet that keeps exporting on a fast clock.

Each `advance()` moves simulated time forward by `demo.hours_per_cycle` hours and appends what the
billing export would have loaded in that span (late rows and corrections included) to the local
DuckDB table, and rewrites the day files of GPU utilization up to the new instant. The daemon then
polls both exactly as it would poll BigQuery and Cloud Monitoring.

Restart-safe: every load is one DuckDB transaction, and once it has committed the new instant is
recorded in a one-column table beside the export (`gpucost_demo_clock`). A restart resumes at the
later of that instant and the export's `MAX(export_time)`: every row exported up to either has been
loaded (a crash between a load and its record only leaves the clock a step behind, with no row in
between), so rows loaded before a crash are never loaded twice and the clock does not go back.
Day files are rewritten whole (a temporary file renamed over the old one), never appended; on a
restart the last two days are rewritten (a crash may have come between a load and its files) and
any missing day is written, so the files always match the clock.

Start-up cost matters (`gpucost run --once` is the first thing a user tries): the initial 13 days
of billing go to DuckDB through Arrow (`load_rows(typed=True)`), and each day file is generated and
written once, with the simulator's fast gzip level.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from monitor.clock import DemoClock
from monitor.config import Config
from monitor.simulate.export import open_gzip
from monitor.simulate.simulator import DEFAULT_START, FleetSimulator
from monitor.simulate.utilization import write_page
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_rows
from monitor.timeutil import floor_day, floor_hour

__all__ = ["DemoFeeder"]

log = logging.getLogger("gpucost.demo")
_DAY = timedelta(days=1)
_REWRITE_ON_RESUME = 2 * _DAY
_CLOCK = "gpucost_demo_clock"  # one row per load: the simulated instant it brought the export to


class DemoFeeder:
    """Owns the demo's DuckDB connection and simulated clock (single writer: the billing job)."""

    def __init__(self, cfg: Config, start: datetime | None = None):
        """`start`: the simulated instant a new feed begins at; by default the fleet's last day, so
        the first cycle has the rest as history (a soak test starts earlier to live many days)."""
        self.cfg = cfg
        d = cfg.demo
        self.sim = FleetSimulator(d.seed, DEFAULT_START, d.days, d.scale, inject=True)
        self.conn: duckdb.DuckDBPyConnection = open_billing_db(cfg.billing.db, memory_limit=cfg.billing.duckdb_memory_limit)
        self.util_dir = (
            Path(cfg.utilization.files[0]) if cfg.utilization.files else d.data_dir / "utilization"
        )
        self.util_dir.mkdir(parents=True, exist_ok=True)
        # Start with all but the last day already exported, so the first cycle has history to judge.
        first_now = start or self.sim.end - _DAY
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {_CLOCK} (now TIMESTAMPTZ NOT NULL)")
        (resume,) = self.conn.execute(
            f"SELECT greatest((SELECT MAX(now) FROM {_CLOCK}), MAX(export_time)) FROM billing_export"
        ).fetchone()
        if resume is None:
            self._load(DEFAULT_START - _DAY, first_now)
            now = first_now
        else:  # everything exported up to `resume` is loaded (loads are atomic): go on from there
            now = max(resume, first_now)
            log.info("demo: resuming", extra={"at": now.isoformat()})
        self.clock = DemoClock(now, self.sim.end)
        self._write_utilization(DEFAULT_START, now, rewrite_from=now - _REWRITE_ON_RESUME)

    def advance(self) -> tuple[datetime, datetime, int]:
        """Move simulated time forward one step; returns (from, to, rows loaded)."""
        if self.clock.exhausted:
            return self.clock.now(), self.clock.now(), 0
        # the export's rows and the utilization files first, then the clock: a utilization poll
        # running meanwhile at the new instant read files not yet written to it, recorded those
        # hours as read, and the daemon warned of GPU spend without utilization (resolved at the
        # next poll), cycle after cycle
        prev = self.clock.now()
        now = self.clock.next(timedelta(hours=self.cfg.demo.hours_per_cycle))
        rows = self._load(prev, now)
        self._write_utilization(floor_day(prev), now)
        self.clock.move_to(now)
        log.info("demo: simulated time advanced", extra={"to": now.isoformat(), "rows_loaded": rows})
        return prev, now, rows

    def _load(self, t0: datetime, t1: datetime) -> int:
        """Append the rows exported in (t0, t1], then record t1 as the instant to resume from."""
        rows = load_rows(self.conn, self.sim.rows_exported_between(t0, t1), "demo feed", typed=True)
        self.conn.execute(f"INSERT INTO {_CLOCK} VALUES ($1)", [t1])
        return rows

    def _write_utilization(
        self, start: datetime, until: datetime, rewrite_from: datetime | None = None
    ) -> None:
        """(Re)write the day files covering [start, until): each holds its day's points so far.

        With `rewrite_from`, days ending before it are written only when their file is missing.
        """
        day, end = floor_day(start), floor_hour(until)
        while day < end:
            path = self.util_dir / f"{day.date().isoformat()}.json.gz"
            if rewrite_from is None or day + _DAY > rewrite_from or not path.exists():
                self._write_day(path, day, min(day + _DAY, end))
            day += _DAY

    def _write_day(self, path: Path, day: datetime, upto: datetime) -> None:
        """One `{"timeSeries": [...]}` page, streamed series by series, renamed into place."""
        sim = self.sim
        tmp = path.with_suffix(".tmp")
        with open_gzip(tmp) as gz:
            write_page(gz, sim.ctx, sim.fleet.vms, sim.hours, day, upto)
        os.replace(tmp, path)

    def close(self) -> None:
        self.conn.close()
