"""A Cloud Monitoring stand-in: the real `google.monitoring.v3.MetricService` over gRPC
(`ListTimeSeries` and `ListMetricDescriptors`).

It binds 127.0.0.1 on a free port and speaks the real protobuf wire format, so the real
google-cloud-monitoring client talks to it unchanged. It does not aggregate: a test loads it with
series already at the alignment grain (what the real service returns for ALIGN_MEAN + REDUCE_MEAN),
and the server selects them by `metric.type` from the request filter and by point end time in
``(interval.start_time, interval.end_time]``, newest point first like the real API. Series are paged
`page_size` at a time with opaque tokens. `faults` is a queue of status codes (None = answer
normally) consumed one per call, to script UNAVAILABLE / RESOURCE_EXHAUSTED at any call. Every
request is recorded as the deserialized `ListTimeSeriesRequest`.

`ListMetricDescriptors` answers a `metric.type = "..."` filter from `units` (metric type -> unit),
preloaded with the REAL unit of every metric the presets read (`REAL_UNITS`, each cited); a type
absent from `units` has no descriptor (an empty answer, as for a metric not in the project). A test
sets `units[type] = "ms"` to make a unit unknown. Descriptor requests are recorded apart, in
`descriptor_requests`, and have their own fault queue, `descriptor_faults`.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc
from google.cloud import monitoring_v3
from google.protobuf.json_format import ParseDict
from google.protobuf.timestamp_pb2 import Timestamp

__all__ = ["REAL_UNITS", "FakeMonitoringServer", "ScopedMonitoringServer", "from_rest_json", "gauge_series"]

_TYPE_RE = re.compile(r'metric\.type\s*=\s*"([^"]+)"')
_WL = "workload.googleapis.com/"
_PROM = "prometheus.googleapis.com/{}/gauge"

#: The units Cloud Monitoring's descriptors carry for the metrics gpucost reads.
REAL_UNITS: dict[str, str] = {
    # https://cloud.google.com/monitoring/api/metrics_opsagent, gpu section: "GAUGE, DOUBLE, %" and
    # "GAUGE, INT64, By".
    "agent.googleapis.com/gpu/utilization": "%",
    "agent.googleapis.com/gpu/memory/bytes_used": "By",
    # GoogleCloudPlatform/opentelemetry-operations-collector receiver/dcgmreceiver/metadata.yaml
    # (v1 at 051f4ee0: dcgm.gpu.profiling.sm_utilization unit 1; v2 at 34805c03: gpu.dcgm.* units
    # "1" and By); the Ops Agent (ops-agent apps/dcgm.go) adds the prefix and keeps the unit.
    _WL + "dcgm.gpu.profiling.sm_utilization": "1",
    _WL + "gpu.dcgm.sm.utilization": "1",
    _WL + "gpu.dcgm.utilization": "1",
    _WL + "gpu.dcgm.memory.bytes_used": "By",
    # https://cloud.google.com/monitoring/api/metrics_kubernetes; duty cycle is the kubelet's
    # AcceleratorStats.dutyCycle, a percent (kubernetes.io/docs/reference/kubelet-api/stats.v1alpha1).
    "kubernetes.io/node/accelerator/duty_cycle": "%",
    "kubernetes.io/container/accelerator/duty_cycle": "%",
    "kubernetes.io/container/accelerator/memory_used": "By",
    # Managed Service for Prometheus: Prometheus metrics carry no unit
    # (GoogleCloudPlatform/prometheus-engine#232), so their descriptors' unit is empty.
    _PROM.format("DCGM_FI_PROF_SM_ACTIVE"): "",
    _PROM.format("DCGM_FI_PROF_GR_ENGINE_ACTIVE"): "",
    _PROM.format("DCGM_FI_DEV_GPU_UTIL"): "",
    _PROM.format("DCGM_FI_DEV_FB_USED"): "",
}


def gauge_series(
    metric_type: str,
    resource_type: str,
    resource_labels: dict[str, str],
    metric_labels: dict[str, str],
    points: Iterable[tuple[datetime, float]],
    *,
    system_labels: dict[str, str] | None = None,
    metric_kind: str = "GAUGE",
    value_type: str = "DOUBLE",
    unit: str = "",
) -> monitoring_v3.TimeSeries:
    """A TimeSeries of (end_time, value) points, as an aligned Cloud Monitoring response carries them."""
    value_key = "int64_value" if value_type == "INT64" else "double_value"
    return monitoring_v3.TimeSeries(
        metric={"type": metric_type, "labels": metric_labels},
        resource={"type": resource_type, "labels": resource_labels},
        metadata={"system_labels": system_labels} if system_labels else None,
        metric_kind=metric_kind,
        value_type=value_type,
        unit=unit,
        points=[
            {"interval": {"end_time": end}, "value": {value_key: int(v) if value_key == "int64_value" else v}}
            for end, v in points
        ],
    )


def from_rest_json(ts: dict[str, Any]) -> monitoring_v3.TimeSeries:
    """A REST-JSON TimeSeries (an exported file's, the simulator's) as the protobuf the API sends:
    `ParseDict`'s result, with the common point (an end / start time and a double or int64 value)
    built directly, because `ParseDict` takes a minute per 10^6 points. Any other point, and every
    field but the points, goes through `ParseDict`."""
    raw = monitoring_v3.TimeSeries.pb()()
    ParseDict({k: v for k, v in ts.items() if k != "points"}, raw)
    add = raw.points.add
    for p in ts.get("points", []):
        interval, value = p.get("interval"), p.get("value")
        if (
            p.keys() == {"interval", "value"}
            and isinstance(interval, dict)
            and "endTime" in interval
            and interval.keys() <= {"endTime", "startTime"}
            and isinstance(value, dict)
            and len(value) == 1
            and (
                type(value.get("doubleValue")) in (float, int) or _integer(value.get("int64Value"))
            )
        ):
            q = add()
            q.interval.end_time.CopyFrom(_timestamp(interval["endTime"]))
            if "startTime" in interval:
                q.interval.start_time.CopyFrom(_timestamp(interval["startTime"]))
            if "doubleValue" in value:
                q.value.double_value = value["doubleValue"]
            else:
                q.value.int64_value = int(value["int64Value"])
        else:
            ParseDict(p, add())
    return monitoring_v3.TimeSeries.wrap(raw)


def _integer(v: Any) -> bool:
    return type(v) is int or (type(v) is str and v.removeprefix("-").isdigit())


@functools.lru_cache(maxsize=1 << 16)
def _timestamp(text: str) -> Timestamp:
    t = Timestamp()
    t.FromJsonString(text)
    return t


def _ns(ts: Any) -> int:
    """A protobuf Timestamp as integer nanoseconds (comparable, and cheap to compare)."""
    return ts.seconds * 1_000_000_000 + ts.nanos


_POINTS_FIELD = monitoring_v3.TimeSeries.pb().DESCRIPTOR.fields_by_name["points"].number
_RESPONSE = monitoring_v3.ListTimeSeriesResponse.pb().DESCRIPTOR
_SERIES_FIELD = _RESPONSE.fields_by_name["time_series"].number
_TOKEN_FIELD = _RESPONSE.fields_by_name["next_page_token"].number


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at `buf[i:]` and the offset after it."""
    n = shift = 0
    while True:
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return n, i
        shift += 7


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a message or a string) in protobuf's wire format."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fields(buf: bytes) -> list[tuple[int, int, int]]:
    """The top-level fields of a serialized message: (field number, start, end) of each."""
    out, i = [], 0
    while i < len(buf):
        start = i
        tag, i = _read_varint(buf, i)
        wire = tag & 7
        if wire == 0:
            _, i = _read_varint(buf, i)
        elif wire == 2:
            size, i = _read_varint(buf, i)
            i += size
        else:  # 64- and 32-bit scalars (TimeSeries has none at the top level; kept for safety)
            i += {1: 8, 5: 4}[wire]
        out.append((tag >> 3, start, i))
    return out


@dataclass(frozen=True)
class _Indexed:
    """One stored series as the stand-in serves it: `bare`, its serialized fields but the points;
    `ends`, its points' end times (ns) ascending; `points`, its points' serialized field entries
    newest first (ties in reverse stored order), the j-th newest at `points[offsets[j]:offsets[j + 1]]`.
    A series followed by points is a series with those points (protobuf merges concatenated
    messages, appending repeated fields), so a selection is `bare` plus one slice of `points`."""

    ts: Any  # the indexed object, kept so its id() cannot be reused
    bare: bytes
    ends: list[int]
    points: bytes
    offsets: list[int]

    @classmethod
    def of(cls, ts: Any) -> _Indexed:
        raw = monitoring_v3.TimeSeries.pb(ts)
        ends = [_ns(p.interval.end_time) for p in raw.points]
        wire = raw.SerializeToString()
        fields = _fields(wire)
        bare = b"".join(wire[s:e] for n, s, e in fields if n != _POINTS_FIELD)
        entries = [wire[s:e] for n, s, e in fields if n == _POINTS_FIELD]
        oldest_first = sorted(range(len(ends)), key=ends.__getitem__)
        newest_first = [entries[i] for i in reversed(oldest_first)]
        offsets = [0]
        for entry in newest_first:
            offsets.append(offsets[-1] + len(entry))
        return cls(ts, bare, sorted(ends), b"".join(newest_first), offsets)


class FakeMonitoringServer:
    def __init__(self, page_size: int = 2):
        self.page_size = page_size
        self.series: dict[str, list[monitoring_v3.TimeSeries]] = {}
        self.faults: list[grpc.StatusCode | None] = []
        self.requests: list[monitoring_v3.ListTimeSeriesRequest] = []
        self.units: dict[str, str] = dict(REAL_UNITS)
        self.descriptor_faults: list[grpc.StatusCode | None] = []
        self.descriptor_requests: list[monitoring_v3.ListMetricDescriptorsRequest] = []
        self._lock = threading.Lock()
        self._indexed: dict[int, _Indexed] = {}
        self._selections: OrderedDict[tuple[Any, ...], list[bytes]] = OrderedDict()
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, *series: monitoring_v3.TimeSeries) -> None:
        with self._lock:
            for ts in series:
                self.series.setdefault(ts.metric.type, []).append(ts)

    def start(self) -> FakeMonitoringServer:
        handler = grpc.method_handlers_generic_handler(
            "google.monitoring.v3.MetricService",
            {
                "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                    self._list_time_series,
                    request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                    response_serializer=bytes,  # `_list_time_series` answers in wire format
                ),
                "ListMetricDescriptors": grpc.unary_unary_rpc_method_handler(
                    self._list_metric_descriptors,
                    request_deserializer=monitoring_v3.ListMetricDescriptorsRequest.deserialize,
                    response_serializer=monitoring_v3.ListMetricDescriptorsResponse.serialize,
                ),
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def __enter__(self) -> FakeMonitoringServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _list_time_series(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self.requests.append(request)
            fault = self.faults.pop(0) if self.faults else None
            stored = list(self.series.get(m.group(1), []) if (m := _TYPE_RE.search(request.filter)) else [])
        if fault is not None:
            context.abort(fault, f"scripted {fault.name}")
        interval = monitoring_v3.ListTimeSeriesRequest.pb(request).interval
        lo, hi = _ns(interval.start_time), _ns(interval.end_time)
        # a page's request repeats the first page's filter and interval: select once, page the rest
        key = (request.name, request.filter, lo, hi, tuple(id(ts) for ts in stored))
        with self._lock:
            selected = self._selections.get(key)
        if selected is None:
            selected = [pb for ts in stored if (pb := self._select(ts, lo, hi)) is not None]
            with self._lock:
                self._selections[key] = selected
                while len(self._selections) > 16:
                    self._selections.popitem(last=False)
        offset = int(request.page_token or 0)
        more = offset + self.page_size < len(selected)
        page = b"".join(_field(_SERIES_FIELD, ts) for ts in selected[offset : offset + self.page_size])
        return page + (_field(_TOKEN_FIELD, str(offset + self.page_size).encode()) if more else b"")

    def _select(self, ts: monitoring_v3.TimeSeries, lo: int, hi: int) -> bytes | None:
        """The series with its points in (lo, hi], newest first, serialized; None when it has none
        there. Each series is indexed once (`_Indexed`): its points serialized newest first, so any
        interval's points are one slice of bytes. Copying the selected points as protobuf messages
        was most of the stand-in's time (6 s of a production-path daemon's first minute)."""
        with self._lock:
            index = self._indexed.get(id(ts))
            if index is None or index.ts is not ts:
                index = self._indexed[id(ts)] = _Indexed.of(ts)
        first, last = bisect.bisect_right(index.ends, lo), bisect.bisect_right(index.ends, hi)
        if first == last:
            return None
        n = len(index.ends)  # the i-th oldest point is the (n-1-i)-th newest
        return index.bare + index.points[index.offsets[n - last] : index.offsets[n - first]]

    def _list_metric_descriptors(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.descriptor_requests.append(request)
            fault = self.descriptor_faults.pop(0) if self.descriptor_faults else None
            m = _TYPE_RE.search(request.filter)
            unit = self.units.get(m.group(1)) if m else None
        if fault is not None:
            context.abort(fault, f"scripted {fault.name}")
        if m is None or unit is None:
            return monitoring_v3.ListMetricDescriptorsResponse()
        descriptor = {  # only what gpucost reads: the type and its unit
            "name": f"{request.name}/metricDescriptors/{m.group(1)}",
            "type": m.group(1),
            "unit": unit,
        }
        return monitoring_v3.ListMetricDescriptorsResponse(metric_descriptors=[descriptor])


class ScopedMonitoringServer(FakeMonitoringServer):
    """The stand-in answering a `projects/<id>` request only with the series that project sees, as
    the real service scopes a query: its own, or with a metrics scope (`scopes`: scoping project ->
    the projects it monitors, itself included), those of every monitored project ("Metrics scopes
    overview", https://cloud.google.com/monitoring/settings). Series are stored by the
    `project_id` label of their monitored resource."""

    def __init__(self, page_size: int = 2, scopes: dict[str, tuple[str, ...]] | None = None):
        super().__init__(page_size)
        self.scopes = scopes or {}
        self.by_project: dict[str, dict[str, list[monitoring_v3.TimeSeries]]] = {}
        self.asking = threading.local()  # the project of the request this thread serves
        server = self

        class View(dict):
            def get(self, key: str, default: Any = None) -> Any:
                project = server.asking.project
                seen = server.scopes.get(project, (project,))
                out = [ts for p in seen for ts in server.by_project.get(p, {}).get(key, [])]
                return out or default

        self.series = View()

    def add(self, *series: monitoring_v3.TimeSeries) -> None:
        with self._lock:
            for ts in series:
                store = self.by_project.setdefault(ts.resource.labels["project_id"], {})
                store.setdefault(ts.metric.type, []).append(ts)

    def _list_time_series(self, request: Any, context: Any) -> Any:
        self.asking.project = request.name.removeprefix("projects/")
        return super()._list_time_series(request, context)
