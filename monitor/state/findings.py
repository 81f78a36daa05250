"""Findings with their lifecycle: first seen, last seen, resolved (state component "findings").

A finding is identified by its fingerprint (kind + scope), so an estimated finding that later gets
billed figures is the same row with its impact replaced, never a second finding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from monitor.model import Finding
from monitor.state.store import SQLiteStore
from monitor.timeutil import to_iso

__all__ = ["FindingRecord", "open_findings", "record_findings"]

MIGRATIONS = [
    """
    CREATE TABLE findings (
        fingerprint TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        severity TEXT NOT NULL,
        impact_usd TEXT NOT NULL,
        estimated INTEGER NOT NULL,
        provisional INTEGER NOT NULL,
        payload TEXT NOT NULL,
        first_seen TEXT NOT NULL,
        last_seen TEXT NOT NULL,
        resolved_at TEXT
    );
    CREATE INDEX findings_open ON findings (resolved_at)
    """
]


@dataclass(frozen=True)
class FindingRecord:
    fingerprint: str
    kind: str
    severity: str
    impact_usd: str
    estimated: bool
    first_seen: str
    last_seen: str
    resolved_at: str | None
    payload: dict


def record_findings(store: SQLiteStore, firing: Sequence[Finding], now: datetime) -> dict[str, int]:
    """Upsert what fires now; resolve open findings that no longer fire. One transaction."""
    store.migrate("findings", MIGRATIONS)
    stamp = to_iso(now)
    counts = {"new": 0, "updated": 0, "resolved": 0}
    with store.transaction() as conn:
        open_fps = {r[0] for r in conn.execute("SELECT fingerprint FROM findings WHERE resolved_at IS NULL")}
        known = {r[0] for r in conn.execute("SELECT fingerprint FROM findings")}
        for f in firing:
            args = (
                f.kind,
                f.severity.value,
                str(round(f.impact_usd, 2)),
                int(f.estimated),
                int(f.provisional),
                json.dumps(f.to_dict(), default=str),
                stamp,
                f.fingerprint,
            )
            if f.fingerprint in known:
                conn.execute(
                    "UPDATE findings SET kind=?, severity=?, impact_usd=?, estimated=?, provisional=?,"
                    " payload=?, last_seen=?, resolved_at=NULL WHERE fingerprint=?",
                    args,
                )
                counts["updated"] += 1
            else:
                conn.execute(
                    "INSERT INTO findings (kind, severity, impact_usd, estimated, provisional, payload,"
                    " last_seen, fingerprint, first_seen) VALUES (?,?,?,?,?,?,?,?,?)",
                    (*args, stamp),
                )
                counts["new"] += 1
        gone = open_fps - {f.fingerprint for f in firing}
        for fp in gone:
            conn.execute("UPDATE findings SET resolved_at=? WHERE fingerprint=?", (stamp, fp))
        counts["resolved"] = len(gone)
    return counts


def open_findings(store: SQLiteStore) -> list[FindingRecord]:
    store.migrate("findings", MIGRATIONS)
    with store.transaction() as conn:
        rows = conn.execute(
            "SELECT * FROM findings WHERE resolved_at IS NULL ORDER BY CAST(impact_usd AS REAL) DESC"
        ).fetchall()
    return [
        FindingRecord(
            r["fingerprint"],
            r["kind"],
            r["severity"],
            r["impact_usd"],
            bool(r["estimated"]),
            r["first_seen"],
            r["last_seen"],
            r["resolved_at"],
            json.loads(r["payload"]),
        )
        for r in rows
    ]
