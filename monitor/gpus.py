"""Utilization x GPU spend, per GPU node and hour: what idle GPUs cost.

The join runs in an in-memory DuckDB over already-aggregated inputs (GPU cost per node-hour from
the billing engine, utilization per GPU and hour from `monitor.utilization.hourly`), so the same code
serves BigQuery and the embedded engine. Billing rows and GPU-hours are matched by the one node identity of
`monitor.gpu_identity`: (project, instance id) for GCE VMs, (project, zone, name) for billing rows
without an id, (project, cluster, node name) for GKE nodes, whose utilization never carries an id.

A GPU-hour is idle when that GPU's mean utilization over the hour is below the threshold; the idle
dollars of a node-hour are its *effective* GPU cost (gross plus its commitment and sustained-use
credits) times idle GPUs / GPUs attached (`attached_gpus`: the machine type's count, or the GPU-hours
billed, never fewer than the GPUs seen; a GPU that reports nothing is not counted idle, but neither
does it shrink the share), so a GPU already paid for by a commitment (or a $0 reserved one) shows
its idle GPU-hours at what they really cost. Node-hours with GPU spend but no utilization are
*unmonitored*, never assumed busy or idle. The signal precedence (and the GKE node / container duty
cycle pair) was applied when the samples were reduced to hours. A GKE node recreated under its name
within an hour is billed as two instances in that hour, each judged on its own VM's GPUs
(`_JOIN_SQL`). `judge_nodes` runs the same matching where the node-hours are stored, one row per
node back, so `analyze` reads only the node-hours its detectors judge
(`monitor.assemble.judged_gpu_hours`).

Sums per node and rollups (per project, cluster, node pool, namespace, label) live in
`monitor.gpu_rollups`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from monitor.columns import Columns, objects
from monitor.gpu_identity import billed_identities, sample_identities
from monitor.gpu_models import gpus_for_machine_type
from monitor.scratch import scratch
from monitor.sources.presets import Signal
from monitor.utilization.hourly import UtilHour, UtilHours

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "NODE_COLUMNS",
    "GpuCostHour",
    "GpuNodeHours",
    "Hosts",
    "Joined",
    "JoinedColumns",
    "JoinedHour",
    "arrow_table",
    "attached_gpus",
    "effective_micros",
    "gpus_from_usage",
    "idle_share",
    "join_gpu_hours",
    "join_node_hours",
    "judge_nodes",
    "node_gpu_hours",
    "node_table",
    "util_tables",
]



@dataclass(frozen=True, slots=True)
class GpuCostHour:
    """GPU spend of one node in one usage hour (aggregated by the billing engine).

    `cost_micros` is gross; `cud_micros` / `sud_micros` (<= 0) the commitment and sustained-use
    credits on it, `credits_micros` all its credits. `namespaces`: gross micros per `k8s-namespace`
    label value (GKE cost allocation splits a node's rows per namespace).
    """

    hour: datetime
    project: str | None
    zone: str | None
    region: str | None
    instance: str | None
    instance_id: str | None
    cluster: str | None
    machine_type: str | None
    gpu_model: str | None
    pricing_model: str | None
    gpu_hours: Decimal
    cost_micros: int
    credits_micros: int = 0
    provisional: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    node_pool: str | None = None
    cud_micros: int = 0
    sud_micros: int = 0
    namespaces: dict[str, int] = field(default_factory=dict)

    @property
    def effective_micros(self) -> int:
        """Gross plus commitment and sustained-use credits: what the GPU-hours really cost (>= 0)."""
        return effective_micros(self.cost_micros, self.cud_micros, self.sud_micros)


@dataclass(frozen=True, slots=True)
class JoinedHour:
    cost: GpuCostHour
    gpus: int
    mean_utilization_pct: float | None
    idle_gpus: int
    memory_held: bool | None
    signal: str | None = None
    container_metrics: bool | None = None

    @property
    def monitored(self) -> bool:
        return self.mean_utilization_pct is not None

    @property
    def idle_gpu_hours(self) -> Decimal:
        if not self.monitored:
            return Decimal(0)
        return idle_share(self.cost.gpu_hours, self.cost.effective_micros, self.idle_gpus, self.gpus)[0]

    @property
    def idle_cost_micros(self) -> int:
        """Idle GPUs' share of the effective GPU cost (after commitment / sustained-use credits)."""
        if not self.monitored:
            return 0
        return idle_share(self.cost.gpu_hours, self.cost.effective_micros, self.idle_gpus, self.gpus)[1]


def effective_micros(gross: Any, cud: Any, sud: Any) -> Any:
    """Gross plus commitment and sustained-use credits (<= 0): what GPU-hours really cost (>= 0).
    Of one node-hour's ints, or of numpy arrays of them (`monitor.assemble._billed`'s columns)."""
    total = gross + cud + sud
    if isinstance(total, int):
        return max(0, total)
    import numpy as np

    return np.maximum(total, 0)


def idle_share(gpu_hours: Decimal, effective: int, idle_gpus: int, gpus: int) -> tuple[Decimal, int]:
    """The idle GPUs' share of a node-hour: (idle GPU-hours, idle micros of the effective cost)."""
    if gpus == 0:
        return Decimal(0), 0
    return gpu_hours * idle_gpus / gpus, effective * idle_gpus // gpus


#: What a set of GPUs of a host-hour says: how many were seen, their mean utilization, how many sat
#: below the threshold (`$threshold`), whether one held memory while below it, the best signal.
_FIGURES = ("gpus_seen", "mean_util", "idle_gpus", "memory_held", "rank", "container")
_FIGURES_SQL = """COUNT(*) AS gpus_seen,
           AVG(util) AS mean_util,
           COUNT_IF(util < $threshold) AS idle_gpus,
           BOOL_OR(util < $threshold AND mem > 0) AS memory_held,
           MIN(rank) AS rank,
           BOOL_OR(container) AS container"""
#: Each GPU-hour (with its first and last window's start) and each host-hour's `_FIGURES`.
_PER_HOST = f"""
per_gpu AS (
    SELECT sid, gpu, hour,
           SUM(pct_sum) / SUM(samples) AS util,
           MAX(memory_max) AS mem,
           MIN(rank) AS rank,
           BOOL_OR(container) AS container,
           MIN(first) AS first,
           MAX(last) AS last
    FROM gpu_util_hours
    GROUP BY ALL
), per_host AS (
    SELECT sid, hour, {_FIGURES_SQL}
    FROM per_gpu
    GROUP BY ALL
)"""
#: The GPUs of the host-hours several node-hours matched (`shared`), in runs that follow one another
#: in time (`vm` from 0; `vms` runs in the host-hour): a GPU starts a new run when its first window
#: starts after the last one of every GPU before it. A GKE node recreated under its name within the
#: hour is two VMs, one after the other ("the node is drained and re-created. This process preserves
#: the original name of the node": https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-repair,
#: "Node repair process"), and the new VM's GPUs are other devices with other UUIDs, the GPU key of
#: dcgm-exporter and of the node duty cycle (`monitor.sources.presets`). Same UUIDs (the new VM on
#: the same GPUs, or a series keyed by index) make one run, and no split.
_PER_VM = f"""
after AS (
    SELECT g.*, MAX(g.last) OVER (
        PARTITION BY g.sid, g.hour ORDER BY g.first, g.last, g.gpu
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS before
    FROM per_gpu AS g
    JOIN shared USING (sid, hour)
), runs AS (
    SELECT *, SUM(CASE WHEN first > before THEN 1 ELSE 0 END) OVER (
        PARTITION BY sid, hour ORDER BY first, last, gpu ROWS UNBOUNDED PRECEDING
    ) AS vm
    FROM after
), per_vm AS (
    SELECT sid, hour, vm, {_FIGURES_SQL}, COUNT(*) OVER (PARTITION BY sid, hour) AS vms
    FROM runs
    GROUP BY sid, hour, vm
)"""
#: A node-hour `c` (`node`, `hour`) with each host-hour `u` that answers to one of its node's identity
#: keys (`k`, `h`), or none: the join's matching, which `_JUDGE_SQL` runs too.
_HOSTS_OF = """JOIN gpu_node_keys AS k ON k.node = c.node
    LEFT JOIN gpu_hosts AS h ON k.key = h.key
    LEFT JOIN per_host AS u ON u.sid = h.sid AND u.hour = c.hour"""
# GPU-hours are merged per host (`sid`: samples of one node may differ in zone or name labels), then
# matched through the identity keys both sides answer to; of several matching hosts the one with most
# GPUs wins, then the primary key.
#
# Node-hours of several nodes (instance ids) can match one host-hour: a GKE node recreated under its
# name within the hour is billed as two. Each is then judged on its own VM's GPUs, when that is known:
# the host-hour's GPUs fall in as many runs in time as there are node-hours (`_PER_VM`), and the
# nodes' billed hours order them, no two alike (the old VM's node is billed from and to earlier hours
# than the new one's). Both rows saw every GPU of the hour before, 16 on an a3-highgpu-8g, and each
# was idle by the other VM's GPUs too: the old VM idle for its 20 minutes ($29.33), the new one busy,
# showed $40.33 idle (tests/test_recreated_node_dcgm.py). Where it is not known (the new VM on the
# same GPUs, or a VM that did not report), both still see every GPU of the hour.
_JOIN_SQL = f"""
WITH {_PER_HOST}, costs AS (
    SELECT idx, node, hour, MIN(hour) OVER (PARTITION BY node) AS since,
           MAX(hour) OVER (PARTITION BY node) AS until
    FROM gpu_costs
), matched AS (
    SELECT c.idx, c.since, c.until, u.*
    FROM costs AS c
    {_HOSTS_OF}
    QUALIFY ROW_NUMBER() OVER (
        PARTITION BY c.idx ORDER BY u.gpus_seen DESC NULLS LAST, k.pos, h.pos, u.sid
    ) = 1
), shared AS (
    SELECT sid, hour, COUNT(*) AS sharing
    FROM matched
    WHERE sid IS NOT NULL
    GROUP BY ALL
    HAVING COUNT(*) > 1 AND COUNT(DISTINCT (since, until)) = COUNT(*)
), ordered AS (
    SELECT m.idx, s.sharing, ROW_NUMBER() OVER (PARTITION BY sid, hour ORDER BY m.since, m.until) - 1 AS vm
    FROM matched AS m
    JOIN shared AS s USING (sid, hour)
), {_PER_VM}
SELECT m.idx, {", ".join(f"IF(v.sid IS NULL, m.{f}, v.{f}) AS {f}" for f in _FIGURES)}
FROM matched AS m
LEFT JOIN ordered AS o USING (idx)
LEFT JOIN per_vm AS v ON v.sid = m.sid AND v.hour = m.hour AND v.vm = o.vm AND v.vms = o.sharing
WHERE m.gpus_seen IS NOT NULL
ORDER BY m.idx
"""

#: What identifies a GPU node among node-hours (`GpuNodeHours.identities`).
NODE_COLUMNS = ("project", "zone", "instance", "instance_id", "cluster")
# `_JOIN_SQL`'s matching, per node over its node-hours where they are stored (`node_hours`, their
# nodes numbered in `gpu_nodes`): whether some node-hour has no host-hour (unmonitored), whether some
# matching host-hour had a GPU below the threshold. The join keeps one host per node-hour (or one
# VM's GPUs of it), so the second is a superset of the nodes with an idle GPU-hour.
_JUDGE_SQL = f"""WITH {_PER_HOST}, at_node AS (
    SELECT n.node, epoch(c.hour)::BIGINT AS hour
    FROM node_hours AS c
    JOIN gpu_nodes AS n ON {" AND ".join(f"n.{k} IS NOT DISTINCT FROM c.{k}" for k in NODE_COLUMNS)}
), matched AS (
    SELECT c.node, c.hour, BOOL_OR(u.sid IS NOT NULL) AS monitored, BOOL_OR(u.idle_gpus > 0) AS idle
    FROM at_node AS c
    {_HOSTS_OF}
    GROUP BY c.node, c.hour
)
SELECT node, BOOL_OR(NOT monitored), COALESCE(BOOL_OR(idle), false) FROM matched GROUP BY node
"""

#: The signals' values in rank order, read once: an enum member's `.value` is a descriptor call, and
#: the join asked it of every joined node-hour (85,897 at 5 M export rows a month).
_SIGNALS = [s.value for s in Signal]
_NODE = Signal.NODE_DUTY_CYCLE


class GpuNodeHours(Columns[GpuCostHour], row_type=GpuCostHour):
    """GPU spend per node-hour, one list per `GpuCostHour` field: what the billing engine returns,
    joined and priced without one Python object per node-hour (86k of them on 30 days of the bench's
    scale-5 fleet). `rows()` gives the `GpuCostHour`s back (tests, tools, estimates)."""

    __slots__ = ("_identities",)

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        super().__init__(columns)
        self._identities: tuple[list[int], list[list[str]]] | None = None

    def identities(self) -> tuple[list[int], list[list[str]]]:
        """(each node-hour's node number, each node's identity keys, primary first:
        `monitor.gpu_identity.billed_identities`), computed once per distinct node, not per hour."""
        if self._identities is None:
            c = self.columns
            numbers: dict[tuple, int] = {}
            node_of = [
                numbers.setdefault(ident, len(numbers))
                for ident in zip(*(c[k] for k in NODE_COLUMNS), strict=True)
            ]
            keys_of = [[n.key for n in billed_identities(*ident)] for ident in numbers]
            self._identities = (node_of, keys_of)
        return self._identities


def gpus_from_usage(machine_type: str | None, gpu_hours: Decimal) -> int:
    """GPUs attached: from the machine type when billing names it (`a3-highgpu-8g` => 8), else from
    the GPU-hours billed in the hour (exact for a full hour), rounded half up; at least one. It
    added 0.5 and rounded half to even, so an N1 VM's one T4 billed 1.0 GPU-hours read as 2 GPUs
    (3 as 4): its idle share halved, its estimates priced twice (helper 75).

    >>> [gpus_from_usage(None, Decimal(x)) for x in ("1", "3", "3.9999", "0.4", "1.333333")]
    [1, 3, 4, 1, 1]
    """
    known = gpus_for_machine_type(machine_type) if machine_type else None
    if known is not None:
        return known.count
    return max(1, int(gpu_hours.to_integral_value(rounding=ROUND_HALF_UP)))


def node_gpu_hours(nodes: GpuNodeHours) -> list[Decimal]:
    """The GPU-hours each node-hour's GPU count is read from where the machine type does not say
    it (an N1 VM's GPUs are attached apart from it). An hour whose GPU-hours a neighbouring hour of
    the node repeats is a full hour: its own count. Any other is taken for a partial one (a VM
    started at 10:40 with 4 T4 bills 1.33, at 10:30 with 8 T4 a whole 4.0) and takes the node's
    most GPU-hours in an hour. The most of every hour read a VM resized from 4 GPUs to 8 as 8 GPUs
    in its 4-GPU hours, half idle (helper 67's review); a whole number alone was no proof of a full
    hour (helper 69's)."""
    node_of, keys_of = nodes.identities()
    hours = nodes["hour"]
    used_at: list[dict[datetime, Decimal]] = [{} for _ in keys_of]
    for node, hour, used in zip(node_of, hours, nodes["gpu_hours"], strict=True):
        used_at[node][hour] = max(used, used_at[node].get(hour, Decimal(0)))
    most = [max(at.values()) for at in used_at]
    out: list[Decimal] = []
    for node, hour, used in zip(node_of, hours, nodes["gpu_hours"], strict=True):
        top = most[node]
        if used >= top:  # its own count, full hour or not: most node-hours, not tested (bench scale
            out.append(used)  # 48, 382,000 node-hours: 1.05 s of CPU, 0.25 s without the tests)
            continue
        at = used_at[node]
        before, after = at.get(hour - _ONE_HOUR), at.get(hour + _ONE_HOUR)
        full = (before is not None and same_gpu_hours(before, used)) or (
            after is not None and same_gpu_hours(after, used)
        )
        out.append(used if full else top)
    return out


_ONE_HOUR = timedelta(hours=1)
#: GPU-hours of two hours that are the same count (an export's amounts may carry rounding).
_SAME_GPU_HOURS = Decimal("0.001")


def same_gpu_hours(a: Decimal, b: Decimal) -> bool:
    """Whether two hours of a node bill the same GPU-hours: what makes an hour full in
    `node_gpu_hours` when a neighbour repeats it."""
    return abs(a - b) < _SAME_GPU_HOURS


def attached_gpus(machine_type: str | None, gpu_hours: Decimal, seen: int) -> int:
    """The GPUs a node-hour's idle share divides by: those attached (`gpus_from_usage`, given the
    node's most GPU-hours in an hour: `node_gpu_hours`), never fewer than the `seen` ones that
    reported. Dividing by the GPUs seen alone overstated it wherever some did not report: an
    a3-highgpu-8g with 5 of 8 reporting, 3 of them idle, read 3/5 of its $88.

    >>> attached_gpus("a3-highgpu-8g", Decimal(8), 5), attached_gpus(None, Decimal("2.5"), 4)
    (8, 4)
    """
    return max(gpus_from_usage(machine_type, gpu_hours), seen)


def _hour_numbers(hours: Sequence[datetime]) -> list[int]:
    """Hours as epoch seconds (join keys), converted once per distinct hour."""
    seen: dict[datetime, int] = {}
    return [seen[h] if h in seen else seen.setdefault(h, int(h.timestamp())) for h in hours]


def _tables(
    nodes: GpuNodeHours, hours: UtilHours, util: Mapping[str, pa.Table] | None = None
) -> dict[str, pa.Table]:
    """gpu_costs (idx, node, hour), gpu_node_keys (node, pos, key), gpu_hosts (sid, pos, key) and the
    GPU-hours, gpu_util_hours (sid, gpu, hour, ...), as Arrow tables for the join, the GPU-hours
    straight from their columns. Named apart from the aggregate store's tables, beside which
    `judge_nodes` registers them.

    pyarrow is imported here: commands that join nothing do not pay for it."""
    import pyarrow as pa

    node_of, keys_of = nodes.identities()
    costs = {
        "idx": pa.array(range(len(nodes)), pa.int64()),
        "node": pa.array(node_of, pa.int64()),
        "hour": pa.array(_hour_numbers(nodes["hour"]), pa.int64()),
    }
    util = util if util is not None else util_tables(hours)
    return {"gpu_costs": pa.table(costs), "gpu_node_keys": _node_keys(keys_of), **util}


def arrow_table(names: Sequence[str], rows: Sequence[tuple], types: Sequence[pa.DataType]) -> pa.Table:
    """Rows as an Arrow table of `names`, each column of its type (an empty one typed too)."""
    import pyarrow as pa

    cols = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return pa.table([pa.array(c, type=t) for c, t in zip(cols, types, strict=True)], names=list(names))


def _node_keys(keys_of: Sequence[Sequence[str]]) -> pa.Table:
    """gpu_node_keys (node, pos, key): each node's identity keys, primary first; a node without any
    has one NULL key, which matches no host."""
    import pyarrow as pa

    rows = [(n, pos, k) for n, keys in enumerate(keys_of) for pos, k in enumerate(keys)]
    rows += [(n, 0, None) for n, keys in enumerate(keys_of) if not keys]
    return arrow_table(("node", "pos", "key"), rows, (pa.int64(), pa.int64(), pa.string()))


class Hosts:
    """Monitored hosts as the join numbers them (`gpu_hosts`' `sid`): a host is its primary
    identity (samples of one node may differ in zone or name labels), numbered in the order its
    samples are first seen, and it answers to every alias any of its samples has. One numbering for
    `util_tables` and the aggregate store's copy (`monitor.utilization.mirror.join_tables`), whose
    tables must be the same row for row."""

    def __init__(self) -> None:
        self._seen: dict[tuple, int] = {}
        self._primary: dict[str, int] = {}
        self._aliases: dict[tuple[int, str], int] = {}

    def number(self, ids: tuple) -> int:
        """The host of a sample's (project, zone, instance id, instance name, cluster, node name)."""
        sid = self._seen.get(ids)
        if sid is None:
            keys = [n.key for n in sample_identities(*ids)] or [f"none|{ids[0]}"]
            sid = self._seen[ids] = self._primary.setdefault(keys[0], len(self._primary))
            for pos, k in enumerate(keys):
                self._aliases[(sid, k)] = min(pos, self._aliases.get((sid, k), pos))
        return sid

    def table(self) -> pa.Table:
        """gpu_hosts (sid, pos, key): each host's aliases and their rank."""
        import pyarrow as pa

        rows = [(sid, pos, k) for (sid, k), pos in self._aliases.items()]
        return arrow_table(("sid", "pos", "key"), rows, (pa.int64(), pa.int64(), pa.string()))


def util_tables(hours: UtilHours) -> dict[str, pa.Table]:
    """gpu_hosts (sid, pos, key) and gpu_util_hours (sid, gpu, hour, ..., first, last) for the join
    (built once for the judging and the join of the same hours: `monitor.assemble.judged_gpu_hours`)."""
    import pyarrow as pa

    hosts = Hosts()
    h = hours.columns
    ranks = {s: Signal.rank(s) for s in set(h["signal"])}
    idents = zip(h["project"], h["zone"], h["instance_id"], h["instance_name"], h["cluster"], h["node_name"], strict=True)
    sid_col = [hosts.number(ids) for ids in idents]
    return {
        "gpu_hosts": hosts.table(),
        "gpu_util_hours": pa.table(
            {
                "sid": pa.array(sid_col, pa.int64()),
                "gpu": pa.array(h["gpu"], pa.string()),
                "hour": pa.array(_hour_numbers(h["hour"]), pa.int64()),
                "samples": pa.array(h["samples"], pa.int64()),
                "pct_sum": pa.array(h["pct_sum"], pa.float64()),
                "memory_max": pa.array(h["memory_max"], pa.float64()),
                "rank": pa.array([ranks[x] for x in h["signal"]], pa.int64()),
                "container": pa.array([bool(x) for x in h["container"]], pa.bool_()),
                "first": pa.array(h["first"], pa.int64()),
                "last": pa.array(h["last"], pa.int64()),
            }
        ),
    }


@dataclass(frozen=True, slots=True)
class Joined:
    """What utilization says of one billed node-hour (absent: unmonitored). `gpus`: the GPUs that
    reported (of its own VM, where the host-hour had two: `_JOIN_SQL`; `attached_gpus` makes the
    count the share divides by)."""

    gpus: int
    mean_utilization_pct: float
    idle_gpus: int
    memory_held: bool | None
    signal: str | None
    container_metrics: bool | None


@dataclass(frozen=True)
class JoinedColumns:
    """What utilization says of each billed node-hour, by position (`join_node_hours`): numpy
    columns as the engine returned them, `matched` False where no monitored host matches the
    node-hour (unmonitored; its other values are then unset). Read as columns by
    `monitor.assemble._billed`, so no `Joined` is built per node-hour (380,546 a detection run at
    5 M export rows a month: 0.66 s of the join's 1.04 s under cProfile, within the noise of the
    run's 5.3-5.9 s end to end); `row` builds one for tests and tools."""

    matched: Any
    gpus: Any
    mean_utilization_pct: Any
    idle_gpus: Any
    memory_held: list[bool | None]
    signal: list[str | None]
    container_metrics: list[bool | None]

    def __len__(self) -> int:
        return len(self.matched)

    def row(self, i: int) -> Joined | None:
        if not self.matched[i]:
            return None
        return Joined(
            int(self.gpus[i]),
            float(self.mean_utilization_pct[i]),
            int(self.idle_gpus[i]),
            self.memory_held[i],
            self.signal[i],
            self.container_metrics[i],
        )


def join_node_hours(
    nodes: GpuNodeHours,
    hours: UtilHours | Sequence[UtilHour],
    idle_threshold_pct: float,
    tables: Mapping[str, pa.Table] | None = None,
) -> JoinedColumns:
    """Per node-hour of `nodes`, in order: its utilization (per GPU and hour:
    `monitor.utilization.hourly`, as columns or `UtilHour`s), unmatched when no monitored host
    matches it. `tables`: `util_tables(hours)`, when already built, or the same tables read from
    the aggregate store's copy of the utilization hours (`monitor.utilization.mirror.join_tables`):
    they then stand for `hours`, which may hold fewer (the estimates' provisional days alone).

    Each joined hour says which signal it was judged on (the best one seen in the hour) and, for a
    GKE node judged on its node duty cycle, whether it had container metrics at all.
    """
    import numpy as np

    n = len(nodes)
    out = JoinedColumns(
        matched=np.zeros(n, bool),
        gpus=np.zeros(n, np.int64),
        mean_utilization_pct=np.zeros(n, np.float64),
        idle_gpus=np.zeros(n, np.int64),
        memory_held=[None] * n,
        signal=[None] * n,
        container_metrics=[None] * n,
    )
    if not nodes or (tables is None and not hours):
        return out
    # One thread: the per-GPU means are float sums, and a parallel aggregate adds them in a
    # different order each run, so a finding's evidence changed in its last digits between
    # identical runs.
    con = scratch(threads=1)
    try:
        for name, table in _tables(nodes, UtilHours.of(hours), tables).items():
            con.register(name, table)
        result = con.sql(_JOIN_SQL, params={"threshold": idle_threshold_pct}).to_arrow_table()
    finally:
        con.close()
    idx = result.column("idx").to_numpy()
    out.matched[idx] = True
    out.gpus[idx] = result.column("gpus_seen").to_numpy()
    out.mean_utilization_pct[idx] = result.column("mean_util").to_numpy()
    out.idle_gpus[idx] = result.column("idle_gpus").to_numpy()
    signals = objects([*_SIGNALS, None])  # a rank past the signals: none
    judged_on = signals[np.minimum(result.column("rank").to_numpy(), len(_SIGNALS))].tolist()
    for i, held, signal, container in zip(
        idx.tolist(), result.column("memory_held").to_pylist(), judged_on, result.column("container").to_pylist(),
        strict=True,
    ):  # fmt: skip
        out.memory_held[i] = held
        out.signal[i] = signal
        out.container_metrics[i] = bool(container) if signal == _NODE else None
    return out


def node_table(nodes: Sequence[tuple]) -> pa.Table:
    """GPU nodes (`NODE_COLUMNS` values) as an Arrow table of those columns."""
    import pyarrow as pa

    columns = list(zip(*nodes, strict=True)) if nodes else [()] * len(NODE_COLUMNS)
    return pa.table({k: pa.array(v, pa.string()) for k, v in zip(NODE_COLUMNS, columns, strict=True)})


def judge_nodes(
    nodes: Sequence[tuple],
    hours: UtilHours,
    idle_threshold_pct: float,
    run: Callable[[str, Mapping[str, pa.Table]], list[tuple]],
    tables: Mapping[str, pa.Table] | None = None,
) -> tuple[set[int], set[int]]:
    """Of the GPU `nodes` (`NODE_COLUMNS` values, distinct), by position: those with a node-hour no
    monitored host matches, and those with a node-hour a matching host had a GPU below the threshold
    in (a superset of those with an idle GPU-hour), as the join (`_JOIN_SQL`) matches them.
    `tables`: `util_tables(hours)`, when already built.

    `run(sql, tables)` runs `sql` where the node-hours are stored (as `node_hours`), with `tables`
    registered: the node-hours stay there, one row per node comes back."""
    import pyarrow as pa

    keys_of = [[n.key for n in billed_identities(*node)] for node in nodes]
    numbered = node_table(nodes).add_column(0, "node", pa.array(range(len(nodes)), pa.int64()))
    util = tables if tables is not None else util_tables(hours)
    registered = {"gpu_nodes": numbered, "gpu_node_keys": _node_keys(keys_of), **util}
    # a literal, not a parameter: `run`'s SQL binds the node-hours' range positionally
    rows = run(_JUDGE_SQL.replace("$threshold", repr(float(idle_threshold_pct))), registered)
    return {n for n, unmonitored, _ in rows if unmonitored}, {n for n, _, idle in rows if idle}


def join_gpu_hours(
    costs: Sequence[GpuCostHour], hours: Sequence[UtilHour], idle_threshold_pct: float
) -> list[JoinedHour]:
    """`join_node_hours` over `GpuCostHour`s, one `JoinedHour` each (tests and tools)."""
    out: list[JoinedHour] = []
    nodes = GpuNodeHours.from_rows(costs)
    joined = join_node_hours(nodes, hours, idle_threshold_pct)
    for i, (c, most) in enumerate(zip(costs, node_gpu_hours(nodes), strict=True)):
        j = joined.row(i)
        if j is None:
            out.append(JoinedHour(c, gpus_from_usage(c.machine_type, most), None, 0, None))
        else:
            out.append(
                JoinedHour(
                    c,
                    attached_gpus(c.machine_type, most, j.gpus),
                    j.mean_utilization_pct,
                    j.idle_gpus,
                    j.memory_held,
                    j.signal,
                    j.container_metrics,
                )
            )
    return out
