"""Retention: the daemon's state store is pruned past its horizon, never of what is still needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from alerts.outbox import ensure_schema, fmt_ts
from monitor.billing_poll import hourly_costs, poll_billing
from monitor.billing_poll import prune as prune_billing
from monitor.config import BillingConfig, Config, parse_config
from monitor.errors import ConfigError
from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.service import Service
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from monitor.state.analytics import AggregateStore
from monitor.state.findings import open_findings, record_findings
from monitor.state.retention import horizon, prune
from monitor.state.store import SQLiteStore
from monitor.utilization import load_samples, replace_window
from monitor.utilization import migrate as migrate_utilization
from monitor.utilization.records import GpuSample
from tests.test_queries import export_row, load_rows

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
CUT = NOW - timedelta(days=90)
GPU = "Nvidia Tesla A100 GPU running in Americas"


@pytest.fixture
def store(tmp_path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "state.sqlite")
    yield s
    s.close()


def _finding(name: str, start: datetime) -> Finding:
    scope = Scope(project="p", zone="us-central1-a", instance=name)
    return Finding(
        kind="idle_gpu",
        severity=Severity.WARNING,
        title=name,
        summary=name,
        impact_usd=Decimal("10"),
        window_start=start,
        window_end=start + timedelta(hours=5),
        scope=scope,
        evidence={},
        recommendation="-",
        fingerprint=fingerprint("idle_gpu", scope),
    )


def _sample(at: datetime) -> GpuSample:
    return GpuSample("p", "us-central1-a", "42", "vm-1", None, None, "0", "A100", at, at + timedelta(minutes=5), 50.0, "gpu_utilization", None)  # fmt: skip


def _outbox(conn, key: str, status: str, created: datetime) -> None:
    conn.execute(
        "INSERT INTO alerts_outbox (idempotency_key, group_key, receiver, sequence, reason, channel, text,"
        " blocks, status, created_at, next_attempt_at) VALUES (?, 'g', '#c', 1, 'new_group', '#c', 't', '[]', ?, ?, ?)",
        (key, status, fmt_ts(created), fmt_ts(created)),
    )


def _nflog(conn, group: str, root: str, active: int, updated: datetime) -> None:
    conn.execute(
        "INSERT INTO alerts_nflog (group_key, receiver, labels, entry, snapshots, root_key, active, updated_at)"
        " VALUES (?, '#c', '{}', '{}', '{}', ?, ?, ?)",
        (group, root, active, fmt_ts(updated)),
    )


def test_prune_deletes_what_lies_before_the_horizon_and_keeps_what_is_still_needed(store) -> None:
    old, recent = CUT - timedelta(days=3), NOW - timedelta(days=2)
    # billing: an old and a recent day of aggregates, through the real poll
    conn = open_billing_db(None)
    load_rows(conn, [export_row(GPU, 2.0, hour=old), export_row(GPU, 3.0, hour=recent)])
    aggregates = AggregateStore(None)
    poll_billing(DuckDBBillingSource(conn), aggregates, BillingConfig(lookback_days=62), now=NOW)
    poll_billing(
        DuckDBBillingSource(conn), aggregates, BillingConfig(lookback_days=62), now=old + timedelta(days=1)
    )
    assert len(hourly_costs(aggregates, old - timedelta(days=1), NOW)) == 2
    # utilization: an old and a recent window
    migrate_utilization(store)
    for at in (old, recent):
        replace_window(store, "p", "ops_agent_nvml", at, at + timedelta(hours=1), [_sample(at)], now=at)
    # findings: resolved long ago, resolved lately, still open from long ago
    record_findings(store, [_finding("gone", old), _finding("open", old)], old)
    record_findings(store, [_finding("open", old)], old + timedelta(hours=1))  # "gone" resolved then
    record_findings(store, [_finding("open", old), _finding("late", recent)], recent)
    record_findings(store, [_finding("open", old)], recent + timedelta(hours=1))  # "late" resolved
    # alerts: delivered long ago (one the root of a still-active group's thread), pending, recent
    ensure_schema(store)
    with store.transaction() as c:
        _outbox(c, "old-sent", "sent", old)
        _outbox(c, "old-root", "sent", old)
        _outbox(c, "old-pending", "pending", old)
        _outbox(c, "new-sent", "sent", recent)
        _nflog(c, "active-group", "old-root", 1, old)
        _nflog(c, "closed-group", "old-sent", 0, old)
        _nflog(c, "closed-lately", "new-sent", 0, recent)

    deleted = prune(store, CUT) | prune_billing(aggregates, CUT)

    assert deleted["billing_hourly"] == 1 and deleted["utilization_points"] == 1
    assert [h.usage_hour for h in hourly_costs(aggregates, old - timedelta(days=1), NOW)] == [recent]
    assert [s.start for s in load_samples(store, old - timedelta(days=1), NOW)] == [recent]
    assert {f.payload["title"] for f in open_findings(store)} == {"open"}
    with store.transaction() as c:
        titles = {r[0] for r in c.execute("SELECT json_extract(payload, '$.title') FROM findings")}
        keys = {r[0] for r in c.execute("SELECT idempotency_key FROM alerts_outbox")}
        groups = {r[0] for r in c.execute("SELECT group_key FROM alerts_nflog")}
    assert titles == {"open", "late"}  # resolved before the horizon: gone; open or recent: kept
    assert keys == {"old-root", "old-pending", "new-sent"}
    assert groups == {"active-group", "closed-lately"}
    assert prune(store, CUT) | prune_billing(aggregates, CUT) == dict.fromkeys(deleted, 0)  # idempotent


def test_the_horizon_never_cuts_what_the_detectors_read() -> None:
    assert horizon(NOW, 90, 29) == NOW - timedelta(days=90)
    assert horizon(NOW, 62, 29) == NOW - timedelta(days=62)  # two invoice months
    assert horizon(NOW, 62, 90) == NOW - timedelta(days=14 + 90 + 1)  # a 90-day baseline wins


def test_retention_is_configured_and_scheduled(tmp_path) -> None:
    assert Config().state.retention_days == 90
    with pytest.raises(
        ConfigError, match=r"state\.retention_days: Input should be greater than or equal to 62"
    ):
        parse_config({"state": {"retention_days": 30}}, "gpucost.toml")
    db = tmp_path / "billing.duckdb"
    open_billing_db(db).close()
    cfg = parse_config(
        {
            "state": {"url": f"sqlite:///{tmp_path / 's.sqlite'}"},
            "billing": {"db": str(db)},
            "utilization": {"files": [str(tmp_path)]},
        }
    )
    assert "retention" in {s.name for s in Service(cfg).job_specs()}


def test_announced_job_runs_that_ended_before_the_horizon_are_pruned(store) -> None:
    from alerts.job_message import migrate as migrate_jobs

    migrate_jobs(store)
    with store.transaction() as c:
        for job, last in (("old-run", CUT - timedelta(days=1)), ("new-run", NOW - timedelta(days=3))):
            c.execute(
                "INSERT INTO jobs_finished (job, receiver, first_hour, last_hour, idempotency_key, announced_at)"
                " VALUES (?, '#c', ?, ?, ?, ?)",
                (job, fmt_ts(last - timedelta(days=2)), fmt_ts(last), f"k-{job}", fmt_ts(last)),
            )
    assert prune(store, CUT)["jobs_finished"] == 1
    with store.transaction() as c:
        assert [r[0] for r in c.execute("SELECT job FROM jobs_finished")] == ["new-run"]
