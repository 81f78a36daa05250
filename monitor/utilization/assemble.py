"""Points averaged into alignment windows, memory attached, one signal kept per GPU and window.

Samples live at the alignment grain (300 s by default): a sample covers ``[start, end)`` and carries
the mean of the points whose end time falls in ``(start, end]`` (Cloud Monitoring's ALIGN_MEAN rule).

A 14-day fleet is several hundred thousand windows, so everything is keyed by small integers (a
series number, an epoch second, a sequence number recording first appearance) and each sample is
built once, already in its final order: per GPU the windows of a series arrive in time order, so
only GPUs seen through several series (metrics, or label changes) need a merge.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np

from monitor.sources.presets import MetricSpec, Role
from monitor.utilization.records import IDENT_FIELDS, GpuSample, ParsedSeries, SampleDraft, SkipReason, freeze
from monitor.utilization.select import HostKey, Ident, host_keys, merge

__all__ = ["assemble"]


class _Head:
    """The windows of every series sharing one (metric, identity): sums, counts, first appearance.

    Plain dicts of numbers (not a list per window): a fleet has hundreds of thousands of windows,
    and small containers by the hundred thousand cost as much again in garbage collection.
    """

    __slots__ = ("counts", "ident", "seqs", "spec", "sums")

    def __init__(self, spec: MetricSpec, ident: Ident):
        self.spec, self.ident = spec, ident
        self.sums: dict[int, float] = {}  # window end -> sum of values
        self.counts: dict[int, int] = {}  # window end -> count, only where more than one
        self.seqs: dict[int, int] = {}  # window end -> sequence number of its first value

    def mean(self, b: int) -> float:
        return self.sums[b] / self.counts.get(b, 1)

    def ends(self) -> list[int]:
        """Window ends in time order (series arrive in time order: the sort is a linear pass)."""
        return sorted(self.sums)


def _average(series: Iterable[ParsedSeries], align: int, lo: float, hi: float) -> list[_Head]:
    """Sum and count the points of each window starting in [lo, hi), per (metric, identity)."""
    number: dict[tuple[str, Ident], _Head] = {}
    heads: list[_Head] = []
    ceil = math.ceil
    seq = 0
    # Only the points a window in [lo, hi) can use (they run in end order): a window read in pieces
    # (the daemon's file poll, six hours at a time) visits each piece's points, not all of the
    # files'. A point ending at or before lo - align falls in windows ending before lo; one ending
    # at or after hi + align + span starts at or after hi + align.
    spans = [
        (
            s,
            bisect_right(s.points.ends, lo - align) if lo > -math.inf else 0,
            bisect_left(s.points.ends, hi + align + s.span) if hi < math.inf else len(s.points),
        )
        for s in series
    ]
    for (s, i, j), fast in zip(spans, _by_window(spans, align, lo, hi), strict=True):
        ident = tuple(s.ident[f] for f in IDENT_FIELDS)
        head = number.get((s.spec.metric_type, ident))
        if head is None:
            head = number[(s.spec.metric_type, ident)] = _Head(s.spec, ident)
            heads.append(head)
        sums, counts, seqs = head.sums, head.counts, head.seqs
        if fast is not None and sums.keys().isdisjoint(fast[0]):
            windows, totals, several = fast  # windows new to this head: what the loop would store
            sums.update(zip(windows, totals, strict=True))
            counts.update(several)
            seqs.update(zip(windows, range(seq, seq + len(windows)), strict=True))
            seq += len(windows)
            continue
        points = s.points
        for start, end, value in points.between(i, j):
            e = ceil(end)
            last = -(-e // align) * align
            first = last if start == end or int(start) >= e else (int(start) // align) * align + align
            for b in (last,) if first == last else range(first, last + 1, align):
                if lo <= b - align < hi:
                    if b in sums:
                        sums[b] += value
                        counts[b] = counts.get(b, 1) + 1
                    else:
                        sums[b] = value
                        seqs[b] = seq
                        seq += 1
    return heads


_Windows = tuple[list[int], list[float], dict[int, int]]


def _by_window(
    spans: list[tuple[ParsedSeries, int, int]], align: int, lo: float, hi: float
) -> list[_Windows | None]:
    """`_average`'s loop done by numpy over the points [i, j) of every series at once, for the
    usual series, each point in one window: per series, the ends of the windows in [lo, hi) its
    points fall in, in order, their sums, and the counts of those with several points. None for a
    series with a point over several windows, which the loop handles. Sums add a window's points
    one by one in order, as the loop does, so they are the same to the bit. At bench scale 5 the
    loop took 7 s of the 32 s that `analyze` spent on 30 days of utilization (cProfile), a numpy
    pass per series 4.6 s (a six-hour piece holds 72 points of a series: numpy's fixed cost per call
    weighs), one pass a piece for all its series 1.9 s with the loop's dict updates."""
    out: list[_Windows | None] = [None] * len(spans)
    chosen = [k for k, (_, i, j) in enumerate(spans) if j > i]
    if not chosen:
        return out

    def column(name: str) -> np.ndarray:
        return np.concatenate(
            [
                np.frombuffer(getattr(spans[k][0].points, name), dtype=np.float64)[spans[k][1] : spans[k][2]]
                for k in chosen
            ]
        )

    starts, ends, values = column("starts"), column("ends"), column("values")
    owner = np.repeat(np.arange(len(chosen)), [spans[k][2] - spans[k][1] for k in chosen])
    e = np.ceil(ends).astype(np.int64)
    last = -(-e // align) * align  # the window the point ends in
    first = starts.astype(np.int64)  # int(start): toward zero, as astype
    spread = (starts != ends) & (first < e) & ((first // align) * align + align != last)
    declined = np.zeros(len(chosen), dtype=bool)
    declined[owner[spread]] = True
    begins = last - align
    keep = (begins >= lo) & (begins < hi)
    owner, windows, values = owner[keep], last[keep], values[keep]
    if windows.size == 0:  # no window in [lo, hi) for any of them
        for n, k in enumerate(chosen):
            out[k] = None if declined[n] else ([], [], {})
        return out
    # points run in end order (`ParsedSeries.points`), so a series' windows do: runs of one window
    same = owner[1:] == owner[:-1]
    firsts = np.flatnonzero(np.concatenate(([True], ~same | (windows[1:] != windows[:-1]))))
    sizes = np.diff(np.append(firsts, windows.size))
    totals = values[firsts].copy()
    for k in range(1, int(sizes.max(initial=1))):  # the k-th point of every window that has one
        more = sizes > k
        totals[more] += values[firsts[more] + k]
    bounds = np.searchsorted(owner[firsts], np.arange(len(chosen) + 1)).tolist()
    ends_of, totals_of, sizes_of = windows[firsts].tolist(), totals.tolist(), sizes.tolist()
    for n, k in enumerate(chosen):
        if not declined[n]:
            a, b = bounds[n], bounds[n + 1]
            several = {w: c for w, c in zip(ends_of[a:b], sizes_of[a:b], strict=True) if c > 1}
            out[k] = (ends_of[a:b], totals_of[a:b], several)
    return out


def _in_order(heads: list[_Head], memory: bool) -> list[_Head]:
    """Heads with windows, of one role, by the first appearance of their first window."""
    chosen = [h for h in heads if h.sums and (h.spec.role is Role.MEMORY) == memory]
    return sorted(chosen, key=lambda h: h.seqs[next(iter(h.sums))])


def assemble(
    series: Iterable[ParsedSeries],
    alignment_seconds: int,
    skips: Counter[str],
    window: tuple[datetime, datetime] | None = None,
) -> list[GpuSample]:
    """Average points into alignment windows, attach memory to utilization, keep the best signal.

    With `window`, only samples whose start lies in ``[window[0], window[1])`` are produced. The
    result is sorted by (project, host, gpu, start), as `select_signals` orders it.
    """
    align = alignment_seconds
    lo, hi = (w.timestamp() for w in window) if window else (-math.inf, math.inf)
    heads = _average(series, align, lo, hi)
    util = _in_order(heads, memory=False)
    memory = _memory_at(util, _in_order(heads, memory=True), skips)
    key = host_keys(h.ident for h in util)
    by_gpu: dict[HostKey, list[_Head]] = {}
    for h in util:
        by_gpu.setdefault(key(h.ident), []).append(h)
    ends = {b for h in util for b in h.sums}
    when = {t: datetime.fromtimestamp(t, UTC) for t in ends | {b - align for b in ends}}
    out: list[GpuSample] = []
    for gpu in sorted(by_gpu):
        group = by_gpu[gpu]
        if len(group) == 1:
            out += _samples(group[0], align, when, memory.get(id(group[0])))
        else:
            tagged = [
                (s.start.timestamp(), h.seqs[b], s)
                for h in group
                for b, s in zip(h.ends(), _samples(h, align, when, memory.get(id(h))), strict=True)
            ]
            out += merge(tagged)
    return out


def _samples(
    head: _Head, align: int, when: dict[int, datetime], memory: dict[int, float] | None
) -> list[GpuSample]:
    """The samples of one head in time order, with their memory figures (window end -> bytes)."""
    ident, signal, sums = head.ident, str(head.spec.signal), head.sums
    if head.counts or memory:
        mean, mem = head.mean, (memory or {}).get
        drafts = [SampleDraft(*ident, when[b - align], when[b], mean(b), signal, mem(b)) for b in head.ends()]
    else:  # the usual case: one value per window, nothing to divide or attach
        drafts = [SampleDraft(*ident, when[b - align], when[b], sums[b], signal, None) for b in head.ends()]
    return freeze(drafts)


def _memory_at(util: list[_Head], memory: list[_Head], skips: Counter[str]) -> dict[int, dict[int, float]]:
    """id(utilization head) -> window end -> bytes of GPU memory used in that window.

    Hosts are matched across metrics (aliases from both); of two memory figures for one GPU and
    window the later seen wins; memory seen with no utilization is counted.
    """
    if not memory:
        return {}
    key = host_keys(h.ident for h in util + memory)
    figures = sorted((h.seqs[b], i, b) for i, h in enumerate(memory) for b in h.sums)
    by_key = {(*key(memory[i].ident), b): memory[i].mean(b) for _, i, b in figures}
    out: dict[int, dict[int, float]] = {}
    matched: set[tuple] = set()
    for h in util:
        gpu = key(h.ident)
        for b in h.sums:
            k = (*gpu, b)
            matched.add(k)
            if k in by_key:
                out.setdefault(id(h), {})[b] = by_key[k]
    skips[SkipReason.MEMORY_ONLY] += len(by_key.keys() - matched)
    return out
