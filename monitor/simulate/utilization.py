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

import json
import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from functools import lru_cache
from typing import IO, NamedTuple

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
    "write_page",
]

METRIC_TYPE = "agent.googleapis.com/gpu/utilization"
DCGM_V1_METRIC = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"
GKE_NODE_METRIC = "kubernetes.io/node/accelerator/duty_cycle"
STEP = 300  # seconds per aligned point
_PER_HOUR = 3600 // STEP


def gpu_uuid(seed: int, vm: Vm, gpu: int) -> str:
    h = hexid(seed, vm.key, gpu, groups=8).lower().replace("-", "")
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@lru_cache(maxsize=1 << 14)
def _vm_constants(seed: int, key: str, gpus: int) -> tuple[float, tuple[float, ...]]:
    """A VM's base level and its GPUs' offsets: keyed draws that do not depend on the hour, so they
    are hashed once per VM, not again for every VM-hour and GPU-hour (47,000 hashes a fortnight)."""
    return unit(seed, "util-base", key), tuple(6 * unit(seed, "util-gpu", key, g) - 3 for g in range(gpus))


def _level(seed: int, vm: Vm, h: int, when: datetime) -> tuple[float, float]:
    """(mean, noise sd) of the VM's GPUs in one hour, by workload profile."""
    if vm.util == UtilProfile.IDLE or (vm.idle and vm.idle[0] <= h < vm.idle[1]):
        return 0.15, 0.25
    base = _vm_constants(seed, vm.key, vm.machine.gpus)[0]
    wobble = 2 * unit(seed, "util-hour", vm.key, h) - 1
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
    gauss = r.gauss
    offsets = _vm_constants(seed, vm.key, vm.machine.gpus)[1] if mean >= 1 else (0.0,) * vm.machine.gpus
    return [
        [round(min(100.0, max(0.0, gauss(mean + offset, sd))), 2) for _ in range(buckets)]
        for offset in offsets
    ]


def _dumps(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


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


def _as_reported(vm: Vm, pcts: list[float]) -> list[float]:
    """Percents busy in the unit the VM's source reports: DCGM v1 gives the 0-1 ratio."""
    return [round(p / 100, 4) for p in pcts] if vm.monitoring is Monitoring.DCGM_V1 else pcts


class _Bucket(NamedTuple):
    """One aligned bucket: its `interval` (one dict shared by every series) and the JSON text of a
    point up to its value, so a day file is written without building or dumping a dict per point."""

    interval: dict
    head: str


def _buckets(ctx: Ctx, h: int, t0: datetime, t1: datetime) -> list[_Bucket | None]:
    """The buckets of hour h, None for those outside [t0, t1)."""
    hs = ctx.hour_start(h)
    out: list[_Bucket | None] = []
    for j in range(_PER_HOUR):
        b = hs + timedelta(seconds=STEP * j)
        if not t0 <= b < t1:
            out.append(None)
            continue
        interval = {"startTime": _stamp(b), "endTime": _stamp(b + timedelta(seconds=STEP))}
        out.append(_Bucket(interval, f'{{"interval":{_dumps(interval)},"value":{{"doubleValue":'))
    return out


def _gpu_points(
    ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime
) -> Iterator[tuple[Vm, int, list[tuple[_Bucket, float]]]]:
    """(VM, GPU, its points newest first as (bucket, value as reported)) of every monitored GPU
    with points whose interval starts in [t0, t1), one VM at a time (a day of a scaled fleet is
    written without holding it all)."""
    lo = max(0, math.floor((t0 - ctx.start) / timedelta(hours=1)))
    hi = min(hours, math.ceil((t1 - ctx.start) / timedelta(hours=1)))
    buckets = {h: _buckets(ctx, h, t0, t1) for h in range(lo, hi)}
    for vm in vms:
        if not vm.monitored or not vm.machine.gpus:
            continue
        points: list[list[tuple[_Bucket, float]]] = [[] for _ in range(vm.machine.gpus)]
        for h in range(lo, hi):
            spans = buckets[h]
            for g, values in enumerate(hour_values(ctx.seed, vm, h, ctx.hour_start(h))):
                reported = _as_reported(vm, values)
                points[g].extend((b, v) for b, v in zip(spans, reported, strict=False) if b is not None)
        for g, pts in enumerate(points):
            if pts:
                yield vm, g, pts[::-1]


def iter_series(ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime) -> Iterator[dict]:
    """TimeSeries dicts of every monitored GPU with points whose interval starts in [t0, t1)."""
    for vm, g, pts in _gpu_points(ctx, vms, hours, t0, t1):
        points = [{"interval": b.interval, "value": {"doubleValue": v}} for b, v in pts]
        yield {**_series_head(ctx.seed, vm, g), "points": points}


def utilization_series(ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime) -> list[dict]:
    return list(iter_series(ctx, vms, hours, t0, t1))


def write_page(out: IO[bytes], ctx: Ctx, vms: Iterable[Vm], hours: int, t0: datetime, t1: datetime) -> None:
    """`{"timeSeries": [...]}` of `iter_series`, written series by series: the same bytes as
    `json.dumps` of it (compact separators), but each point's text is its bucket's JSON head and
    the value's repr (what json writes for a finite float, and values are clamped), because
    building and dumping a dict per point was most of the time of writing a fleet's day files."""
    out.write(b'{"timeSeries":[')
    for i, (vm, g, pts) in enumerate(_gpu_points(ctx, vms, hours, t0, t1)):
        head = _dumps(_series_head(ctx.seed, vm, g))[:-1]  # without its closing brace
        points = ",".join([b.head + repr(v) + "}}" for b, v in pts])
        out.write(f'{"," if i else ""}{head},"points":[{points}]}}'.encode())
    out.write(b"]}")
