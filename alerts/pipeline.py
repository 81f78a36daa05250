"""The alert pipeline, assembled in one place: `build_stages()`.

    unique -> min_severity -> silence -> route -> group -> dedupe -> enqueue      (process)
    outbox -> deliver with retry -> record (outbox row + notification log)       (deliver_outbox)

`process(findings_now_firing, now, deps)` runs the first list inside ONE state-store transaction:
the notification-log updates and the outbox rows they imply commit together, before anything is
sent. The log then says "queued", not "sent": `deliver_outbox(deps, now)` (in `alerts.delivery`)
sends what is due and records the outcome, and only a confirmed delivery writes the log's
`last_notified_at` (in the same transaction that marks the outbox row sent).
A fingerprint that was firing and is absent from `findings_now_firing` is resolved.

Group timers, as in Alertmanager: a group that must wait (`group_wait` for a new group,
`group_interval` for an update) stores when it is due (`wait_until` in its log row), and `process`
stores what fired (`alerts_firing`). `flush_due(deps, now)`, run by the outbox job before each
delivery (`outbox_tick`), runs the same stages for the groups whose time has come, over what fired
at the last detection run: a finding first seen at t reaches Slack at t + group_wait, since the
daemon wakes the outbox job when the earliest timer ends (`next_due`), and by t + group_wait + the
outbox interval at worst, whether or not another detection runs, and after a restart too (both are
in the store).
A flush only acts on due groups; repeats and resolutions still come from detection runs.

First start is not a flood: the `history` stage keeps findings that ended before gpucost first
started out of every group and hands them to `alerts.history`, which posts them once as one summary
per channel.

Each stage is a small function `(Batch, Ctx) -> Batch`; none reads a clock or calls a network.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from alerts.blocks import render_group, snapshot
from alerts.dedupe import Action, Decision, LogEntry, Policy, Reason, decide
from alerts.delivery import DeliveryReport, deliver_outbox, fire_fault
from alerts.history import enqueue_summaries, history_settings
from alerts.notifier import Message, Notifier
from alerts.outbox import enqueue, ensure_schema, fmt_ts, idempotency_key, load_firing, parse_ts, save_firing
from alerts.routing import finding_value, route, routes_from_config
from alerts.silence import ActiveSilence, is_silenced, silences_from_config
from monitor.config import AlertsConfig, SlackConfig
from monitor.model import Finding, Severity
from monitor.state.store import StateStore

__all__ = [
    "DEFAULT_CHANNEL",
    "DeliveryReport",
    "Deps",
    "PipelineReport",
    "build_stages",
    "deliver_outbox",
    "flush_due",
    "idempotency_key",
    "outbox_tick",
    "process",
]

DEFAULT_CHANNEL = "#gpucost-alerts"


@dataclass(frozen=True)
class Deps:
    """Everything the pipeline touches, injected. `fault(point)` is a test hook that may raise to
    simulate a crash at "after_enqueue", "before_send" or "after_send"."""

    store: StateStore
    notifier: Notifier
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    fault: Callable[[str], None] | None = None
    batch_size: int = 50
    #: Where alerts about gpucost itself go (a message that failed for good), never the notifier
    #: that failed: the console notifier (`monitor.cycle` passes one); None logs them only.
    operator: Notifier | None = None
    #: How long a delivery pass waits for another one (another thread or process) to finish before
    #: leaving the due rows to it (`alerts.delivery.OUTBOX_LOCK`); a pass takes seconds, up to the
    #: notifier's timeout per row when Slack hangs.
    lock_wait_s: float = 30.0

    @property
    def default_channel(self) -> str:
        return self.slack.channel or DEFAULT_CHANNEL


@dataclass(frozen=True)
class Notified:
    group_key: str
    receiver: str
    reason: Reason
    idempotency_key: str
    fingerprints: tuple[str, ...]


@dataclass(frozen=True)
class PipelineReport:
    received: int
    below_min_severity: int
    silenced: int
    groups: int
    waiting: int
    notified: tuple[Notified, ...]
    history: int = 0  # findings that ended before the first start (never alerted one by one)
    summaries: tuple[str, ...] = ()  # idempotency keys of the summaries enqueued


@dataclass
class Group:
    key: str
    receiver: str
    labels: dict[str, str | None]
    findings: list[Finding] = field(default_factory=list)


@dataclass
class Batch:
    findings: list[Finding]
    routed: list[tuple[Finding, str]] = field(default_factory=list)
    groups: dict[tuple[str, str], Group] = field(default_factory=dict)
    decisions: list[tuple[Group, Decision, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Ctx:
    now: datetime
    conn: sqlite3.Connection
    min_rank: int
    silences: list[ActiveSilence]
    routes: list[tuple[dict[str, str], str]]
    default_channel: str
    group_by: tuple[str, ...]
    policy: Policy
    still_firing: frozenset[str] = frozenset()
    only: frozenset[tuple[str, str]] | None = None  # a timer flush: decide for these groups only
    started: datetime | None = None  # first start; None: no history split
    history_cut: datetime | None = None  # a finding ending before this is history
    remind_ended: bool = False  # remind findings whose waste is over (`Finding.over`) too
    summary_due: bool = False  # the history had time to be read: summarise it
    counts: dict[str, int] = field(default_factory=dict)
    notified: list[Notified] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


Stage = Callable[[Batch, Ctx], Batch]


def unique(b: Batch, ctx: Ctx) -> Batch:
    """One finding per fingerprint (the last wins); everything here is still firing."""
    by_fp = {f.fingerprint: f for f in b.findings}
    ctx.still_firing = frozenset(by_fp)
    ctx.count("received", len(by_fp))
    return replace(b, findings=list(by_fp.values()))


def min_severity(b: Batch, ctx: Ctx) -> Batch:
    kept = [f for f in b.findings if f.severity.rank >= ctx.min_rank]
    ctx.count("below_min_severity", len(b.findings) - len(kept))
    return replace(b, findings=kept)


def silence(b: Batch, ctx: Ctx) -> Batch:
    kept = [f for f in b.findings if not is_silenced(f, ctx.silences, ctx.now)]
    ctx.count("silenced", len(b.findings) - len(kept))
    return replace(b, findings=kept)


def route_stage(b: Batch, ctx: Ctx) -> Batch:
    return replace(b, routed=[(f, route(f, ctx.routes, ctx.default_channel)) for f in b.findings])


def history(b: Batch, ctx: Ctx) -> Batch:
    """Take out what ended before the first start; summarise it once it is due (not in a flush)."""
    if ctx.history_cut is None:
        return b
    cut = ctx.history_cut
    past = [(f, r) for f, r in b.routed if f.window_end < cut]
    ctx.count("history", len(past))
    if past and ctx.summary_due and ctx.only is None:
        ctx.summaries += enqueue_summaries(ctx.conn, past, now=ctx.now, started=ctx.started or ctx.now)
    return replace(b, routed=[(f, r) for f, r in b.routed if f.window_end >= cut])


def group(b: Batch, ctx: Ctx) -> Batch:
    groups: dict[tuple[str, str], Group] = {}
    for f, receiver in b.routed:
        labels = {k: finding_value(f, k) for k in ctx.group_by}
        key = json.dumps(sorted(labels.items()), separators=(",", ":"))
        g = groups.setdefault((key, receiver), Group(key, receiver, labels))
        g.findings.append(f)
    for g in groups.values():
        g.findings.sort(key=lambda f: (-f.impact_usd, f.fingerprint))
    return replace(b, groups=groups)


def dedupe(b: Batch, ctx: Ctx) -> Batch:
    """Load the log of every current or still-open group and decide (pure) for each."""
    logs = _load_log(ctx.conn, b.groups)
    groups = dict(b.groups)
    for (key, receiver), row in logs.items():
        groups.setdefault((key, receiver), Group(key, receiver, json.loads(row["labels"])))
    if ctx.only is not None:
        groups = {gid: g for gid, g in groups.items() if gid in ctx.only}
    decisions = []
    for gid, g in sorted(groups.items()):
        row = logs.get(gid)
        entry = _entry(row) if row is not None else None
        firing = frozenset(f.fingerprint for f in g.findings)
        current = None if ctx.remind_ended else frozenset(f.fingerprint for f in g.findings if not f.over)
        d = decide(entry, firing, ctx.still_firing, ctx.now, ctx.policy, current)
        decisions.append((g, d, {"row": row}))
    return replace(b, decisions=decisions)


def enqueue_stage(b: Batch, ctx: Ctx) -> Batch:
    """Persist log entries and, for NOTIFY, the outbox row: same transaction, before any send."""
    for g, d, extra in b.decisions:
        row = extra["row"]
        if d.action is Action.NONE:
            if row is not None and row["wait_until"] is not None:  # nothing left to wait for
                _clear_timer(ctx.conn, g)
            continue
        if d.action is Action.WAIT:
            ctx.count("waiting")
        snaps = json.loads(row["snapshots"]) if row is not None else {}
        root_key = row["root_key"] if row is not None else None
        if d.action is Action.NOTIFY:
            root_key = _enqueue_notification(g, d, snaps, root_key, ctx)
        current = {f.fingerprint: snapshot(f) for f in g.findings}
        snaps = {fp: s for fp, s in {**snaps, **current}.items() if fp in d.entry.firing or fp in current}
        timer = d.wait_until if d.action is Action.WAIT else None
        _save_log(ctx.conn, g, d.entry, snaps, root_key, ctx.now, timer)
    return b


def build_stages() -> tuple[Stage, ...]:
    """The whole alert pipeline, in order. Delivery and recording run in `deliver_outbox`."""
    return (unique, min_severity, silence, route_stage, history, group, dedupe, enqueue_stage)


def process(
    findings_now_firing: Sequence[Finding], now: datetime, deps: Deps, *, history_read: bool = False
) -> PipelineReport:
    """Run the pipeline for everything firing at `now`; returns what was decided and enqueued.
    `history_read`: the whole window's utilization was read, so the first-start summary is due
    without waiting out `first_start_summary_wait_minutes`."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    ensure_schema(deps.store)
    settings = _settings(deps, now, history_read=history_read)
    with deps.store.transaction() as conn:
        save_firing(conn, list({f.fingerprint: f for f in findings_now_firing}.values()), now)
        ctx = _run(Ctx(now=now, conn=conn, **settings), findings_now_firing)
    fire_fault(deps.fault, "after_enqueue")
    return _report(ctx)


def flush_due(deps: Deps, now: datetime) -> PipelineReport:
    """Decide for every group whose wait ended by `now`, over what fired at the last detection
    run (one transaction, like `process`); a no-op when no timer is due."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    ensure_schema(deps.store)
    settings = _settings(deps, now)
    with deps.store.transaction() as conn:
        due = frozenset(
            (r[0], r[1])
            for r in conn.execute(
                "SELECT group_key, receiver FROM alerts_nflog WHERE wait_until IS NOT NULL"
                " AND wait_until <= ?",
                (fmt_ts(now),),
            )
        )
        ctx = Ctx(now=now, conn=conn, **settings, only=due)
        if due:
            ctx = _run(ctx, load_firing(conn))
    if ctx.notified:
        fire_fault(deps.fault, "after_enqueue")
    return _report(ctx)


def next_due(deps: Deps) -> datetime | None:
    """When the earliest waiting group becomes due (its `group_wait` / `group_interval` timer), or
    None: what the daemon wakes the outbox job for, so a group goes out when its wait ends rather
    than at the next tick after it."""
    ensure_schema(deps.store)
    with deps.store.transaction() as conn:
        row = conn.execute("SELECT MIN(wait_until) FROM alerts_nflog WHERE wait_until IS NOT NULL").fetchone()
    return parse_ts(row[0]) if row and row[0] else None


def outbox_tick(deps: Deps, now: datetime) -> tuple[PipelineReport, DeliveryReport]:
    """What the outbox job does each interval: flush the groups that are due, then deliver."""
    flushed = flush_due(deps, now)
    return flushed, deliver_outbox(deps, now)


def _run(ctx: Ctx, findings: Sequence[Finding]) -> Ctx:
    batch = Batch(findings=list(findings))
    for stage in build_stages():
        batch = stage(batch, ctx)
    ctx.count("groups", len(batch.decisions))
    return ctx


def _report(ctx: Ctx) -> PipelineReport:
    c = ctx.counts
    return PipelineReport(
        received=c.get("received", 0),
        below_min_severity=c.get("below_min_severity", 0),
        silenced=c.get("silenced", 0),
        groups=c.get("groups", 0),
        waiting=c.get("waiting", 0),
        notified=tuple(ctx.notified),
        history=c.get("history", 0),
        summaries=tuple(ctx.summaries),
    )


def _settings(deps: Deps, now: datetime, *, history_read: bool = False) -> dict[str, Any]:
    a = deps.alerts
    return {
        "min_rank": Severity(a.min_severity).rank,
        "silences": silences_from_config(a),
        "routes": routes_from_config(deps.slack),
        "default_channel": deps.default_channel,
        "group_by": tuple(a.group_by),
        "policy": Policy(
            group_wait=timedelta(seconds=a.group_wait_seconds),
            group_interval=timedelta(seconds=a.group_interval_seconds),
            repeat_interval=timedelta(hours=a.repeat_interval_hours),
            send_resolved=a.send_resolved,
        ),
        "remind_ended": a.remind_ended,
        **history_settings(deps.alerts, deps.store, now, history_read=history_read),
    }


def _enqueue_notification(
    g: Group, d: Decision, snaps: dict[str, Any], root_key: str | None, ctx: Ctx
) -> str | None:
    reason = d.reason or Reason.REPEAT
    # Every message shows the whole group (what is new marked), as Alertmanager's do: any message
    # restarts the group's repeat interval, so one showing only the news would leave the rest of
    # the group unreminded for up to an interval after it (found by tests/test_soak.py).
    shown = g.findings
    resolved = [snaps.get(fp, {"title": fp, "impact_usd": "0"}) for fp in sorted(d.resolved)]
    text, blocks = render_group(reason, shown, d.new, resolved)
    fps = sorted({f.fingerprint for f in shown} | d.resolved)
    key = idempotency_key(g.key, g.receiver, fps, d.entry.sequence)
    is_root = reason is Reason.NEW_GROUP or root_key is None
    msg = Message(key, g.receiver, text, blocks, reply_broadcast=reason is Reason.REPEAT)
    enqueue(
        ctx.conn,
        key=key,
        group_key=g.key,
        receiver=g.receiver,
        sequence=d.entry.sequence,
        reason=reason.value,
        root_key=None if is_root else root_key,
        message=msg,
        now=ctx.now,
    )
    ctx.notified.append(Notified(g.key, g.receiver, reason, key, tuple(fps)))
    return key if is_root else root_key


def _load_log(conn: sqlite3.Connection, groups: dict[tuple[str, str], Group]) -> dict[tuple[str, str], Any]:
    rows = {
        (r["group_key"], r["receiver"]): r
        for r in conn.execute("SELECT * FROM alerts_nflog WHERE active = 1")
    }
    for key, receiver in groups:
        if (key, receiver) not in rows:
            r = conn.execute(
                "SELECT * FROM alerts_nflog WHERE group_key = ? AND receiver = ?", (key, receiver)
            ).fetchone()
            if r is not None:
                rows[(key, receiver)] = r
    return rows


def _entry(row: Any) -> LogEntry:
    e = json.loads(row["entry"])

    def ts(key: str) -> datetime | None:
        return parse_ts(e[key]) if e.get(key) else None

    return LogEntry(
        firing=frozenset(e["firing"]),
        last_notified_at=ts("last_notified_at"),
        first_seen_at=ts("first_seen_at"),
        sequence=e["sequence"],
        episode=e["episode"],
        queued_at=ts("queued_at"),
        last_failed_at=ts("last_failed_at"),
    )


def _save_log(
    conn: sqlite3.Connection,
    g: Group,
    e: LogEntry,
    snaps: dict[str, Any],
    root_key: str | None,
    now: datetime,
    wait_until: datetime | None = None,
) -> None:
    entry = {
        "firing": sorted(e.firing),
        "last_notified_at": fmt_ts(e.last_notified_at) if e.last_notified_at else None,
        "first_seen_at": fmt_ts(e.first_seen_at) if e.first_seen_at else None,
        "sequence": e.sequence,
        "episode": e.episode,
        "queued_at": fmt_ts(e.queued_at) if e.queued_at else None,
        "last_failed_at": fmt_ts(e.last_failed_at) if e.last_failed_at else None,
    }
    active = int(bool(e.firing) or e.first_seen_at is not None)
    conn.execute(
        "INSERT INTO alerts_nflog (group_key, receiver, labels, entry, snapshots, root_key, active,"
        " updated_at, wait_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (group_key, receiver)"
        " DO UPDATE SET entry = excluded.entry, snapshots = excluded.snapshots,"
        " root_key = excluded.root_key, active = excluded.active, updated_at = excluded.updated_at,"
        " wait_until = excluded.wait_until",
        (
            g.key,
            g.receiver,
            json.dumps(g.labels),
            json.dumps(entry),
            json.dumps(snaps),
            root_key,
            active,
            fmt_ts(now),
            fmt_ts(wait_until) if wait_until else None,
        ),
    )


def _clear_timer(conn: sqlite3.Connection, g: Group) -> None:
    conn.execute(
        "UPDATE alerts_nflog SET wait_until = NULL WHERE group_key = ? AND receiver = ?", (g.key, g.receiver)
    )
