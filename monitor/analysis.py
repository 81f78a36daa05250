"""One pass of the whole pipeline over a window: what `gpucost analyze` and `gpucost gpus` print.

The daemon's steps, run once into a throwaway SQLite state store (a temp dir) so a one-off audit
never touches the daemon's state: the billing poll (`poll_billing`, with a lookback stretched to the
window), the utilization window (`replace_window` / `load_samples`), `assemble_inputs` and the
detectors. Sources are either files (`--billing` export files loaded into an in-memory DuckDB,
`--utilization` Monitoring JSON) or whatever `[billing]` / `[utilization]` configure (BigQuery and
Cloud Monitoring in production), so the same command audits a live account.

Window defaults: end = the latest `usage_end_time` in the data for the embedded engine (files or a
local DuckDB copy, which may be days old), or now for BigQuery (live: hours utilization covers but
billing does not yet are estimated); start = end - 14 days. Detectors also see the invoice month
to date (budget forecasts need it) and the history their baselines need before `start`
(`spend_anomaly`'s `baseline_days`), but totals, attribution, findings and GPU rows cover exactly
[start, end). With `[jobs.budgets]`, the billing is read as far back as the daemon would keep it
(`state.retention_days` before `end`): a job budget counts the job's life, as far back as that.

    sources = open_sources(cfg, billing_paths=[Path("export.ndjson.gz")])
    result = run_analysis(sources, cfg, now=clock.now())
    json.dumps(result.to_dict())
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor import month
from monitor.assemble import assemble_inputs
from monitor.attribution import compile_rules
from monitor.billing_poll import currencies, poll_billing, provisional_since
from monitor.billing_poll import prune as prune_billing
from monitor.config import Config
from monitor.detectors import build_detectors, history_needed, run_in_window
from monitor.detectors.costs import Costs, as_costs
from monitor.detectors.inputs import BudgetSpec, CostHour, DeferredGpuHours, GpuHourTable
from monitor.detectors.job_budget import budgets_without_spend, reads_held, without_spend_message
from monitor.errors import UserError
from monitor.gcpause import collector_paused
from monitor.model import Finding, category_of, to_cents
from monitor.progress import Progress
from monitor.report import data_extent, data_window, default_window
from monitor.sources.base import BillingSource, MeteredSource
from monitor.sources.factory import billing_source_from_config, billing_source_from_files
from monitor.state.analytics import AggregateStore
from monitor.state.retention import horizon
from monitor.state.store import SQLiteStore
from monitor.timeutil import floor_day, floor_hour, to_iso
from monitor.utilization import UtilizationSource, replace_windows
from monitor.utilization import migrate as migrate_utilization

if TYPE_CHECKING:
    from monitor.sources.budgets import Budget

__all__ = [
    "Analysis",
    "AttributionLine",
    "Sources",
    "Stats",
    "Window",
    "analyze_once",
    "attribution",
    "ceil_hour",
    "detection_start",
    "open_sources",
    "resolve_window",
    "run_analysis",
]

log = logging.getLogger("gpucost.analysis")
_DAY = timedelta(days=1)
_JOIN_ALIGNMENT = 3600  # seconds: the grain of the GPU join (hour buckets, epoch-aligned)


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class Window:
    """[start, end) analysed; `as_of` is the instant provisional days count back from (the latest
    load for files, now for live sources) and the `now` the detectors see."""

    start: datetime
    end: datetime
    as_of: datetime


@dataclass(frozen=True)
class AttributionLine:
    """Money of one (subcategory, pricing model) over the window, exact (summed from micros)."""

    category: str
    subcategory: str
    pricing_model: str | None
    cost: Decimal
    credits: Decimal

    @property
    def net_cost(self) -> Decimal:
        return self.cost + self.credits

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "subcategory": self.subcategory,
            "pricing_model": self.pricing_model,
            "cost": _num(self.cost),
            "credits": _num(self.credits),
            "net_cost": _num(self.net_cost),
        }


@dataclass
class Stats:
    """What reading the billing data cost: queries run, rows, BigQuery bytes, wall seconds."""

    engine: str
    queries: int = 0
    rows_scanned: int = 0
    rows_fetched: int = 0
    bytes_processed: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "queries": self.queries,
            "rows_scanned": self.rows_scanned,
            "rows_fetched": self.rows_fetched,
            "bytes_processed": self.bytes_processed,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Analysis:
    window: Window
    provisional_from: datetime
    currency: str
    attribution: tuple[AttributionLine, ...]
    findings: tuple[Finding, ...]
    #: the window's GPU hours, billed and estimated, as the join built them: columns, as `gpucost
    #: jobs` and `gpucost gpus` read them
    gpu_hours: GpuHourTable
    stats: Stats
    #: the export currencies other than USD whose amounts were converted (`currency_conversion_rate`)
    converted_from: tuple[str, ...] = ()

    @property
    def totals(self) -> dict[str, Decimal]:
        cost = sum((a.cost for a in self.attribution), Decimal(0))
        credits = sum((a.credits for a in self.attribution), Decimal(0))
        return {"cost": cost, "credits": credits, "net_cost": cost + credits}

    def window_dict(self) -> dict[str, str | None]:
        return {
            "start": to_iso(self.window.start),
            "end": to_iso(self.window.end),
            "provisional_from": to_iso(self.provisional_from),
        }

    def to_dict(self) -> dict[str, Any]:
        """The `gpucost analyze --format json` contract (issue 5), findings largest impact first."""
        return {
            "window": self.window_dict(),
            "currency": self.currency,
            "converted_from": list(self.converted_from),
            "totals": {k: _num(v) for k, v in self.totals.items()},
            "attribution": [a.to_dict() for a in self.attribution],
            "findings": [f.to_dict() for f in self.findings],
            "stats": self.stats.to_dict(),
        }


def _num(value: Decimal) -> float:
    """A JSON number to the cent (the sums are exact micros; a report shows cents), rounded as every
    printed figure is (`to_cents`: a real export's -1e-06 credits give 0.0, not -0.0)."""
    return float(to_cents(value))


# ------------------------------------------------------------------------------------------ sources


@dataclass
class Sources:
    """Where one analysis reads from. `live` sources (BigQuery) default the window end to now."""

    billing: BillingSource
    utilization: UtilizationSource | None
    prices: Any  # PriceSource
    #: as read: which are evaluated, and their project ids, is decided once the window is known
    #: (`_budget_specs`)
    budgets: Sequence[Budget] = ()
    live: bool = False
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for c in self.closers:
            c.close()


def open_sources(
    cfg: Config,
    *,
    billing_paths: Sequence[Path] = (),
    utilization_paths: Sequence[Path] = (),
    budgets: bool = True,
) -> Sources:
    """`--billing` / `--utilization` files when given, else the sources `cfg` configures.

    Without `--utilization` and with no utilization configured (no `utilization.files` and not
    Cloud Monitoring), GPU spend is not joined to any utilization: that is "not asked", not
    "agent missing", so `unmonitored_gpu` is left out rather than flagging the whole fleet.
    Budgets come from `[budgets]` only when a config file supplied them.
    """
    from monitor.sources.budgets import budget_source_from_config
    from monitor.sources.pricing import price_source_from_config

    rules = compile_rules(cfg.attribution.rules)
    if billing_paths:
        billing = billing_source_from_files(
            billing_paths, rules=rules, memory_limit=cfg.billing.duckdb_memory_limit
        )
    else:
        billing = billing_source_from_config(cfg.billing, google=cfg.google, rules=rules)
    utilization, closers = _utilization_source(cfg, utilization_paths)
    read = budget_source_from_config(cfg.budgets, cfg.google).budgets() if budgets else []
    return Sources(
        billing=billing,
        utilization=utilization,
        prices=price_source_from_config(cfg.pricing, cfg.google, None),
        budgets=tuple(read),
        live=billing.engine == "bigquery",
        closers=closers,
    )


def _budget_specs(
    budgets: Sequence[Budget], cfg: Config, billing: BillingSource, window: Window
) -> list[BudgetSpec]:
    """The budgets evaluated, as the daemon's detection decides (`monitor.cycle._budget_specs`): an
    API budget names its project by number, mapped to the project id from the export's rows of the
    invoice month read. Read only when some budget has a number (never for `[budgets]` items)."""
    if not budgets:  # nothing to evaluate: the daemon's module is not imported (0.25 s of `analyze`)
        return []
    from monitor.cycle import budget_specs  # the daemon's rule for which budgets are evaluable
    from monitor.sources.budgets import ProjectIds

    month_from = month.read_start(month.current_month(min(window.as_of, window.end)))
    ids = ProjectIds().over(billing, month_from, window.end, lambda: None)
    return budget_specs(budgets, cfg.stored_label_keys(), ids)


def _utilization_source(cfg: Config, paths: Sequence[Path]) -> tuple[UtilizationSource | None, list[Any]]:
    """Utilization aligned to the hour: the join judges each GPU by its mean over the hour, and the
    mean of an hour's points equals the mean of its 5-minute means, so reading hourly means (server
    side on Cloud Monitoring) gives the same figures from 12x fewer samples."""
    from monitor.sources.utilization_files import FileUtilizationSource

    align = _JOIN_ALIGNMENT
    if paths:
        return FileUtilizationSource(list(paths), alignment_seconds=align), []
    if cfg.utilization.source == "cloud_monitoring":
        from monitor.sources.monitoring import CloudMonitoringSource

        ucfg = cfg.utilization.model_copy(update={"alignment_seconds": align})
        src = CloudMonitoringSource(ucfg, cfg.google)
        return src, [src]
    if cfg.utilization.files:
        return FileUtilizationSource(list(cfg.utilization.files), alignment_seconds=align), []
    return None, []


# ------------------------------------------------------------------------------------------- window


def resolve_window(
    source: BillingSource, start: datetime | None, end: datetime | None, now: datetime, *, live: bool
) -> Window:
    """Defaults from the data (files, local DuckDB) or from `now` (live); see the module docstring.

    Raises `UserError` when the window is empty or reversed.
    """
    try:
        if live:
            return Window(*default_window(None, start, end, now), now)
        return Window(*data_window(source, start, end, now))
    except ValueError as e:
        raise UserError(str(e)) from None


def detection_start(window: Window, history: timedelta = timedelta(0)) -> datetime:
    """Where the detectors' data starts: the analysed start less the `history` their baselines need
    (`history_needed`), or, when earlier, where the invoice month of the window's end must be read
    from (`monitor.month.read_start`: its rows include corrections of the previous month's usage)."""
    return min(window.start - history, month.read_start(month.current_month(window.end)))


# ------------------------------------------------------------------------------------------ the run


@contextmanager
def _scratch_stores() -> Iterator[tuple[SQLiteStore, AggregateStore]]:
    """A throwaway state store and aggregate store in a temp dir: files, as the daemon's, so DuckDB
    compresses the aggregates and its memory limit bounds what stays in memory. The state store
    skips fsync (`synchronous=OFF`): it dies with the run, and storing 30 days of bench scale 5's
    utilization (120 six-hour pieces, a commit each) took 5.2 s with it, 4.0 s without."""
    with tempfile.TemporaryDirectory(prefix="gpucost-analyze-") as tmp:
        store, aggregates = (
            SQLiteStore(Path(tmp) / "state.sqlite", pragmas={"synchronous": "OFF"}),
            AggregateStore(Path(tmp) / "aggregates.duckdb"),
        )
        try:
            yield store, aggregates
        finally:
            store.close()
            aggregates.close()


def run_analysis(
    sources: Sources,
    cfg: Config,
    *,
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
    detectors: Any = None,
    month_to_date: bool = True,
    progress: Progress | None = None,
    keep_gpu_hours: bool = True,
) -> Analysis:
    """The pipeline once over [start, end) (defaults: see `resolve_window`).

    `progress` hears each stage's name (minutes each on a large export: `monitor.progress`).

    `detectors` overrides `cfg.detectors` (a built list, `[]` for none, or a raw `[detectors]`
    table). `month_to_date=False` reads only the window (no budget forecast needs the month).
    `keep_gpu_hours=False` leaves `Analysis.gpu_hours` empty (`gpucost analyze` prints none), so GPU
    hours are read only as far as the detectors read them (`assemble_inputs(defer=True)`).
    """
    began = time.monotonic()
    metered = MeteredSource(sources.billing)
    window = resolve_window(metered, start, end, now, live=sources.live)
    built = _detectors(cfg, detectors, with_unmonitored=sources.utilization is not None)
    history = history_needed(built)
    data_start = detection_start(window, history) if month_to_date else window.start - history
    # a job budget counts what is held before `data_start` too (`DetectorInputs.held_spend`)
    held = horizon(window.end, cfg.state.retention_days, history.days) if reads_held(built) else data_start
    read_from = min(data_start, held)
    days = cfg.billing.provisional_days
    stage = progress.describe if progress is not None else (lambda _label: None)
    # the GPU hours and findings live to the end: no collector passes over them (`monitor.gcpause`)
    with collector_paused(), _scratch_stores() as (store, aggregates):
        stage("reading billing")
        _poll(metered, aggregates, cfg, window, read_from)
        if held < data_start:  # the poll reads whole days before it: held spend starts where the daemon's does
            prune_billing(aggregates, held)
        # utilization is joined to the window's GPU hours only: the history is billing alone
        stage("reading utilization")
        _load_utilization(sources.utilization, store, window.start, window)
        prices = sources.prices.price_book(window.as_of) if sources.prices is not None else None
        stage("assembling")
        inputs = assemble_inputs(
            store,
            data_start,
            window.end,
            window.as_of,
            aggregates=aggregates,
            provisional_days=days,
            idle_threshold_pct=cfg.utilization.idle_threshold_pct,
            prices=prices,
            budgets=_budget_specs(sources.budgets, cfg, metered, window),
            gpu_from=window.start,  # the history before the window is read for costs alone
            defer=not keep_gpu_hours,  # a caller that keeps them all reads them all at once
        )
        costs = inputs.hourly  # a view on the scratch aggregate store: closed before it goes
        try:
            converted = _note_currencies(currencies(aggregates, window.start, window.end))
            lines = attribution(costs, window.start, window.end)
            stage("detecting")
            # inside: a job budget may join the GPU hours before the window (`all_gpu_hour_table`)
            findings = run_in_window(inputs, built, window.as_of, window.start)
            if unmatched := budgets_without_spend(built, inputs):
                log.warning(without_spend_message(built, inputs, unmatched))
        finally:
            costs.close()
    window_gpu = inputs.gpu_hours
    gpu = (
        inputs.gpu_hour_table().between(window.start, window.end)
        if keep_gpu_hours
        else GpuHourTable.from_rows([])
    )
    stats = _stats(metered, sources.billing.engine, read_from, window)
    # what was read back into Python from the engines: cost rows and sums, and the window's GPU
    # node-hours (not those before it, which only a job budget joins, when a job ran before it)
    if isinstance(window_gpu, DeferredGpuHours):
        stats.rows_fetched += costs.fetched + window_gpu.fetched
    else:
        stats.rows_fetched += costs.fetched + sum(1 for g in window_gpu if not g.estimated)
    stats.seconds = time.monotonic() - began
    return Analysis(
        window=window,
        provisional_from=provisional_since(window.as_of, days),
        currency="USD",  # `hourly.sql` divides every amount by `currency_conversion_rate`
        attribution=lines,
        findings=tuple(findings),
        gpu_hours=gpu,
        stats=stats,
        converted_from=converted,
    )


def _poll(
    source: BillingSource, store: AggregateStore, cfg: Config, window: Window, data_start: datetime
) -> None:
    """`poll_billing` as of the latest load, with a lookback reaching back to `data_start`.

    Polling "as of" the latest load (not the window end) makes the partition range cover rows that
    landed days after their usage, so totals match the export to the cent.
    """
    poll_now = max(window.as_of, window.end)
    lookback = max(1, (floor_day(poll_now) - floor_day(data_start)).days + 1)
    # model_copy skips validation on purpose: the daemon's lookback is capped at 62 days, a one-off
    # audit of a longer window is what the user asked for.
    billing_cfg = cfg.billing.model_copy(update={"lookback_days": lookback})
    # the scratch store is this command's alone: results stream into it, unspooled
    keys = cfg.stored_label_keys()
    report = poll_billing(source, store, billing_cfg, poll_now, label_keys=keys, private=True)
    log.info(
        "billing read",
        extra={"queries": len(report.queries), "hourly_rows": report.hourly_rows_written},
    )


def ceil_hour(dt: datetime) -> datetime:
    floor = floor_hour(dt)
    return floor if floor == dt else floor + timedelta(hours=1)


def _load_utilization(
    source: UtilizationSource | None, store: SQLiteStore, data_start: datetime, window: Window
) -> None:
    migrate_utilization(store)
    if source is None:
        return
    # whole hours (a live window ends at "now"): Monitoring aligns its buckets to the interval end
    end = ceil_hour(window.end)
    cut = getattr(source, "fetch_pieces", None)  # files: a piece's samples at a time, stored before the next
    pieces = cut(data_start, end) if cut is not None else [(data_start, end, source.fetch(data_start, end))]
    count, skipped = replace_windows(store, "analyze", "analyze", pieces, now=window.as_of, until=window.end)
    log.info("utilization read", extra={"samples": count, "skipped": sum(skipped.values())})
    if skipped:
        log.warning("utilization points skipped: %s", skipped)


def _detectors(cfg: Config, override: Any, *, with_unmonitored: bool) -> list[Any]:
    raw = override if override is not None else cfg.detectors
    if isinstance(raw, list):
        built = raw
    else:
        from monitor.jobs.run import jobs_config  # lazily: monitor.jobs.run imports this module

        built = build_detectors(raw, "config", jobs=jobs_config(cfg))
    if not with_unmonitored:
        built = [d for d in built if d.name != "unmonitored_gpu"]
    return built


def attribution(
    costs: Costs | Sequence[CostHour], start: datetime | None = None, end: datetime | None = None
) -> tuple[AttributionLine, ...]:
    """Per (subcategory, pricing model) over [start, end), summed exactly in the engine (whole
    micros); largest net first."""
    sums = as_costs(costs).sums(("subcategory", "pricing_model"), start=start, end=end)
    lines = [AttributionLine(category_of(sub), sub, pm, s.cost, s.credits) for (sub, pm), s in sums.items()]
    return tuple(sorted(lines, key=lambda a: (-a.net_cost, a.subcategory, a.pricing_model or "")))


def _note_currencies(seen: set[str]) -> tuple[str, ...]:
    """Amounts are always USD (`hourly.sql` divides by `currency_conversion_rate`); the currencies
    converted, which the output names: seed 7's USD total holds its EUR account converted
    ($263,739.10 against `report`'s USD invoice, $258,781.85) and said nothing of it."""
    other = tuple(sorted(seen - {"USD"}))
    if other:
        log.info("billing rows in %s converted to USD with currency_conversion_rate", ", ".join(other))
    return other


def _stats(metered: MeteredSource, engine: str, start: datetime, window: Window) -> Stats:
    """Totals over every query run. Engines that do not count input rows (DuckDB; BigQuery reports
    bytes instead) get one more cheap query: the export rows in the range read."""
    scanned = [r.rows_scanned for _, r in metered.runs if r.rows_scanned is not None]
    if not scanned:
        scanned = [data_extent(metered, start, window.end, window.as_of)[3]]
    results = [r for _, r in metered.runs]
    reported = [r.bytes_processed for r in results if r.bytes_processed is not None]
    return Stats(
        engine=engine,
        queries=len(results),
        rows_scanned=sum(scanned),
        rows_fetched=sum(len(r.rows) for r in results),
        bytes_processed=sum(reported) if reported else None,
    )


def analyze_once(
    cfg: Config,
    *,
    now: datetime,
    billing_paths: Sequence[Path] = (),
    utilization_paths: Sequence[Path] = (),
    start: datetime | None = None,
    end: datetime | None = None,
    with_budgets: bool = True,
    detectors: Any = None,
    month_to_date: bool = True,
    progress: Progress | None = None,
    keep_gpu_hours: bool = True,
) -> Analysis:
    """Open the sources, run the analysis, close the sources (what the CLI commands call)."""
    sources = open_sources(
        cfg, billing_paths=billing_paths, utilization_paths=utilization_paths, budgets=with_budgets
    )
    try:
        return run_analysis(
            sources,
            cfg,
            now=now,
            start=start,
            end=end,
            detectors=detectors,
            month_to_date=month_to_date,
            progress=progress,
            keep_gpu_hours=keep_gpu_hours,
        )
    finally:
        sources.close()
