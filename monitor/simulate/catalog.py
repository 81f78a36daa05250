"""What the simulated fleet buys: services, regions, machine types and SKUs with list prices.

Descriptions follow the patterns in shared/reference/gcp.md section 3 (what attribution matches
on); prices are close to the approximate list prices there. SKU ids are made up but stable
(a hash of the description), like real ids they are the same for every billing account.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from monitor.simulate.rand import hexid

__all__ = [
    "COMPUTE",
    "FILESTORE",
    "GCS_DOWNLOAD",
    "GKE",
    "GKE_ZONAL",
    "INTER_ZONE",
    "INTER_ZONE_INGRESS",
    "INTER_ZONE_OLD",
    "INTRA_ZONE",
    "INVOICE",
    "MACHINES",
    "REGIONS",
    "STORAGE",
    "VERTEX",
    "GpuKind",
    "MachineType",
    "Pricing",
    "Region",
    "Service",
    "Sku",
    "commitment_skus",
    "compute_skus",
    "filestore_sku",
    "gcs_sku",
    "inter_region_sku",
    "internet_sku",
    "net_sku",
    "pd_sku",
    "snapshot_sku",
    "storage_sku",
    "vertex_skus",
]

GIB = 1 << 30
MONTH_SECONDS = 730 * 3600
D = Decimal


@dataclass(frozen=True)
class Service:
    id: str
    description: str


COMPUTE = Service("6F81-5844-456A", "Compute Engine")
STORAGE = Service("95FF-2EF5-5EA1", "Cloud Storage")
GKE = Service("CCD8-9BF1-090E", "Kubernetes Engine")
VERTEX = Service("C7E2-9256-1C43", "Vertex AI")
FILESTORE = Service(hexid("Cloud Filestore"), "Cloud Filestore")
INVOICE = Service(hexid("Invoice"), "Invoice")


class Pricing(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    COMMITTED = "committed"


@dataclass(frozen=True)
class Region:
    name: str
    country: str
    area: str  # continent word in compute SKUs: "running in Americas"
    city: str  # city word in storage SKUs: "Balanced PD Capacity in Iowa"
    multiplier: Decimal


REGIONS: dict[str, Region] = {
    "us-central1": Region("us-central1", "US", "Americas", "Iowa", D(1)),
    "europe-west4": Region("europe-west4", "NL", "EMEA", "Netherlands", D("1.1")),
}


@dataclass(frozen=True)
class Sku:
    """One billable SKU: usage is reported in `usage_unit`, priced per `pricing_unit`."""

    service: Service
    description: str
    usage_unit: str
    pricing_unit: str
    per_pricing_unit: int  # usage units in one pricing unit
    price: Decimal  # USD per pricing unit

    @property
    def id(self) -> str:
        return hexid(self.description)


@dataclass(frozen=True)
class GpuKind:
    sku_name: str  # as in SKU descriptions
    model: str  # as NVML reports it (the `model` metric label)
    on_demand: Decimal
    spot: Decimal
    commit_1y: Decimal


@dataclass(frozen=True)
class MachineType:
    name: str
    family: str  # A3, A2, G2, N2
    cores: int
    memory_gib: int
    gpus: int
    gpu: GpuKind | None


H100 = GpuKind("Nvidia H100 80GB", "NVIDIA H100 80GB HBM3", D("9.80"), D("2.25"), D("6.17"))
A100 = GpuKind("Nvidia Tesla A100", "NVIDIA A100-SXM4-40GB", D("2.933908"), D("1.10"), D("1.85"))
L4 = GpuKind("Nvidia L4", "NVIDIA L4", D("0.5606"), D("0.2236"), D("0.3532"))

MACHINES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("a3-highgpu-8g", "A3", 208, 1872, 8, H100),
        MachineType("a2-highgpu-8g", "A2", 96, 680, 8, A100),
        MachineType("a2-highgpu-1g", "A2", 12, 85, 1, A100),
        MachineType("g2-standard-8", "G2", 8, 32, 1, L4),
        MachineType("n2-standard-16", "N2", 16, 64, 0, None),
    )
}

# (core per hour, RAM per GiB-hour) by family and pricing model.
_FAMILY_PRICES: dict[str, dict[Pricing, tuple[Decimal, Decimal]]] = {
    "A3": {Pricing.ON_DEMAND: (D("0.029126"), D("0.003903")), Pricing.SPOT: (D("0.006990"), D("0.000937"))},
    "A2": {Pricing.ON_DEMAND: (D("0.031611"), D("0.004237")), Pricing.SPOT: (D("0.009483"), D("0.001271"))},
    "G2": {Pricing.ON_DEMAND: (D("0.024988"), D("0.002927")), Pricing.SPOT: (D("0.009995"), D("0.001171"))},
    "N2": {Pricing.ON_DEMAND: (D("0.031611"), D("0.004237")), Pricing.SPOT: (D("0.007650"), D("0.001025"))},
}
_COMMIT_1Y = {"A3": (D("0.018349"), D("0.002459")), "A2": (D("0.019915"), D("0.002669"))}


def _local(price: Decimal, region: Region) -> Decimal:
    return (price * region.multiplier).quantize(D("0.000001"))


def compute_skus(machine: MachineType, region: Region, pricing: Pricing) -> dict[str, Sku]:
    """GPU / Core / Ram SKUs of one VM. Committed VMs bill on-demand SKUs (CUD credits offset them)."""
    spot = pricing is Pricing.SPOT
    prefix = "Spot Preemptible " if spot else ""
    rate = Pricing.SPOT if spot else Pricing.ON_DEMAND
    core, ram = _FAMILY_PRICES[machine.family][rate]
    fam, area = machine.family, region.area
    skus = {
        "core": Sku(
            COMPUTE,
            f"{prefix}{fam} Instance Core running in {area}",
            "seconds",
            "hour",
            3600,
            _local(core, region),
        ),
        "ram": Sku(
            COMPUTE,
            f"{prefix}{fam} Instance Ram running in {area}",
            "byte-seconds",
            "gibibyte hour",
            GIB * 3600,
            _local(ram, region),
        ),
    }
    if machine.gpu is not None:
        price = machine.gpu.spot if spot else machine.gpu.on_demand
        desc = f"{prefix}{machine.gpu.sku_name} GPU running in {area}"
        skus["gpu"] = Sku(COMPUTE, desc, "seconds", "hour", 3600, _local(price, region))
    return skus


def commitment_skus(machine: MachineType, region: Region) -> dict[str, Sku]:
    """`Commitment v1: ...` fee SKUs of a 1-year resource commitment for this machine family."""
    assert machine.gpu is not None
    core, ram = _COMMIT_1Y[machine.family]
    fam, area = machine.family, region.area
    return {
        "gpu": Sku(
            COMPUTE,
            f"Commitment v1: {machine.gpu.sku_name} GPU running in {area} for 1 Year",
            "seconds",
            "hour",
            3600,
            _local(machine.gpu.commit_1y, region),
        ),
        "core": Sku(
            COMPUTE,
            f"Commitment v1: {fam} Cpu in {area} for 1 Year",
            "seconds",
            "hour",
            3600,
            _local(core, region),
        ),
        "ram": Sku(
            COMPUTE,
            f"Commitment v1: {fam} Ram in {area} for 1 Year",
            "byte-seconds",
            "gibibyte hour",
            GIB * 3600,
            _local(ram, region),
        ),
    }


def net_sku(description: str, price: str, service: Service = COMPUTE) -> Sku:
    """A traffic SKU: usage in bytes, priced per GiB."""
    return Sku(service, description, "bytes", "gibibyte", GIB, D(price))


def storage_sku(service: Service, description: str, price_per_gib_month: str) -> Sku:
    """A capacity SKU: usage in byte-seconds, priced per GiB-month (730 hours)."""
    return Sku(
        service, description, "byte-seconds", "gibibyte month", GIB * MONTH_SECONDS, D(price_per_gib_month)
    )


# Convenience constructors for the SKUs the fleet uses (descriptions per gcp.md section 3).
def pd_sku(region: Region) -> Sku:
    return storage_sku(COMPUTE, f"Balanced PD Capacity in {region.city}", "0.10")


def snapshot_sku(region: Region) -> Sku:
    return storage_sku(COMPUTE, f"Storage PD Snapshot in {region.city}", "0.05")


def gcs_sku(location: str, price: str) -> Sku:
    return storage_sku(STORAGE, f"Standard Storage {location}", price)


def filestore_sku(region: Region) -> Sku:
    return storage_sku(FILESTORE, f"Filestore Basic SSD Capacity in {region.city}", "0.30")


GKE_ZONAL = Sku(GKE, "Zonal Kubernetes Clusters", "seconds", "hour", 3600, D("0.10"))
GCS_DOWNLOAD = net_sku("Download Worldwide Destinations (excluding Asia & Australia)", "0.12", STORAGE)
INTRA_ZONE = net_sku("Network Intra Zone Data Transfer Out", "0")
INTER_ZONE = net_sku("Network Inter Zone Data Transfer Out", "0.01")
INTER_ZONE_OLD = net_sku("Network Inter Zone Egress", "0.01")
INTER_ZONE_INGRESS = net_sku("Network Inter Zone Ingress", "0")


def internet_sku(src: Region, dst_area: str, *, old: bool = False) -> Sku:
    what = "Internet Egress" if old else "Internet Data Transfer Out"
    return net_sku(f"Network {what} from {src.area} to {dst_area}", "0.12")


def inter_region_sku(src: Region, dst: Region) -> Sku:
    return net_sku(f"Network Inter Region Data Transfer Out from {src.area} to {dst.area}", "0.05")


def vertex_skus(region: Region) -> tuple[Sku, Sku]:
    area = region.area
    core = Sku(
        VERTEX,
        f"Online/Batch Prediction N1 Predefined Instance Core running in {area}",
        "seconds",
        "hour",
        3600,
        _local(D("0.0379"), region),
    )
    ram = Sku(
        VERTEX,
        f"Online/Batch Prediction N1 Predefined Instance RAM running in {area}",
        "byte-seconds",
        "gibibyte hour",
        GIB * 3600,
        _local(D("0.0050"), region),
    )
    return core, ram
