"""One Slack message when a training job finishes: its total, its hidden costs, and what one zone
or Spot would have saved (issue 14 item 4).

Why not a finding: a finding that fires while its job is in the detection window is re-announced
by the pipeline every `repeat_interval` ("Still firing") and "Resolved" when it leaves the window;
a finished job is news once. So the message bypasses grouping and dedupe and goes straight into
the persistent outbox (delivered, retried, looked up after an uncertain send, `gpucost outbox`,
like every alert), and `jobs_finished` records, in the same transaction as the outbox row, which
run of which job was told and what its figures were counted to: a restart, a second detection run
or late billing rows never send it again. The job's compute billed from there on is its next run
under the name, told in turn with what it cost from there (the two messages add up).

Finished, robust to billing lag: the job's last billed hour, and its last hour of utilization
estimated without billing yet, are both older than `[jobs] running_within_hours` (the engine's
`running` flag, `monitor.jobs.build`); an idle VM still up reports utilization (0 %) and still
bills, so its job is not finished. And settled: its hours are before the provisional ones
(`billing.provisional_days`), and its figures are counted up to them. Rows land hours to days after
their usage, each resource at its own pace: told 6 h after its job went quiet, every message of an
audit run (helper 74, tests/test_job_finished_audit.py) was short of the job's total, by up to 12%.
A job that runs again before it is settled is one run. Jobs that had ended before gpucost first
started are history (`alerts.history`'s cut), never announced.

Pure apart from `announce_finished` (one transaction on the state store). The per-job figures are
the jobs engine's (`alerts.digest_jobs.job_records`, the one adapter to it).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from alerts.blocks import money
from alerts.digest_jobs import job_records
from alerts.escape import escape_mrkdwn as esc
from alerts.escape import truncate
from alerts.notifier import Message
from alerts.outbox import enqueue, ensure_schema, fmt_ts, parse_ts
from monitor.detectors.costs import Costs, Touching, as_costs, billed_until
from monitor.model import JOB_FINISHED, Finding, Scope, Severity, idle_usd
from monitor.state.store import StateStore

__all__ = [
    "JOB_GROUP",
    "Announced",
    "announce_finished",
    "announce_jobs",
    "finished_jobs",
    "job_message",
    "job_message_key",
    "migrate",
    "routing_finding",
]

JOB_GROUP = JOB_FINISHED  # the outbox group of finished-job messages, and their kind
_HOUR = timedelta(hours=1)
_MICROS = Decimal(1_000_000)
_MIGRATIONS = [
    "CREATE TABLE jobs_finished (job TEXT NOT NULL, receiver TEXT NOT NULL, first_hour TEXT NOT NULL,"
    " last_hour TEXT NOT NULL, idempotency_key TEXT NOT NULL, announced_at TEXT NOT NULL,"
    " PRIMARY KEY (job, receiver, last_hour))",
    # where the message's figures were counted to (the window's end): a later run of the job is
    # counted from there, so the two messages add up and a row of the told run landing late is
    # not a run of its own (NULL in rows told before: their `announced_at` stands in)
    "ALTER TABLE jobs_finished ADD COLUMN counted_until TEXT",
]


def migrate(store: StateStore) -> None:
    """The `jobs_finished` table: which job runs were announced (pruned by `monitor.state.retention`)."""
    store.migrate("jobs_finished", _MIGRATIONS)


#: Hidden costs named in the message: (subcategory, what to call it).
_HIDDEN = (
    ("network.inter_zone", "inter-zone traffic"),
    ("network.inter_region", "inter-region traffic"),
    ("network.internet", "internet egress"),
    ("orchestration.gke", "cluster fees (shared by node-hours)"),
    ("storage.persistent_disk", "persistent disk"),
    ("storage.gcs", "Cloud Storage"),
    ("storage.snapshot", "snapshots"),
)


@dataclass(frozen=True)
class Announced:
    """A run of a job already told: [first_hour, last_hour], its message's figures counted up to
    `counted_until` (None: not recorded, told before it was)."""

    job: str
    first_hour: datetime
    last_hour: datetime
    counted_until: datetime | None = None


def finished_jobs(
    records: Iterable[Any],
    announced: Iterable[Announced],
    history_cut: datetime | None = None,
    settled_before: datetime | None = None,
) -> list[Any]:
    """The engine's records (`JobRecord`) of jobs that finished and were not told: named, not
    `running`, ending at or after `history_cut` and before `settled_before` (the first provisional
    hour: the job's billing is complete, and it has no estimated hour, all of which are
    provisional), and not overlapping a told run of the same name (late rows stretch a told run;
    they do not make a new one)."""
    told: dict[str, list[Announced]] = {}
    for a in announced:
        told.setdefault(a.job, []).append(a)
    out = []
    for r in records:
        if r.job is None or r.running or r.last_hour is None or r.first_hour is None:
            continue
        if history_cut is not None and r.last_hour + _HOUR < history_cut:
            continue
        if settled_before is not None and r.last_hour + _HOUR > settled_before:
            continue
        if any(a.last_hour >= r.first_hour for a in told.get(r.job, ())):
            continue
        out.append(r)
    return sorted(out, key=lambda r: (r.last_hour, r.job))


def job_message_key(job: str, receiver: str, last_hour: datetime) -> str:
    """One key per (job run, channel): the outbox row's key and the Slack message metadata."""
    digest = hashlib.sha256(f"{job}\x00{receiver}\x00{fmt_ts(last_hour)}".encode()).hexdigest()[:20]
    return f"job-finished-{digest}"


def _share(part: Decimal, whole: Decimal) -> str:
    return f" ({(part / whole * 100).quantize(Decimal('0.1'))}%)" if whole > 0 else ""


def _md(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 2900)}}


def _sub(r: Any, sub: str) -> Decimal:
    return Decimal(int(r.net_by_subcategory.get(sub, 0))) / _MICROS


def _idle(usage: Any) -> str:
    """The idle GPUs' dollars as the jobs table and the digest say them (`idle_usd`), "" for a job
    without GPU-hours (the message then has no idle line)."""
    if not usage.gpu_hours:
        return ""
    return idle_usd(usage.idle_cost, usage.unmonitored_cost, bool(usage.monitored_gpu_hours), usage.gpu_hours)


def job_message(r: Any, receiver: str, *, partial_from: datetime | None = None) -> Message:
    """The message for one finished job (`JobRecord`), in the findings' layout (`alerts.blocks`):
    header, total, scope, hidden costs, counterfactuals, context. `partial_from`: the job is billed
    from the first hour held (its total covers only what was held from then on)."""
    job, net, hours = str(r.job), r.net_cost, int((r.last_hour + _HOUR - r.first_hour) / _HOUR)
    span = f"{r.first_hour:%Y-%m-%d %H:%M}–{r.last_hour + _HOUR:%Y-%m-%d %H:%M} UTC ({hours} h)"
    total = f"*Total:* {money(net)} net ({money(r.cost)} before credits) over {span}"
    if partial_from is not None:  # billed from the first hour held: it may have begun before
        total += f" _(from {partial_from:%Y-%m-%d}: it may have started before the billing held)_"
    several = len(r.gpu_models) > 1
    gpus = (
        (f"{r.gpus} GPUs ({esc(r.gpu_model)}), " if several else f"{r.gpus}× {esc(r.gpu_model)}, ")
        if r.gpu_model
        else ""
    )
    util = r.gpu.mean_utilization_pct
    used = f"{gpus}{float(r.gpu.gpu_hours):,.1f} GPU-hours" if r.gpu.gpu_hours else "no GPUs"
    scope = (
        f"*Scope:* {used}"
        + (f" at {util:.1f}% mean utilization" if util is not None else "")
        + f" · projects {', '.join(f'`{esc(p)}`' for p in r.projects) or '-'}"
        + f" · zones {', '.join(f'`{esc(z)}`' for z in r.zones) or '-'}"
    )
    # idle dollars are known only for monitored GPU-hours: a job none of whose GPUs reported
    # utilization read "idle GPUs: $0.00 (0.0%)" (seed 23's embeddings), a job without GPUs too
    idle = _idle(r.gpu)
    hidden = [f"• idle GPUs: {idle}{_share(r.gpu.idle_cost, net)}"] if idle not in ("", "unknown") else []
    hidden += [f"• {name}: {money(v)}{_share(v, net)}" for sub, name in _HIDDEN if (v := _sub(r, sub)) != 0]
    if r.gpu.unmonitored_cost:
        hidden.append(
            f"• GPU spend with no utilization data: {money(r.gpu.unmonitored_cost)}"
            + (" (its idle GPUs cannot be told)" if idle == "unknown" else "")
        )
    spot = (
        f"Spot: save {money(r.spot_savings)}"
        + (f" (list prices: {esc(r.spot_price_source)})" if r.spot_price_source else "")
        if r.spot_savings
        else "Spot: nothing to save (already Spot or committed, or no Spot price known)"
    )
    per_busy = r.cost_per_busy_gpu_hour
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": truncate(f"Job finished: {esc(job)}", 150), "emoji": True},
        },
        _md(f":checkered_flag: {total}"),
        _md(scope),
        _md("*Hidden costs:*\n" + "\n".join(hidden)),
        _md(f"*Counterfactuals:* one zone: save {money(r.single_zone_savings)} · {spot}"),
    ]
    ctx = f"`gpucost jobs --job {esc(job)}` for its hours"
    if per_busy is not None:
        ctx = f"{money(per_busy)} per busy GPU-hour · " + ctx
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(ctx, 2900)}]})
    text = truncate(
        f"Job finished: {esc(job)}: {money(net)} over {hours} h; "
        + (f"idle GPUs {idle}, " if idle else "")
        + f"one zone would save {money(r.single_zone_savings)}",
        3000,
    )
    return Message(job_message_key(job, receiver, r.last_hour), receiver, text, blocks)


def _announced(conn: sqlite3.Connection) -> list[Announced]:
    rows = conn.execute("SELECT job, first_hour, last_hour, counted_until, announced_at FROM jobs_finished")
    return [Announced(r[0], parse_ts(r[1]), parse_ts(r[2]), parse_ts(r[3] or r[4])) for r in rows]


def _counted_from(told: Iterable[Announced]) -> dict[str, datetime]:
    """Where each told job's next run is counted from: what its latest told run's message counted
    to. Its compute hours from there on are a new run; the told run's own hours, late rows
    included, are never counted again."""
    out: dict[str, datetime] = {}
    for a in told:
        cut = a.counted_until or a.last_hour + _HOUR
        if a.job not in out or cut > out[a.job]:
            out[a.job] = cut
    return out


def routing_finding(r: Any) -> Finding:
    """What `[[slack.routes]]` matchers see of a finished job: kind `job_finished`, its project
    (when it has one), and its job labels as `label.<key>` (the job's first value of each)."""
    labels = {k: v[0] for k, v in r.labels.items() if v}
    scope = Scope(project=r.projects[0] if len(r.projects) == 1 else None, labels=labels)
    when = r.last_hour or datetime.min.replace(tzinfo=UTC)
    return Finding(
        JOB_GROUP, Severity.INFO, f"Job finished: {r.job}", "", r.net_cost, when, when, scope, {}, "", ""
    )


def announce_finished(
    store: StateStore,
    hourly: Costs | Sequence[Any],
    gpu_hours: Sequence[Any] | Callable[[], Sequence[Any]],
    jobs: Any,
    *,
    now: datetime,
    window_start: datetime,
    window_end: datetime,
    receiver: str | Callable[[Any], str],
    prices: Any = None,
    history_cut: datetime | None = None,
    estimates: Sequence[Any] | None = None,
    settled_before: datetime | None = None,
    held_from: Callable[[], datetime | None] | None = None,
) -> list[str]:
    """Queue one message per newly finished job (outbox) and record it, in one transaction;
    returns the keys queued. `hourly` / `gpu_hours`: the detection inputs (`Costs` or `CostHour`s,
    `GpuHour`s, or what returns them as a table: `DetectorInputs.all_gpu_hour_table`, of which
    only the finished jobs' nodes' hours are built) of [window_start, window_end).
    `estimates`: GPU hours holding every estimated hour of them (`DetectorInputs.gpu_hours`; by
    default `gpu_hours` when it is a list). `receiver`: the channel, or a function of the job's
    record (routing). A job is told once, whichever channel it went to. `settled_before`: the
    first provisional hour (`DetectorInputs.provisional_from`; None: none is). `held_from`: how far
    back the billing read is held (`HeldSpend.held_from`), asked only when a job is told; None:
    from `window_start`. A job billed from there on may have begun before it.

    Settled, not only quiet: rows land hours to days after their usage, each resource at its own
    pace, so 6 h of quiet told jobs their totals short (the audit's llm-pretrain $16,008.29 of
    $17,211.17), and a message cannot be taken back. A job told is counted from what its message
    counted to on (`_counted_from`): its next run under the name is a run of its own.

    Cheap: the engine runs only when a job's last hour, billed or estimated (`_estimated_until`), is
    settled and the job was not told, and then only on the jobs that can have finished
    (`build_jobs(only=...)`, over `_rows_for`). Billing lags usage by hours, so without the
    estimated hours every running job's billing looks stale at every detection run, and every job
    was built each time (1.6 s of a 3 s detection run on the demo fleet)."""
    keys_of = jobs.label_keys()
    within = timedelta(hours=jobs.running_within_hours)
    ensure_schema(store)
    migrate(store)
    with store.transaction() as conn:
        told = _announced(conn)
    costs = as_costs(hourly)
    if estimates is None and not callable(gpu_hours):
        estimates = gpu_hours
    window_end = billed_until(costs, window_start, window_end, within)
    until = _estimated_until(costs, estimates or (), keys_of)
    cuts = _counted_from(told)
    stale = {
        j: span
        for j, span in _spans(costs, keys_of, cuts).items()
        if _settled(max(span[1], until.get(j, span[1])), window_end - within, settled_before)
    }
    if not finished_jobs(_Candidate.latest(stale), told, history_cut):
        return []
    # Every job that can have finished and was not told (a finished job's billing is stale, and the
    # engine's first hour is the billed one): only these are built (their records are the engine's
    # to the micro, from the rows that can decide them). The history cut is the records' own (their
    # last hour may grow by estimated hours), applied below as before.
    names = {c.job for c in finished_jobs(_Candidate.spans(stale), told)}
    if not names:
        return []
    gpu = gpu_hours() if callable(gpu_hours) else gpu_hours
    # counted to the first provisional hour: a job's bucket billing on after it is not settled yet
    # (the next run of the job is counted from there)
    counted_until = min(window_end, settled_before or window_end)
    records = _records(costs, gpu, jobs, _by_cut(names, cuts), counted_until, window_end, prices)
    held = max(window_start, (held_from() if held_from is not None and records else None) or window_start)
    queued: list[str] = []
    with store.transaction() as conn:  # what was told is read again here: a concurrent run told it
        ready = {
            id(r)
            for r in finished_jobs([r for r, _ in records], _announced(conn), history_cut, settled_before)
        }
        for r, cut in records:
            if id(r) not in ready:
                continue
            partial = held if r.first_hour <= held and (cut is None or cut < held) else None
            channel = receiver(r) if callable(receiver) else receiver
            msg = job_message(r, channel, partial_from=partial)
            if _enqueue(conn, msg, r, now, counted_until):
                queued.append(msg.idempotency_key)
    return queued


def _records(
    costs: Costs,
    gpu: Sequence[Any],
    jobs: Any,
    groups: Iterable[tuple[datetime | None, set[str]]],
    counted_until: datetime,
    window_end: datetime,
    prices: Any,
) -> list[tuple[Any, datetime | None]]:
    """The engine's records of the jobs of each group (`_by_cut`), each with where it was counted
    from: over [cut, counted_until), a told job's next run from its cut on. The engine splits
    cluster fees and GPU node-hours hour by hour, so a record of fewer hours is exact for those."""
    keys = jobs.label_keys()
    out: list[tuple[Any, datetime | None]] = []
    for cut, group in groups:
        rows = _candidate_rows(costs, keys, group, cut, counted_until)
        since = _gpu_since(gpu, cut, counted_until)
        built = job_records(
            _rows_for(rows, _jobs_of(rows, keys), group), since, jobs, window_end, prices, only=group
        )
        out += [(r, cut) for r in built]
    return out


def _gpu_since(gpu: Any, cut: datetime | None, until: datetime) -> Any:
    """The GPU hours of [cut, until), of a list or of a table (`GpuHourTable`: kept a table, so that
    only the finished jobs' nodes' hours are built, `build_jobs(only=...)`)."""
    from monitor.detectors.inputs import GpuHourTable  # lazily, like `job_records`

    if isinstance(gpu, GpuHourTable):
        return gpu.take(i for i, h in enumerate(gpu["hour"]) if (cut is None or h >= cut) and h < until)
    return [g for g in gpu if (cut is None or g.hour >= cut) and g.hour < until]


def _settled(last: datetime, quiet_before: datetime, settled_before: datetime | None) -> bool:
    """Whether a job whose last hour is `last` is over: quiet (`running_within_hours` before the
    latest hour billed) and out of the provisional hours."""
    return last + _HOUR < quiet_before and (settled_before is None or last + _HOUR <= settled_before)


def _enqueue(conn: sqlite3.Connection, msg: Message, r: Any, now: datetime, counted_until: datetime) -> bool:
    """One job's message into the outbox and its run into `jobs_finished`, in the caller's
    transaction; True when the message was new."""
    new = enqueue(
        conn,
        key=msg.idempotency_key,
        group_key=JOB_GROUP,
        receiver=msg.channel,
        sequence=int(r.last_hour.timestamp() // 3600),
        reason="job_finished",
        root_key=None,
        message=msg,
        now=now,
    )
    conn.execute(
        "INSERT OR IGNORE INTO jobs_finished (job, receiver, first_hour, last_hour, idempotency_key,"
        " announced_at, counted_until) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            r.job,
            msg.channel,
            fmt_ts(r.first_hour),
            fmt_ts(r.last_hour),
            msg.idempotency_key,
            fmt_ts(now),
            fmt_ts(counted_until),
        ),
    )
    return bool(new)


def _by_cut(names: AbstractSet[str], cuts: Mapping[str, datetime]) -> list[tuple[datetime | None, set[str]]]:
    """The jobs to build, grouped by where they are counted from (None: the whole read)."""
    groups: dict[datetime | None, set[str]] = {}
    for j in sorted(names):
        groups.setdefault(cuts.get(j), set()).add(j)
    return list(groups.items())


def _spans(
    costs: Costs, keys: Sequence[str], cuts: Mapping[str, datetime]
) -> dict[str, tuple[datetime, datetime]]:
    """Each job's billed span as its record will count it (`_spans_by_kind`); a told job's is that
    of its compute hours from its cut on (`_counted_from`), none without: its checkpoints bucket
    billing on after the told run is not a new run, even once the told run's compute has left the
    read window (the bucket deleted six weeks on was told as a run of its own), and a row of the
    told run landing late is before the cut."""
    compute, other = _spans_by_kind(costs, keys)
    spans = other | compute
    later = {j for j, cut in cuts.items() if j in compute and compute[j][1] >= cut}
    for j in cuts:
        spans.pop(j, None)
    for cut in sorted({cuts[j] for j in later}):
        compute_after, _ = _spans_by_kind(costs, keys, start=cut)
        for j in later:
            if cuts[j] == cut and j in compute_after:
                spans[j] = compute_after[j]
    return spans


@dataclass(frozen=True)
class _Candidate:
    """What the cheap pre-check knows of a job: its name and billed hours as the engine counts them
    (its last hour may still grow by estimated hours: not `running` here)."""

    job: str
    first_hour: datetime
    last_hour: datetime
    running: bool = False

    @classmethod
    def latest(cls, spans: Mapping[str, tuple[datetime, datetime]]) -> list[_Candidate]:
        """The check that decides whether the engine runs at all: first hour taken as the last (only
        a told run ending at or after it rules the job out)."""
        return [cls(j, last, last) for j, (_first, last) in spans.items()]

    @classmethod
    def spans(cls, spans: Mapping[str, tuple[datetime, datetime]]) -> list[_Candidate]:
        """With the first billed hour: ruled out exactly as the engine's record would be."""
        return [cls(j, first, last) for j, (first, last) in spans.items()]


def _jobs_of(hourly: Iterable[Any], keys: Sequence[str]) -> list[str | None]:
    """Each row's job by the engine's identity (first job label key present)."""
    from monitor.jobs.identity import job_of  # lazily, like `job_records`

    return [job_of(h.labels, keys) for h in hourly]


def _spans_by_kind(
    costs: Costs, keys: Sequence[str], start: datetime | None = None
) -> tuple[dict[str, tuple[datetime, datetime]], dict[str, tuple[datetime, datetime]]]:
    """Each job's (first, last) billed hour from `start` on, of its compute rows and of its others
    (`_spans`): the engine (`monitor.jobs.build`) counts a job's span from its compute rows when it
    has any (its checkpoint bucket bills every hour after the job ended), else from all its rows; a
    row's job is the first job label key present. Summed in the engine: one group per label set."""
    from monitor.jobs.identity import job_of  # lazily, like `job_records`

    compute: dict[str, tuple[datetime, datetime]] = {}
    other: dict[str, tuple[datetime, datetime]] = {}
    for (labels, is_compute), s in costs.sums(("labels", "compute"), start=start).items():
        job = job_of(costs.labels_of(labels), keys)
        if job is None:
            continue
        spans = compute if is_compute else other
        cur = spans.get(job)
        spans[job] = (s.first, s.last) if cur is None else (min(cur[0], s.first), max(cur[1], s.last))
    return compute, other


def _estimated_until(costs: Costs, gpu_hours: Sequence[Any], keys: Sequence[str]) -> dict[str, datetime]:
    """Each job's latest estimated GPU hour as its record will have it, or earlier
    (`monitor.jobs.build.estimated_last_hours`), from one small GROUP BY: a row per GPU node and
    label set."""
    if not any(h.estimated for h in gpu_hours):
        return {}
    from monitor.jobs.build import estimated_last_hours  # lazily, like `job_records`
    from monitor.jobs.identity import job_of

    groups = costs.sums(
        ("project", "zone", "instance", "instance_id", "cluster", "labels"), subcategories=["compute.gpu"]
    )
    billed = [(ident, job_of(costs.labels_of(labels), keys), s.last) for (*ident, labels), s in groups.items()]
    return estimated_last_hours(billed, gpu_hours)


def _touched(own: Iterable[Any]) -> tuple[set[tuple], set[str | None], set[str]]:
    """What the jobs' own rows reach (`_rows_for`): the (project, cluster, hour) of their cluster
    node-hours, and the names and ids of their GPU nodes."""
    fee_keys: set[tuple] = set()
    instances: set[str | None] = set()
    ids: set[str] = set()
    for h in own:
        if not h.subcategory.startswith("compute."):
            continue
        if h.cluster and h.instance:
            fee_keys.add((h.project, h.cluster, h.hour))
        if h.subcategory == "compute.gpu":
            instances.add(h.instance)
            if h.instance_id:
                ids.add(h.instance_id)
    return fee_keys, instances, ids


def _candidate_rows(
    costs: Costs,
    keys: Sequence[str],
    names: AbstractSet[str],
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Any]:
    """The rows `_rows_for` can pick for the jobs `names` (of [start, end)), in the engine's order,
    rather than every row of the window: the jobs' own rows (by label set), every row of the
    clusters they had nodes in and every GPU row of their nodes. The clusters and nodes are what `_touched` reads of the own
    rows, asked of the engine as one small GROUP BY (a row per node and SKU class, not per hour).
    `_rows_for` over these picks what it picks over all rows: each row it keeps is of a named job, of
    one of those clusters, or a GPU row of one of those nodes."""
    from monitor.jobs.identity import job_of  # lazily, like `job_records`

    own = costs.labels_where(lambda labels: job_of(labels, keys) in names)
    nodes = costs.sums(
        by=("subcategory", "cluster", "instance", "instance_id"),
        labels=own,
        categories=["compute"],
        start=start,
        end=end,
    )
    clusters = sorted({c for _, c, instance, _ in nodes if c and instance})
    gpus = [(instance, iid) for sub, _, instance, iid in nodes if sub == "compute.gpu"]
    instances = list({instance for instance, _ in gpus})
    ids = sorted({iid for _, iid in gpus if iid})
    return costs.rows(touching=Touching(own, clusters, instances, ids), start=start, end=end)


def _rows_for(hourly: Sequence[Any], jobs_of: Sequence[str | None], names: AbstractSet[str]) -> list[Any]:
    """The rows that can decide the records of the jobs `names` (a superset of what the engine
    keeps for `build_jobs(only=...)`, in order): their own rows; at each (project, cluster, hour)
    where they had a cluster node, every cluster node's compute row and the cluster fee (fees are
    shared by node-hours); and every GPU row of a node they used (by name or instance id: a superset
    of the node identity), at any hour (GPU-hours are split by usage on a node, and a node's
    estimated hours go to its latest billed job). Converting only these makes the check cheap."""
    from monitor.jobs.build import CLUSTER_FEE  # lazily, like `job_records`

    fee_keys, instances, ids = _touched(h for h, job in zip(hourly, jobs_of, strict=True) if job in names)
    return [
        h
        for h, job in zip(hourly, jobs_of, strict=True)
        if job in names
        or (h.subcategory == "compute.gpu" and (h.instance in instances or h.instance_id in ids))
        or (
            (h.project, h.cluster, h.hour) in fee_keys
            and (h.subcategory == CLUSTER_FEE or (h.subcategory.startswith("compute.") and h.instance))
        )
    ]


def announce_jobs(deps: Any, inputs: Any, now: datetime) -> list[str]:
    """What the detection step calls (`monitor.cycle.run_detection`): `announce_finished` over the
    detection inputs, routed like findings (`[[slack.routes]]`, see `routing_finding`; else the
    default channel), with the first-start cut (`alerts.history`), settled before the inputs'
    provisional hours, and the billing held as far back as the aggregate store holds it."""
    from alerts.history import history_settings
    from alerts.routing import route, routes_from_config
    from monitor.jobs.run import jobs_config  # lazily, like `job_records`

    ensure_schema(deps.store)  # the first-start record reads the outbox
    routes = routes_from_config(deps.cfg.slack)
    return announce_finished(
        deps.store,
        inputs.hourly,
        inputs.all_gpu_hour_table,  # joined before the detection window only when a job has finished
        jobs_config(deps.cfg),
        estimates=inputs.estimated_gpu_hours(),  # every estimated hour is on the joined side
        now=now,
        window_start=inputs.window_start,
        window_end=inputs.window_end,
        receiver=lambda r: route(routing_finding(r), routes, deps.alert_deps.default_channel),
        prices=inputs.prices,
        history_cut=history_settings(deps.cfg.alerts, deps.store, now).get("history_cut"),
        settled_before=inputs.provisional_from,
        held_from=(lambda: inputs.held_spend().held_from) if inputs.held_spend is not None else None,
    )
