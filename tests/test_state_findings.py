"""Findings keep one identity across polls; estimated -> billed replaces the impact in place."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from monitor.model import Finding, Scope, Severity, fingerprint
from monitor.state import SQLiteStore
from monitor.state.findings import open_findings, record_findings

T0 = datetime(2026, 11, 10, 12, tzinfo=UTC)


def finding(impact: str, estimated: bool = False) -> Finding:
    scope = Scope(project="p", instance="vm-1", instance_id="42")
    return Finding(
        kind="idle_gpu",
        severity=Severity.WARNING,
        title="t",
        summary="s",
        impact_usd=Decimal(impact),
        window_start=T0 - timedelta(hours=3),
        window_end=T0,
        scope=scope,
        evidence={},
        recommendation="r",
        fingerprint=fingerprint("idle_gpu", scope),
        estimated=estimated,
    )


def test_lifecycle_new_update_resolve_and_reopen(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    est = finding("240.00", estimated=True)
    assert record_findings(store, [est], T0) == {"new": 1, "updated": 0, "resolved": 0}
    billed = replace(est, impact_usd=Decimal("251.37"), estimated=False)
    assert record_findings(store, [billed], T0 + timedelta(hours=1)) == {
        "new": 0,
        "updated": 1,
        "resolved": 0,
    }
    (rec,) = open_findings(store)
    assert (rec.impact_usd, rec.estimated, rec.first_seen) == ("251.37", False, "2026-11-10T12:00:00Z")
    assert record_findings(store, [], T0 + timedelta(hours=2))["resolved"] == 1
    assert open_findings(store) == []
    assert record_findings(store, [billed], T0 + timedelta(hours=3)) == {
        "new": 0,
        "updated": 1,
        "resolved": 0,
    }
    assert len(open_findings(store)) == 1


def test_state_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    s1 = SQLiteStore(path)
    record_findings(s1, [finding("10")], T0)
    s1.close()
    assert [r.kind for r in open_findings(SQLiteStore(path))] == ["idle_gpu"]
