"""What the simulated fleet buys: services, regions, machine types and SKUs with list prices.

The simulator imitates Google Cloud, never our code: every SKU description below is the catalog's own
wording, and every GPU price is a catalog-derived figure for its region. Sources (public
repositories; strings and prices are reference data, cited here, nothing else copied):

- [hail] hail-is/hail `batch/batch/cloud/gcp/driver/pricing.py` (Cloud Billing Catalog SKU ids with
  their descriptions): `Nvidia L4 GPU running in Iowa` (A88A-5A60-E821), `Nvidia L4 GPU attached to
  Spot Preemptible VMs running in Iowa` (AEC2-3D5C-61BF), `G2 Instance Core running in Iowa`
  (D18E-3563-415F), `G2 Instance Ram running in Iowa` (F0A4-E3D3-33BD), `Spot Preemptible G2 Instance
  Core running in Iowa` (59A6-9C49-BDDB), `Spot Preemptible G2 Instance Ram running in Iowa`
  (BF80-650A-78E6). G2 and L4 SKUs name the CITY; A2/A3 SKUs name the continent.
- [gpu-hourly] a public catalog fetcher's SKU table (public code index, find_string record 70214249507;
  its repository is not named by the index):
  `Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas`, `Spot Preemptible A3
  Instance Core running in Americas`, `Spot Preemptible A3 Instance Ram running in Americas`,
  `Nvidia H100 80GB GPU running in Americas`, `A3 Instance Core running in Americas`.
- [cyclenerd] Cyclenerd/google-cloud-pricing-cost-calculator `build/mapping.csv` (HEAD dac3128):
  `Nvidia Tesla A100 GPU attached to Spot%`, `Nvidia H100 80GB GPU attached to Spot%`, `Spot
  Preemptible A2 Instance%`, `Commitment v1: Nvidia H100 80GB GPU%1 Year`, `Commitment v1: A3 %1 Year`.
- [gcp-sku-yaml] a Google-copyright pricing script (public code search):
  `Commitment v1: Nvidia H100 80GB GPU running in%` + `%for 1 Year`, `Commitment v1: A3 Cpu in%`,
  `Commitment v1: A3 Ram in%`, `N2 Instance Core running in%`.
- [vms.csv] skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv`, per-GPU accelerator rows
  (AcceleratorCount 1: Price, SpotPrice, USD/h): commit 017e2502fb63c7a28757acd94002b2d6099d3e3d for
  H100 and A100, commit 6f65ab58724c0a5b17dbb81ee124e7d7dee0d4a5 for L4 (the same figures in both
  where both were read). A2 core and RAM rates solve exactly from the host-only rows of a2-highgpu-1g
  (12 vCPU, 85 GiB) and a2-ultragpu-1g (12 vCPU, 170 GiB) of the same file, per region.

Not from a catalog (no per-SKU source was found): the A3/G2/N2 core and RAM rates (approximate list
prices, us-central1 only) and the 1-year commitment fees. They are plain numbers, never ratios.
SKU ids are made up but stable (a hash of the description), like real ids they are the same for
every billing account.
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
    "gpu_sku_description",
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
    area: str  # continent word in A2/A3/N2 SKUs: "running in Americas"
    city: str  # city word in G2/L4 and storage SKUs: "running in Iowa", "Balanced PD Capacity in Iowa"


REGIONS: dict[str, Region] = {
    "us-central1": Region("us-central1", "US", "Americas", "Iowa"),
    "europe-west4": Region("europe-west4", "NL", "EMEA", "Netherlands"),
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
    by_city: bool  # the SKU names the region's city (L4), not its continent (H100, A100)
    prices: dict[str, tuple[Decimal, Decimal]]  # region -> (on-demand, Spot) USD per GPU-hour [vms.csv]
    commit_1y: Decimal  # us-central1 1-year commitment fee per GPU-hour (not catalog-derived)

    def __hash__(self) -> int:
        return hash(self.sku_name)


@dataclass(frozen=True)
class MachineType:
    name: str
    family: str  # A3, A2, G2, N2
    cores: int
    memory_gib: int
    gpus: int
    gpu: GpuKind | None


# [vms.csv] commit 017e2502: H100 AcceleratorCount 1 rows. The on-demand H100 SKU of us-central1 is
# `Nvidia H100 80GB GPU running in Americas`, the same SKU as us-east4's (one SKU per continent), whose
# row reads 9.79655 (9.796550569 at full precision in a CSV fixture of Cloud Billing catalog rows,
# public code index record 55513368414); the us-central1 row itself reads 4.20076, which no `...
# running in Americas` SKU can be (it would give two prices to one SKU). SkyPilot's fetcher
# (skypilot-org/skypilot `sky/catalog/data_fetchers/fetch_gcp.py` @21fd5541, `get_gpu_df`) takes the
# FIRST OnDemand SKU of the region whose description contains `H100 80GB GPU`, which can be another
# H100 SKU (a reserved or DWS variant): that explains the odd row. us-central1 Spot: 5.8632, the
# Cloud Billing catalog read 2026-09-26 for `Nvidia H100 80GB GPU attached to Spot Preemptible VMs
# running in Americas` (tgarg01/silybench-data `derived/csv/gpu_prices.csv` @045df3bf), newer than
# vms.csv's 2.253. europe-west4: 12.73552 on demand, 2.2913 Spot [vms.csv]. The same figures as
# `monitor/data/price_snapshot.json` (scripts/price_snapshot.py), read from the same sources.
H100 = GpuKind(
    "Nvidia H100 80GB",
    "NVIDIA H100 80GB HBM3",
    False,
    {"us-central1": (D("9.796550569"), D("5.8632")), "europe-west4": (D("12.73552"), D("2.2913"))},
    D("6.17"),
)
# [vms.csv] commit 017e2502 (and 6f65ab58): A100 AcceleratorCount 1 rows. europe-west4 on demand
# (`Nvidia Tesla A100 GPU running in EMEA`): the europe-west4 row's 1.61365 is another first match
# of the fetcher (as above), and me-west1's 3.2273 another region's; Cyclenerd pricing.yml
# @fd66b26f (2026-07-30) prices a2-highgpu-1g in europe-west4 at 3.747972, which less the
# europe-west4 host-only a2-highgpu-1g row of vms.csv (0.81406) leaves 2.93391 for the GPU.
A100 = GpuKind(
    "Nvidia Tesla A100",
    "NVIDIA A100-SXM4-40GB",
    False,
    {"us-central1": (D("2.93391"), D("1.1472")), "europe-west4": (D("2.93391"), D("1.1691"))},
    D("1.85"),
)
# [vms.csv] commit 6f65ab58: L4 AcceleratorCount 1 rows (us-central1 = Iowa in the SKU [hail]).
L4 = GpuKind(
    "Nvidia L4",
    "NVIDIA L4",
    True,
    {"us-central1": (D("0.56004"), D("0.2231")), "europe-west4": (D("0.58804"), D("0.2106"))},
    D("0.3532"),
)

MACHINES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("a3-highgpu-8g", "A3", 208, 1872, 8, H100),
        MachineType("a3-highgpu-1g", "A3", 26, 234, 1, H100),
        MachineType("a2-highgpu-8g", "A2", 96, 680, 8, A100),
        MachineType("a2-highgpu-1g", "A2", 12, 85, 1, A100),
        MachineType("g2-standard-8", "G2", 8, 32, 1, L4),
        MachineType("n2-standard-16", "N2", 16, 64, 0, None),
    )
}

_US, _EU = "us-central1", "europe-west4"
# (core per hour, RAM per GiB-hour) by (family, region) and pricing model.
_FAMILY_PRICES: dict[tuple[str, str], dict[Pricing, tuple[Decimal, Decimal]]] = {
    ("A3", _US): {
        Pricing.ON_DEMAND: (D("0.029126"), D("0.003903")),
        Pricing.SPOT: (D("0.006990"), D("0.000937")),
    },
    # Not catalog-derived per unit: [vms.csv] gives only the host total (a3-highgpu-1g: 1.18251 in
    # us-central1, 1.24163 in europe-west4); these europe-west4 rates are plain list-like numbers.
    ("A3", _EU): {
        Pricing.ON_DEMAND: (D("0.032038"), D("0.004293")),
        Pricing.SPOT: (D("0.007689"), D("0.001031")),
    },
    # [vms.csv] us-central1 a2-highgpu-1g 0.73948 / a2-ultragpu-1g 1.09962 -> 0.031611 + 0.004237;
    # Spot 0.29576 / 0.43983 -> 0.012641 + 0.001695 (rounded to the micro-dollar; the Spot pricing
    # page's A2 vCPU figure is 0.01264).
    ("A2", _US): {
        Pricing.ON_DEMAND: (D("0.031611"), D("0.004237")),
        Pricing.SPOT: (D("0.012641"), D("0.001695")),
    },
    # [vms.csv] europe-west4 a2-highgpu-1g 0.81406 / a2-ultragpu-1g 1.2105 -> 0.034802 + 0.004664;
    # Spot 0.31824 / 0.47328 -> 0.013600 + 0.001824.
    ("A2", _EU): {
        Pricing.ON_DEMAND: (D("0.034802"), D("0.004664")),
        Pricing.SPOT: (D("0.0136"), D("0.001824")),
    },
    ("G2", _US): {
        Pricing.ON_DEMAND: (D("0.024988"), D("0.002927")),
        Pricing.SPOT: (D("0.009995"), D("0.001171")),
    },
    ("N2", _US): {
        Pricing.ON_DEMAND: (D("0.031611"), D("0.004237")),
        Pricing.SPOT: (D("0.007650"), D("0.001025")),
    },
}
_COMMIT_1Y = {"A3": (D("0.018349"), D("0.002459")), "A2": (D("0.019915"), D("0.002669"))}
_BY_CITY = frozenset({"G2"})  # [hail]: `G2 Instance Core running in Iowa`


def gpu_sku_description(gpu: GpuKind, region: Region, spot: bool) -> str:
    """The catalog's GPU SKU wording. Spot is an INFIX on GPUs ([gpu-hourly], [hail], [cyclenerd]):
    `Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa`."""
    where = region.city if gpu.by_city else region.area
    attached = " attached to Spot Preemptible VMs" if spot else ""
    return f"{gpu.sku_name} GPU{attached} running in {where}"


def compute_skus(machine: MachineType, region: Region, pricing: Pricing) -> dict[str, Sku]:
    """GPU / Core / Ram SKUs of one VM. Committed VMs bill on-demand SKUs (CUD credits offset them).

    Spot CPU and RAM use a PREFIX ([gpu-hourly], [hail], [cyclenerd]): `Spot Preemptible A3 Instance
    Core running in Americas`."""
    spot = pricing is Pricing.SPOT
    prefix = "Spot Preemptible " if spot else ""
    core, ram = _FAMILY_PRICES[(machine.family, region.name)][Pricing.SPOT if spot else Pricing.ON_DEMAND]
    fam = machine.family
    where = region.city if fam in _BY_CITY else region.area
    skus = {
        "core": Sku(
            COMPUTE, f"{prefix}{fam} Instance Core running in {where}", "seconds", "hour", 3600, core
        ),
        "ram": Sku(
            COMPUTE,
            f"{prefix}{fam} Instance Ram running in {where}",
            "byte-seconds",
            "gibibyte hour",
            GIB * 3600,
            ram,
        ),
    }
    if machine.gpu is not None:
        on_demand, spot_price = machine.gpu.prices[region.name]
        desc = gpu_sku_description(machine.gpu, region, spot)
        skus["gpu"] = Sku(COMPUTE, desc, "seconds", "hour", 3600, spot_price if spot else on_demand)
    return skus


def commitment_skus(machine: MachineType, region: Region) -> dict[str, Sku]:
    """`Commitment v1: ...` fee SKUs of a 1-year resource commitment ([gcp-sku-yaml], [cyclenerd])."""
    assert machine.gpu is not None and region.name == _US
    core, ram = _COMMIT_1Y[machine.family]
    fam, area = machine.family, region.area
    return {
        "gpu": Sku(
            COMPUTE,
            f"Commitment v1: {machine.gpu.sku_name} GPU running in {area} for 1 Year",
            "seconds",
            "hour",
            3600,
            machine.gpu.commit_1y,
        ),
        "core": Sku(COMPUTE, f"Commitment v1: {fam} Cpu in {area} for 1 Year", "seconds", "hour", 3600, core),
        "ram": Sku(
            COMPUTE,
            f"Commitment v1: {fam} Ram in {area} for 1 Year",
            "byte-seconds",
            "gibibyte hour",
            GIB * 3600,
            ram,
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


# gcp.md section 3: the GKE management fee, $0.10 per cluster-hour (`Zonal Kubernetes Clusters`).
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
        D("0.0379"),
    )
    ram = Sku(
        VERTEX,
        f"Online/Batch Prediction N1 Predefined Instance RAM running in {area}",
        "byte-seconds",
        "gibibyte hour",
        GIB * 3600,
        D("0.0050"),
    )
    return core, ram
