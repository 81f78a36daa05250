"""The fleet container and the small builder the project layouts use.

The fleet is built once per (seed, hours, scale, inject); every entity then renders any hour on its
own. `scale` repeats the whole fleet (names get a `-r<k>` suffix); hidden costs are injected into
the first copy only, so the ground truth is the same at any scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.simulate.catalog import MACHINES, REGIONS, Pricing, Region, pd_sku
from monitor.simulate.compute import Monitoring, Vm
from monitor.simulate.rand import digits, hexid
from monitor.simulate.rows import USD_ACCOUNT, Account, Project
from monitor.simulate.services import Disk

__all__ = ["EU", "US", "Builder", "Fleet", "Injected", "Labels", "make_project"]

US, EU = REGIONS["us-central1"], REGIONS["europe-west4"]
Labels = tuple[tuple[str, str], ...]


@dataclass
class Injected:
    """Which entities carry the hidden costs (None / empty when not injected)."""

    went_idle: Vm | None = None
    never_used: Vm | None = None
    cross_zone: tuple[Vm, ...] = ()
    cross_zone_cluster: str | None = None
    anomaly_project: Project | None = None
    anomaly_first_hour: int | None = None
    anomaly_job: str | None = None
    unmonitored: Vm | None = None
    hung_node: Vm | None = None  # a GKE GPU node whose job hangs: billed, 0 % duty cycle


@dataclass
class Fleet:
    seed: int
    hours: int
    entities: list[Any] = field(default_factory=list)
    vms: list[Vm] = field(default_factory=list)
    projects: list[Project] = field(default_factory=list)
    injected: Injected = field(default_factory=Injected)

    def add(self, *entities: Any) -> None:
        for e in entities:
            self.entities.append(e)
            if isinstance(e, Vm):
                self.vms.append(e)


@dataclass(frozen=True)
class Builder:
    """Helpers shared by the project layouts: stable ids and names, one fleet copy at a time."""

    fleet: Fleet
    sfx: str  # name suffix of this copy ("" for the first)
    inject: bool  # inject hidden costs into this copy

    @property
    def seed(self) -> int:
        return self.fleet.seed

    @property
    def hours(self) -> int:
        return self.fleet.hours

    def region_of(self, zone: str) -> Region:
        return EU if zone.startswith("europe") else US

    def vm(self, project: Project, name: str, zone: str, machine: str, pricing: Pricing, **kw: Any) -> Vm:
        """Add a VM (and its boot disk) to the fleet. A GKE node (`cluster` given) reports through
        GKE's node metrics unless told otherwise: GKE nodes run no Ops Agent."""
        name = name if kw.get("cluster") else name + self.sfx
        if kw.get("cluster"):
            kw.setdefault("monitoring", Monitoring.GKE_NODE)
        boot_labels = kw.pop("boot_disk_labels", None)
        iid = digits(self.seed, 19, "instance", project.id, name)
        vm = Vm(name, project, self.region_of(zone), zone, MACHINES[machine], pricing, iid, **kw)
        self.fleet.add(vm)
        self.disk(vm, "boot", 200 if vm.machine.gpus >= 8 else 100, labels=boot_labels)
        return vm

    def disk(self, vm: Vm, suffix: str, size_gib: int, labels: Labels | None = None) -> Disk:
        """A disk of `vm`, named like it (boot) or `<vm>-<suffix>`; it carries the VM's labels
        unless `labels` says otherwise (labels are per resource: a disk created without any has none)."""
        name = f"{vm.name}-{suffix}" if suffix != "boot" else vm.name
        disk = Disk(
            name,
            vm.project,
            vm.region,
            vm.zone,
            size_gib,
            pd_sku(vm.region),
            digits(self.seed, 19, "disk", vm.project.id, name, suffix),
            vm.labels if labels is None else labels,
            vm.first_hour,
            vm.last_hour,
            owner=vm.name,
        )
        self.fleet.add(disk)
        return disk

    def gke_node(self, cluster: str, pool: str, i: int, location: str) -> tuple[str, dict[str, Any]]:
        """A node VM name as GKE makes it (`gke-<cluster>-<pool>-<8 hex of the instance group>-<4
        chars>`), and the `vm()` keywords of a node: the labels GKE puts on its billing rows
        (`goog-k8s-cluster-name`, `goog-k8s-cluster-location`, `goog-k8s-node-pool-name`: Cloud
        Billing "Structure of Detailed data export", cloud.google.com/billing/docs/how-to/
        export-data-bigquery-tables/detailed-usage), its cluster, pool and cluster location."""
        group = hexid(self.seed, cluster, pool, groups=2).lower().replace("-", "")
        node = hexid(self.seed, cluster, pool, i, groups=1).lower()
        labels = (
            ("goog-k8s-cluster-name", cluster),
            ("goog-k8s-cluster-location", location),
            ("goog-k8s-node-pool-name", pool),
        )
        kw = {"labels": labels, "cluster": cluster, "node_pool": pool, "cluster_location": location}
        return f"gke-{cluster}-{pool}-{group}-{node}", kw

    def ident(self, *keys: object, n: int = 19) -> str:
        return digits(self.seed, n, *keys)


def make_project(
    seed: int, pid: str, labels: Labels, folder: str, tags: Labels = (), account: Account = USD_ACCOUNT
) -> Project:
    org = (digits(seed, 12, "org"), "example-ml.com")
    fold = (digits(seed, 12, "folder", folder), folder)
    return Project(pid, digits(seed, 12, "project", pid), pid, labels, fold, org, tags, account)
