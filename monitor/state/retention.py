"""Retention: the state store keeps what the detectors and the alert log need, and no more.

An always-on daemon writes hourly aggregates, utilization points, findings and alert rows every
few minutes; without pruning the store grows forever and every detection run reads more of it.
`prune` deletes, in one transaction, what lies before the horizon (`state.retention_days`, never
less than what the configured detectors read: the detection window plus their baselines, and two
invoice months for month-to-date figures):

- utilization points (and series left without a point), and the record of reads (coverage) that
  ended before it;
- findings resolved before it; digests sent for days before it;
- alert messages delivered or failed before it, except a group's thread root (a later reply
  still needs its Slack `ts`), and notification-log entries of groups inactive since before it.

Pending alerts, open findings, active groups and first-start summaries are never pruned. The billing
aggregates and partition watermarks older than the horizon are pruned in the aggregate store
(`monitor.billing_poll.prune`), by the same daily job.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from alerts.outbox import ensure_schema, fmt_ts
from monitor.state.store import StateStore
from monitor.timeutil import to_iso

__all__ = ["MIN_RETENTION_DAYS", "horizon", "prune"]

log = logging.getLogger("gpucost.retention")

#: Early in a month the previous invoice month is still corrected and read (`billing_poll.poll_scope`).
MIN_RETENTION_DAYS = 62
_DETECTION_DAYS = 14  # monitor.cycle.detection_window


def horizon(now: datetime, retention_days: int, history_days: int) -> datetime:
    """The oldest time kept: `retention_days` back, or further if the detectors' baselines
    (`history_days` before the detection window) or month-to-date figures need it."""
    days = max(retention_days, MIN_RETENTION_DAYS, _DETECTION_DAYS + history_days + 1)
    return now - timedelta(days=days)


def prune(store: StateStore, cut: datetime) -> dict[str, int]:
    """Delete what lies before `cut`; returns the rows deleted per table (logged)."""
    from monitor.state.findings import MIGRATIONS as FINDINGS
    from monitor.utilization.state import log_change, rebuild_hours
    from monitor.utilization.state import migrate as migrate_utilization

    migrate_utilization(store)
    store.migrate("findings", FINDINGS)
    ensure_schema(store)
    epoch, alerts = int(cut.timestamp()), fmt_ts(cut)
    statements = {
        "utilization_points": ("DELETE FROM utilization_points WHERE start < ?", (epoch,)),
        # hours wholly before the cut; the hour it falls in is reduced again from what is left
        "utilization_hours": ("DELETE FROM utilization_hours WHERE hour + 3600 <= ?", (epoch,)),
        "utilization_series": (
            "DELETE FROM utilization_series WHERE id NOT IN (SELECT DISTINCT series FROM utilization_points)",
            (),
        ),
        "utilization_coverage": ('DELETE FROM utilization_coverage WHERE "end" <= ?', (epoch,)),
        "findings": (
            "DELETE FROM findings WHERE resolved_at IS NOT NULL AND resolved_at < ?",
            (to_iso(cut),),
        ),
        # a thread root is kept while its group fires and while a reply to it is pending: a
        # group that fired past the horizon and resolved lost its root under its "resolved"
        # reply, which then went top-level, or twice after an uncertain first attempt
        "alerts_outbox": (
            "DELETE FROM alerts_outbox WHERE status IN ('sent', 'failed') AND created_at < ?"
            " AND idempotency_key NOT IN"
            " (SELECT root_key FROM alerts_nflog WHERE root_key IS NOT NULL AND active = 1)"
            " AND idempotency_key NOT IN"
            " (SELECT root_key FROM alerts_outbox WHERE root_key IS NOT NULL AND status = 'pending')",
            (alerts,),
        ),
        "alerts_nflog": ("DELETE FROM alerts_nflog WHERE active = 0 AND updated_at < ?", (alerts,)),
    }
    deleted: dict[str, int] = {}
    with store.transaction() as conn:
        for table, (sql, params) in statements.items():
            deleted[table] = conn.execute(sql, params).rowcount
        log_change(conn, 0, epoch - epoch % 3600)  # the hours deleted whole
        if epoch % 3600:
            rebuild_hours(conn, epoch - epoch % 3600, epoch - epoch % 3600 + 3600)
        has_digest = conn.execute("SELECT 1 FROM schema_migrations WHERE component = 'digest'").fetchone()
        if has_digest:
            deleted["digest_sent"] = conn.execute(
                "DELETE FROM digest_sent WHERE day < ?", (cut.date().isoformat(),)
            ).rowcount
        # a job run that ended before the horizon is past every window read: it cannot be announced again
        has_jobs = conn.execute(
            "SELECT 1 FROM schema_migrations WHERE component = 'jobs_finished'"
        ).fetchone()
        if has_jobs:
            deleted["jobs_finished"] = conn.execute(
                "DELETE FROM jobs_finished WHERE last_hour < ?", (alerts,)
            ).rowcount
    log.info("retention", extra={"before": cut.isoformat(), "deleted": sum(deleted.values()), **deleted})
    return deleted
