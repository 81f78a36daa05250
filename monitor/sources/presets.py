"""Metric presets: which Cloud Monitoring metrics carry GPU utilization, and how to read them.

Pure data (no I/O), shared by the Cloud Monitoring source (which turns a spec into a filter and a
`group_by_fields` list) and the file source (which recognises a metric type in exported JSON).
A spec says WHAT a metric is (its resource, its labels, the signal it carries); HOW its values are
scaled is not here: units come from the API (`ListMetricDescriptors`) or, failing that, from the
documented table in `monitor.sources.units`, and an unknown unit is never guessed.

Sources of the metric types, resources and labels below (checked 2026-12):
- Ops Agent NVML: https://cloud.google.com/monitoring/api/metrics_opsagent ("gpu" section):
  labels gpu_number, uuid, model; memory/bytes_used label memory_state one of [used, free].
- Ops Agent DCGM v1 and v2: the same page ("NVIDIA Data Center GPU Manager (DCGM) (v1)" / "(v2)"
  tables: gce_instance, labels gpu_number, model, uuid; v2 gpu.dcgm.memory.bytes_used adds `state`),
  GoogleCloudPlatform/ops-agent apps/dcgm.go (v1 renames gpu.dcgm.sm.utilization to
  dcgm.gpu.profiling.sm_utilization; v2 renames gpu.memory.state to `state`) and
  GoogleCloudPlatform/opentelemetry-operations-collector receiver/dcgmreceiver/metadata.yaml
  (gpu.dcgm.utilization = "Ratio of time the graphics engine is active", i.e. DCGM's
  GR_ENGINE_ACTIVE, not NVML utilization; state enum [used, free, reserved]).
- GKE: https://cloud.google.com/monitoring/api/metrics_kubernetes (node/ and container/
  accelerator/duty_cycle on k8s_node / k8s_container; metric labels accelerator_id, make, model,
  from the kubelet's AcceleratorStats id/make/model); resource labels
  https://cloud.google.com/monitoring/api/resources (k8s_node: project_id, location, cluster_name,
  node_name; k8s_container: project_id, location, cluster_name, namespace_name, pod_name,
  container_name, with the node in metadata.system_labels.node_name).
- dcgm-exporter on Managed Service for Prometheus: NVIDIA/dcgm-exporter
  internal/pkg/rendermetrics/render_metrics.go labels gpu, UUID, pci_bus_id, device, modelName and
  the host as `Hostname`, renamed `hostname` by commit d5e5f510 (PR #655, 2026-05-12): both are read.

A label path names where a value lives in a TimeSeries, in REST JSON terms:
``resource.<key>`` (``resource.labels``), ``metric.<key>`` (``metric.labels``) and ``system.<key>``
(``metadata.systemLabels``). Each GPU-sample field lists candidate paths, first non-empty wins.

>>> PRESETS["ops_agent_nvml"].metrics[0].filter
'metric.type = "agent.googleapis.com/gpu/utilization" AND resource.type = "gce_instance"'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "METRICS",
    "PRESETS",
    "LabelMap",
    "MetricSpec",
    "Preset",
    "Role",
    "Signal",
    "spec_for",
]


class Signal(StrEnum):
    """The family a utilization figure comes from, in order of trust (first = most trusted).

    SM activity measures the fraction of SMs doing work; NVML "utilization" only says a kernel was
    running (a single tiny kernel reads 100%); GKE duty cycle is NVML's figure seen by the kubelet.
    """

    SM_ACTIVE = "sm_active"
    GR_ENGINE_ACTIVE = "gr_engine_active"
    GPU_UTILIZATION = "gpu_utilization"
    NODE_DUTY_CYCLE = "node_duty_cycle"
    CONTAINER_DUTY_CYCLE = "container_duty_cycle"

    @property
    def precedence(self) -> int:
        """Lower wins when several signals cover the same GPU and window."""
        return list(Signal).index(self)

    @classmethod
    def rank(cls, signal: str) -> int:
        """`precedence` of a signal as stored (its value); one this release does not know ranks last."""
        try:
            return cls(signal).precedence
        except ValueError:
            return len(cls)


class Role(StrEnum):
    UTILIZATION = "utilization"  # percent busy, once converted by its unit
    MEMORY = "memory_used"  # bytes of GPU memory held, once converted by its unit


def _group_field(path: str) -> str:
    kind, _, key = path.partition(".")
    prefix = {"resource": "resource.label", "metric": "metric.label", "system": "metadata.system_labels"}
    return f"{prefix[kind]}.{key}"


@dataclass(frozen=True)
class LabelMap:
    """Where each identifying field of a GPU sample is found for one monitored-resource type."""

    project: tuple[str, ...] = ("resource.project_id",)
    zone: tuple[str, ...] = ()
    instance_id: tuple[str, ...] = ()
    instance_name: tuple[str, ...] = ()
    cluster: tuple[str, ...] = ()
    node_name: tuple[str, ...] = ()
    gpu: tuple[str, ...] = ()
    model: tuple[str, ...] = ()

    def paths(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for name in (
            "project",
            "zone",
            "instance_id",
            "instance_name",
            "cluster",
            "node_name",
            "gpu",
            "model",
        ):
            for p in getattr(self, name):
                seen.setdefault(p, None)
        return tuple(seen)

    @property
    def group_by_fields(self) -> tuple[str, ...]:
        """Every label we read, so the cross-series reducer keeps them (it drops the rest)."""
        return tuple(_group_field(p) for p in self.paths())


@dataclass(frozen=True)
class MetricSpec:
    metric_type: str
    resource_type: str
    role: Role
    labels: LabelMap
    signal: Signal | None = None  # None for memory metrics
    require: tuple[tuple[str, str], ...] = ()  # label path == value (e.g. memory_state "used")
    notes: str = field(default="", compare=False)

    @property
    def filter(self) -> str:
        """The Monitoring filter selecting exactly this metric (label values are our constants)."""
        parts = [f'metric.type = "{self.metric_type}"', f'resource.type = "{self.resource_type}"']
        parts += [f'{_group_field(path)} = "{value}"' for path, value in self.require]
        return " AND ".join(parts)


@dataclass(frozen=True)
class Preset:
    name: str
    metrics: tuple[MetricSpec, ...]


_GCE = LabelMap(
    zone=("resource.zone",),
    instance_id=("resource.instance_id",),
    instance_name=("system.name",),
    gpu=("metric.gpu_number",),
    model=("metric.model",),
)
_K8S_NODE = LabelMap(
    zone=("resource.location",),
    cluster=("resource.cluster_name",),
    node_name=("resource.node_name",),
    gpu=("metric.accelerator_id",),
    model=("metric.model",),
)
_K8S_CONTAINER = LabelMap(
    zone=("resource.location",),
    cluster=("resource.cluster_name",),
    node_name=("system.node_name",),
    gpu=("metric.accelerator_id",),
    model=("metric.model",),
)
_PROM = LabelMap(
    zone=("resource.location",),
    cluster=("resource.cluster",),
    node_name=("metric.hostname", "metric.Hostname"),  # main branch since 2026-05 / older releases
    # The GPU by its UUID first, its index only when the UUID is absent (relabelled away): GKE's
    # node and container duty cycles name a GPU by `accelerator_id`, the kubelet's AcceleratorStats
    # ID, which is the NVML device UUID (google/cadvisor accelerators/nvidia.go `UpdateStats`,
    # `ID: uuid` from `device.UUID()`), and dcgm-exporter's `UUID` label is that same device UUID
    # (NVIDIA/dcgm-exporter internal/pkg/rendermetrics/render_metrics.go). Keyed by its index, a
    # node seen by both counted every GPU twice and the signal precedence never applied.
    gpu=("metric.UUID", "metric.gpu"),
    model=("metric.modelName",),
)

_U, _M = Role.UTILIZATION, Role.MEMORY
_WL = "workload.googleapis.com/"
_PROM_T = "prometheus.googleapis.com/{}/gauge"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "ops_agent_nvml",
            (
                MetricSpec(
                    "agent.googleapis.com/gpu/utilization", "gce_instance", _U, _GCE, Signal.GPU_UTILIZATION
                ),
                MetricSpec(
                    "agent.googleapis.com/gpu/memory/bytes_used",
                    "gce_instance",
                    _M,
                    _GCE,
                    require=(("metric.memory_state", "used"),),
                ),
            ),
        ),
        Preset(
            "ops_agent_dcgm",
            (
                MetricSpec(
                    _WL + "dcgm.gpu.profiling.sm_utilization",
                    "gce_instance",
                    _U,
                    _GCE,
                    Signal.SM_ACTIVE,
                    notes="receiver v1: DCGM_FI_PROF_SM_ACTIVE, a 0-1 ratio (unit 1)",
                ),
                MetricSpec(
                    _WL + "gpu.dcgm.sm.utilization",
                    "gce_instance",
                    _U,
                    _GCE,
                    Signal.SM_ACTIVE,
                    notes="receiver v2 (preview): unit 1",
                ),
                MetricSpec(
                    _WL + "gpu.dcgm.utilization",
                    "gce_instance",
                    _U,
                    _GCE,
                    Signal.GR_ENGINE_ACTIVE,
                    notes="receiver v2 (preview): graphics-engine activity, unit 1",
                ),
                MetricSpec(
                    _WL + "gpu.dcgm.memory.bytes_used",
                    "gce_instance",
                    _M,
                    _GCE,
                    require=(("metric.state", "used"),),
                    notes="receiver v2: label state one of used, free, reserved",
                ),
            ),
        ),
        Preset(
            "gke",
            (
                MetricSpec(
                    "kubernetes.io/node/accelerator/duty_cycle",
                    "k8s_node",
                    _U,
                    _K8S_NODE,
                    Signal.NODE_DUTY_CYCLE,
                ),
                MetricSpec(
                    "kubernetes.io/container/accelerator/duty_cycle",
                    "k8s_container",
                    _U,
                    _K8S_CONTAINER,
                    Signal.CONTAINER_DUTY_CYCLE,
                ),
                MetricSpec(
                    "kubernetes.io/container/accelerator/memory_used", "k8s_container", _M, _K8S_CONTAINER
                ),
            ),
        ),
        Preset(
            "managed_prometheus_dcgm",
            (
                MetricSpec(
                    _PROM_T.format("DCGM_FI_PROF_SM_ACTIVE"),
                    "prometheus_target",
                    _U,
                    _PROM,
                    Signal.SM_ACTIVE,
                ),
                MetricSpec(
                    _PROM_T.format("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
                    "prometheus_target",
                    _U,
                    _PROM,
                    Signal.GR_ENGINE_ACTIVE,
                ),
                MetricSpec(
                    _PROM_T.format("DCGM_FI_DEV_GPU_UTIL"),
                    "prometheus_target",
                    _U,
                    _PROM,
                    Signal.GPU_UTILIZATION,
                ),
                MetricSpec(
                    _PROM_T.format("DCGM_FI_DEV_FB_USED"),
                    "prometheus_target",
                    _M,
                    _PROM,
                    notes="MiB per dcgm-exporter's counters csv",
                ),
            ),
        ),
    )
}

#: Every known metric type -> its spec (a metric type belongs to exactly one preset).
METRICS: dict[str, MetricSpec] = {m.metric_type: m for p in PRESETS.values() for m in p.metrics}


def spec_for(metric_type: str) -> MetricSpec | None:
    return METRICS.get(metric_type)
