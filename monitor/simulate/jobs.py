"""Ground truth per training job: what the simulator made each job cost, idle and send across zones.

Known from the entities the simulator built, never by reading its rows with our parser: a job is
the value of the first of `JOB_LABEL_KEYS` on an entity's labels (a VM, its disks, its traffic, a
bucket); a disk created without labels belongs to the VM it was created with (`Disk.owner`); a GKE
cluster's fee is shared by the cluster's running nodes, hour by hour, one node-hour each. Idle
hours are those the simulator made idle (`UtilProfile.IDLE`, `Vm.idle`): every GPU there reports
about 0 %, every other GPU-hour tens of percent. Idle dollars are the GPU rows of those hours at
the price paid (cost plus commitment credits); inter-zone dollars the rows of inter-zone traffic
SKUs. Money is USD micros per row, like `truth.row_usd_micros`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from monitor.simulate.catalog import INTER_ZONE, INTER_ZONE_OLD
from monitor.simulate.compute import UtilProfile, Vm
from monitor.simulate.fleet import Fleet
from monitor.simulate.layout import JOB_LABEL_KEYS
from monitor.simulate.services import Bucket, ClusterFee, Disk, Flow
from monitor.simulate.truth import credit_usd_micros, row_usd_micros, usd

__all__ = ["job_of", "jobs_truth"]

Rows = Callable[[Any, int], list[dict]]  # (entity, hour) -> its rows
_INTER_ZONE = {INTER_ZONE.description, INTER_ZONE_OLD.description}


def job_of(labels: Iterable[tuple[str, str]]) -> str | None:
    found = dict(labels)
    return next((found[k] for k in JOB_LABEL_KEYS if found.get(k)), None)


def _entity_job(e: Any, vm_jobs: dict[tuple[str, str], str | None]) -> str | None:
    if isinstance(e, Flow):
        return job_of(e.vm.labels)
    if isinstance(e, Disk):
        return job_of(e.labels) or (vm_jobs.get((e.project.id, e.owner)) if e.owner else None)
    if isinstance(e, Vm | Bucket):
        return job_of(e.labels)
    return None


def _idle(vm: Vm, h: int) -> bool:
    return vm.util == UtilProfile.IDLE or (vm.idle is not None and vm.idle[0] <= h < vm.idle[1])


class _Job:
    def __init__(self) -> None:
        self.cost = self.net = self.idle = self.inter_zone = 0
        self.gpu_seconds = 0
        self.zones: set[str] = set()
        self.instances: set[str] = set()

    def add(self, rows: list[dict]) -> None:
        for row in rows:
            cost = row_usd_micros(row)
            self.cost += cost
            self.net += cost + credit_usd_micros(row)

    def to_dict(self, job: str | None) -> dict:
        return {
            "job": job,
            "cost_usd": usd(self.cost),
            "net_cost_usd": usd(self.net),
            "idle_cost_usd": usd(self.idle),
            "inter_zone_usd": usd(self.inter_zone),
            "gpu_hours": self.gpu_seconds / 3600,
            "zones": sorted(self.zones),
            "instances": sorted(self.instances),
            "cost_micros": self.cost,
            "net_cost_micros": self.net,
            "idle_cost_micros": self.idle,
            "inter_zone_micros": self.inter_zone,
        }


def _fee_share(fee: ClusterFee, fleet: Fleet, seed: int, h: int) -> dict[str | None, float]:
    nodes = [
        v for v in fleet.vms if v.cluster == fee.name and v.project == fee.project and v.seconds(seed, h)
    ]
    shares: dict[str | None, float] = defaultdict(float)
    for v in nodes:
        shares[job_of(v.labels)] += 1 / len(nodes)
    return shares or {None: 1.0}


def jobs_truth(fleet: Fleet, seed: int, rows: Rows) -> list[dict]:
    """Per job (None: every row no job label reaches), over every hour of the window, largest first.

    Only jobs with a name are listed with their figures; the unlabelled rest is the fleet total
    less theirs, so it is not repeated here."""
    vm_jobs = {(v.project.id, v.name): job_of(v.labels) for v in fleet.vms}
    jobs: dict[str, _Job] = defaultdict(_Job)
    for e in fleet.entities:
        if isinstance(e, ClusterFee):
            for h in range(fleet.hours):
                for job, share in _fee_share(e, fleet, seed, h).items():
                    if job is not None:
                        part = _Job()
                        part.add(rows(e, h))
                        jobs[job].cost += round(part.cost * share)
                        jobs[job].net += round(part.net * share)
            continue
        job = _entity_job(e, vm_jobs)
        if job is None:
            continue
        j = jobs[job]
        for h in range(fleet.hours):
            got = rows(e, h)
            j.add(got)
            if isinstance(e, Flow) and e.sku.description in _INTER_ZONE:
                j.inter_zone += sum(row_usd_micros(r) + credit_usd_micros(r) for r in got)
            if isinstance(e, Vm) and e.machine.gpus and got:
                j.gpu_seconds += e.machine.gpus * e.seconds(seed, h)
                if _idle(e, h):
                    gpu = e.skus["gpu"].description
                    j.idle += sum(
                        max(0, row_usd_micros(r) + credit_usd_micros(r))
                        for r in got
                        if r["sku"]["description"] == gpu
                    )
        if isinstance(e, Vm):
            j.instances.add(e.name)
            j.zones.add(e.zone)
    return [j.to_dict(name) for name, j in sorted(jobs.items(), key=lambda kv: (-kv[1].cost, kv[0]))]
