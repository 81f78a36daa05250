"""The steps of one monitoring cycle, as `run_*(deps, now)` functions.

The daemon decides *when* each runs (monitor.daemon), the CLI *which* runs once; both call these.
Each step reads what earlier steps left in the state store, so steps can run at different cadences
and a crash in one never corrupts another: billing poll -> utilization poll -> detection (findings
+ alert pipeline) -> delivery (outbox) -> digest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from alerts import pipeline
from alerts.console import ConsoleNotifier
from alerts.digest import DIGEST_GROUP, digest_key, enqueue_digest, write_digest
from alerts.export_stale import stale_since, tell_stale_export
from alerts.factory import make_notifier
from alerts.job_message import announce_jobs
from alerts.notifier import Notifier
from alerts.outbox import ensure_schema as ensure_outbox
from alerts.outbox import get_row, parse_ts
from alerts.outbox import status as outbox_status
from alerts.outbox_admin import requeue_failed
from monitor import month
from monitor.assemble import assemble_inputs
from monitor.billing_poll import latest_export, poll_billing, retire_state_tables
from monitor.billing_poll import prune as prune_billing
from monitor.clock import Clock
from monitor.config import Config
from monitor.detectors import Detector, build_detectors, history_needed, run_in_window
from monitor.detectors.inputs import BudgetSpec, DetectorInputs
from monitor.detectors.job_budget import budgets_without_spend, without_spend_message
from monitor.digest_data import digest_data
from monitor.gcpause import collector_paused
from monitor.metrics import Metrics
from monitor.model import Finding
from monitor.progress import progress
from monitor.sources.base import BillingSource
from monitor.sources.budgets import Budget, IdLookup, ProjectIds, budget_source_from_config
from monitor.sources.pricing import price_source_from_config
from monitor.state.analytics import AggregateStore, aggregates_path
from monitor.state.findings import record_findings
from monitor.state.retention import horizon, prune
from monitor.state.store import (
    SQLiteStore,
    StateStoreError,
    export_seen,
    last_detection,
    open_store,
    record_detection,
    recorded_first_start,
)
from monitor.timeutil import floor_hour, to_iso
from monitor.utilization import migrate as migrate_utilization
from monitor.utilization import replace_windows
from monitor.utilization.coverage import Interval, gaps, load_coverage, read_coverage
from monitor.utilization.mirror import sync as sync_utilization

__all__ = [
    "Cancelled",
    "Deps",
    "budget_specs",
    "build_deps",
    "detect",
    "detection_inputs",
    "month_to_date_by_category",
    "run_billing_poll",
    "run_cycle",
    "run_delivery",
    "run_detection",
    "run_digest",
    "run_price_refresh",
    "run_retention",
    "run_utilization_backfill",
    "run_utilization_poll",
    "utilization_coverage",
    "utilization_since",
]

log = logging.getLogger("gpucost.cycle")
_DETECTION_WINDOW = timedelta(days=14)
_FILE_REREAD = timedelta(days=3)


@dataclass
class Deps:
    cfg: Config
    clock: Clock
    store: SQLiteStore
    aggregates: AggregateStore
    billing: BillingSource
    utilization: Any  # CloudMonitoringSource | FileUtilizationSource
    prices: Any  # PriceSource
    budgets: Any  # BudgetSource
    detectors: list[Detector]
    notifier: Notifier
    metrics: Metrics
    last_success: dict[str, datetime] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: the job budgets the last detection run warned of (`budgets_without_spend`): told again only
    #: when they change, not at every run
    budgets_told: tuple[str, ...] = ()
    #: the file source's pieces this process stored, and the inputs each was read from
    #: (`_changed_pieces`): a poll re-stores only the pieces whose files changed
    file_pieces: dict[tuple[datetime, datetime], bytes] = field(default_factory=dict)
    #: the project ids of the numbers API budgets name, as the billing export pairs them: read once
    #: (`ProjectIds`), not at every detection run
    project_ids: ProjectIds = field(default_factory=ProjectIds)
    #: the clock a long step's progress lines read (`monitor.progress`); tests pass a fake one
    monotonic: Callable[[], float] = time.monotonic

    @property
    def alert_deps(self) -> pipeline.Deps:
        return pipeline.Deps(self.store, self.notifier, self.cfg.alerts, self.cfg.slack)


def _utilization_source(cfg: Config) -> Any:
    if cfg.utilization.source == "cloud_monitoring":
        from monitor.sources.monitoring import CloudMonitoringSource

        return CloudMonitoringSource(cfg.utilization, cfg.google)
    from monitor.sources.utilization_files import FileUtilizationSource

    return FileUtilizationSource(
        list(cfg.utilization.files), alignment_seconds=cfg.utilization.alignment_seconds
    )


def build_deps(
    cfg: Config,
    clock: Clock,
    billing: BillingSource,
    *,
    metrics: Metrics | None = None,
    stream: TextIO | None = None,
    environ: dict[str, str] | None = None,
) -> Deps:
    """Wire every source from config; nothing is read from the network here."""
    store = open_store(cfg.state.url)
    retire_state_tables(store)
    return Deps(
        cfg=cfg,
        clock=clock,
        store=store,
        aggregates=AggregateStore(aggregates_path(cfg.state.url, cfg.state.aggregates_path)),
        billing=billing,
        utilization=_utilization_source(cfg),
        prices=price_source_from_config(cfg.pricing, cfg.google, store),
        budgets=budget_source_from_config(cfg.budgets, cfg.google),
        detectors=build_detectors(cfg.detectors, "config", jobs=_jobs_config(cfg)),
        notifier=make_notifier(cfg, environ, stream),
        metrics=metrics or Metrics.create(),
    )


def _jobs_config(cfg: Config) -> Any:
    """`[jobs]` (lazily: `monitor.jobs` imports the analysis, which imports the detectors)."""
    from monitor.jobs.run import jobs_config

    return jobs_config(cfg)


def _ok(deps: Deps, step: str, now: datetime) -> None:
    deps.last_success[step] = now


def run_billing_poll(deps: Deps, now: datetime) -> dict[str, Any]:
    # one open of the aggregate file for the poll and the export's age (an open is ~13 ms of an
    # idle poll's ~45 at bench scale 5). A first poll, or one after downtime, reads weeks of export
    # (minutes of queries on BigQuery at scale): its log gets a progress line at most every 10 s,
    # never a bar (the log is a daemon's output); a poll under 10 s logs none
    with (
        deps.aggregates.session(),
        progress("billing poll", clock=deps.monotonic, heartbeat=1.0, bar=False) as stages,
    ):
        report = poll_billing(
            deps.billing,
            deps.aggregates,
            deps.cfg.billing,
            now,
            label_keys=deps.cfg.stored_label_keys(),
            progress=stages,
        )
        latest = latest_export(deps.aggregates)
    for q in report.queries:
        deps.metrics.billing_queries.labels(q).inc()
    if report.bytes_processed:
        deps.metrics.billing_bytes.inc(report.bytes_processed)
    deps.metrics.billing_rows.inc(report.hourly_rows_written)
    _ok(deps, "billing", now)
    log.info(
        "billing poll",
        extra={
            "partitions_changed": len(report.partitions_changed),
            "hourly_rows": report.hourly_rows_written,
            "queries": len(report.queries),
        },
    )
    _export_freshness(deps, now, latest)
    if report.partitions_seen == 0:
        # every figure would read $0 without another word: an export pointed at the wrong table, or
        # one whose rows are all older than the lookback (a copy of last year's export)
        log.warning(
            "no billing export rows in the poll's scope: check that [billing] names the current export"
            " (`gpucost check` shows its latest export time)",
            extra={"scope_start": to_iso(report.scope_start), "scope_end": to_iso(report.scope_end)},
        )
    return report.to_dict()


def _export_freshness(deps: Deps, now: datetime, latest: datetime | None) -> None:
    """The export's age on /metrics, and, for BigQuery, the channel told once when it stopped
    arriving, or never loaded anything since gpucost first ran (`alerts.export_stale`): polls keep
    succeeding on an export that no longer loads, or on an empty table. A local DuckDB copy is a
    snapshot its user loads: its age is no news."""
    deps.metrics.watch_export(latest, deps.clock)
    if deps.cfg.billing.source != "bigquery":
        return
    # the newest load ever seen (retention prunes the partitions of an export stopped for months);
    # without one, the export is measured from gpucost's first start, as the daemon records it
    latest = export_seen(deps.store, latest)
    watched_since = recorded_first_start(deps.store) if latest is None else None
    stale_after = timedelta(hours=deps.cfg.billing.stale_after_hours)
    since = stale_since(latest, watched_since, now, stale_after)
    if since is None:
        return
    log.warning(
        "the billing export has loaded nothing for %d h%s: check that it is still on and that [billing]"
        " names its table (`gpucost check`)",
        int((now - since) / timedelta(hours=1)),
        "" if latest is not None else " (no load seen since gpucost first started)",
        extra={"latest_export": to_iso(latest) if latest is not None else None},
    )
    table = deps.cfg.billing.table or ""
    tell_stale_export(
        deps.store,
        latest_export=latest,
        now=now,
        stale_after=stale_after,
        receiver=deps.alert_deps.default_channel,
        table=table,
        watched_since=watched_since,
    )


def utilization_since(cfg: Config, now: datetime) -> datetime:
    """How far back utilization must have been read: the billing window (`lookback_days`) or the
    detection window, whichever reaches further (detectors judge every hour of the latter)."""
    return min(now - timedelta(days=cfg.billing.lookback_days), detection_window(now)[0])


def run_utilization_poll(deps: Deps, now: datetime, *, backfill: bool = True) -> dict[str, Any]:
    """The live poll. `backfill=False` (the daemon, whose backfill is a job of its own) reads only
    the live windows, so detection follows them at once; one-shot runs backfill here too."""
    src = deps.utilization
    since = utilization_since(deps.cfg, now)
    if hasattr(src, "poll"):  # Cloud Monitoring: per (project, preset) watermarks in the store
        report = src.poll(deps.store, now, since=since, backfill=backfill)
        report.raise_for_failures()
        count, skipped = sum(w.samples for w in report.windows), report.skipped
        _log_backfill(report)
    else:  # files: re-read the recent days, and whatever of the window was never read
        migrate_utilization(deps.store)
        end = floor_hour(now) + timedelta(hours=1)
        covered = read_coverage(deps.store, "files", "files")
        unread = gaps(covered, floor_hour(since), end - _FILE_REREAD)
        start = unread[0][0] if unread else end - _FILE_REREAD
        # Six hours at a time (`PIECE`), each stored (and recorded as read) before the next is read:
        # a first read holds one piece's samples, not the window's (bench scale 48: three days of
        # files, 4.14 M samples, peaked at 2.6 GB read at once, 1,060 MB a day at a time, 469 MB
        # so). A crash between pieces leaves those stored so far recorded as read, the rest unread.
        # recorded as read up to now, not to the end of the current hour: the rest of the hour has no
        # samples yet, and an hour recorded as read without them is "unmonitored" (the demo's
        # daemon warned of GPU spend without utilization, then resolved it, cycle after cycle)
        pieces = _changed_pieces(src, start, end, now, covered, deps.file_pieces)
        count, skipped = replace_windows(deps.store, "files", "files", pieces, now=now, until=now)
    _copy_utilization(deps)
    deps.metrics.set_unknown_units(getattr(src, "unknown_units", {}))
    deps.metrics.utilization_samples.labels(deps.cfg.utilization.source).inc(count)
    _ok(deps, "utilization", now)
    log.info("utilization poll", extra={"samples": count, "skipped": sum(skipped.values())})
    return {"samples": count, "skipped": skipped}


def _copy_utilization(deps: Deps) -> None:
    """Bring the aggregate store's copy of the utilization hours up to what the poll stored, so a
    detection run finds it current (`monitor.utilization.mirror`; it syncs what is left). The
    samples are stored already: a copy that fails (the aggregate store held by another process)
    is said, and the next detection run copies them."""
    try:
        sync_utilization(deps.store, deps.aggregates)
    except StateStoreError as e:
        log.warning("utilization copy to the aggregate store failed", extra={"error": str(e)})


def _changed_pieces(
    src: Any,
    start: datetime,
    end: datetime,
    now: datetime,
    covered: Sequence[tuple[datetime, datetime]],
    stored: dict[tuple[datetime, datetime], bytes],
) -> Iterator[tuple[datetime, datetime, Any]]:
    """The file source's pieces of [start, end), less those this process stored from the same
    inputs (`stored`: (start, end as stored) -> `FetchResult.inputs`) whose range the store still
    records as read. Re-storing such a piece swaps its samples for the same samples: polls five
    minutes apart re-stored all twelve pieces of the three days each time where one or two had
    changed (seed 7: 1.4-1.6 s a poll, 0.06-0.07 s so). A piece is marked stored once the caller
    asks for the next one, after it committed this one."""

    def unchanged(lo: datetime, hi: datetime, inputs: bytes) -> bool:
        stop = min(hi, now)
        return stored.get((lo, stop)) == inputs and not gaps(covered, lo, stop)

    for lo, hi, result in src.fetch_pieces(start, end, unchanged=unchanged):
        inputs = result.inputs
        yield lo, hi, result
        stored[(lo, min(hi, now))] = inputs
    for key in [k for k in stored if k[0] < start]:  # left the re-read window: never asked again
        del stored[key]


def run_utilization_backfill(deps: Deps, now: datetime, cancelled: Callable[[], bool] | None = None) -> int:
    """One paced step of the history backfill (the daemon's own job); returns the chunks read, so
    the caller knows whether detection has anything new to judge. Files need no backfill."""
    src = deps.utilization
    if not hasattr(src, "backfill"):
        return 0
    report = src.backfill(deps.store, utilization_since(deps.cfg, now), now, cancelled=cancelled)
    deps.metrics.utilization_samples.labels(deps.cfg.utilization.source).inc(
        sum(w.samples for w in report.windows)
    )
    _log_backfill(report)
    if report.windows and history_read(deps, now):
        log.info("utilization history read", extra={"since": utilization_since(deps.cfg, now).isoformat()})
    return len(report.windows)


def history_read(deps: Deps, now: datetime) -> bool:
    """Whether utilization was read for the whole window (then the first-start summary need not
    wait any longer: what it lists is all there is to find)."""
    src = deps.utilization
    if not hasattr(src, "backfill_pending"):
        return True  # files: the first poll reads every unread hour of the window
    return src.backfill_pending(deps.store, utilization_since(deps.cfg, now), now) == 0


def _log_backfill(report: Any) -> None:
    if backfilled := [w for w in report.windows if w.backfill]:
        log.info(
            "utilization backfill",
            extra={"chunks": len(backfilled), "oldest": min(w.start for w in backfilled).isoformat()},
        )


_NOT_MAPPED = "no lookup of project ids was given"


def budget_specs(
    budgets: Sequence[Budget], kept_labels: Sequence[str] | None = None, project_ids: IdLookup | None = None
) -> list[BudgetSpec]:
    """Budgets the forecast measures as their owner set them: this invoice month's spend (net of
    every credit, or before credits) of the account, one project or one label whose key the
    aggregates keep (`kept_labels`, `Config.stored_label_keys`; None: not checked). The others are
    left out with a warning naming why: forecast as that, a quarter's amount was this month's, a
    folder's budget the whole account's. An API budget names its project by number:
    `project_ids` (called once, for the numbers of budgets otherwise measured) gives its id, as a
    config budget names it; a number without one is left out too (its spend would read $0)."""
    whys = [_not_evaluable(b, kept_labels) for b in budgets]
    numbers = {
        b.project_numbers[0]
        for b, why in zip(budgets, whys, strict=True)
        if why is None and b.project_numbers
    }
    ids, unknown = project_ids(numbers) if numbers and project_ids is not None else ({}, _NOT_MAPPED)
    specs = []
    for b, why in zip(budgets, whys, strict=True):
        project = b.projects[0] if b.projects else None
        if why is None and b.project_numbers:
            project = ids.get(b.project_numbers[0])
            why = None if project is not None else f"project number {b.project_numbers[0]}: {unknown}"
        if why is not None:
            log.warning("budget not evaluated: %s", why, extra={"budget": b.name})
            continue
        specs.append(
            BudgetSpec(
                name=b.name,
                amount=b.amount_usd,
                project=project,
                label=b.labels[0] if b.labels else None,
                gross=b.credits == "exclude_all",
            )
        )
    return specs


def _not_evaluable(b: Budget, kept_labels: Sequence[str] | None) -> str | None:
    """Why the forecast cannot measure `b` (None: it can). The Budget API's filter (period, folders,
    subaccounts, credit treatment): https://cloud.google.com/ruby/docs/reference/
    google-cloud-billing-budgets-v1/latest/Google-Cloud-Billing-Budgets-V1-Filter"""
    if len(b.projects) + len(b.project_numbers) > 1 or b.services:
        return "multi-project / service filters"
    if b.period != "month":
        return f"its amount is for a {b.period} period, not a calendar month"
    if b.resource_ancestors or b.subaccounts:
        return "scoped to folders, organizations or subaccounts"
    if b.credits not in ("include_all", "exclude_all"):
        return "net of some credit types only"
    if len(b.labels) > 1:
        return "more than one label"
    if kept_labels is not None and b.labels and b.labels[0][0] not in kept_labels:
        return f'label key "{b.labels[0][0]}" is not kept: add it to [billing] labels'
    return None


def detection_window(
    now: datetime, start: datetime | None = None, end: datetime | None = None
) -> tuple[datetime, datetime]:
    end = end or floor_hour(now) + timedelta(hours=1)
    return start or end - _DETECTION_WINDOW, end


def detection_inputs(
    deps: Deps, now: datetime, start: datetime | None = None, end: datetime | None = None
) -> DetectorInputs:
    """What detectors see, to `end` (default: the last 14 days up to the current hour; see
    `detection_window`), from the earliest of: the window start less the history the detectors'
    baselines need (`spend_anomaly`'s `baseline_days`), and the start of the reading of the
    invoice month to date (budget forecasts and `/metrics` need every row of the invoice)."""
    start, end = detection_window(now, start, end)
    migrate_utilization(deps.store)
    month_from = month.read_start(month.current_month(min(now, end)))
    read_from = min(start - history_needed(deps.detectors), month_from)
    return assemble_inputs(
        deps.store,
        read_from,
        end,
        now,
        provisional_days=deps.cfg.billing.provisional_days,
        idle_threshold_pct=deps.cfg.utilization.idle_threshold_pct,
        prices=deps.prices.price_book(now),
        budgets=_budget_specs(deps, month_from, end),
        aggregates=deps.aggregates,
        coverage=utilization_coverage(deps),
        gpu_from=start,  # GPU detectors judge the window; history and month to date are costs
    )


def _budget_specs(deps: Deps, month_from: datetime, end: datetime) -> list[BudgetSpec]:
    """The budgets' specs, the numbers of API budgets mapped to project ids from the export's rows
    of the invoice month read ([month_from, end)): a project with none spent nothing this month."""
    ids = deps.project_ids.over(deps.billing, month_from, end, lambda: latest_export(deps.aggregates))
    return budget_specs(deps.budgets.budgets(), deps.cfg.stored_label_keys(), ids)


@contextmanager
def _run_inputs(
    deps: Deps, now: datetime, start: datetime | None = None, end: datetime | None = None
) -> Iterator[DetectorInputs]:
    """`detection_inputs` for the length of one run: built and used with the cyclic collector
    paused (their objects live to the run's end: `monitor.gcpause`), and their costs, a view that
    holds the aggregate store's file, closed at its end, not at the next collection."""
    with collector_paused():
        inputs = detection_inputs(deps, now, start, end)
        try:
            yield inputs
        finally:
            inputs.hourly.close()


def utilization_coverage(deps: Deps) -> dict[str, tuple[Interval, ...]]:
    """What utilization the store has read: per polled project (and "*" for the rest) for Cloud
    Monitoring, one range set for every project with files."""
    if hasattr(deps.utilization, "poll"):
        u = deps.cfg.utilization
        return load_coverage(deps.store, [(p, s) for p in u.projects for s in u.presets])
    return load_coverage(deps.store, [("files", "files")], by_scope=False)


def detect(
    deps: Deps, now: datetime, start: datetime | None = None, end: datetime | None = None
) -> list[Finding]:
    """Findings for [start, end) (default: the last 14 days up to the current hour)."""
    with _run_inputs(deps, now, start, end) as inputs:
        return run_in_window(inputs, deps.detectors, now, detection_window(now, start, end)[0])


def month_to_date_by_category(inputs: DetectorInputs, now: datetime) -> dict[str, Decimal]:
    """Net spend per top-level category on the current invoice month (`monitor.month`: rows by
    their `invoice_month`, not their usage hour), up to `now`; exact Decimals (`/metrics`)."""
    sums = inputs.hourly.sums(("category",), end=now, month_of=month.current_month(now))
    return {cat: s.net for (cat,), s in sums.items()}


class Cancelled(Exception):
    """A step stopped at a safe point because the daemon is shutting down (nothing half-written)."""


def run_detection(deps: Deps, now: datetime, cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Detect, record findings and enqueue alerts. `cancelled()` is checked before anything is
    written, so a shutdown never lets a detection enqueue alerts after the final outbox flush."""

    def checkpoint() -> None:
        if cancelled is not None and cancelled():
            raise Cancelled("detection")

    with _run_inputs(deps, now) as inputs:
        checkpoint()
        findings = run_in_window(inputs, deps.detectors, now, detection_window(now)[0])
        checkpoint()
        counts = record_findings(deps.store, findings, now)
        record_detection(deps.store, now)
        report = pipeline.process(findings, now, deps.alert_deps, history_read=history_read(deps, now))
        jobs_told = announce_jobs(deps, inputs, now)  # finished jobs: one message each, outbox only
        deps.findings = findings
        deps.metrics.findings.clear()
        for f in findings:
            deps.metrics.findings.labels(f.kind, f.severity.value).inc()
        for cat, amount in month_to_date_by_category(inputs, now).items():
            deps.metrics.spend_usd.labels(cat).set(float(amount))  # exported as a float; summed exactly
        _tell_budgets_without_spend(deps, inputs)
    _ok(deps, "detection", now)
    log.info(
        "detection",
        extra={
            "findings": len(findings),
            **counts,
            "notified": len(report.notified),
            "history": report.history,  # ended before the first start: summarised, not alerted
            "summaries": len(report.summaries),
            "jobs_finished": len(jobs_told),
        },
    )
    return {"findings": len(findings), **counts, "pipeline": str(report)}


def _tell_budgets_without_spend(deps: Deps, inputs: DetectorInputs) -> None:
    """A job budget no billing row reaches never fires: a gauge while it lasts, a warning when
    the set of such budgets changes (a daemon started before its job runs would say it every run)."""
    unmatched = tuple(budgets_without_spend(deps.detectors, inputs))
    deps.metrics.set_budgets_without_spend(unmatched)
    if unmatched and unmatched != deps.budgets_told:
        log.warning(
            without_spend_message(deps.detectors, inputs, unmatched), extra={"budgets": list(unmatched)}
        )
    deps.budgets_told = unmatched


def run_retention(deps: Deps, now: datetime) -> dict[str, int]:
    """Prune the state and aggregate stores past `state.retention_days` (the daemon's daily job)."""
    cut = horizon(now, deps.cfg.state.retention_days, history_needed(deps.detectors).days)
    return prune_billing(deps.aggregates, cut) | prune(deps.store, cut)


def run_delivery(deps: Deps, now: datetime) -> dict[str, Any]:
    """The outbox job: flush the alert groups whose `group_wait` / `group_interval` ended (their
    timers, `pipeline.flush_due`), then send what is due. The daemon also runs it when the earliest
    timer ends (`Service._wake_delivery`), so alert latency is `group_wait`, and at most `group_wait` +
    the outbox interval, independent of the detection cadence."""
    flushed, report = pipeline.outbox_tick(_delivery_deps(deps), now)
    _record_sent_digests(deps)
    st = outbox_status(deps.store)
    deps.metrics.outbox_depth.labels("pending").set(st.pending)
    deps.metrics.outbox_depth.labels("failed").set(st.failed)
    deps.metrics.outbox_depth.labels("sent").set(st.sent)
    if report.failed:
        deps.metrics.delivery_failures.labels("permanent").inc(report.failed)
    if report.retried:
        deps.metrics.delivery_failures.labels("retryable").inc(report.retried)
    _ok(deps, "delivery", now)
    return {
        "flushed": len(flushed.notified),
        "report": str(report),
        "pending": st.pending,
        "failed": st.failed,
        "last_error": st.last_error,
        "operator_alerts": report.operator_alerts,
    }


def _delivery_deps(deps: Deps) -> pipeline.Deps:
    """The alert deps with the operator's console: a message that failed for good is told there,
    never through the notifier that failed (the console notifier itself when there is no Slack)."""
    console = deps.notifier if isinstance(deps.notifier, ConsoleNotifier) else None
    return replace(deps.alert_deps, operator=console or ConsoleNotifier(deps.cfg.alerts.console_dir))


_DIGEST_MIGRATIONS = [
    "CREATE TABLE digest_sent (day TEXT NOT NULL, channel TEXT NOT NULL, sent_at TEXT NOT NULL,"
    " slack_ts TEXT, PRIMARY KEY (day, channel))"
]


def _digest_sent(deps: Deps, day: date, channel: str) -> bool:
    deps.store.migrate("digest", _DIGEST_MIGRATIONS)
    with deps.store.transaction() as conn:
        row = conn.execute("SELECT 1 FROM digest_sent WHERE day = ? AND channel = ?", (str(day), channel))
        return row.fetchone() is not None


def _record_digest(deps: Deps, day: date, channel: str, ts: str | None, now: datetime) -> None:
    with deps.store.transaction() as conn:
        conn.execute(
            "INSERT OR REPLACE INTO digest_sent (day, channel, sent_at, slack_ts) VALUES (?, ?, ?, ?)",
            (str(day), channel, now.isoformat(), ts),
        )


def _record_sent_digests(deps: Deps) -> None:
    """Copy the digests the outbox delivered into `digest_sent` (idempotent): the once-per-day
    record says "sent" only once Slack confirmed the post."""
    ensure_outbox(deps.store)
    deps.store.migrate("digest", _DIGEST_MIGRATIONS)
    with deps.store.transaction() as conn:
        sent = conn.execute(
            "SELECT sequence, receiver, sent_at, slack_ts FROM alerts_outbox"
            " WHERE group_key = ? AND reason = 'digest' AND status = 'sent'",
            (DIGEST_GROUP,),
        ).fetchall()
        recorded = {(r[0], r[1]) for r in conn.execute("SELECT day, channel FROM digest_sent")}
    for seq, channel, sent_at, ts in sent:
        day = datetime.strptime(str(seq), "%Y%m%d").date()
        if (str(day), channel) not in recorded:
            _record_digest(deps, day, channel, ts, parse_ts(sent_at))


def run_digest(
    deps: Deps, now: datetime, day: date | None = None, send: bool = False, force: bool = False
) -> dict[str, Any]:
    """Yesterday's digest (in the digest's time zone) written under `digest.out_dir`; with `send`,
    also queued in the outbox, once per day and channel (key from (digest, day, channel): a restart
    or a second run adds nothing, and a digest sent for the day is never queued again), with its
    chart. The outbox job delivers it like any alert: retries with backoff, the look-up after an
    uncertain send, `gpucost outbox`, the operator alert on a permanent failure. Before any
    detection ran on the store (the daemon's first digest, `gpucost digest` on its own), its
    findings section says none was looked for.
    `force` (an operator asked for this day: `gpucost digest --send`) also re-queues the day's
    failed digest and delivers it at once, in this call. `result["sent"]` says whether it is at
    Slack, `result["queued"]` whether it waits in the outbox, `result["error"]` why not sent."""
    tz = ZoneInfo(deps.cfg.digest.timezone)
    day = day or (now.astimezone(tz).date() - timedelta(days=1))
    migrate_utilization(deps.store)  # a digest before any utilization poll reads no samples, not no table
    data = digest_data(
        deps.store,
        day,
        deps.cfg.digest.timezone,
        now,
        deps.cfg.billing.provisional_days,
        deps.cfg.utilization.idle_threshold_pct,
        jobs=_jobs_config(deps.cfg),
        aggregates=deps.aggregates,
        coverage=utilization_coverage(deps),
        detected=last_detection(deps.store) is not None,
    )
    md, png = write_digest(data, deps.cfg.digest.out_dir)
    result: dict[str, Any] = {"day": str(day), "markdown": str(md), "png": str(png)}
    if send:
        result.update(_queue_digest(deps, data, png, now, deliver=force))
        if result["error"]:  # still queued: the outbox retries it; else failed and told (outbox)
            level = logging.WARNING if result["queued"] else logging.ERROR
            log.log(level, "digest not delivered", extra={"day": str(day), "error": result["error"]})
    _ok(deps, "digest", now)
    log.info("digest written", extra={"day": str(day), "markdown": str(md)})
    return result


def digest_queued(deps: Deps, day: date) -> bool:
    """The day's digest is in the outbox (pending, sent or failed) or recorded as sent: queueing it
    again would add nothing, so a daemon (re)started after its time need not build it again."""
    channel = deps.alert_deps.default_channel
    ensure_outbox(deps.store)
    return get_row(deps.store, digest_key(day, channel)) is not None or _digest_sent(deps, day, channel)


def _queue_digest(deps: Deps, data: Any, png: Path, now: datetime, *, deliver: bool) -> dict[str, Any]:
    """Enqueue the day's digest unless it was sent; with `deliver`, re-queue what of it failed and
    send it now. The chart goes only where threads exist (a webhook cannot upload files)."""
    channel = deps.alert_deps.default_channel
    root = digest_key(data.day, channel)
    keys = [root, f"{root}-chart", f"{root}-jobs-chart"]  # charts: see enqueue_digest
    ensure_outbox(deps.store)
    _record_sent_digests(deps)
    before = get_row(deps.store, keys[0])
    if before is None and _digest_sent(deps, data.day, channel):  # sent before digests were queued
        return {"sent": True, "queued": False, "error": None, "already": True}
    if before is None:
        with deps.store.transaction() as conn:
            enqueue_digest(conn, data, png if deps.notifier.supports_threads else None, channel, now)
    if deliver:
        failed = tuple(r.id for r in _rows(deps, keys) if r.status == "failed")
        if failed:
            requeue_failed(deps.store, now, failed)
        pipeline.deliver_outbox(_delivery_deps(deps), now, keys)
        _record_sent_digests(deps)
    rows = _rows(deps, keys)
    errors = [r.last_error for r in rows if r.status != "sent" and r.last_error]
    return {
        "sent": rows[0].status == "sent",
        "queued": rows[0].status == "pending",  # the digest itself (its chart waits on it)
        "error": errors[0] if errors else None,
        "already": before is not None and before.status == "sent",
    }


def _rows(deps: Deps, keys: list[str]) -> list[Any]:
    return [r for k in keys if (r := get_row(deps.store, k)) is not None]


def run_price_refresh(deps: Deps, now: datetime) -> dict[str, Any]:
    if hasattr(deps.prices, "refresh"):
        deps.prices.refresh(now)
    book = deps.prices.price_book(now)
    _ok(deps, "prices", now)
    return {"source": book.source, "as_of": str(book.as_of)}


def run_cycle(deps: Deps, now: datetime) -> dict[str, Any]:
    """One full cycle, in order (used by `gpucost run --once` and tests)."""
    return {
        "billing": run_billing_poll(deps, now),
        "utilization": run_utilization_poll(deps, now),
        "detection": run_detection(deps, now),
        "delivery": run_delivery(deps, now),
        "digest": run_digest(deps, now),
    }


def state_dir(cfg: Config) -> Path:
    return Path(cfg.state.url.removeprefix("sqlite:///")).parent
