"""Everything around the VMs: traffic, disks, snapshots, buckets, Filestore, GKE fees, Vertex AI,
tax. Each is an entity with a `key` and `rows(ctx, h)`, like `Vm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

from monitor.simulate.catalog import GIB, INTER_ZONE, INTER_ZONE_INGRESS, INTRA_ZONE, INVOICE, Region, Sku
from monitor.simulate.compute import Ctx, Vm
from monitor.simulate.rand import unit
from monitor.simulate.rows import Credit, Place, Project, RowMaker, make_row

__all__ = [
    "Bucket",
    "ClusterFee",
    "Disk",
    "Filestore",
    "Flow",
    "Snapshot",
    "Tax",
    "VertexEndpoint",
    "cluster_flows",
]

_TAX_SKU = Sku(INVOICE, "Tax", "", "", 1, Decimal(0))


def _weekday_factor(ctx: Ctx, h: int) -> float:
    """Traffic is lighter at weekends (a weekly shape, not an anomaly)."""
    return 0.8 if ctx.hour_start(h).weekday() >= 5 else 1.0


@dataclass(frozen=True)
class Flow:
    """Traffic a VM sends (or receives) on one network SKU while it runs."""

    name: str
    vm: Vm
    sku: Sku
    gib_per_hour: float
    jitter: float = 0.15
    weekly: bool = False

    @property
    def key(self) -> str:
        return f"flow/{self.vm.project.id}/{self.vm.name}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        secs = self.vm.seconds(ctx.seed, h)
        if not secs:
            return []
        u = unit(ctx.seed, "traffic", self.key, h)
        gib = self.gib_per_hour * (1 + self.jitter * (2 * u - 1)) * secs / 3600
        if self.weekly:
            gib *= _weekday_factor(ctx, h)
        return [self._maker.row(int(gib * GIB), ctx.hour_start(h))]

    @cached_property
    def _maker(self) -> RowMaker:
        vm = self.vm
        return RowMaker(
            project=vm.project,
            place=vm.place,
            sku=self.sku,
            labels=vm.labels,
            system_labels=vm.system_labels(),
            resource=(vm.name, vm.global_name),
        )


@dataclass(frozen=True)
class Disk:
    name: str
    project: Project
    region: Region
    zone: str
    size_gib: int
    sku: Sku
    disk_id: str
    labels: tuple[tuple[str, str], ...] = ()
    first_hour: int = -(10**7)
    last_hour: int = 10**7
    owner: str | None = None  # the VM it was created with (ground truth only; never written to rows)

    @property
    def key(self) -> str:
        return f"disk/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        if not self.first_hour <= h < self.last_hour:
            return []
        return [self._maker.row(self.size_gib * GIB * 3600, ctx.hour_start(h))]

    @cached_property
    def _maker(self) -> RowMaker:
        gname = (
            f"//compute.googleapis.com/projects/{self.project.number}/zones/{self.zone}/disk/{self.disk_id}"
        )
        return RowMaker(
            project=self.project,
            place=Place.zonal(self.region, self.zone),
            sku=self.sku,
            labels=self.labels,
            resource=(self.name, gname),
        )


@dataclass(frozen=True)
class Snapshot:
    """A snapshot chain that grows a little every day."""

    name: str
    project: Project
    region: Region
    base_gib: int
    daily_gib: int
    sku: Sku
    snapshot_id: str

    @property
    def key(self) -> str:
        return f"snapshot/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        size = self.base_gib + self.daily_gib * max(0, h // 24)
        gname = f"//compute.googleapis.com/projects/{self.project.number}/global/snapshots/{self.snapshot_id}"
        return [
            make_row(
                project=self.project,
                place=Place.regional(self.region),
                sku=self.sku,
                amount=size * GIB * 3600,
                start=ctx.hour_start(h),
                resource=(self.name, gname),
            )
        ]


@dataclass(frozen=True)
class Bucket:
    """A Cloud Storage bucket: stored bytes every hour, plus downloads when it serves any."""

    name: str
    project: Project
    place: Place
    size_gib: int
    storage_sku: Sku
    download_sku: Sku | None = None
    download_gib_per_hour: float = 0.0
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"bucket/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        res = (self.name, f"//storage.googleapis.com/projects/_/buckets/{self.name}")
        common = {
            "project": self.project,
            "place": self.place,
            "start": ctx.hour_start(h),
            "labels": self.labels,
            "resource": res,
        }
        out = [make_row(sku=self.storage_sku, amount=self.size_gib * GIB * 3600, **common)]
        if self.download_sku is not None:
            u = unit(ctx.seed, "download", self.key, h)
            gib = self.download_gib_per_hour * (0.8 + 0.4 * u) * _weekday_factor(ctx, h)
            out.append(make_row(sku=self.download_sku, amount=int(gib * GIB), **common))
        return out


@dataclass(frozen=True)
class Filestore:
    name: str
    project: Project
    region: Region
    zone: str
    capacity_gib: int
    sku: Sku

    @property
    def key(self) -> str:
        return f"filestore/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        gname = f"//file.googleapis.com/projects/{self.project.number}/locations/{self.zone}/instances/{self.name}"
        return [
            make_row(
                project=self.project,
                place=Place.zonal(self.region, self.zone),
                sku=self.sku,
                amount=self.capacity_gib * GIB * 3600,
                start=ctx.hour_start(h),
                resource=(self.name, gname),
            )
        ]


@dataclass(frozen=True)
class ClusterFee:
    """The GKE management fee of one cluster; the first zonal cluster rides the free tier."""

    name: str
    project: Project
    region: Region
    zone: str
    sku: Sku
    free_tier: bool = False

    @property
    def key(self) -> str:
        return f"gke/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        credits = (
            (Credit("Free tier", "FREE_TIER", Decimal(1), id="gke-free-tier", full_name="GKE free tier"),)
            if self.free_tier
            else ()
        )
        gname = f"//container.googleapis.com/projects/{self.project.number}/zones/{self.zone}/clusters/{self.name}"
        labels = (("goog-k8s-cluster-name", self.name), ("goog-k8s-cluster-location", self.zone))
        return [
            make_row(
                project=self.project,
                place=Place.zonal(self.region, self.zone),
                sku=self.sku,
                amount=3600,
                start=ctx.hour_start(h),
                labels=labels,
                resource=(self.name, gname),
                credits=credits,
            )
        ]


@dataclass(frozen=True)
class VertexEndpoint:
    """A Vertex AI online-prediction endpoint: node Core and RAM rows."""

    name: str
    endpoint_id: str
    project: Project
    region: Region
    replicas: int
    cores: int
    memory_gib: int
    core_sku: Sku
    ram_sku: Sku

    @property
    def key(self) -> str:
        return f"vertex/{self.project.id}/{self.name}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        gname = (
            f"//aiplatform.googleapis.com/projects/{self.project.number}/locations/{self.region.name}"
            f"/endpoints/{self.endpoint_id}"
        )
        common = {
            "project": self.project,
            "place": Place.regional(self.region),
            "start": ctx.hour_start(h),
            "resource": (self.name, gname),
        }
        n = self.replicas * 3600
        return [
            make_row(sku=self.core_sku, amount=n * self.cores, **common),
            make_row(sku=self.ram_sku, amount=n * self.memory_gib * GIB, **common),
        ]


@dataclass(frozen=True)
class Tax:
    """A daily sales-tax row per project (cost_type "tax"), in the day's last hour."""

    project: Project

    @property
    def key(self) -> str:
        return f"tax/{self.project.id}"

    def rows(self, ctx: Ctx, h: int) -> list[dict]:
        if ctx.hour_start(h).hour != 23:
            return []
        micros = 2_000_000 + int(4_000_000 * unit(ctx.seed, "tax", self.key, h // 24))
        row = make_row(
            project=self.project, place=None, sku=_TAX_SKU, amount=0, start=ctx.hour_start(h), micros=micros
        )
        row["cost_type"] = "tax"
        return [row]


def cluster_flows(nodes: list[Vm], gib_per_hour: float) -> list[Flow]:
    """Gradient-sync traffic of a training cluster: each node sends `gib_per_hour` spread evenly over
    its peers; traffic to peers in another zone is billed inter-zone (and shows as ingress there)."""
    flows = []
    for node in nodes:
        peers = [n for n in nodes if n is not node]
        other = sum(1 for n in peers if n.zone != node.zone) / len(peers)
        if other < 1:
            flows.append(Flow("allreduce-intra", node, INTRA_ZONE, gib_per_hour * (1 - other), 0.1))
        if other > 0:
            flows.append(Flow("allreduce-inter", node, INTER_ZONE, gib_per_hour * other, 0.1))
            flows.append(Flow("allreduce-ingress", node, INTER_ZONE_INGRESS, gib_per_hour * other, 0.1))
    return flows
