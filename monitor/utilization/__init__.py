"""GPU utilization records, parsed from Cloud Monitoring TimeSeries, and their place in the state store.

One parser serves both sources: the Cloud Monitoring client's protobuf responses are converted to the
REST JSON shape (`to_rest_json`) that exported files already have, so a malformed point is treated the
same whether it came over gRPC or from disk. Bad input never aborts a poll: every dropped point is
counted under a `SkipReason`.

- `records`: the value objects (`GpuSample`, `ParsedSeries`, `FetchResult`, `SkipReason`).
- `parse`: one TimeSeries validated into a `ParsedSeries` (`parse_series`, `to_rest_json`).
- `assemble`: points averaged into alignment windows, one signal per GPU and window (`assemble`,
  `select_signals`, `resolve_duty_cycles`).
- `hourly`: samples reduced per GPU and hour, what the GPU join reads (`UtilHour`, `util_hours`).
- `state`: watermarks and stored samples in the state store (`migrate`, `read_watermark`,
  `replace_window`, `load_samples`, and `load_util_hours`, reduced in the store's engine).
"""

from __future__ import annotations

from monitor.sources.presets import Signal
from monitor.utilization.assemble import assemble
from monitor.utilization.hourly import UtilHour, util_hours
from monitor.utilization.parse import parse_series, to_rest_json
from monitor.utilization.records import (
    BUSY_EPSILON_PCT,
    FetchResult,
    GpuSample,
    ParsedSeries,
    SkipReason,
    UtilizationSource,
)
from monitor.utilization.select import resolve_duty_cycles, select_signals
from monitor.utilization.state import (
    COMPONENT,
    load_samples,
    load_util_hours,
    migrate,
    read_watermark,
    replace_window,
    replace_windows,
)

__all__ = [
    "BUSY_EPSILON_PCT",
    "COMPONENT",
    "FetchResult",
    "GpuSample",
    "ParsedSeries",
    "Signal",
    "SkipReason",
    "UtilHour",
    "UtilizationSource",
    "assemble",
    "load_samples",
    "load_util_hours",
    "migrate",
    "parse_series",
    "read_watermark",
    "replace_window",
    "replace_windows",
    "resolve_duty_cycles",
    "select_signals",
    "to_rest_json",
    "util_hours",
]
