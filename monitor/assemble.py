"""Assemble what detectors see from the state store: cost hours, GPU hours, live estimates.

Billing aggregates (micros, from the engine) become `CostHour`s in USD; the GPU rows among them are
joined with stored utilization (`monitor.gpus`) into `GpuHour`s. For hours utilization already covers
but billing does not yet (the export lags hours to days), GPU cost is *estimated* from the instance's
GPU model and count and the price book, so an idle 8 x H100 VM is flagged within hours, not when the
invoice data lands. Estimated hours carry `estimated=True` and disappear once billed rows arrive.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from monitor.billing_poll import (
    COST_ORDER,
    NodeHours,
    open_stored_costs,
    over_gpu_node_hours,
    provisional_since,
    stored_gpu_node_hours,
)
from monitor.columns import objects, shared_values
from monitor.detectors.costs import Costs
from monitor.detectors.inputs import (
    BudgetSpec,
    CostHour,
    DetectorInputs,
    GpuHour,
    GpuHourTable,
    JudgedGpuHours,
    PriceLookup,
    TableGpuHours,
    UnmonitoredGpuHours,
)
from monitor.gpu_identity import node_pool_from_name, sample_identities
from monitor.gpu_models import gpus_for_machine_type, normalize_gpu_model, parse_sku_description, region_of
from monitor.gpus import (
    NODE_COLUMNS,
    GpuCostHour,
    GpuNodeHours,
    JoinedColumns,
    attached_gpus,
    effective_micros,
    gpus_from_usage,
    idle_share,
    join_node_hours,
    judge_nodes,
    node_gpu_hours,
    node_table,
    same_gpu_hours,
    util_tables,
)
from monitor.jobs.held import held_spend
from monitor.jobs.identity import parse_labels
from monitor.model import micros_to_decimal
from monitor.sources.presets import Signal
from monitor.state.analytics import AggregateStore
from monitor.state.store import StateStore
from monitor.timeutil import from_naive_utc
from monitor.utilization.coverage import Coverage
from monitor.utilization.hourly import UtilHour, UtilHours
from monitor.utilization.mirror import Select
from monitor.utilization.mirror import join_tables as utilization_join_tables
from monitor.utilization.mirror import sync as sync_utilization
from monitor.utilization.mirror import util_hours as utilization_copy_hours
from monitor.utilization.mirror import whole_hours as utilization_copy_whole_hours
from monitor.utilization.state import load_util_hours

__all__ = [
    "assemble_inputs",
    "cost_hours",
    "gpu_cost_hours",
    "gpu_hours",
    "gpu_node_hours",
    "judged_gpu_hours",
    "stored_costs",
]

log = logging.getLogger("gpucost.assemble")

_HOUR = timedelta(hours=1)
_MICROS = Decimal(1_000_000)
_Q6 = Decimal("0.000001")
_ZERO = Decimal(0)
#: The labels and namespaces of every node-hour without any: one dict, not one each (nothing
#: mutates them, see `_LabelSets`).
_NONE: dict = {}


def _d(value: float | None) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


class _LabelSets(dict):
    """A stored `k=v,k=v` label string -> its dict, parsed once per read: rows with the same label set
    share one dict (nothing mutates the labels of a `CostHour` or `GpuCostHour`)."""

    def __missing__(self, raw: str | None) -> dict[str, str]:
        labels = self[raw] = parse_labels(raw)
        return labels


class _Dollars(dict):
    """Micros -> USD, converted once per distinct amount: a node bills the same amount most hours
    (Decimals are immutable, so the hours share them)."""

    def __missing__(self, micros: int) -> Decimal:
        value = self[micros] = micros_to_decimal(micros)
        return value


def stored_costs(store: AggregateStore, start: datetime, end: datetime, since: datetime) -> Costs:
    """The stored aggregates of [start, end) as the detectors' engine (`monitor.detectors.costs`):
    a view on the aggregate store, read in one snapshot; hours from `since` on are provisional."""
    parse = _LabelSets().__getitem__
    return open_stored_costs(
        store, start, end, since, lambda conn, select: Costs.over(conn, select, parse, COST_ORDER)
    )


def cost_hours(store: AggregateStore, start: datetime, end: datetime, since: datetime) -> list[CostHour]:
    """The stored aggregates of [start, end) as `CostHour`s, in the readers' order: every row in
    Python, for tools and tests (detectors ask `stored_costs` for sums instead)."""
    costs = stored_costs(store, start, end, since)
    try:
        return costs.rows()
    finally:
        costs.close()


#: Node-hour columns whose values repeat from hour to hour (names, places, label sets): one Python
#: object per distinct value, shared by the rows (`monitor.columns.shared_values`).
_REPEATED = frozenset(
    ("project", "zone", "region", "instance", "instance_id", "cluster", "machine_type",
     "pricing_model", "labels", "namespace", "node_pool")
)  # fmt: skip


def _gpu_model(sku: str | None) -> str | None:
    """The GPU model a GPU SKU's description names (None: none)."""
    model = parse_sku_description(sku or "").model
    return str(model) if model else None


def gpu_node_hours(
    store: AggregateStore,
    start: datetime,
    end: datetime,
    since: datetime,
    *,
    only: NodeHours | None = None,
) -> GpuNodeHours:
    """GPU spend per node-hour of [start, end), summed over SKUs, corrections and (GKE cost
    allocation) namespaces in the engine (`stored_gpu_node_hours`), column by column; the gross cost
    per `k8s-namespace` is kept for the rollups. GPU-hours are summed as the export's decimal amounts.
    `only`: those node-hours alone, in the same order."""
    table = stored_gpu_node_hours(store, start, end, only=only)
    col = {
        name: shared_values(table.column(name)) if name in _REPEATED else table.column(name).to_pylist()
        for name in table.column_names
        if name not in ("hour", "usage", "sku_description", "labels")
    }
    hours = shared_values(table.column("hour"), from_naive_utc)  # a few hundred distinct hours
    models = shared_values(table.column("sku_description"), _gpu_model)  # a few SKUs, parsed once each
    # A node-hour of one row: its own labels, usage and namespace, a column at a time (a few
    # distinct GPU-hour amounts: 8.0 a full hour; label sets shared, as nothing mutates them)
    labels_of = _LabelSets()
    labels: list[dict[str, str]] = shared_values(
        table.column("labels"), labels_of.__getitem__, labels_of[None]
    )
    gpu_hours: list[Decimal] = shared_values(table.column("usage"), _d, _ZERO)
    namespaces: list[dict[str, int]] = [
        {ns: int(gross)} if ns else _NONE for ns, gross in zip(col["namespace"], col["gross"], strict=True)
    ]
    # a node-hour of several rows (`usages`, `label_sets`... set): merged from them
    for i, raws in enumerate(col["label_sets"]):
        if raws is None:
            continue
        merged: dict[str, str] = {}
        for each in raws:
            merged.update(parse_labels(each))
        labels[i] = merged
        gpu_hours[i] = sum((_d(u) for u in col["usages"][i]), Decimal(0))
        acc: dict[str, int] = defaultdict(int)
        for each, g in zip(col["namespaces"][i], col["grosses"][i], strict=True):
            if each:
                acc[each] += g
        namespaces[i] = dict(acc)
    return GpuNodeHours(
        {
            "hour": hours,
            "project": col["project"],
            "zone": col["zone"],
            "region": col["region"],
            "instance": col["instance"],
            "instance_id": col["instance_id"],
            "cluster": col["cluster"],
            "machine_type": col["machine_type"],
            "gpu_model": models,
            "pricing_model": col["pricing_model"],
            "gpu_hours": gpu_hours,
            "cost_micros": col["gross"],
            "credits_micros": col["credits"],
            "provisional": [h >= since for h in hours],
            "labels": labels,
            "node_pool": col["node_pool"],
            "cud_micros": col["cud"],
            "sud_micros": col["sud"],
            "namespaces": namespaces,
        }
    )


def gpu_cost_hours(store: AggregateStore, start: datetime, end: datetime, since: datetime) -> list[GpuCostHour]:
    """`gpu_node_hours` as one `GpuCostHour` per node-hour (tests and tools)."""
    return gpu_node_hours(store, start, end, since).rows()


def _billed(nodes: GpuNodeHours, joined: JoinedColumns, counted: Sequence[Decimal]) -> GpuHourTable:
    """One GPU hour per billed node-hour, as a table (`GpuHourTable`): the node-hours' columns
    where they are the hours' (hour, names, places, GPU model, pricing, GPU-hours), the rest
    computed from the columns and the join; `counted`: the GPU-hours each node-hour's GPU count is
    read from (`node_gpu_hours`).

    The idle dollars of a node-hour are its *effective* GPU cost (gross plus its commitment and
    sustained-use credits) times idle GPUs / GPUs attached (`monitor.gpus.attached_gpus`: a GPU
    that reports nothing does not shrink the share). Each hour carries its node's key
    (`GpuHour.node_key`), made once per node. Column at a time where a column allows (the
    dollars picked by numpy from one `Decimal` per distinct amount, the node keys from one per
    node): only the GPU counts and idle shares are a loop over the hours."""
    import numpy as np

    from monitor.detectors.idle_gpu import node_instance_key  # the detectors' package imports this module

    c = nodes.columns
    node_of = nodes.identities()[0]
    number = np.fromiter(node_of, np.int64, len(node_of))
    firsts = np.unique(number, return_index=True)[1].tolist()  # each node's first hour, by node
    node_keys = objects([node_instance_key(*(c[k][i] for k in NODE_COLUMNS)) for i in firsts])
    gross, cud, sud = (
        np.fromiter(c[k], np.int64, len(node_of)) for k in ("cost_micros", "cud_micros", "sud_micros")
    )
    effective = effective_micros(gross, cud, sud)
    gpus: list[int] = []
    idle_hours: list[Decimal] = [_ZERO] * len(node_of)
    idle_micros: list[int] = [0] * len(node_of)
    seen, idle, matches = joined.gpus.tolist(), joined.idle_gpus.tolist(), joined.matched.tolist()
    for i, (machine, most, matched, used, paid) in enumerate(
        zip(c["machine_type"], counted, matches, c["gpu_hours"], effective.tolist(), strict=True)
    ):
        if not matched:
            gpus.append(gpus_from_usage(machine, most))
            continue
        attached = attached_gpus(machine, most, seen[i])
        gpus.append(attached)
        idle_hours[i], idle_micros[i] = idle_share(used, paid, idle[i], attached)
    means = joined.mean_utilization_pct.tolist()
    mean = [m if matched else None for m, matched in zip(means, matches, strict=True)]
    dollars = _Dollars()
    own = ("hour", "project", "instance", "gpu_model", "gpu_hours", "zone", "region", "instance_id", "cluster",
           "machine_type", "pricing_model")  # fmt: skip
    return GpuHourTable(
        {
            **{name: c[name] for name in own},
            "gpus": gpus,
            "mean_utilization_pct": mean,
            "idle_gpu_hours": idle_hours,
            "idle_cost": _in_dollars(np.fromiter(idle_micros, np.int64, len(idle_micros)), dollars),
            "memory_held": joined.memory_held,
            "signal": joined.signal,
            "container_metrics": joined.container_metrics,
            "gpu_cost": _in_dollars(gross, dollars),
            "gpu_credits": _in_dollars(effective - gross, dollars),
            "gpu_cud": _in_dollars(cud, dollars),
            "labels": [labels or _NONE for labels in c["labels"]],  # shared: nothing mutates a row's labels
            "node_pool": [
                pool or node_pool_from_name(cluster, instance)
                for pool, cluster, instance in zip(c["node_pool"], c["cluster"], c["instance"], strict=True)
            ],
            "namespaces": [
                {ns: dollars[m] for ns, m in sorted(spaces.items())} if spaces else _NONE
                for spaces in c["namespaces"]
            ],
            "estimated": [False] * len(node_of),
            "node_key": node_keys[number].tolist(),
        }
    )


def _in_dollars(micros: Any, dollars: _Dollars) -> list[Decimal]:
    """Micros (a numpy array) as USD, one `Decimal` per distinct amount (`_Dollars`), picked by numpy."""
    import numpy as np

    distinct, at = np.unique(micros, return_inverse=True)
    return objects([dollars[m] for m in distinct.tolist()])[at.reshape(-1)].tolist()


#: The `UtilHours` columns that identify a monitored host (`sample_identities`' arguments, in order).
_HOST_COLUMNS = ("project", "zone", "instance_id", "instance_name", "cluster", "node_name")


def _estimates(
    nodes: GpuNodeHours,
    hours: UtilHours,
    prices: PriceLookup | None,
    threshold: float,
    end: datetime,
    provisional_from: datetime | None,
    counted: Sequence[Decimal],
) -> list[GpuHour]:
    """GPU hours utilization covers but billing does not (yet), priced from the price book.
    `counted`: what `_billed` counts each node-hour's GPUs from (`node_gpu_hours`), so an estimate
    counts its node's GPUs as the billed hours do.

    Only whole hours before `end` and, when given, at or after `provisional_from`: older hours are
    settled billing, and an hour with utilization but no GPU row there is not ours to invent (an
    instance billed to another account, say). An hour is "billed" when any identity of the node
    (`monitor.gpu_identity`: GCE id, zone/name, GKE cluster/node) has a GPU row in it, so a billing
    row never gets a second, estimated copy; hours missing between billed ones (rows landing out of
    order) are estimated too. Signal precedence (and the GKE duty-cycle pair) was resolved when the
    samples were reduced to hours (`monitor.utilization.hourly`).
    """
    if prices is None or not hours:
        return []
    node_of, keys_of = nodes.identities()
    billed_hours: list[set[datetime]] = [set() for _ in keys_of]
    latest_of = [-1] * len(keys_of)  # per node, its latest node-hour (the first of equal hours)
    hour_col = nodes["hour"]
    for i, (node, hour) in enumerate(zip(node_of, hour_col, strict=True)):
        billed_hours[node].add(hour)
        j = latest_of[node]
        if j < 0 or hour > hour_col[j]:
            latest_of[node] = i
    nodes_of = _nodes_of(keys_of)
    latest: dict[str, int] = {
        key: max((latest_of[n] for n in ns), key=lambda i: (hour_col[i], -i)) for key, ns in nodes_of.items()
    }
    hour_of = hours["hour"]
    wanted = [
        i
        for i, hour in enumerate(hour_of)
        if hour + _HOUR <= end and (provisional_from is None or hour >= provisional_from)
    ]
    # A host's identities once per host, not per hour; a group (a primary key and an hour) is judged
    # billed by the identities of the first host seen with that primary key.
    hosts = list(zip(*(hours[c] for c in _HOST_COLUMNS), strict=True))
    keys_of_host: dict[tuple, list[str]] = {}
    aliases: dict[str, list[str]] = {}
    grouped: list[tuple[int, str]] = []
    for i in wanted:
        host = hosts[i]
        keys = keys_of_host.get(host)
        if keys is None:
            keys = keys_of_host[host] = [n.key for n in sample_identities(*host)]
        if keys:
            aliases.setdefault(keys[0], keys)
            grouped.append((i, keys[0]))
    # per primary key, the hours any node of any of its identities billed (a union once per key,
    # not a scan of its nodes' sets for every utilization hour: 345,680 of them at bench scale 48)
    billed_of: dict[str, set[datetime]] = {}
    for key, keys in aliases.items():
        nodes_billed = [billed_hours[n] for k in keys for n in nodes_of.get(k, ())]
        billed_of[key] = nodes_billed[0] if len(nodes_billed) == 1 else set().union(*nodes_billed)
    by_hour: dict[tuple[str, datetime], list[UtilHour]] = defaultdict(list)
    for i, key in grouped:  # only the hours billing does not cover become `UtilHour`s
        hour = hour_of[i]
        if hour not in billed_of[key]:
            by_hour[(key, hour)].append(hours.row(i))
    priced = {key: next((latest[k] for k in aliases[key] if k in latest), None) for key, _ in by_hour}
    out = []
    for (key, hour), group in sorted(by_hour.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        i = priced[key]
        known = (nodes.row(i), counted[i]) if i is not None else None
        out.extend(_estimate_hour(hour, group, known, prices, threshold))
    return out


def _nodes_of(keys_of: Sequence[Sequence[str]]) -> dict[str, list[int]]:
    """Identity key -> the nodes (`GpuNodeHours.identities`' numbers) that answer to it."""
    nodes_of: dict[str, list[int]] = defaultdict(list)
    for node, keys in enumerate(keys_of):
        for key in keys:
            nodes_of[key].append(node)
    return nodes_of


def _unbilled(nodes: GpuNodeHours, start: datetime, end: datetime) -> Select:
    """What `_estimates` reads of the utilization of [start, end) (whole hours) beside the billed
    `nodes`: for each host (`_HOST_COLUMNS`' values) whose hours it judges as every other host of
    the same primary identity, the hours no node of its identities billed; none for a host without
    an identity (never estimated). `_estimates` judges a host's hour by the identities of the first
    host it sees with the same primary one, so where those hosts answer to different identities,
    their hours are read whole (`monitor.utilization.mirror.util_hours`' `select`)."""

    def select(hosts: Collection[tuple]) -> dict[tuple, list[int]]:
        keys_of_host = {host: [n.key for n in sample_identities(*host)] for host in hosts}
        variants: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for keys in keys_of_host.values():
            if keys:
                variants[keys[0]].add(tuple(keys))
        node_of, keys_of = nodes.identities()
        billed: list[set[datetime]] = [set() for _ in keys_of]
        for node, hour in zip(node_of, nodes["hour"], strict=True):
            if hour >= start:
                billed[node].add(hour)
        nodes_of = _nodes_of(keys_of)
        grid = [start + k * _HOUR for k in range((end - start) // _HOUR)]
        epoch = {hour: int(hour.timestamp()) for hour in grid}
        out: dict[tuple, list[int]] = {}
        for host, keys in keys_of_host.items():
            if not keys:
                out[host] = []
            elif len(variants[keys[0]]) == 1:
                sets = [billed[n] for k in keys for n in nodes_of.get(k, ())]
                out[host] = [epoch[h] for h in grid if not any(h in hours for hours in sets)]
        return out

    return select


def _estimate_hour(
    hour: datetime,
    group: list[UtilHour],
    known: tuple[GpuCostHour, Decimal] | None,
    prices: PriceLookup,
    threshold: float,
) -> list[GpuHour]:
    """One estimated node-hour: GPU model and pricing from its latest billed hour when there is
    one, else from the Monitoring `model` label at on-demand prices. A known hour's credits carry
    over as a ratio (a committed GPU's effective price stays what billing showed).

    `known`: that hour and the GPU-hours its GPU count is read from (`node_gpu_hours`), so the
    estimate counts the GPUs the billed hours count. Its own GPU-hours said too few when it was a
    partial hour: an N1 VM's 4 T4 stopped at :20 bill 1.33, read as 1 GPU, and with 2 of them
    reporting the estimate priced 2 ($0.70 an hour) where the bill will say 4 ($1.40).

    The hour is priced whole even where the VM ran part of it (its first or last hour): the
    samples of a `UtilHour` say when they were taken (its first and last window starts), not why
    they stop, so they cannot tell that from an agent that started late or stopped reporting while
    the VM ran on (the same samples; billing charges those hours whole). A VM stopped at :20 is
    overstated until its billing lands, which then replaces the estimate
    (tests/test_estimate_gpus.py). The GPUs counted are the most that reported at once
    (`_most_at_once`): a node recreated within the hour reports twice its GPUs, one VM's after the
    other's."""
    first = group[0]
    k, counted = known if known is not None else (None, _ZERO)
    model = (k.gpu_model if k else None) or normalize_gpu_model(first.model or "")
    region = (k.region if k else None) or region_of(first.zone or "")
    pricing = (k.pricing_model if k else None) or "on_demand"
    term = {"committed": "on_demand", "reserved": "on_demand"}.get(pricing, pricing)
    unit = prices.gpu_hourly(str(model), region, term) if model else None
    if unit is None and k is not None and k.gpu_hours > 0 and k.cost_micros > 0:
        # Not in the price book (a GPU or region the snapshot lacks): the node's own gross rate from
        # its latest billed hour. Dropping the hour instead would cut an idle run wherever billing
        # is late, and the cut re-keys an ongoing idle_gpu finding at every detection (the soak
        # test's forgotten A100 in europe-west4 was alerted as new each day).
        unit = Decimal(k.cost_micros) / _MICROS / k.gpu_hours
    if unit is None:
        return []
    per_gpu: dict[str, list[float]] = {}
    spans: dict[str, tuple[int, int]] = {}
    signal = min((h.signal for h in group), key=Signal.rank)
    for h in group:
        n_sum = per_gpu.setdefault(h.gpu, [0, 0.0])
        n_sum[0] += h.samples
        n_sum[1] += h.pct_sum
        a, b = spans.get(h.gpu, (h.first, h.last))
        spans[h.gpu] = (min(a, h.first), max(b, h.last))
    # the GPUs attached, as a billed hour of the node counts them (`attached_gpus`): those that
    # did not report are paid for too, and priced as the bill will price them
    seen = len(per_gpu)
    at_once = _most_at_once(spans.values())
    gpus = attached_gpus(k.machine_type, counted, at_once) if k is not None else at_once
    said = gpus_for_machine_type(k.machine_type) if k is not None else None
    if said is not None and seen > said.count:
        # More GPUs reported than the machine has: VMs one after the other under the node's name (a
        # GKE node recreated within the hour, its new VM's GPUs with new UUIDs). The hour is priced
        # for the GPUs attached, each GPU seen judged for its share of it: 16 GPUs of an
        # a3-highgpu-8g were priced $176 with $88 idle where the bill says about $80.67 (helper 70).
        gpus = said.count
    means = [total / n for n, total in per_gpu.values()]
    idle = sum(1 for m in means if m < threshold)
    judged = max(gpus, seen)  # the GPUs each idle one is a share of
    cost = (unit * gpus).quantize(_Q6)
    effective = cost * _effective_ratio(k)
    cluster = k.cluster if k else first.cluster
    instance = k.instance if k else (first.instance_name or first.node_name)
    return [
        GpuHour(
            hour=hour,
            project=(k.project if k else first.project),
            instance=instance,
            gpu_model=str(model),
            gpus=gpus,
            gpu_hours=Decimal(gpus),
            gpu_cost=cost,
            mean_utilization_pct=sum(means) / len(means),
            idle_gpu_hours=Decimal(idle) * gpus / judged,
            idle_cost=(effective * idle / judged).quantize(_Q6),
            zone=(k.zone if k else first.zone),
            region=region,
            instance_id=(k.instance_id if k else first.instance_id),
            cluster=cluster,
            machine_type=(k.machine_type if k else None),
            memory_held=any(h.idle_allocated for h in group),
            pricing_model=pricing,
            estimated=True,
            labels=dict(k.labels) if k else {},
            node_pool=(k.node_pool if k else None) or node_pool_from_name(cluster, instance),
            gpu_credits=(effective - cost).quantize(_Q6),
            gpu_cud=(cost * _cud_ratio(k)).quantize(_Q6),
            signal=signal,
            container_metrics=any(h.container for h in group) if signal == Signal.NODE_DUTY_CYCLE.value else None,
        )
    ]


def _most_at_once(spans: Iterable[tuple[int, int]]) -> int:
    """The most GPUs of an hour that reported at once: of GPUs in runs one after the other (their
    first and last window starts, as `monitor.gpus._PER_VM` splits them), the largest run. A GKE
    node on N1 with 4 T4 recreated within the hour reports 8 UUIDs, 4 at a time: the estimate
    counted 8 (the machine type names no GPUs to cap them), $2.80 an hour where 4 are attached."""
    most = run = 0
    end: int | None = None
    for first, last in sorted(spans):
        run = 1 if end is not None and first > end else run + 1
        end = last if end is None else max(end, last)
        most = max(most, run)
    return most


def _cud_ratio(known: GpuCostHour | None) -> Decimal:
    """CUD credits / gross of the node's latest billed hour (0 without one): an estimate keeps the
    share of it a commitment covered (`GpuHour.on_demand_share`)."""
    if known is None or known.cost_micros <= 0:
        return Decimal(0)
    return Decimal(known.cud_micros) / Decimal(known.cost_micros)


def _effective_ratio(known: GpuCostHour | None) -> Decimal:
    """Effective / gross of the node's latest billed hour: 1 without one, 0 when billing showed its
    GPUs at $0 (a reserved variant)."""
    if known is None:
        return Decimal(1)
    if known.cost_micros <= 0:
        return Decimal(0)
    return Decimal(known.effective_micros) / Decimal(known.cost_micros)


def gpu_hour_table(
    costs: Sequence[GpuCostHour] | GpuNodeHours,
    hours: UtilHours | Sequence[UtilHour],
    threshold: float,
    prices: PriceLookup | None,
    end: datetime,
    provisional_from: datetime | None = None,
    tables: Mapping[str, Any] | None = None,
    joined: JoinedColumns | None = None,
) -> GpuHourTable:
    """Billed GPU hours (`gpu_node_hours`) joined with utilization (per GPU and hour:
    `monitor.utilization.hourly`), plus estimated ones (see `_estimates`), as a table. `tables`: the
    utilization's join tables (`monitor.gpus.util_tables`), when already built; they stand for
    `hours` in the join, and `hours` need then hold only what the estimates read (from
    `provisional_from` on). `joined`: the join's results (`join_node_hours`), when already run;
    they stand for `tables` and `hours` in the join."""
    nodes = costs if isinstance(costs, GpuNodeHours) else GpuNodeHours.from_rows(costs)
    util = UtilHours.of(hours)
    counted = node_gpu_hours(nodes)  # one count for the billed hours and the estimates
    if joined is None:
        joined = join_node_hours(nodes, util, threshold, tables)
    billed = _billed(nodes, joined, counted)
    return billed.extended(_estimates(nodes, util, prices, threshold, end, provisional_from, counted))


def gpu_hours(*args: Any, **kwargs: Any) -> list[GpuHour]:
    """`gpu_hour_table`'s hours (its arguments) as `GpuHour`s: billed, then estimated."""
    return gpu_hour_table(*args, **kwargs).rows()


def judged_gpu_hours(
    aggregates: AggregateStore,
    util: UtilHours,
    start: datetime,
    end: datetime,
    since: datetime,
    threshold: float,
    prices: PriceLookup | None,
) -> tuple[GpuHourTable, int]:
    """The GPU hours of [start, end) the GPU detectors judge (`JudgedGpuHours`), read from the store
    as far as they need, as a table, and the rows read from it.

    The nodes are read (one row each) and the join's matching is run where the node-hours are
    (`judge_nodes`): which nodes have an unmonitored node-hour, which a host-hour with a GPU below
    the threshold. The node-hours read are every one of those nodes and of every node of the same
    instance (`instance_key`: `idle_gpu` reads an instance's hours whole), every one with an
    on-demand part (`NodeHours.on_demand_part`), and every one the estimates read: from `since` on
    (`_estimates` tests billed hours from the first provisional hour) and each node's latest and the
    hour before it (an estimate is priced from its node's latest billed hour). The join builds each
    hour from its own node-hour and, where others share its host-hour (a GKE node recreated within
    it: `monitor.gpus._JOIN_SQL`), from theirs and the span of hours each node was read; a
    node-hour's GPU count reads its neighbours (`node_gpu_hours`). The instances of one GKE node
    name are one instance, read whole together, and a split never shows a GPU idle that the judging
    did not see, so the hours of the nodes read whole are the ones the whole gives, in its order,
    wherever they have idle dollars. An instance they show idle or unmonitored whose nodes were not
    all read (an estimated idle hour; a host the join matched that the judging did not) has its
    nodes read, and the hours built again; so has a node whose estimates count their GPUs from a
    partial latest hour (`_counted_in_part`).
    """
    # the detectors' package imports this module's
    from monitor.detectors.idle_gpu import node_instance_key

    distinct = f"SELECT DISTINCT {', '.join(NODE_COLUMNS)} FROM node_hours"
    nodes = [tuple(r) for r in over_gpu_node_hours(aggregates, start, end, distinct)]

    def run(sql: str, tables: Any) -> list[tuple]:
        return over_gpu_node_hours(aggregates, start, end, sql, tables)

    tables = util_tables(util)  # built once, for the judging and the join
    unmonitored, idle = judge_nodes(nodes, util, threshold, run, tables)
    fetched = 2 * len(nodes)  # the nodes, then one judgement each
    instance_of = [node_instance_key(*node) for node in nodes]
    number = {node: i for i, node in enumerate(nodes)}
    keep = _whole_instances(unmonitored | idle, instance_of)
    while True:
        whole = len(keep) == len(nodes)  # every node whole: every node-hour, no filter to run
        only = (
            None
            if whole
            else NodeHours(
                since,
                nodes=node_table([nodes[i] for i in sorted(keep)]),
                latest_of=NODE_COLUMNS,
                on_demand_part=True,
            )
        )
        nodes_read = gpu_node_hours(aggregates, start, end, since, only=only)
        hours = gpu_hour_table(nodes_read, util, threshold, prices, end, since, tables)
        fetched += hours.billed_count()
        if whole:  # nothing can be missing
            return hours, fetched
        # per node, not per hour (tens of thousands of hours)
        c = hours.columns
        estimated = c["estimated"]
        node_of = list(zip(*(c[name] for name in NODE_COLUMNS), strict=True))
        shown = {key for key, idle in zip(hours.node_keys(), c["idle_gpu_hours"], strict=True) if idle}
        missing = {i for i, key in enumerate(instance_of) if key in shown}
        unread = zip(node_of, c["mean_utilization_pct"], estimated, strict=True)
        dark = {node for node, pct, guess in unread if pct is None and not guess}
        missing |= {number[node] for node in dark | _counted_in_part(hours, node_of) if node in number}
        if missing <= keep:
            return hours, fetched
        log.debug("GPU hours read again", extra={"nodes": len(missing - keep)})
        keep = _whole_instances(keep | missing, instance_of)


def _counted_in_part(hours: GpuHourTable, node_of: Sequence[tuple]) -> set[tuple]:
    """The nodes with an estimated hour whose GPU count the hours read may not give as every hour
    of the node would. An estimate counts its node's GPUs from its latest billed hour as
    `node_gpu_hours` does: its own GPU-hours when the hour before bills the same (a full hour),
    else the node's most in any hour, which the read (every hour from `since` on, each node's
    latest and the hour before it) may not hold: an N1 VM's 4 T4 stopped at 2:20 and running again
    from 40:00 with 2 GPUs reporting were estimated at 2 GPUs where reading every hour counts 4
    (helper 71)."""
    c = hours.columns
    flags = c["estimated"]
    estimated = {node for node, guess in zip(node_of, flags, strict=True) if guess}
    used: dict[tuple, dict[datetime, Decimal]] = defaultdict(dict)
    for node, guess, hour, gpu_hours in zip(node_of, flags, c["hour"], c["gpu_hours"], strict=True):
        if not guess and node in estimated:
            at = used[node]
            at[hour] = max(gpu_hours, at.get(hour, gpu_hours))
    out = set()
    for node, at in used.items():  # a node never billed is priced from its Monitoring labels
        last = max(at)
        before = at.get(last - _HOUR)
        if before is None or not same_gpu_hours(before, at[last]):
            out.add(node)
    return out


def _whole_instances(nodes: set[int], instance_of: Sequence[tuple]) -> set[int]:
    """`nodes` and every node of the same instance."""
    wanted = {instance_of[i] for i in nodes}
    return {i for i, key in enumerate(instance_of) if key in wanted}


def assemble_inputs(
    store: StateStore,
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    aggregates: AggregateStore,
    provisional_days: int,
    idle_threshold_pct: float,
    prices: PriceLookup | None,
    budgets: Sequence[BudgetSpec] = (),
    coverage: Coverage = None,
    gpu_from: datetime | None = None,
    defer: bool = False,
) -> DetectorInputs:
    """Detector inputs for [start, end): billing from the `aggregates` store, utilization from the
    state `store`. `coverage`: which utilization was read (`monitor.utilization.coverage`); None: all
    of it.

    `gpu_from` (the detection window's start): GPU hours are joined from there on now, the earlier
    ones only if a reader asks (`DetectorInputs.all_gpu_hour_table`). The split is never after the
    first provisional hour, so every estimated hour is on the joined side; an estimate takes its
    node's GPU model and pricing from the node's latest billed hour on that side (a node billed
    only before it is priced from its Monitoring labels, at on-demand rates, until its billing
    lands).

    `defer`: the window's GPU hours are read as far as the detectors read them, all of them only
    if a reader needs them all: `JudgedGpuHours` (`judged_gpu_hours`) or, when no utilization
    overlaps the window, `UnmonitoredGpuHours`, built when a detector reads them (`analyze`). The
    daemon reads them all here: where most node-hours are on demand or unmonitored, judging which
    to read costs more than it saves (docs/performance.md, 2026-12-05). The daemon's join reads the
    window's utilization from the aggregate store's copy (`monitor.utilization.mirror`, synced
    first): a 14-day window of 1.6 M GPU-hours (bench scale 48) took 4.8 s to read from SQLite into
    Python, and a detection run 13.4-18.9 s against 9.2-12.8 s with the copy (docs/performance.md,
    2026-12-06, eighteenth session). Its estimates read from the copy only the provisional hours
    billing does not cover (`_unbilled`): 463 of 230,475 GPU-hours there (nineteenth session).
    It holds them as a table (`TableGpuHours`): the opportunity detectors, `unmonitored_gpu` and a
    job budget read its columns, `idle_gpu` the `GpuHour`s built for the nodes it judges, a
    finished job's message the estimated ones and its jobs' nodes' hours.

    Every GPU node-hour is read in the costs' read transaction (`AggregateStore.pinned`): the
    daemon's billing poll may commit while a detection run still reads GPU hours (those before
    `gpu_from`, for a job budget or a finished job's message), and they must be of the costs'
    snapshot. So are the labelled sums of what the store holds before `start`
    (`DetectorInputs.held_spend`, `monitor.jobs.held`), summed when a job budget asks.
    """
    since = provisional_since(now, provisional_days)
    split = start if gpu_from is None else max(start, min(gpu_from, since, end))
    copied = not defer and utilization_copy_whole_hours(split, end)
    if copied:  # before the costs pin the store's snapshot: the window's utilization is read there
        sync_utilization(store, aggregates)
    hourly = stored_costs(aggregates, start, end, since)
    pinned = hourly.snapshot()
    if pinned is not None:
        aggregates = aggregates.pinned(*pinned)

    def joined(lo: datetime, hi: datetime, util: UtilHours | None = None) -> GpuHourTable:
        util = load_util_hours(store, lo, hi) if util is None else util
        nodes = gpu_node_hours(aggregates, lo, hi, since)
        return gpu_hour_table(nodes, util, idle_threshold_pct, prices, hi, since)

    def window_hours() -> Sequence[GpuHour]:
        if copied:
            # the join's utilization from the aggregate store's copy, and of the provisional hours
            # the estimates read, only those billing does not cover (`_unbilled`)
            tables = utilization_join_tables(store, aggregates, split, end)
            nodes = gpu_node_hours(aggregates, split, end, since)
            join = join_node_hours(nodes, UtilHours.of(()), idle_threshold_pct, tables)
            del tables  # 121 MB there: dropped before the GPU hours are built
            lo = max(split, since)
            util = utilization_copy_hours(store, aggregates, lo, end, _unbilled(nodes, lo, end))
            table = gpu_hour_table(nodes, util, idle_threshold_pct, prices, end, since, joined=join)
            return TableGpuHours(table)  # read as columns where they can be (`TableGpuHours`)
        util = load_util_hours(store, split, end)
        if not defer:
            return TableGpuHours(joined(split, end, util))
        if not len(util):  # nothing to join: built when (and as far as) a detector reads them

            def unmonitored(pricing: str | None) -> GpuHourTable:
                # "on_demand": the node-hours with an on-demand part (`UnmonitoredGpuHours.on_demand_table`)
                only = (
                    NodeHours(on_demand_part=True) if pricing == "on_demand"
                    else NodeHours(pricing_model=pricing) if pricing is not None else None
                )  # fmt: skip
                nodes = gpu_node_hours(aggregates, split, end, since, only=only)
                return gpu_hour_table(nodes, util, idle_threshold_pct, prices, end, since)

            return UnmonitoredGpuHours(unmonitored)
        judged, fetched = judged_gpu_hours(aggregates, util, split, end, since, idle_threshold_pct, prices)
        return JudgedGpuHours(judged, lambda: joined(split, end, util), fetched)

    try:
        window = window_hours()
    except BaseException:
        hourly.close()  # it holds the store's file
        raise
    return DetectorInputs(
        window_start=start,
        window_end=end,
        provisional_from=since,
        hourly=hourly,
        gpu_hours=window,
        prices=prices,
        budgets=tuple(budgets),
        utilization_coverage=coverage,
        gpu_from=split if split > start else None,
        earlier_gpu_hours=functools.cache(lambda: joined(start, split)) if split > start else None,
        held_spend=functools.cache(lambda: held_spend(aggregates, start)),
    )
