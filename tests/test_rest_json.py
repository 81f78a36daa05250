"""`to_rest_json` writes a TimeSeries exactly as protobuf's `MessageToDict` does, for every point
shape: the parser reads that JSON for the API and for exported files alike, so a difference would
read the same series two ways."""

from __future__ import annotations

import math

from google.cloud import monitoring_v3
from google.protobuf.json_format import MessageToDict, ParseDict
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.utilization.parse import to_rest_json
from tests.fakes.monitoring_server import from_rest_json

_SECONDS = st.integers(min_value=0, max_value=253402300799)  # up to 9999-12-31T23:59:59Z
_NANOS = st.sampled_from([0, 1, 1000, 1_000_000, 500_000_000, 123_456_789])


@st.composite
def points(draw: st.DrawFn) -> dict:
    """A Point in any shape the API may send: with or without an interval, start or end time, and a
    double (non-finite too), int64, bool, string or distribution value, or none."""
    p: dict = {}
    interval: dict = {}
    if draw(st.integers(0, 9)):  # mostly an end time
        interval["end_time"] = {"seconds": draw(_SECONDS), "nanos": draw(_NANOS)}
    if draw(st.booleans()):
        interval["start_time"] = {"seconds": draw(_SECONDS), "nanos": draw(_NANOS)}
    if interval or draw(st.booleans()):
        p["interval"] = interval
    kind = draw(st.sampled_from(["double", "double", "int64", "bool", "string", "distribution", None]))
    if kind == "double":
        p["value"] = {"double_value": draw(st.floats(allow_nan=True, allow_infinity=True))}
    elif kind == "int64":
        p["value"] = {"int64_value": draw(st.integers(-(2**63), 2**63 - 1))}
    elif kind == "bool":
        p["value"] = {"bool_value": draw(st.booleans())}
    elif kind == "string":
        p["value"] = {"string_value": draw(st.text(max_size=5))}
    elif kind == "distribution":
        p["value"] = {"distribution_value": {"count": draw(st.integers(0, 9)), "mean": 1.5}}
    return p


def _series(pts: list[dict]) -> monitoring_v3.TimeSeries:
    return monitoring_v3.TimeSeries(
        metric={"type": "agent.googleapis.com/gpu/utilization", "labels": {"gpu_number": "0"}},
        resource={"type": "gce_instance", "labels": {"instance_id": "123", "zone": "us-central1-a"}},
        metadata={"system_labels": {"fields": {"name": {"string_value": "vm-1"}}}},
        metric_kind="GAUGE",
        value_type="DOUBLE",
        unit="%",
        points=pts,
    )


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (MessageToDict writes NaN as the string "NaN": compared as is)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(st.lists(points(), max_size=6))
def test_every_point_shape_is_written_as_message_to_dict_writes_it(pts: list[dict]) -> None:
    ts = _series(pts)
    assert _same(to_rest_json(ts), MessageToDict(ts._pb))
    assert _same(to_rest_json(ts._pb), MessageToDict(ts._pb))  # raw protobuf as well


def test_the_common_point_and_a_series_without_points() -> None:
    ts = _series(
        [
            {"interval": {"end_time": {"seconds": 1764547200}}, "value": {"double_value": 42.5}},
            {"interval": {"end_time": {"seconds": 1764547500, "nanos": 5}}, "value": {"int64_value": 7}},
        ]
    )
    out = to_rest_json(ts)
    assert out["points"] == [
        {"interval": {"endTime": "2025-12-01T00:00:00Z"}, "value": {"doubleValue": 42.5}},
        {"interval": {"endTime": "2025-12-01T00:05:00.000000005Z"}, "value": {"int64Value": "7"}},
    ]
    assert out == MessageToDict(ts._pb)
    assert to_rest_json(_series([])) == MessageToDict(_series([])._pb)


@settings(max_examples=300, deadline=None)
@given(st.lists(points(), max_size=6))
def test_the_fakes_reader_is_parse_dict(pts: list[dict]) -> None:
    """The gRPC stand-in's `from_rest_json` (the fleet's JSON as the API's protobuf) builds what
    `ParseDict` builds, whatever the point: served series are the simulator's, unaltered."""
    ts = _series(pts)
    rest = MessageToDict(ts._pb)
    expected = monitoring_v3.TimeSeries()._pb
    ParseDict(rest, expected)
    assert from_rest_json(rest)._pb == expected
