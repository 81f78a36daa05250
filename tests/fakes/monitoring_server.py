"""A Cloud Monitoring stand-in: the real `google.monitoring.v3.MetricService/ListTimeSeries` over gRPC.

It binds 127.0.0.1 on a free port and speaks the real protobuf wire format, so the real
google-cloud-monitoring client talks to it unchanged. It does not aggregate: a test loads it with
series already at the alignment grain (what the real service returns for ALIGN_MEAN + REDUCE_MEAN),
and the server selects them by `metric.type` from the request filter and by point end time in
``(interval.start_time, interval.end_time]``, newest point first like the real API. Series are paged
`page_size` at a time with opaque tokens. `faults` is a queue of status codes (None = answer
normally) consumed one per call, to script UNAVAILABLE / RESOURCE_EXHAUSTED at any call. Every
request is recorded as the deserialized `ListTimeSeriesRequest`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from concurrent import futures
from datetime import datetime
from typing import Any

import grpc
from google.cloud import monitoring_v3

__all__ = ["FakeMonitoringServer", "gauge_series"]

_TYPE_RE = re.compile(r'metric\.type\s*=\s*"([^"]+)"')


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
) -> monitoring_v3.TimeSeries:
    """A TimeSeries of (end_time, value) points, as an aligned Cloud Monitoring response carries them."""
    value_key = "int64_value" if value_type == "INT64" else "double_value"
    return monitoring_v3.TimeSeries(
        metric={"type": metric_type, "labels": metric_labels},
        resource={"type": resource_type, "labels": resource_labels},
        metadata={"system_labels": system_labels} if system_labels else None,
        metric_kind=metric_kind,
        value_type=value_type,
        points=[
            {"interval": {"end_time": end}, "value": {value_key: int(v) if value_key == "int64_value" else v}}
            for end, v in points
        ],
    )


class FakeMonitoringServer:
    def __init__(self, page_size: int = 2):
        self.page_size = page_size
        self.series: dict[str, list[monitoring_v3.TimeSeries]] = {}
        self.faults: list[grpc.StatusCode | None] = []
        self.requests: list[monitoring_v3.ListTimeSeriesRequest] = []
        self._lock = threading.Lock()
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
                    response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize,
                )
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

    def _list_time_series(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.requests.append(request)
            fault = self.faults.pop(0) if self.faults else None
            stored = list(self.series.get(m.group(1), []) if (m := _TYPE_RE.search(request.filter)) else [])
        if fault is not None:
            context.abort(fault, f"scripted {fault.name}")
        lo, hi = request.interval.start_time, request.interval.end_time
        selected = []
        for ts in stored:
            pts = [p for p in ts.points if lo < p.interval.end_time <= hi]
            if pts:
                pts.sort(key=lambda p: p.interval.end_time, reverse=True)
                copy = monitoring_v3.TimeSeries(ts)
                copy.points = pts
                selected.append(copy)
        offset = int(request.page_token or 0)
        page = selected[offset : offset + self.page_size]
        more = offset + self.page_size < len(selected)
        return monitoring_v3.ListTimeSeriesResponse(
            time_series=page, next_page_token=str(offset + self.page_size) if more else ""
        )
