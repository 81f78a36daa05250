"""The one place that knows how the Cloud Billing catalog words a SKU description.

Two consumers read SKU descriptions and must never disagree: the attribution rules, compiled into
SQL `CASE` expressions that BigQuery and DuckDB evaluate (`monitor/attribution/rules.py`), and the
Python side (GPU-hour estimates, the Catalog price book) through `parse_sku`. Both are built from
the pattern constants below, so a wording the catalog adds is taught in one place.

Every pattern is RE2 (the regex engine of BigQuery and DuckDB: no look-arounds, no
back-references), written without flags; `ci()` prefixes `(?i)` because the catalog's
capitalisation is not stable (`Nvidia Tesla T4 GPU`, `TpuV6e`, `Ram`/`RAM`). Python's `re` reads
the same patterns identically (they use only classes, groups, alternation, `\\b` and anchors).

The wording, with where it was seen (full strings in tests/fixtures/skus/real_skus.tsv):

- GPUs: `Nvidia Tesla A100 GPU running in Americas`, `Nvidia H100 80GB GPU running in ...`, newer
  parts without the Nvidia word (`H200 141GB GPU running in Netherlands`, `RTX 6000 96GB running
  in Oregon`) and the A4 machine billed per GPU (`A4 Nvidia B200 (1 gpu slice) running in ...`).
- Spot GPUs are an INFIX: `Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa`
  (hail-is/hail batch/batch/cloud/gcp/driver/pricing.py); Spot CPU/RAM a PREFIX:
  `Spot Preemptible G2 Instance Core running in Iowa`; older exports say `Preemptible ...`, and
  older GPU SKUs `Nvidia Tesla K80 GPU attached to preemptible VMs running in Americas`
  (neuro-inc/platform-reports tests/unit/test_metrics.py @ 0134c7af73d80f5b588a7143f1ec22ca3c008fb9).
- Commitments: `Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year` /
  `... for 3 Years`, `Commitment v1: A2 Cpu in Americas for 1 Year`, C2's `Commitment: Compute
  optimized Core running in ...`.
- Reserved and Dynamic Workload Scheduler: `Reserved Nvidia Tesla A100 GPU in Americas` (a $0
  SKU), `Reserved Nvidia H100 80GB GPU in Seoul in Calendar Mode`, `Nvidia H100 80GB GPU attached
  to DWS Defined Duration VMs running in Seoul`, `DWS Calendar Mode A4 Nvidia B200 (1 gpu slice)
  in Seoul` (djwar42/arr-coc-0-1 PLAN-MD-FILES/november/15th/EXCESSIVE_POKING_AROUND_STUDY.md,
  a dump of the live catalog). All of them map to `PricingModel.RESERVED`: capacity bought ahead
  of use, whose hourly rate (often $0) is not the on-demand one.
- Vertex AI management fees price, per GPU / core / GiB, capacity that Compute Engine bills on its
  own SKUs (DWS, Spot, reservations): `Vertex AI: Training/Pipelines management fee on NVIDIA H100
  80GB in Iowa` rides beside `Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in
  Americas` (yshimojo/zenn-articles articles/dws-flex-new-skus.md @ 98b435f3, a billing report).
  They are not capacity: counting them would double the GPU-hours.
- Place: the trailing `running in <region, city or continent>` / `in <place>`, before an optional
  `in Calendar Mode` or `for N Year(s)`.

>>> p = parse_sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa")
>>> (p.counts.value, p.gpu_model.value, p.pricing_model.value, p.geo)
('gpu', 'L4', 'spot', 'Iowa')
>>> parse_sku("Commitment v1: A2 Cpu in Americas for 3 Years").kind.value
'commit_3y'
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from monitor.gpu_models import GpuModel, PriceKind
from monitor.model import PricingModel

__all__ = [
    "BIGQUERY_SERVICE",
    "BIGQUERY_STORAGE",
    "COMMITMENT",
    "CPU_CORE",
    "GEO",
    "GPU",
    "GPU_MODELS",
    "MANAGEMENT_FEE",
    "RAM",
    "RESERVED",
    "SPOT",
    "SPOT_INFIX",
    "SPOT_PREFIX",
    "Counts",
    "ParsedSku",
    "ci",
    "parse_sku",
    "with_pricing",
]

# --- patterns (RE2, no flags; wrap with ci()) -------------------------------------------------

#: Accelerator SKUs: anything Nvidia, a GPU, a TPU (`TpuV6e`, `V6e TPU`), or a part named without
#: either word (`RTX 6000 96GB running in Oregon`).
GPU = r"\bNvidia\b|\bGPU\b|\bTPU\b|\bTpu|\bRTX (?:PRO )?6000\b"
#: vCPU capacity (`A2 Instance Core`, commitment `A2 Cpu`, GKE Autopilot `Pod mCPU Requests`).
CPU_CORE = r"\bCore\b|\bCpu\b|\bvCPU\b|\bmCPU\b"
#: Memory capacity (`A2 Instance Ram`, Autopilot `Pod Memory Requests`).
RAM = r"\bRam\b|\bMemory\b"

#: Spot as the catalog writes it for GPUs (and local SSD): an infix after the part; older SKUs
#: say `attached to preemptible VMs`.
SPOT_INFIX = r"\battached to (?:Spot )?Preemptible VMs\b"
#: Spot as written for CPU/RAM (`Spot Preemptible`), and in older exports (`Preemptible`).
SPOT_PREFIX = r"^(?:Spot Preemptible|Preemptible)\b"
SPOT = rf"{SPOT_PREFIX}|{SPOT_INFIX}"
#: Commitment fees: `Commitment v1: ...` and C2's `Commitment: ...`.
COMMITMENT = r"^Commitment\b"
#: The commitment term, `for 1 Year` / `for 3 Years` (group 1 = years).
COMMITMENT_TERM = r"\bfor (\d+) Years?\b"
#: Capacity bought ahead: `Reserved ...` ($0 variants, Calendar Mode) and Dynamic Workload
#: Scheduler (`attached to DWS Defined Duration VMs`, `DWS Calendar Mode ...`, flex-start).
RESERVED = r"^Reserved\b|\bDWS\b|\bCalendar Mode\b|\bFlex[ -]?Start\b"
#: Vertex AI's management fees on capacity billed elsewhere: a fee, never capacity (see above).
MANAGEMENT_FEE = r"^Vertex AI: .*\bmanagement fee\b"

#: The place at the end: `running in Salt Lake City`, `in Americas for 1 Year`, `in Seoul in
#: Calendar Mode` (group 1). Python-only and matched case-SENSITIVELY: the catalog writes this
#: `in` in lower case, while `Data Transfer In from APAC to Americas` is a direction, not a place.
GEO = r"\bin ([A-Za-z][A-Za-z .'&-]*?)(?: in Calendar Mode)?(?: for \d+ Years?)?$"
#: The machine family before the capacity word: `N2D AMD Instance Core`, `Commitment v1: A2 Cpu`.
FAMILY = (
    r"^(?:Spot Preemptible |Preemptible |Commitment v\d+: )?([A-Z][0-9]+[A-Z]?)\b"
    r"[A-Za-z -]*?\b(?:Core|Cpu|Ram)\b"
)

#: GPU models, ORDERED: the first match wins (H100 Mega before H100, A100 80GB before A100, which
#: is the 40GB part when no size is given, as in `Nvidia Tesla A100 GPU`).
GPU_MODELS: tuple[tuple[str, GpuModel], ...] = (
    (r"\bB200\b", GpuModel.B200),
    (r"\bH200\b", GpuModel.H200_141GB),
    (r"\bH100 (?:80GB )?Mega\b", GpuModel.H100_MEGA_80GB),
    # `Nvidia H100 80GB Plus GPU` is the A3 Mega's GPU ("A3 Plus" was A3 Mega's first name):
    # dstackai/gpuhunt src/gpuhunt/providers/gcp.py @ 35841515de3792fe6be73b0422ac8901b6b929c8
    # maps `nvidia-h100-80gb-plus` and `A3Plus Instance` to `a3-megagpu`.
    (r"\bH100 80GB Plus\b", GpuModel.H100_MEGA_80GB),
    (r"\bH100\b", GpuModel.H100_80GB),
    (r"\bA100 80GB\b", GpuModel.A100_80GB),
    (r"\bA100\b", GpuModel.A100_40GB),
    (r"\bRTX (?:PRO )?6000\b", GpuModel.RTX_PRO_6000),
    (r"\bL4\b", GpuModel.L4),
    (r"\bT4\b", GpuModel.T4),
    (r"\bV100\b", GpuModel.V100),
    (r"\bP100\b", GpuModel.P100),
    (r"\bP4\b", GpuModel.P4),
    (r"\bK80\b", GpuModel.K80),
)

#: Cloud Storage copying what is written to a dual- or multi-region bucket to its other regions:
#: `Network Data Transfer GCP Replication within Northern America` (SKU AED0-3315-7B11, $0.02/GiB;
#: janelia-flyem/tensorstore-export docs/mCNS-ExportAnalysis.md @ 54c5c22e, a real bill's
#: post-mortem). Inter-region traffic that writes pay for, not reads.
REPLICATION = r"\bGCP Replication\b"
#: Cloud Storage serving reads of a multi-region bucket to a Google Cloud service (a VM) in a region
#: on the same continent: `Network Data Transfer GCP Multi-region within Northern America` (a real
#: bill, julfou7/seenit-app docs/audits/audit-finops-gcp-2026-09-20.md, beside the Replication
#: SKU). Free until Google's 2022 Cloud Storage pricing change (from October 2022, or a discounted
#: contract's renewal), since then "priced the same as general data moves between different
#: locations on the same continent", even from a region the multi-region covers
#: (https://cloud.google.com/storage/pricing-announce#network, quoted in lilab-bcb/cumulus#410;
#: $0.02/GiB in North America, hail-is/hail#14286): inter-region traffic that a regional bucket in
#: the readers' region avoids. Not `Standard Storage US Multi-region` (storage, not traffic).
MULTI_REGION = r"\bGCP Multi-region\b"

#: Services whose SKUs are BigQuery (`BigQuery`, `BigQuery Reservation API`, ...).
BIGQUERY_SERVICE = r"^BigQuery\b"
#: BigQuery storage SKUs (`Active Storage`, `Long Term Storage`, `Active Logical Storage`,
#: `Long-Term Physical Storage`, ...). Everything else BigQuery bills (`Analysis` = on-demand
#: query processing, slot reservations, streaming) is query processing, not storage.
BIGQUERY_STORAGE = r"\b(?:Active|Long[ -]?Term)\b.*\bStorage\b|\b(?:Logical|Physical) Storage\b"

#: Variant words: a special offering whose price is not the plain rate (the price book skips them).
_VARIANTS = (
    "reserved",
    "dws",
    "defined duration",
    "flex start",
    "calendar mode",
    "sole tenancy",
    "sole tenant",
    "vgpu",
    "virtual workstation",
    "custom",
    "extended",
    "premium",
)


def ci(pattern: str) -> str:
    """`pattern` made case-insensitive for RE2 and Python alike."""
    return f"(?i)(?:{pattern})"


def with_pricing(pricing: str, counts: str) -> str:
    """A pattern matching `counts` (GPU, CPU_CORE, RAM) priced as `pricing` (SPOT, RESERVED), in
    either order: the Spot word is a prefix for CPU/RAM and an infix after the GPU part."""
    return ci(rf"(?:{pricing}).*(?:{counts})|(?:{counts}).*(?:{pricing})")


@functools.cache
def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(ci(pattern))


# --- the parsed value ---------------------------------------------------------------------------


class Counts(StrEnum):
    """What a capacity SKU's usage counts."""

    GPU = "gpu"
    CPU = "cpu"
    RAM = "ram"


@dataclass(frozen=True)
class ParsedSku:
    """What a SKU description says, read with the same patterns the compiled SQL uses.

    `counts` is None for non-capacity SKUs. `pricing_model` is what the WORDING implies (a
    commitment fee is `committed`; CUD credits on an on-demand row are the row's business).
    `kind` is the price-book view (`commit_1y` / `commit_3y` for fees; reserved and DWS SKUs keep
    `on_demand` with a `variant`, since their rate is not the plain one).
    """

    description: str
    counts: Counts | None
    pricing_model: PricingModel
    kind: PriceKind
    gpu_model: GpuModel | None = None
    family: str | None = None
    commitment_years: int | None = None
    variant: str | None = None
    geo: str | None = None


def _pricing(desc: str) -> tuple[PricingModel, PriceKind, int | None]:
    if _re(COMMITMENT).search(desc):
        term = _re(COMMITMENT_TERM).search(desc)
        years = int(term.group(1)) if term else None
        return PricingModel.COMMITTED, PriceKind.COMMIT_3Y if years == 3 else PriceKind.COMMIT_1Y, years
    if _re(SPOT).search(desc):
        return PricingModel.SPOT, PriceKind.SPOT, None
    if _re(RESERVED).search(desc):
        return PricingModel.RESERVED, PriceKind.ON_DEMAND, None
    return PricingModel.ON_DEMAND, PriceKind.ON_DEMAND, None


def _counts(desc: str) -> Counts | None:
    # Same order as the rules: management fees, then accelerators, then CPU, then RAM.
    if _re(MANAGEMENT_FEE).search(desc):
        return None
    for pattern, counts in ((GPU, Counts.GPU), (CPU_CORE, Counts.CPU), (RAM, Counts.RAM)):
        if _re(pattern).search(desc):
            return counts
    return None


def _gpu_model(desc: str) -> GpuModel | None:
    return next((model for pattern, model in GPU_MODELS if _re(pattern).search(desc)), None)


def _variant(desc: str) -> str | None:
    low = " ".join(re.findall(r"[a-z0-9]+", desc.lower()))
    return next((v for v in _VARIANTS if re.search(rf"\b{v}\b", low)), None)


@functools.lru_cache(maxsize=8192)
def parse_sku(description: str) -> ParsedSku:
    """Read one SKU description (whitespace-normalised, matched case-insensitively). Cached: an
    export has hundreds of SKUs over millions of rows (the result is frozen).

    >>> p = parse_sku("Spot Preemptible A3 Instance Core running in Americas")
    >>> (p.counts.value, p.family, p.pricing_model.value, p.geo)
    ('cpu', 'A3', 'spot', 'Americas')
    >>> parse_sku("Reserved Nvidia Tesla A100 80GB GPU in Americas").pricing_model.value
    'reserved'
    """
    desc = " ".join((description or "").split())
    model, kind, years = _pricing(desc)
    counts = _counts(desc)
    gpu_model = _gpu_model(desc) if counts is Counts.GPU else None
    family = None
    if counts in (Counts.CPU, Counts.RAM) and (m := _re(FAMILY).search(desc)):
        family = m.group(1).upper()
    geo_m = re.search(GEO, desc)
    return ParsedSku(
        description=desc,
        counts=counts,
        pricing_model=model,
        kind=kind,
        gpu_model=gpu_model,
        family=family,
        commitment_years=years,
        variant=_variant(desc),
        geo=geo_m.group(1).strip() if geo_m else None,
    )
