"""GPU model names, normalised across the three places gpucost meets them.

The same H100 shows up as a billing SKU (`Nvidia H100 80GB GPU attached to Spot Preemptible VMs
running in Americas`; SKU wording is `monitor.sku`'s business), as a machine type
(`a3-highgpu-8g`), as a Cloud Monitoring label (`model` = `NVIDIA H100 80GB HBM3`) and as a GKE
accelerator (`nvidia-h100-80gb`). Prices, live estimates and the GPU join only line up if all of
them map to one `GpuModel`. Everything here is pure and table-driven.

>>> normalize_gpu_model("NVIDIA A100-SXM4-40GB")
<GpuModel.A100_40GB: 'A100 40GB'>
>>> gpus_for_machine_type("a3-highgpu-8g")
MachineGpus(model=<GpuModel.H100_80GB: 'H100 80GB'>, count=8)
>>> parse_sku_description("Commitment v1: Nvidia H100 80GB GPU running in Americas for 3 Years").kind
<PriceKind.COMMIT_3Y: 'commit_3y'>
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "COMMON_MODELS",
    "PRICE_PROXIES",
    "GpuModel",
    "MachineGpus",
    "PriceKind",
    "SkuDescription",
    "geo_of_region",
    "gpus_for_machine_type",
    "machine_family",
    "normalize_gpu_model",
    "parse_sku_description",
    "region_of",
]


class GpuModel(StrEnum):
    """Canonical GPU names (the value is what reports print)."""

    B200 = "B200"
    H200_141GB = "H200 141GB"
    H100_MEGA_80GB = "H100 Mega 80GB"
    H100_80GB = "H100 80GB"
    A100_80GB = "A100 80GB"
    A100_40GB = "A100 40GB"
    L4 = "L4"
    T4 = "T4"
    V100 = "V100"
    P100 = "P100"
    P4 = "P4"
    K80 = "K80"
    RTX_PRO_6000 = "RTX PRO 6000"


#: Models the bundled price snapshot must price (tests enforce it). Newer parts (H200, B200,
#: H100 Mega) are recognised but priced only by the Catalog API (or through `PRICE_PROXIES`).
COMMON_MODELS: tuple[GpuModel, ...] = (
    GpuModel.H100_80GB,
    GpuModel.A100_80GB,
    GpuModel.A100_40GB,
    GpuModel.L4,
    GpuModel.T4,
    GpuModel.V100,
    GpuModel.P100,
    GpuModel.P4,
)

#: When a model has no price at all, the price of a close relative, flagged approximate.
PRICE_PROXIES: dict[GpuModel, GpuModel] = {GpuModel.H100_MEGA_80GB: GpuModel.H100_80GB}


class PriceKind(StrEnum):
    """How an hour is bought. Values match `monitor.model.PricingModel` where they overlap."""

    ON_DEMAND = "on_demand"
    SPOT = "spot"
    COMMIT_1Y = "commit_1y"
    COMMIT_3Y = "commit_3y"


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


# Ordered: the first rule whose tokens are all present wins (H100 Mega before H100, A100 80GB
# before A100, which is the 40GB part when no size is given, as in "Nvidia Tesla A100 GPU").
_MODEL_RULES: tuple[tuple[frozenset[str], GpuModel], ...] = (
    (frozenset({"b200"}), GpuModel.B200),
    (frozenset({"h200"}), GpuModel.H200_141GB),
    (frozenset({"h100", "mega"}), GpuModel.H100_MEGA_80GB),
    (frozenset({"h100", "plus"}), GpuModel.H100_MEGA_80GB),  # A3 Plus = A3 Mega (see monitor.sku)
    (frozenset({"h100"}), GpuModel.H100_80GB),
    (frozenset({"a100", "80gb"}), GpuModel.A100_80GB),
    (frozenset({"a100"}), GpuModel.A100_40GB),
    (frozenset({"l4"}), GpuModel.L4),
    (frozenset({"t4"}), GpuModel.T4),
    (frozenset({"v100"}), GpuModel.V100),
    (frozenset({"p100"}), GpuModel.P100),
    (frozenset({"p4"}), GpuModel.P4),
    (frozenset({"k80"}), GpuModel.K80),
    (frozenset({"rtx", "pro", "6000"}), GpuModel.RTX_PRO_6000),
    (frozenset({"rtx", "6000", "96gb"}), GpuModel.RTX_PRO_6000),
)


def normalize_gpu_model(text: str | None) -> GpuModel | None:
    """Map any spelling (SKU description, Monitoring `model` label, GKE accelerator) to a model.

    >>> normalize_gpu_model("nvidia-tesla-a100"), normalize_gpu_model("Tesla T4")
    (<GpuModel.A100_40GB: 'A100 40GB'>, <GpuModel.T4: 'T4'>)
    >>> normalize_gpu_model("AMD MI300X") is None
    True
    """
    if not text:
        return None
    toks = set(_tokens(text))
    for needed, model in _MODEL_RULES:
        if needed <= toks:
            return model
    return None


@dataclass(frozen=True)
class MachineGpus:
    model: GpuModel
    count: int


# machine-type prefix -> model, and the GPU count for each size suffix.
_G2_COUNTS = {"4": 1, "8": 1, "12": 1, "16": 1, "32": 1, "24": 2, "48": 4, "96": 8}
_MACHINE_PREFIXES: dict[str, GpuModel] = {
    "a4-highgpu": GpuModel.B200,
    "a3-ultragpu": GpuModel.H200_141GB,
    "a3-megagpu": GpuModel.H100_MEGA_80GB,
    "a3-highgpu": GpuModel.H100_80GB,
    "a3-edgegpu": GpuModel.H100_80GB,
    "a2-ultragpu": GpuModel.A100_80GB,
    "a2-highgpu": GpuModel.A100_40GB,
    "a2-megagpu": GpuModel.A100_40GB,
}


@functools.lru_cache(maxsize=1024)
def gpus_for_machine_type(machine_type: str | None) -> MachineGpus | None:
    """GPUs built into an accelerator-optimised machine type; None for N1 (GPUs attached apart).
    Cached: a fleet has a handful of machine types and the GPU join asks once per node-hour.

    >>> gpus_for_machine_type("g2-standard-48")
    MachineGpus(model=<GpuModel.L4: 'L4'>, count=4)
    >>> gpus_for_machine_type("n1-standard-8") is None
    True
    """
    if not machine_type:
        return None
    mt = machine_type.strip().lower().rsplit("/", 1)[-1]  # tolerate ".../machineTypes/a3-highgpu-8g"
    if m := re.fullmatch(r"g2-standard-(\d+)", mt):
        count = _G2_COUNTS.get(m.group(1))
        return MachineGpus(GpuModel.L4, count) if count else None
    if m := re.fullmatch(r"([a-z0-9]+-[a-z]+gpu)-(\d+)g(?:-[a-z]+)?", mt):
        model = _MACHINE_PREFIXES.get(m.group(1))
        return MachineGpus(model, int(m.group(2))) if model else None
    return None


def machine_family(machine_type: str | None) -> str | None:
    """`a3-highgpu-8g` -> `A3`: the family whose core/RAM SKUs bill the VM."""
    if not machine_type:
        return None
    m = re.match(r"([a-z][a-z0-9]*)-", machine_type.strip().lower().rsplit("/", 1)[-1])
    return m.group(1).upper() if m else None


@dataclass(frozen=True)
class SkuDescription:
    """What a Compute Engine SKU description says, for pricing and attribution.

    `resource` is "gpu", "cpu", "ram" or None; `model` is set for GPUs, `family` (A2, G2, ...) for
    CPU/RAM. `variant` names a special offering whose price is not the plain rate (reserved, DWS,
    sole tenancy, ...); `geo` is the trailing place ("Americas", "Iowa"). A view of
    `monitor.sku.ParsedSku`, kept for the price book and the GPU-hour estimates.
    """

    resource: str | None
    kind: PriceKind
    model: GpuModel | None = None
    family: str | None = None
    variant: str | None = None
    geo: str | None = None


def parse_sku_description(description: str) -> SkuDescription:
    """Read a Compute Engine SKU description with `monitor.sku.parse_sku` (the one SKU parser).

    >>> d = parse_sku_description("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Iowa")
    >>> (d.resource, d.kind.value, d.model.value, d.geo)
    ('gpu', 'spot', 'H100 80GB', 'Iowa')
    >>> d = parse_sku_description("A2 Instance Ram running in Americas")
    >>> (d.resource, d.family, d.kind.value)
    ('ram', 'A2', 'on_demand')
    """
    from monitor.sku import parse_sku  # monitor.sku builds on GpuModel/PriceKind defined here

    p = parse_sku(description)
    return SkuDescription(
        resource=p.counts.value if p.counts else None,
        kind=p.kind,
        model=p.gpu_model,
        family=p.family,
        variant=p.variant,
        geo=p.geo,
    )


_GEOS: tuple[tuple[str, str], ...] = (
    ("us", "americas"),
    ("northamerica", "americas"),
    ("southamerica", "americas"),
    ("europe", "emea"),
    ("me", "emea"),
    ("africa", "emea"),
    ("asia", "apac"),
    ("australia", "apac"),
)


def region_of(location: str | None) -> str | None:
    """`us-central1-a` -> `us-central1`; a region or multi-region passes through (lower-cased)."""
    if not location:
        return None
    loc = location.strip().lower()
    m = re.fullmatch(r"([a-z]+-[a-z]+\d+)-[a-z]", loc)
    return m.group(1) if m else loc


def geo_of_region(region: str | None) -> str | None:
    """The billing multi-region (americas / emea / apac) a region's SKUs are priced under."""
    r = region_of(region)
    if not r:
        return None
    head = r.split("-", 1)[0]
    return next((geo for prefix, geo in _GEOS if head == prefix), None)
