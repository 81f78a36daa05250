"""One Cloud Monitoring TimeSeries (REST JSON) validated into a `ParsedSeries`.

Bad input never aborts a poll: every dropped point is counted under a `SkipReason`: a series
without the labels naming its host and GPU (`missing_labels`), a point without an interval or with
an end time that is not RFC 3339 with a zone (`bad_timestamp`: the API always writes `Z`, so a naive
time means another tool wrote the file and its zone is unknown), a value that is missing, not a
number or not finite (`non_numeric`). The files source rejects a file none of whose points is usable. Values are
converted by their unit (`monitor.sources.units`): a series whose unit is unknown is skipped whole,
counted as `unknown_unit` and named in `unknown` (metric type -> unit), never scaled by a guess.
A fleet's files
hold hundreds of thousands of points, nearly all well formed, so each point first takes a fast path
(a float value, string timestamps, in range) and only an unusual one goes through the general
checks, which decide exactly as before.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any

from monitor.sources.presets import METRICS, MetricSpec, Role
from monitor.sources.units import NO_UNIT, UNKNOWN_UNIT, factor, resolve_unit
from monitor.timeutil import parse_timestamp
from monitor.utilization.records import IDENT_FIELDS, ParsedSeries, Points, SkipReason

__all__ = ["parse_series", "to_rest_json"]

_RANGE_TOLERANCE_PCT = 0.5  # averaging can land a hair outside [0, 100]
_MAX_PCT = 100.0 + _RANGE_TOLERANCE_PCT
_HOLDERS = {"resource": ("resource", "labels"), "metric": ("metric", "labels")}
_SYSTEM = ("metadata", "systemLabels")

Point = tuple[float, float, float]


def to_rest_json(series: Any) -> dict[str, Any]:
    """A google-cloud-monitoring `TimeSeries` (proto-plus or raw protobuf) as the REST API's JSON:
    exactly `MessageToDict`'s, which one parser reads for the API and for exported files alike.
    `MessageToDict` walks every point's messages generically (11 ms for a day of 5-minute points,
    two thirds of a backfill's time), so the common point (an interval and a double or int64 value)
    is written here, its timestamps memoized; any other point goes through `MessageToDict`."""
    from google.protobuf.json_format import MessageToDict

    pb = series._pb if hasattr(series, "_pb") else series
    if not pb.points:
        return MessageToDict(pb)
    bare = type(pb)()
    bare.CopyFrom(pb)
    del bare.points[:]
    out = MessageToDict(bare)
    out["points"] = [_point_json(p, MessageToDict) for p in pb.points]
    return out


def _point_json(p: Any, general: Any) -> dict[str, Any]:
    """One Point as `MessageToDict(p)` writes it (`general` for any point not of the common shape)."""
    kind = p.value.WhichOneof("value")
    if not p.HasField("interval") or kind not in ("double_value", "int64_value"):
        return general(p)
    interval = p.interval
    if not interval.HasField("end_time"):
        return general(p)
    if kind == "double_value":
        x = p.value.double_value
        value: dict[str, Any] = {"doubleValue": x if math.isfinite(x) else general(p.value)["doubleValue"]}
    else:
        value = {"int64Value": str(p.value.int64_value)}
    span = {"endTime": _rfc3339(interval.end_time.seconds, interval.end_time.nanos)}
    if interval.HasField("start_time"):
        span["startTime"] = _rfc3339(interval.start_time.seconds, interval.start_time.nanos)
    return {"interval": span, "value": value}


@lru_cache(maxsize=1 << 16)
def _rfc3339(seconds: int, nanos: int) -> str:
    """A Timestamp as protobuf's JSON writes it (its own `ToJsonString`): a fleet's points share a
    few hundred end times."""
    from google.protobuf.timestamp_pb2 import Timestamp

    return Timestamp(seconds=seconds, nanos=nanos).ToJsonString()


def _label(ts: Mapping[str, Any], path: str) -> str | None:
    kind, _, key = path.partition(".")
    holder = _HOLDERS.get(kind, _SYSTEM)
    outer = ts.get(holder[0])
    labels = outer.get(holder[1]) if isinstance(outer, Mapping) else None
    value = labels.get(key) if isinstance(labels, Mapping) else None
    return None if value in (None, "") else str(value)


def _ident(ts: Mapping[str, Any], spec: MetricSpec, default_project: str | None) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in IDENT_FIELDS:
        paths = getattr(spec.labels, name)
        out[name] = next((v for p in paths if (v := _label(ts, p)) is not None), None)
    out["project"] = out["project"] or default_project
    return out


@lru_cache(maxsize=1 << 16)
def _epoch(raw: str) -> float:
    """RFC 3339 to epoch seconds, memoized: a fleet's series share the same few hundred timestamps.
    A time without a zone is a ValueError (counted as `bad_timestamp`)."""
    return parse_timestamp(raw, require_zone=True).timestamp()


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


def _point(p: Any, scale: float, is_util: bool, skips: Counter[str]) -> Point | None:
    """The general check of one point (any shape); None, counted in `skips`, when unusable."""
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


def _points(raw: list[Any], scale: float, is_util: bool, skips: Counter[str]) -> list[Point]:
    """Every usable point of a series: the common shape inline, anything else via `_point`."""
    out: list[Point] = []
    append = out.append
    epoch = _epoch
    top = _MAX_PCT if is_util else math.inf
    for p in raw:
        try:
            interval = p["interval"]
            e, s, x = interval["endTime"], interval.get("startTime"), p["value"]["doubleValue"]
        except (KeyError, TypeError, IndexError, AttributeError):
            e = x = None
        if x.__class__ is float and e.__class__ is str and (s is None or s.__class__ is str):
            try:
                end = epoch(e)
                start = end if s is None else epoch(s)
                ok = start <= end and math.isfinite(x)
            except ValueError:
                ok = False  # a bad timestamp: the general check counts it
            v = x * scale
            if ok and -_RANGE_TOLERANCE_PCT <= v <= top:
                # `_point`'s clamps, as comparisons, not min/max calls (with `Points` built a column at
                # a time: six day files of bench scale 5 parsed in 2.08 s, 2.41 s before)
                if v < 0.0:
                    v = 0.0
                elif is_util and v > 100.0:
                    v = 100.0
                append((start, end, v))
                continue
        q = _point(p, scale, is_util, skips)
        if q is not None:
            append(q)
    return out


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


def _in_order(points: list[Point], skips: Counter[str]) -> list[Point]:
    """Points must run one way (the API returns newest first); keep the longest run, skip the rest."""
    ends = [p[1] for p in points]
    if all(a > b for a, b in pairwise(ends)):  # the API's order, nothing out of place
        return points[::-1]
    if all(a < b for a, b in pairwise(ends)):
        return points
    up = sum(b > a for a, b in pairwise(ends))
    down = sum(b < a for a, b in pairwise(ends))
    keys = ends if up > down else [-e for e in ends]
    keep = _longest_monotonic(keys)
    skips[SkipReason.OUT_OF_ORDER] += len(points) - len(keep)
    return sorted((p for i, p in enumerate(points) if i in keep), key=lambda p: p[1])


def _spec_of(ts: Mapping[str, Any], raw_points: list, skips: Counter[str]) -> MetricSpec | None:
    metric = ts.get("metric")
    mtype = metric.get("type") if isinstance(metric, Mapping) else None
    spec = METRICS.get(mtype) if isinstance(mtype, str) else None
    reason: SkipReason | None = None
    if spec is None:
        reason = SkipReason.UNKNOWN_METRIC
    elif ts.get("metricKind", "GAUGE") != "GAUGE" or ts.get("valueType", "DOUBLE") not in ("DOUBLE", "INT64"):
        reason = SkipReason.UNEXPECTED_KIND
    if reason is not None:
        skips[reason] += len(raw_points)
        return None
    return spec


def _factor(
    ts: Mapping[str, Any], spec: MetricSpec, unit: str | None, unknown: dict[str, str] | None
) -> float | None:
    """The series' conversion factor: its own `unit`, else the caller's, else the documented one."""
    code = resolve_unit(spec.metric_type, ts.get("unit"), unit)
    f = None if code is None else factor(code, spec.role)
    if f is None and unknown is not None:
        unknown.setdefault(spec.metric_type, code or NO_UNIT)
    return f


def parse_series(
    ts: Any,
    skips: Counter[str],
    *,
    default_project: str | None = None,
    unit: str | None = None,
    unknown: dict[str, str] | None = None,
) -> ParsedSeries | None:
    """Validate one REST-JSON TimeSeries; None (with its points counted in `skips`) when unusable.

    `unit` is what the caller knows of the metric's unit (a `ListMetricDescriptors` answer, a
    page's `unit`); the series' own `unit` field wins over it, the documented table comes last.
    A metric skipped for its unit is recorded in `unknown` (metric type -> unit as declared).
    """
    if not isinstance(ts, Mapping) or not isinstance(ts.get("points", []), list):
        skips[SkipReason.MALFORMED_SERIES] += 1
        return None
    raw_points: list = ts.get("points", [])
    spec = _spec_of(ts, raw_points, skips)
    if spec is None:
        return None
    if any(_label(ts, path) != value for path, value in spec.require):
        return None  # e.g. memory_state "free": a real series, just not the one we read
    scale = _factor(ts, spec, unit, unknown)
    if scale is None:
        skips[UNKNOWN_UNIT] += len(raw_points)
        return None
    ident = _ident(ts, spec, default_project)
    if (
        not ident["project"]
        or not ident["gpu"]
        or not (ident["instance_id"] or ident["node_name"] or ident["instance_name"])
    ):
        skips[SkipReason.MISSING_LABELS] += len(raw_points)
        return None
    points = Points(_in_order(_points(raw_points, scale, spec.role is Role.UTILIZATION, skips), skips))
    return ParsedSeries(spec, ident, points, max(map(operator.sub, points.ends, points.starts), default=0.0))
