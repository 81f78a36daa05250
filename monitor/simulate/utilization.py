"""GPU utilization as Cloud Monitoring returns it: `projects.timeSeries.list` JSON (camelCase), one
TimeSeries per GPU with 300 s aligned means (ALIGN_MEAN: DOUBLE values), newest point first.

Each VM reports the way its `Monitoring` says, in that source's own metric, resource, labels and unit:

- Ops Agent (NVML): `agent.googleapis.com/gpu/utilization` on `gce_instance`, labels gpu_number,
  model, uuid; unit "%" (gcp.md section 4).
- Ops Agent DCGM v1 receiver: `workload.googleapis.com/dcgm.gpu.profiling.sm_utilization` on
  `gce_instance`, labels gpu_number, model, uuid; unit "1": a 0-1 RATIO, 0.78 for 78 % busy
  (gcp.md section 4: DCGM_FI_PROF_SM_ACTIVE, not rescaled by the agent).
- GKE node: `kubernetes.io/node/accelerator/duty_cycle` on `k8s_node` (resource labels project_id,
  location, cluster_name, node_name), metric labels accelerator_id, make, model; unit "%"
  (cloud.google.com/monitoring/api/metrics_kubernetes; GKE "Monitor GPU utilization" docs: percent of
  the last sample period the GPU was processing). The kubelet takes these from cAdvisor's NVML
  collector: make "nvidia", model the NVML device name, id the GPU UUID (kubernetes/kubernetes#55188).

Each VM-hour draws its points from its own keyed generator, so an hour rendered alone equals the
same hour inside a long run. VMs without an agent (`Monitoring.NONE`) have no series at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from monitor.simulate.compute import Ctx, Monitoring, UtilProfile, Vm
from monitor.simulate.rand import hexid, rng, unit

__all__ = [
    "DCGM_V1_METRIC",
    "GKE_NODE_METRIC",
    "METRIC_TYPE",
    "STEP",
    "gpu_uuid",
    "hour_values",
    "iter_series",
    "utilization_series",
]

METRIC_TYPE = "agent.googleapis.com/gpu/utilization"
DCGM_V1_METRIC = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"
GKE_NODE_METRIC = "kubernetes.io/node/accelerator/duty_cycle"
STEP = 300  # seconds per aligned point
_PER_HOUR = 3600 // STEP


def gpu_uuid(seed: int, vm: Vm, gpu: int) -> str:
    h = hexid(seed, vm.key, gpu, groups=8).lower().replace("-", "")
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _level(seed: int, vm: Vm, h: int, when: datetime) -> tuple[float, float]:
    """(mean, noise sd) of the VM's GPUs in one hour, by workload profile."""
    base = unit(seed, "util-base", vm.key)
    wobble = 2 * unit(seed, "util-hour", vm.key, h) - 1
    if vm.util == UtilProfile.IDLE or (vm.idle and vm.idle[0] <= h < vm.idle[1]):
        return 0.15, 0.25
    if vm.util == UtilProfile.INFERENCE:
        diurnal = math.sin(2 * math.pi * (when.hour - 10) / 24)
        return 62 + 8 * base + 20 * diurnal + 5 * wobble, 5.0
    if vm.util == UtilProfile.NOTEBOOK:
        return 45 + 20 * base + 8 * wobble, 6.0
    return 78 + 15 * base + 4 * wobble, 3.0


def hour_values(seed: int, vm: Vm, h: int, when: datetime) -> list[list[float]]:
    """Per GPU, the aligned means of the buckets the VM ran in during hour h (oldest first)."""
    secs = vm.seconds(seed, h)
    buckets = min(_PER_HOUR, math.ceil(secs / STEP))
    if not buckets:
        return []
    mean, sd = _level(seed, vm, h, when)
    r = rng(seed, "util-points", vm.key, h)
    out = []
    for g in range(vm.machine.gpus):
        offset = 0.0 if mean < 1 else 6 * unit(seed, "util-gpu", vm.key, g) - 3
        out.append([round(min(100.0, max(0.0, r.gauss(mean + offset, sd))), 2) for _ in range(buckets)])
    return out


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _series_head(seed: int, vm: Vm, gpu: int) -> dict:
    assert vm.machine.gpu is not None
    uuid, model = gpu_uuid(seed, vm, gpu), vm.machine.gpu.model
    if vm.monitoring is Monitoring.GKE_NODE:
        return {
            "metric": {
                "type": GKE_NODE_METRIC,
                "labels": {"accelerator_id": uuid, "make": "nvidia", "model": model},
            },
            "resource": {
                "type": "k8s_node",
                "labels": {
                    "project_id": vm.project.id,
                    "location": vm.cluster_location or vm.zone,
                    "cluster_name": vm.cluster or "",
                    "node_name": vm.name,
                },
            },
            "metricKind": "GAUGE",
            "valueType": "DOUBLE",
            "unit": "%",
        }
    dcgm = vm.monitoring is Monitoring.DCGM_V1
    return {
        "metric": {
            "type": DCGM_V1_METRIC if dcgm else METRIC_TYPE,
            "labels": {"gpu_number": str(gpu), "model": model, "uuid": uuid},
        },
        "resource": {
            "type": "gce_instance",
            "labels": {"project_id": vm.project.id, "instance_id": vm.instance_id, "zone": vm.zone},
        },
        "metadata": {"systemLabels": {"name": vm.name}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "unit": "1" if dcgm else "%",
    }


def _as_reported(vm: Vm, pct: float) -> float:
    """A percent busy in the unit the VM's source reports: DCGM v1 gives the 0-1 ratio."""
    return round(pct / 100, 4) if vm.monitoring is Monitoring.DCGM_V1 else pct


def _intervals(ctx: Ctx, h: int, t0: datetime, t1: datetime) -> list[dict | None]:
    """The interval of each bucket of hour h, None for buckets outside [t0, t1). Shared by every
    series (the same dict object), which keeps a day of points cheap to build."""
    hs = ctx.hour_start(h)
    out: list[dict | None] = []
    for j in range(_PER_HOUR):
        b = hs + timedelta(seconds=STEP * j)
        inside = t0 <= b < t1
        out.append(
            {"startTime": _stamp(b), "endTime": _stamp(b + timedelta(seconds=STEP))} if inside else None
        )
    return out


def iter_series(ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime) -> Iterator[dict]:
    """TimeSeries dicts of every monitored GPU with points whose interval starts in [t0, t1), one VM
    at a time (a day of a scaled fleet is written without holding it all)."""
    lo = max(0, math.floor((t0 - ctx.start) / timedelta(hours=1)))
    hi = min(hours, math.ceil((t1 - ctx.start) / timedelta(hours=1)))
    intervals = {h: _intervals(ctx, h, t0, t1) for h in range(lo, hi)}
    for vm in vms:
        if not vm.monitored or not vm.machine.gpus:
            continue
        points: list[list[dict]] = [[] for _ in range(vm.machine.gpus)]
        for h in range(lo, hi):
            spans = intervals[h]
            for g, values in enumerate(hour_values(ctx.seed, vm, h, ctx.hour_start(h))):
                points[g].extend(
                    {"interval": spans[j], "value": {"doubleValue": _as_reported(vm, v)}}
                    for j, v in enumerate(values)
                    if spans[j] is not None
                )
        for g, pts in enumerate(points):
            if pts:
                yield {**_series_head(ctx.seed, vm, g), "points": pts[::-1]}


def utilization_series(ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime) -> list[dict]:
    return list(iter_series(ctx, vms, hours, t0, t1))
