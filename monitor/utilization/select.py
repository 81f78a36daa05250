"""One sample per GPU and window: the most trusted signal, its gaps filled from the others.

When several signals cover one GPU and window, the most trusted wins (`Signal.precedence`: SM
activity > NVML utilization > GKE duty cycle). GPUs are keyed by (project, host, gpu), where a host
seen both by instance id and by name is always keyed by its id. Results are sorted by that key and
the window start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from itertools import groupby, islice
from operator import eq, itemgetter

from monitor.sources.presets import Signal
from monitor.utilization.records import GpuSample

__all__ = ["HostKey", "Ident", "host_keys", "merge", "pick", "rank_of", "select_signals"]

Ident = tuple[str | None, ...]  # IDENT_FIELDS values
HostKey = tuple[str, str, str]  # (project, host, gpu)


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
        out.append(samples[members[0]] if len(members) == 1 else _best([samples[i] for i in members]))
    return out


def rank_of(keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    """Each distinct (project, host, gpu) numbered in sorted order."""
    return {k: r for r, k in enumerate(sorted(set(keys)))}


def select_signals(samples: Iterable[GpuSample]) -> list[GpuSample]:
    """One sample per GPU and window: the most trusted signal, gaps filled from the others.

    The result is sorted by (project, host, gpu, start).
    """
    items = samples if isinstance(samples, list) else list(samples)
    idents = [_ident(s) for s in items]
    key = host_keys(idents)
    keys = [key(i) for i in idents]
    rank = rank_of(keys)
    return pick([rank[k] for k in keys], [s.start.timestamp() for s in items], items)


def _best(group: list[GpuSample]) -> GpuSample:
    group.sort(key=lambda s: _precedence(s.signal))
    best = group[0]
    fill = {
        f.name: next((getattr(g, f.name) for g in group if getattr(g, f.name) is not None), None)
        for f in fields(GpuSample)
        if getattr(best, f.name) is None
    }
    return replace(best, **fill) if fill else best


def _precedence(signal: str) -> int:
    try:
        return Signal(signal).precedence
    except ValueError:
        return len(Signal)


def merge(entries: list[tuple[float, int, GpuSample]]) -> list[GpuSample]:
    """(start, tie-break, sample) of the series of one GPU: one sample per start, best signal first.

    Members of a collision reach `_best` in tie-break order (the order they were first seen).
    """
    entries.sort(key=itemgetter(0, 1))
    out = []
    for _, group in groupby(entries, key=itemgetter(0)):
        members = [g[2] for g in group]
        out.append(members[0] if len(members) == 1 else _best(members))
    return out
