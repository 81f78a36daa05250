"""Metric units: one table turning a Cloud Monitoring unit into our figures, and the documented units.

Values are converted by their unit, never by a guess about the metric: utilization becomes percent
busy (0-100), memory becomes bytes. The unit grammar is Cloud Monitoring's UCUM subset
(googleapis/googleapis `google/api/metric.proto`, `MetricDescriptor.unit`): `1` is dimensionless
(for the GPU metrics we read, a 0-1 ratio), `%` a percentage (0-100), `10^2.%` "a ratio, typically in
the range 0..1, that will be multiplied by 100 and displayed as a percentage", `By` a byte with the
prefixes `k M G T` (10^3n) and `Ki Mi Gi Ti` (2^10n); an annotation after a unit (`By{used}`) is a
comment. A unit outside this table is unknown: the metric is skipped and named, never converted by
a factor we made up.

Where does a unit come from? In order: the TimeSeries' own `unit`, then what the caller knows
(`ListMetricDescriptors` for the API, a page's `unit` for exported JSON), then `DOCUMENTED_UNITS`.
An empty unit or `{not_a_unit}` (what `ListTimeSeriesResponse.unit` says when a page mixes units)
carries no information and falls through. Managed Service for Prometheus metrics have no unit at
all (Prometheus has no concept of units: GoogleCloudPlatform/prometheus-engine#232), so theirs come
from dcgm-exporter's own counter definitions.

>>> factor("1", Role.UTILIZATION), factor("%", Role.UTILIZATION), factor("MiBy", Role.MEMORY)
(100.0, 1.0, 1048576.0)
>>> factor("ms", Role.UTILIZATION) is None, factor("By", Role.UTILIZATION) is None
(True, True)
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import StrEnum

from monitor.sources.presets import Role

__all__ = [
    "DOCUMENTED_UNITS",
    "NO_UNIT",
    "UNKNOWN_UNIT",
    "UnitKind",
    "UnknownUnit",
    "UnknownUnitWarnings",
    "declared",
    "factor",
    "resolve_unit",
]

log = logging.getLogger("monitor.sources")

#: The skip reason counted for points of a series whose unit is unknown (a `SkipReason` value).
UNKNOWN_UNIT = "unknown_unit"

#: How an unknown unit is named when nothing declared one (no descriptor, no field, no documentation).
NO_UNIT = "(none)"

#: `ListTimeSeriesResponse.unit` when a page's series differ in unit: says nothing about any one.
_NOT_A_UNIT = "{not_a_unit}"


class UnitKind(StrEnum):
    RATIO = "ratio"  # 0-1
    PERCENT = "percent"  # 0-100
    BYTES = "bytes"


_ROLE_KINDS = {Role.UTILIZATION: (UnitKind.RATIO, UnitKind.PERCENT), Role.MEMORY: (UnitKind.BYTES,)}
_TO_PERCENT = {UnitKind.RATIO: 100.0, UnitKind.PERCENT: 1.0}
_BYTE_PREFIX = {
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": float(2**10),
    "Mi": float(2**20),
    "Gi": float(2**30),
    "Ti": float(2**40),
}
_BYTES = re.compile(r"(Ki|Mi|Gi|Ti|k|M|G|T)?By")
_ANNOTATION = re.compile(r"\{[^{}]*\}$")


@dataclass(frozen=True)
class UnknownUnit:
    """A metric skipped because its unit is not in the table (or does not fit what the metric is)."""

    metric_type: str
    unit: str

    def __str__(self) -> str:
        return f"{self.metric_type} (unit {self.unit!r})"


def _kind_and_scale(unit: str) -> tuple[UnitKind, float] | None:
    """The kind of a unit and its factor to that kind's base (ratio, percent, byte), if known."""
    if unit in ("1", "10^2.%"):
        return UnitKind.RATIO, 1.0
    if unit == "%":
        return UnitKind.PERCENT, 1.0
    if (m := _BYTES.fullmatch(unit)) is not None:
        return UnitKind.BYTES, _BYTE_PREFIX[m.group(1) or ""]
    return None


def factor(unit: str, role: Role) -> float | None:
    """Multiply raw values in `unit` by this to get percent busy (utilization) or bytes (memory).

    None when the unit is unknown or of the wrong kind for the role (bytes on a utilization metric).
    A trailing annotation is a comment (`%{busy}` is `%`); an annotation alone means `1`.
    """
    unit = unit.strip()
    if unit.startswith("{") and _ANNOTATION.fullmatch(unit):
        unit = "1"
    elif unit != "10^2.%":
        unit = _ANNOTATION.sub("", unit)
    found = _kind_and_scale(unit)
    if found is None or found[0] not in _ROLE_KINDS[role]:
        return None
    kind, scale = found
    return scale * _TO_PERCENT[kind] if role is Role.UTILIZATION else scale


def declared(unit: object) -> str | None:
    """A unit that says something: a non-empty string other than `{not_a_unit}`, else None."""
    if not isinstance(unit, str) or not unit.strip() or unit.strip() == _NOT_A_UNIT:
        return None
    return unit.strip()


def resolve_unit(metric_type: str, *candidates: object) -> str | None:
    """The first meaningful unit among `candidates` (most specific first), else the documented one."""
    for c in candidates:
        if (u := declared(c)) is not None:
            return u
    return DOCUMENTED_UNITS.get(metric_type)


_OPS_AGENT = "https://cloud.google.com/monitoring/api/metrics_opsagent"
_DCGM_RECEIVER = "GoogleCloudPlatform/opentelemetry-operations-collector receiver/dcgmreceiver/metadata.yaml"

#: The documented unit of every metric a preset reads, for sources without descriptors (files) and
#: for descriptors without a unit (Managed Prometheus). Each entry names its source.
DOCUMENTED_UNITS: dict[str, str] = {
    # Ops Agent, NVML ("agent" table, gpu section; _OPS_AGENT): GAUGE DOUBLE "%", "Values are between
    # 0.0 and 100.0"; memory/bytes_used GAUGE INT64 "By", label memory_state one of [used, free].
    "agent.googleapis.com/gpu/utilization": "%",
    "agent.googleapis.com/gpu/memory/bytes_used": "By",
    # Ops Agent DCGM receiver v1 (_DCGM_RECEIVER at 051f4ee0: dcgm.gpu.profiling.sm_utilization
    # "Fraction of time at least one warp was active ...", unit 1). The Ops Agent's v1 pipeline
    # (GoogleCloudPlatform/ops-agent apps/dcgm.go) only renames gpu.dcgm.sm.utilization to it and
    # adds the workload.googleapis.com/ prefix: no rescaling, so values are 0-1.
    "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization": "1",
    # Ops Agent DCGM receiver v2 (_DCGM_RECEIVER at 34805c03): gpu.dcgm.utilization "Ratio of time
    # the graphics engine is active" unit "1"; gpu.dcgm.sm.utilization unit "1";
    # gpu.dcgm.memory.bytes_used unit By with attribute gpu.memory.state [used, free, reserved],
    # renamed to label `state` by ops-agent apps/dcgm.go (receiver_version 2).
    "workload.googleapis.com/gpu.dcgm.utilization": "1",
    "workload.googleapis.com/gpu.dcgm.sm.utilization": "1",
    "workload.googleapis.com/gpu.dcgm.memory.bytes_used": "By",
    # GKE system metrics (https://cloud.google.com/monitoring/api/metrics_kubernetes). Duty cycle is
    # the kubelet's AcceleratorStats.dutyCycle, "Percent of time over the past sample period (10s)
    # during which the accelerator was actively processing" (uint64, 0-100), memoryUsed "unit: bytes"
    # (https://kubernetes.io/docs/reference/kubelet-api/stats.v1alpha1/).
    "kubernetes.io/node/accelerator/duty_cycle": "%",
    "kubernetes.io/container/accelerator/duty_cycle": "%",
    "kubernetes.io/container/accelerator/memory_used": "By",
    # dcgm-exporter on Managed Service for Prometheus: NVIDIA/dcgm-exporter etc/default-counters.csv
    # and etc/dcp-metrics-included.csv: DCGM_FI_DEV_GPU_UTIL "GPU utilization (in %)",
    # DCGM_FI_DEV_FB_USED "Framebuffer memory used (in MiB)", DCGM_FI_PROF_GR_ENGINE_ACTIVE "Ratio of
    # time the graphics engine is active", DCGM_FI_PROF_SM_ACTIVE "The ratio of cycles an SM has at
    # least 1 warp assigned".
    "prometheus.googleapis.com/DCGM_FI_DEV_GPU_UTIL/gauge": "%",
    "prometheus.googleapis.com/DCGM_FI_DEV_FB_USED/gauge": "MiBy",
    "prometheus.googleapis.com/DCGM_FI_PROF_GR_ENGINE_ACTIVE/gauge": "1",
    "prometheus.googleapis.com/DCGM_FI_PROF_SM_ACTIVE/gauge": "1",
}


class UnknownUnitWarnings:
    """Warns once per (metric type, unit) for its owner's life: a daemon polls every minute, and a
    unit that is unknown at the first poll stays unknown until someone changes the table."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()

    def warn(self, unknown: dict[str, str]) -> None:
        for metric_type, unit in unknown.items():
            if (metric_type, unit) not in self._warned:
                self._warned.add((metric_type, unit))
                log.warning(
                    "metric skipped: unknown unit %r for %s (no conversion is guessed)",
                    unit,
                    metric_type,
                    extra={"metric_type": metric_type, "unit": unit},
                )
