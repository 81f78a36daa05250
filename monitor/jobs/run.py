"""The jobs view of one window: the analysis pipeline once, `queries/jobs.sql` on the same source.

`run_analysis` (no detectors) gives what the idle-GPU path gives every other view: the window, the
attributed totals and the GPU hours joined with utilization (billed and estimated). `jobs.sql` then
runs on the same billing source with the same window, and `build_jobs` puts the two together.
Nothing here reads export rows: both queries aggregate in the engine.

    report = jobs_once(cfg, jobs_config(cfg), now=clock.now(), billing_paths=[Path("export.ndjson.gz")])
    report.to_dict()  # the `gpucost jobs --format json` document
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from monitor.analysis import Analysis, Sources, Window, open_sources, run_analysis
from monitor.columns import shared_values
from monitor.config import Config
from monitor.detectors.inputs import PriceLookup
from monitor.errors import UserError
from monitor.jobs.build import JOB_COLUMNS, JobColumns, JobRecord, build_jobs, paired_cents
from monitor.jobs.config import JobsConfig
from monitor.progress import Progress
from monitor.report import read_until
from monitor.sources.base import BillingSource
from monitor.timeutil import aware_utc

__all__ = [
    "QUERY",
    "JobsReport",
    "job_table_columns",
    "jobs_config",
    "jobs_once",
    "jobs_params",
    "jobs_report",
    "run_jobs",
]

QUERY = "jobs"


def jobs_config(cfg: Config) -> JobsConfig:
    """`[jobs]` of the config."""
    return cfg.jobs


@dataclass(frozen=True)
class JobsReport:
    """Every job of one window, plus what the export's attributed total was (for the check that
    the jobs add up to it)."""

    window: Window
    window_dict: Mapping[str, str | None]
    currency: str
    totals: Mapping[str, Decimal]
    jobs: tuple[JobRecord, ...]

    def job(self, name: str) -> JobRecord:
        """The job named `name`; `UserError` naming the known jobs otherwise."""
        for j in self.jobs:
            if j.job == name:
                return j
        known = ", ".join(j.job for j in self.jobs if j.job) or "none"
        raise UserError(f"--job {name!r}: no such job in this window (jobs: {known})")

    def to_dict(self, *, job: str | None = None) -> dict[str, Any]:
        """The `gpucost jobs --format json` document; with `job`, only that job, with its hours."""
        costs, nets = paired_cents([j.cost for j in self.jobs], [j.net_cost for j in self.jobs])
        docs = []
        for j, c, n in zip(self.jobs, costs, nets, strict=True):
            if job is not None and j.job != job:
                continue
            doc = j.to_dict(cost=c, net_cost=n)
            if job is not None:
                doc["hours"] = [h.to_dict() for h in j.hours]
            docs.append(doc)
        if job is not None and not docs:
            self.job(job)  # raises with the known names
        return {
            "window": dict(self.window_dict),
            "currency": self.currency,
            "totals": {
                "cost_usd": float(sum(costs, Decimal(0))),
                "net_cost_usd": float(sum(nets, Decimal(0))),
            },
            "jobs": docs,
        }


def jobs_params(window: Window, keys: Sequence[str]) -> dict[str, Any]:
    """`jobs.sql`'s parameters: the window's usage hours, load days up to the latest load (late
    rows count, as in the billing poll) and the job label keys."""
    return {
        "usage_start": window.start,
        "usage_end": window.end,
        "partition_end": read_until(window.as_of, window.end),
        "job_label_keys": list(keys),
    }


def job_table_columns(table: Any) -> JobColumns:
    """`jobs.sql`'s result (Arrow: a table or a batch reader) as the engine's columns, each
    distinct name, label set and hour one Python object (`shared_values`): at bench scale 48 the
    query's 1.65 M rows of the time, read as dicts, held 3.2 GB and took 34.5 s of `gpucost jobs`'
    95 s (836,707 rows since it sums what the jobs engine reads as money alone)."""
    import pyarrow as pa

    if isinstance(table, pa.RecordBatchReader):
        table = table.read_all()
    out: JobColumns = {}
    for name in JOB_COLUMNS:
        column = table.column(name)
        if name == "usage_hour":
            out[name] = shared_values(column, aware_utc)
        elif name in ("gross_micros", "net_micros"):  # DuckDB's sums arrive as decimal128(38, 0)
            out[name] = column.cast(pa.int64()).to_pylist()
        elif name == "usage_amount":
            out[name] = column.to_pylist()
        else:
            out[name] = shared_values(column)
    return out


def jobs_report(
    analysis: Analysis,
    rows: Sequence[Mapping[str, Any]] | JobColumns,
    jobs_cfg: JobsConfig,
    prices: PriceLookup | None,
) -> JobsReport:
    """Pure: the analysis of a window and `jobs.sql`'s rows (or columns) for the same window, as jobs."""
    records = build_jobs(
        rows,
        analysis.gpu_hours,
        keys=jobs_cfg.label_keys(),
        window_end=analysis.window.end,
        running_within=timedelta(hours=jobs_cfg.running_within_hours),
        prices=prices,
    )
    return JobsReport(
        window=analysis.window,
        window_dict=analysis.window_dict(),
        currency=analysis.currency,
        totals=analysis.totals,
        jobs=tuple(records),
    )


def run_jobs(
    sources: Sources,
    cfg: Config,
    jobs_cfg: JobsConfig,
    *,
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
    progress: Progress | None = None,
) -> JobsReport:
    """The analysis (no detectors, the window only) and `jobs.sql` on `sources.billing`; `progress`
    hears each stage's name (`run_analysis`'s, then the jobs' own)."""
    analysis = run_analysis(
        sources, cfg, now=now, start=start, end=end, detectors=[], month_to_date=False, progress=progress
    )
    if progress is not None:
        progress.describe("reading jobs")
    billing: BillingSource = sources.billing
    rows = job_table_columns(
        billing.run(QUERY, jobs_params(analysis.window, jobs_cfg.label_keys()), arrow=True).table
    )
    prices = sources.prices.price_book(analysis.window.as_of) if sources.prices is not None else None
    if progress is not None:
        progress.describe("building jobs")
    return jobs_report(analysis, rows, jobs_cfg, prices)


def jobs_once(
    cfg: Config,
    jobs_cfg: JobsConfig,
    *,
    now: datetime,
    billing_paths: Sequence[Path] = (),
    utilization_paths: Sequence[Path] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    progress: Progress | None = None,
) -> JobsReport:
    """Open the sources (files, else the configured ones), run, close (what `gpucost jobs` calls)."""
    sources = open_sources(
        cfg, billing_paths=billing_paths, utilization_paths=utilization_paths, budgets=False
    )
    try:
        return run_jobs(sources, cfg, jobs_cfg, now=now, start=start, end=end, progress=progress)
    finally:
        sources.close()
