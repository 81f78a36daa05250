"""The embedded default, alive: a simulated fleet that keeps exporting on a fast clock.

Each `advance()` moves simulated time forward by `demo.hours_per_cycle` hours and appends what the
billing export would have loaded in that span (late rows and corrections included) to the local
DuckDB table, and rewrites the day files of GPU utilization up to the new instant. The daemon then
polls both exactly as it would poll BigQuery and Cloud Monitoring.

Restart-safe without a side table: every load is one DuckDB transaction, and the simulated clock
resumes at the table's `MAX(export_time)`, so rows loaded before a crash are never loaded twice, and
day files are rewritten whole (atomically), never appended.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from monitor.clock import DemoClock
from monitor.config import Config
from monitor.simulate.simulator import DEFAULT_START, FleetSimulator
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_rows
from monitor.timeutil import floor_day, floor_hour

__all__ = ["DemoFeeder"]

log = logging.getLogger("gpucost.demo")
_DAY = timedelta(days=1)


class DemoFeeder:
    """Owns the demo's DuckDB connection and simulated clock (single writer: the billing job)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        d = cfg.demo
        self.sim = FleetSimulator(d.seed, DEFAULT_START, d.days, d.scale, inject=True)
        self.conn: duckdb.DuckDBPyConnection = open_billing_db(cfg.billing.db)
        self.util_dir = (
            Path(cfg.utilization.files[0]) if cfg.utilization.files else d.data_dir / "utilization"
        )
        self.util_dir.mkdir(parents=True, exist_ok=True)
        # Start with all but the last day already exported, so the first cycle has history to judge.
        first_now = self.sim.end - _DAY
        (resume,) = self.conn.execute("SELECT MAX(export_time) FROM billing_export").fetchone()
        if resume is None:
            self._load(DEFAULT_START - _DAY, first_now)
            self._write_utilization(DEFAULT_START, first_now)
        # Everything exported up to MAX(export_time) is loaded (loads are atomic): resume there.
        self.clock = DemoClock(max(resume, first_now) if resume is not None else first_now, self.sim.end)

    def advance(self) -> tuple[datetime, datetime, int]:
        """Move simulated time forward one step; returns (from, to, rows loaded)."""
        if self.clock.exhausted:
            return self.clock.now(), self.clock.now(), 0
        prev, now = self.clock.advance(timedelta(hours=self.cfg.demo.hours_per_cycle))
        rows = self._load(prev, now)
        self._write_utilization(floor_day(prev), now)
        log.info("demo: simulated time advanced", extra={"to": now.isoformat(), "rows_loaded": rows})
        return prev, now, rows

    def _load(self, t0: datetime, t1: datetime) -> int:
        return load_rows(self.conn, self.sim.rows_exported_between(t0, t1), "demo feed")

    def _write_utilization(self, start: datetime, until: datetime) -> None:
        """(Re)write the day files covering [start, until): each holds its day's points so far."""
        day = floor_day(start)
        end = floor_hour(until)
        while day < end:
            upto = min(day + _DAY, end)
            payload = {"timeSeries": self.sim.utilization_series(day, upto)}
            path = self.util_dir / f"{day.date().isoformat()}.json.gz"
            tmp = path.with_suffix(".tmp")
            with gzip.GzipFile(tmp, "wb", mtime=0) as gz:
                gz.write(json.dumps(payload, separators=(",", ":")).encode())
            os.replace(tmp, path)
            day += _DAY

    def close(self) -> None:
        self.conn.close()
