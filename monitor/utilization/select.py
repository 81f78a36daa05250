"""One sample per GPU and window: the most trusted signal, its gaps filled from the others.

When several signals cover one GPU and window, the most trusted wins (`Signal.precedence`: SM
activity > NVML utilization > GKE duty cycle). GPUs are keyed by (project, host, gpu), where a host
seen both by instance id and by name is always keyed by its id. Results are sorted by that key and
the window start.

One exception is kept until the join: where GKE's node and container duty cycles cover the same GPU
and window, both samples are kept (the winner first), because whether a node *has* container
metrics is itself evidence: time-shared and MPS GPUs report none ("not for time-shared/MPS GPUs",
GKE's accelerator metrics, /work/shared/reference/gcp.md section 4), and a finding on such a node
must say it was judged on the node duty cycle. `resolve_duty_cycles` then applies the precedence
and reports which node-hours had container metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from datetime import datetime
from itertools import groupby, islice
from operator import eq, itemgetter

from monitor.sources.presets import Signal
from monitor.utilization.records import GpuSample

__all__ = [
    "HostHour",
    "HostKey",
    "Ident",
    "host_keys",
    "merge",
    "pick",
    "rank_of",
    "resolve_duty_cycles",
    "select_signals",
]

Ident = tuple[str | None, ...]  # IDENT_FIELDS values
HostKey = tuple[str, str, str]  # (project, host, gpu)
HostHour = tuple[str, str, datetime]  # (project, host, hour)

_NODE, _CONTAINER = Signal.NODE_DUTY_CYCLE.value, Signal.CONTAINER_DUTY_CYCLE.value


def host_keys(idents: Iterable[Ident]) -> Callable[[Ident], tuple[str, str, str]]:
    """(project, host, gpu) of an identity, where a host seen both by id and by name is keyed by its id.

    The aliases come from `idents` in order (the first id seen for a name wins).
    """
    alias: dict[tuple[str | None, str], str] = {}
    for project, _, instance_id, instance_name, _, node_name, _, _ in idents:
        if instance_id:
            for name in (instance_name, node_name):
                if name:
                    alias.setdefault((project, name), instance_id)

    def key(ident: Ident) -> tuple[str, str, str]:
        project, _, instance_id, instance_name, _, node_name, gpu, _ = ident
        name = node_name or instance_name
        host = instance_id or alias.get((project, name or "")) or name or ""
        return (project or "", host, gpu or "")

    return key


def _ident(s: GpuSample) -> Ident:
    return (s.project, s.zone, s.instance_id, s.instance_name, s.cluster, s.node_name, s.gpu, s.model)


def pick(ranks: Sequence[int], starts: Sequence[float], samples: list[GpuSample]) -> list[GpuSample]:
    """`samples` sorted by (host rank, start), one per key: the best signal where several collide.

    Ties keep their input order (the sort is stable), so the choice among equals is deterministic.
    """
    keys = list(zip(ranks, starts, strict=True))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    ordered = [keys[i] for i in order]
    if not any(map(eq, ordered, islice(ordered, 1, None))):  # the usual case: nothing collides
        return [samples[i] for i in order]
    out: list[GpuSample] = []
    for _, group in groupby(order, key=keys.__getitem__):
        members = list(group)
        if len(members) == 1:
            out.append(samples[members[0]])
        else:
            out += _best([samples[i] for i in members])
    return out


def rank_of(keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    """Each distinct (project, host, gpu) numbered in sorted order."""
    return {k: r for r, k in enumerate(sorted(set(keys)))}


def select_signals(samples: Iterable[GpuSample]) -> list[GpuSample]:
    """One sample per GPU and window: the most trusted signal, gaps filled from the others (a GKE
    node duty cycle keeps the container duty cycle it outranked beside it, see the module docstring).

    The result is sorted by (project, host, gpu, start).
    """
    items = samples if isinstance(samples, list) else list(samples)
    idents = [_ident(s) for s in items]
    key = host_keys(idents)
    keys = [key(i) for i in idents]
    rank = rank_of(keys)
    return pick([rank[k] for k in keys], [s.start.timestamp() for s in items], items)


def _best(group: list[GpuSample]) -> list[GpuSample]:
    """The most trusted sample, its empty fields filled from the others; plus the best container
    duty cycle when the node duty cycle won over it (see the module docstring)."""
    group.sort(key=lambda s: Signal.rank(s.signal))
    best = group[0]
    fill = {
        f.name: next((getattr(g, f.name) for g in group if getattr(g, f.name) is not None), None)
        for f in fields(GpuSample)
        if getattr(best, f.name) is None
    }
    out = [replace(best, **fill) if fill else best]
    if best.signal == _NODE:
        out += [g for g in group if g.signal == _CONTAINER][:1]
    return out


def merge(entries: list[tuple[float, int, GpuSample]]) -> list[GpuSample]:
    """(start, tie-break, sample) of the series of one GPU: one sample per start, best signal first.

    Members of a collision reach `_best` in tie-break order (the order they were first seen).
    """
    entries.sort(key=itemgetter(0, 1))
    out = []
    for _, group in groupby(entries, key=itemgetter(0)):
        members = [g[2] for g in group]
        if len(members) == 1:
            out.append(members[0])
        else:
            out += _best(members)
    return out


def resolve_duty_cycles(samples: Iterable[GpuSample]) -> tuple[list[GpuSample], set[HostHour]]:
    """One sample per GPU and window by `Signal` precedence, and the host-hours with container metrics.

    The second result holds (project, host, hour) of every host that reported a container duty cycle
    in that hour, whichever signal won: a GKE node judged on its node duty cycle and absent from it
    has no container metrics (a time-shared / MPS GPU). Input order is kept.
    """
    items = samples if isinstance(samples, list) else list(samples)
    if not any(s.signal == _CONTAINER for s in items):  # the usual case: the selection already ran
        return items, set()
    idents = [_ident(s) for s in items]
    key = host_keys(idents)
    best: dict[tuple, GpuSample] = {}
    container: set[HostHour] = set()
    for s, ident in zip(items, idents, strict=True):
        project, host, gpu = key(ident)
        if s.signal == _CONTAINER:
            container.add((project, host, s.start.replace(minute=0, second=0, microsecond=0)))
        k = (project, host, gpu, s.start)
        cur = best.get(k)
        if cur is None or Signal.rank(s.signal) < Signal.rank(cur.signal):
            best[k] = s
    return list(best.values()), container
