"""GPU utilization records, parsed from Cloud Monitoring TimeSeries, and their place in the state store.

One parser serves both sources: the Cloud Monitoring client's protobuf responses are converted to the
REST JSON shape (`to_rest_json`) that exported files already have, so a malformed point is treated the
same whether it came over gRPC or from disk. Bad input never aborts a poll: every dropped point is
counted under a `SkipReason`.

Samples live at the alignment grain (300 s by default): a sample covers ``[start, end)`` and carries
the mean of the points whose end time falls in ``(start, end]`` (Cloud Monitoring's ALIGN_MEAN rule).
When several signals cover one GPU and window, `select_signals` keeps the most trusted
(`Signal.precedence`: SM activity > NVML utilization > GKE duty cycle).

The "utilization" state component stores, per polled scope (project) and preset, the end of the last
window read successfully and the samples of each window; re-reading a window replaces its samples.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from itertools import pairwise
from typing import Any, Protocol

from monitor.sources.presets import METRICS, MetricSpec, Role, Signal
from monitor.state.store import StateStore
from monitor.timeutil import parse_timestamp

__all__ = [
    "BUSY_EPSILON_PCT",
    "COMPONENT",
    "FetchResult",
    "GpuSample",
    "ParsedSeries",
    "Signal",
    "SkipReason",
    "UtilizationSource",
    "assemble",
    "load_samples",
    "migrate",
    "parse_series",
    "read_watermark",
    "replace_window",
    "select_signals",
    "to_rest_json",
]

#: Below this mean (percent) a GPU counts as "0% busy" for the idle-but-allocated flag.
BUSY_EPSILON_PCT = 1.0
COMPONENT = "utilization"
_RANGE_TOLERANCE_PCT = 0.5  # averaging can land a hair outside [0, 100]
_MAX_PCT = 100.0 + _RANGE_TOLERANCE_PCT


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Mean utilization of one GPU over one alignment window ``[start, end)``.

    The host is identified by `instance_id` (GCE), else `node_name` (GKE / Prometheus), else
    `instance_name`; `gpu` is the GPU's number (or GKE accelerator id) on that host.
    """

    project: str
    zone: str | None
    instance_id: str | None
    instance_name: str | None
    cluster: str | None
    node_name: str | None
    gpu: str
    model: str | None
    start: datetime
    end: datetime
    utilization_pct: float
    signal: str
    memory_used_bytes: float | None

    @property
    def host(self) -> str:
        return self.instance_id or self.node_name or self.instance_name or ""

    @property
    def idle_but_allocated(self) -> bool:
        """Memory held while (almost) nothing runs: a stuck job or a notebook keeping a GPU."""
        return bool(self.memory_used_bytes) and self.utilization_pct < BUSY_EPSILON_PCT


class SkipReason(StrEnum):
    MALFORMED_SERIES = "malformed_series"
    UNKNOWN_METRIC = "unknown_metric"
    UNEXPECTED_KIND = "unexpected_metric_kind"
    MISSING_LABELS = "missing_labels"
    BAD_TIMESTAMP = "bad_timestamp"
    NON_NUMERIC = "non_numeric"
    OUT_OF_ORDER = "out_of_order"
    OUT_OF_RANGE = "out_of_range"
    MEMORY_ONLY = "memory_without_utilization"


@dataclass
class FetchResult:
    """Samples of a window, points dropped per `SkipReason` value, and API requests (or files) read."""

    samples: list[GpuSample]
    skipped: dict[str, int] = field(default_factory=dict)
    requests: int = 0


class UtilizationSource(Protocol):
    def fetch(self, start: datetime, end: datetime) -> FetchResult: ...


# --------------------------------------------------------------------------------------------- parsing


@dataclass
class ParsedSeries:
    """One TimeSeries reduced to what we use: its spec, identity and (start, end, scaled value) points."""

    spec: MetricSpec
    ident: dict[str, str | None]
    points: list[tuple[float, float, float]]  # epoch seconds: cheap to bucket by the million


_IDENT_FIELDS = ("project", "zone", "instance_id", "instance_name", "cluster", "node_name", "gpu", "model")


def to_rest_json(series: Any) -> dict[str, Any]:
    """A google-cloud-monitoring `TimeSeries` (proto-plus or raw protobuf) as the REST API's JSON."""
    from google.protobuf.json_format import MessageToDict

    pb = series._pb if hasattr(series, "_pb") else series
    return MessageToDict(pb)


def _label(ts: Mapping[str, Any], path: str) -> str | None:
    kind, _, key = path.partition(".")
    holder = {"resource": ("resource", "labels"), "metric": ("metric", "labels")}.get(
        kind, ("metadata", "systemLabels")
    )
    outer = ts.get(holder[0])
    labels = outer.get(holder[1]) if isinstance(outer, Mapping) else None
    value = labels.get(key) if isinstance(labels, Mapping) else None
    return None if value in (None, "") else str(value)


def _ident(ts: Mapping[str, Any], spec: MetricSpec, default_project: str | None) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _IDENT_FIELDS:
        paths = getattr(spec.labels, name)
        out[name] = next((v for p in paths if (v := _label(ts, p)) is not None), None)
    out["project"] = out["project"] or default_project
    return out


@lru_cache(maxsize=1 << 16)
def _epoch(raw: str) -> float:
    """RFC 3339 to epoch seconds, memoized: a fleet's series share the same few hundred timestamps."""
    return parse_timestamp(raw).timestamp()


def _time(interval: Mapping[str, Any], key: str) -> float | None:
    raw = interval.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError(key)
    return _epoch(raw)


def _number(value: Any) -> float | None:
    """doubleValue (number, or "NaN"/"Infinity" strings in proto3 JSON) or int64Value (a string)."""
    if not isinstance(value, Mapping):
        return None
    try:
        if "doubleValue" in value:
            raw = value["doubleValue"]
            x = float(raw) if isinstance(raw, int | float | str) and not isinstance(raw, bool) else None
        elif "int64Value" in value:
            raw = value["int64Value"]
            x = float(int(raw)) if isinstance(raw, int | str) and not isinstance(raw, bool) else None
        else:
            return None
    except (TypeError, ValueError):
        return None
    return x if x is not None and math.isfinite(x) else None


def _longest_monotonic(keys: Sequence[float]) -> set[int]:
    """Indexes of a longest strictly increasing subsequence (patience sorting)."""
    tails: list[float] = []
    tail_idx: list[int] = []
    prev = [-1] * len(keys)
    for i, k in enumerate(keys):
        j = bisect_left(tails, k)
        if j == len(tails):
            tails.append(k)
            tail_idx.append(i)
        else:
            tails[j], tail_idx[j] = k, i
        prev[i] = tail_idx[j - 1] if j else -1
    keep, i = set(), (tail_idx[-1] if tail_idx else -1)
    while i != -1:
        keep.add(i)
        i = prev[i]
    return keep


def _in_order(points: list[tuple[float, float, float]], skips: Counter[str]) -> list:
    """Points must run one way (the API returns newest first); keep the longest run, skip the rest."""
    ends = [p[1] for p in points]
    up = sum(b > a for a, b in pairwise(ends))
    down = sum(b < a for a, b in pairwise(ends))
    keys = ends if up > down else [-e for e in ends]
    keep = _longest_monotonic(keys)
    skips[SkipReason.OUT_OF_ORDER] += len(points) - len(keep)
    return sorted((p for i, p in enumerate(points) if i in keep), key=lambda p: p[1])


def _point(p: Any, scale: float, is_util: bool, skips: Counter[str]) -> tuple[float, float, float] | None:
    interval = p.get("interval") if isinstance(p, Mapping) else None
    try:
        end = _time(interval, "endTime") if isinstance(interval, Mapping) else None
        start = _time(interval, "startTime") if end is not None else None
    except ValueError:
        end = None
    if end is None or (start is not None and start > end):
        skips[SkipReason.BAD_TIMESTAMP] += 1
        return None
    value = _number(p.get("value"))
    if value is None:
        skips[SkipReason.NON_NUMERIC] += 1
        return None
    value *= scale
    if not -_RANGE_TOLERANCE_PCT <= value <= (_MAX_PCT if is_util else math.inf):
        skips[SkipReason.OUT_OF_RANGE] += 1
        return None
    if is_util:
        value = min(max(value, 0.0), 100.0)
    return (end if start is None else start, end, max(value, 0.0))


def parse_series(ts: Any, skips: Counter[str], *, default_project: str | None = None) -> ParsedSeries | None:
    """Validate one REST-JSON TimeSeries; None (with its points counted in `skips`) when unusable."""
    if not isinstance(ts, Mapping) or not isinstance(ts.get("points", []), list):
        skips[SkipReason.MALFORMED_SERIES] += 1
        return None
    raw_points: list = ts.get("points", [])
    metric = ts.get("metric")
    mtype = metric.get("type") if isinstance(metric, Mapping) else None
    spec = METRICS.get(mtype) if isinstance(mtype, str) else None
    reason: SkipReason | None = None
    if spec is None:
        reason = SkipReason.UNKNOWN_METRIC
    elif ts.get("metricKind", "GAUGE") != "GAUGE" or ts.get("valueType", "DOUBLE") not in ("DOUBLE", "INT64"):
        reason = SkipReason.UNEXPECTED_KIND
    if reason is not None or spec is None:
        skips[reason or SkipReason.UNKNOWN_METRIC] += len(raw_points)
        return None
    if any(_label(ts, path) != value for path, value in spec.require):
        return None  # e.g. memory_state "free": a real series, just not the one we read
    ident = _ident(ts, spec, default_project)
    if (
        not ident["project"]
        or not ident["gpu"]
        or not (ident["instance_id"] or ident["node_name"] or ident["instance_name"])
    ):
        skips[SkipReason.MISSING_LABELS] += len(raw_points)
        return None
    is_util = spec.role is Role.UTILIZATION
    points = [q for p in raw_points if (q := _point(p, spec.scale, is_util, skips)) is not None]
    return ParsedSeries(spec, ident, _in_order(points, skips))


# ------------------------------------------------------------------------------------------- assembly


def _bucket_ends(start: float, end: float, align: int) -> range:
    """Epoch ends of the alignment windows a point covers (an instant: the window holding it)."""
    s, e = int(start), math.ceil(end)
    last = -(-e // align) * align
    first = last if s >= e else (s // align) * align + align
    return range(first, last + 1, align)


def _host_key(items: Iterable[Any]) -> Callable[[Any], tuple[str, str, str]]:
    """(project, host, gpu), where a host seen both by id and by name is always keyed by its id."""
    alias: dict[tuple[str, str], str] = {}
    for it in items:
        if it.instance_id:
            for name in (it.instance_name, it.node_name):
                if name:
                    alias.setdefault((it.project, name), it.instance_id)

    def key(it: Any) -> tuple[str, str, str]:
        name = it.node_name or it.instance_name
        host = it.instance_id or alias.get((it.project, name or "")) or name or ""
        return (it.project, host, it.gpu)

    return key


def _average(series: Iterable[ParsedSeries], align: int, lo: float, hi: float) -> dict[tuple, list]:
    """(metric, identity, window end) -> [sum, count, series, identity] for windows starting in [lo, hi)."""
    acc: dict[tuple, list] = {}
    for s in series:
        ident = tuple(s.ident[f] for f in _IDENT_FIELDS)
        metric = s.spec.metric_type
        for start, end, value in s.points:
            # an instant (the common case) falls in exactly one window: skip building a range
            ends = (-(-math.ceil(end) // align) * align,) if start == end else _bucket_ends(start, end, align)
            for b in ends:
                if lo <= b - align < hi:
                    slot = acc.get((metric, ident, b))
                    if slot is None:
                        acc[(metric, ident, b)] = [value, 1, s, ident]
                    else:
                        slot[0] += value
                        slot[1] += 1
    return acc


def _attach_memory(util: list[GpuSample], memory: list[GpuSample], skips: Counter[str]) -> list[GpuSample]:
    if not memory:
        return util
    key = _host_key([*util, *memory])
    mem_at = {(key(m), m.start): m.memory_used_bytes for m in memory}
    out = [replace(u, memory_used_bytes=mem_at.get((key(u), u.start))) for u in util]
    skips[SkipReason.MEMORY_ONLY] += len(mem_at.keys() - {(key(u), u.start) for u in util})
    return out


def assemble(
    series: Iterable[ParsedSeries],
    alignment_seconds: int,
    skips: Counter[str],
    window: tuple[datetime, datetime] | None = None,
) -> list[GpuSample]:
    """Average points into alignment windows, attach memory to utilization, keep the best signal.

    With `window`, only samples whose start lies in ``[window[0], window[1])`` are produced.
    """
    align = alignment_seconds
    lo, hi = (w.timestamp() for w in window) if window else (-math.inf, math.inf)
    util: list[GpuSample] = []
    memory: list[GpuSample] = []
    when: dict[int, datetime] = {}  # one datetime per window boundary, shared by every GPU
    kinds: dict[str, str | None] = {}  # metric type -> signal name, None for memory
    for (metric, _, b), (total, n, s, ident) in _average(series, align, lo, hi).items():
        for t in (b - align, b):
            if t not in when:
                when[t] = datetime.fromtimestamp(t, UTC)
        if metric not in kinds:
            kinds[metric] = None if s.spec.role is Role.MEMORY else str(s.spec.signal)
        signal, mean = kinds[metric], total / n
        if signal is None:
            memory.append(GpuSample(*ident, when[b - align], when[b], 0.0, "memory", mean))
        else:
            util.append(GpuSample(*ident, when[b - align], when[b], mean, signal, None))
    return select_signals(_attach_memory(util, memory, skips))


def select_signals(samples: Iterable[GpuSample]) -> list[GpuSample]:
    """One sample per GPU and window: the most trusted signal, gaps filled from the others."""
    items = samples if isinstance(samples, list) else list(samples)
    key = _host_key(items)
    groups: dict[tuple, Any] = {}  # a lone sample, or a list once a second one shows up
    for s in items:
        k = (*key(s), s.start)
        have = groups.get(k)
        if have is None:
            groups[k] = s
        elif isinstance(have, list):
            have.append(s)
        else:
            groups[k] = [have, s]
    return [g if isinstance(g, GpuSample) else _best(g) for _, g in sorted(groups.items(), key=_first)]


def _first(item: tuple[tuple, Any]) -> tuple:
    return item[0]


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


# ---------------------------------------------------------------------------------------------- state

_MIGRATIONS = (
    """
    CREATE TABLE utilization_windows (
      scope TEXT NOT NULL, preset TEXT NOT NULL, polled_until TEXT NOT NULL, updated_at TEXT NOT NULL,
      PRIMARY KEY (scope, preset));
    CREATE TABLE utilization_samples (
      scope TEXT NOT NULL, preset TEXT NOT NULL, project TEXT NOT NULL, host TEXT NOT NULL,
      zone TEXT, instance_id TEXT, instance_name TEXT, cluster TEXT, node_name TEXT,
      gpu TEXT NOT NULL, model TEXT, start TEXT NOT NULL, "end" TEXT NOT NULL,
      utilization_pct REAL NOT NULL, signal TEXT NOT NULL, memory_used_bytes REAL,
      PRIMARY KEY (scope, preset, project, host, gpu, signal, start));
    CREATE INDEX utilization_samples_start ON utilization_samples (start)
    """,
)
_COLS = [f.name for f in fields(GpuSample)]


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(s: GpuSample) -> list[Any]:
    return [_iso(v) if isinstance(v, datetime) else v for v in (getattr(s, c) for c in _COLS)]


def migrate(store: StateStore) -> None:
    store.migrate(COMPONENT, _MIGRATIONS)


def read_watermark(store: StateStore, scope: str, preset: str) -> datetime | None:
    """End of the last window read successfully for (scope, preset); None before the first poll."""
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT polled_until FROM utilization_windows WHERE scope = ? AND preset = ?", (scope, preset)
        ).fetchone()
    return parse_timestamp(row[0]) if row else None


def replace_window(
    store: StateStore,
    scope: str,
    preset: str,
    start: datetime,
    end: datetime,
    samples: Iterable[GpuSample],
    *,
    now: datetime,
) -> int:
    """Atomically swap the samples of ``[start, end)`` and move the watermark to `end`."""
    rows = [(scope, preset, s.host, *_row(s)) for s in samples]
    with store.transaction() as conn:
        conn.execute(
            "DELETE FROM utilization_samples WHERE scope = ? AND preset = ? AND start >= ? AND start < ?",
            (scope, preset, _iso(start), _iso(end)),
        )
        cols = ", ".join(f'"{c}"' for c in ("scope", "preset", "host", *_COLS))
        conn.executemany(
            f"INSERT OR REPLACE INTO utilization_samples ({cols}) VALUES ({', '.join('?' * (3 + len(_COLS)))})",
            rows,
        )
        conn.execute(
            "INSERT INTO utilization_windows (scope, preset, polled_until, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (scope, preset) DO UPDATE SET polled_until = excluded.polled_until,"
            " updated_at = excluded.updated_at",
            (scope, preset, _iso(end), _iso(now)),
        )
    return len(rows)


def load_samples(store: StateStore, start: datetime, end: datetime) -> list[GpuSample]:
    """Stored samples starting in ``[start, end)``, one per GPU and window (best signal across presets)."""
    cols = ", ".join(f'"{c}"' for c in _COLS)
    with store.transaction() as conn:
        rows = conn.execute(
            f"SELECT {cols} FROM utilization_samples WHERE start >= ? AND start < ?", (_iso(start), _iso(end))
        ).fetchall()
    recs = [
        GpuSample(**{c: parse_timestamp(r[c]) if c in ("start", "end") else r[c] for c in _COLS})
        for r in rows
    ]
    return select_signals(recs)
