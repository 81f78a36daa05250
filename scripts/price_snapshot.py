"""Regenerate `monitor/data/price_snapshot.json` from downloaded catalog-derived source files.

Why a script: the bundled snapshot is what gpucost prices with when the Cloud Billing Catalog API is
not used or not reachable, so it must be made of real per-SKU prices and be refreshable, never of
ratios. Every price in the output comes from one input line; a price no input has is left out.

    .venv/bin/python scripts/price_snapshot.py \\
        --vms scripts/price_sources/skypilot_gcp_vms_extract.csv \\
        --sku-prices scripts/price_sources/sku_prices.csv \\
        --exclusions scripts/price_sources/exclusions.csv \\
        --sources scripts/price_sources/sources.json \\
        --as-of 2026-12-02 --regions us-central1,us-east4,us-west1,europe-west4,asia-southeast1 \\
        --out monitor/data/price_snapshot.json

Inputs:
- `--vms`: SkyPilot's GCP catalog (skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv`, the whole
  file or an extract of its lines). Accelerator rows (empty InstanceType) give on-demand and Spot
  prices per GPU: SkyPilot's fetcher writes the SKU unit price times AcceleratorCount
  (skypilot-org/skypilot `sky/catalog/data_fetchers/fetch_gcp.py` `get_gpu_df`), so the row with
  the smallest count, divided by that count, is the SKU price. Host-only a2-highgpu-1g and
  a2-ultragpu-1g rows (same vCPUs, different RAM) give the A2 vCPU and GiB-RAM rates of a region.
- `--sku-prices`: reviewed catalog SKU lines (description, usage_type, regions, price, source id),
  read with the same parser the Catalog API source uses; they win over `--vms` figures.
- `--exclusions`: (accelerator, region, kind, reason) `--vms` figures known to be a non-plain SKU
  (SkyPilot's fetcher takes the FIRST SKU whose description contains the GPU name, which can be a
  DWS / reserved variant). Excluded prices stay absent unless a SKU line supplies them.
- `--sources`: JSON list naming each source (id, repository, path, commit, date, supplies); the
  first is the `--vms` source (`default_source`), SKU lines name theirs (`origins`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.gpu_models import PriceKind, normalize_gpu_model, parse_sku_description

__all__ = ["a2_rates", "build_snapshot", "gpu_prices", "main", "sku_line_prices"]

Table = dict[tuple[str, str, str], Decimal]  # (item, region, kind) -> USD
_USAGE = {"OnDemand": "on_demand", "Preemptible": "spot", "Commit1Yr": "commit_1y", "Commit3Yr": "commit_3y"}
_MICRO = Decimal("0.000001")


def _dec(text: str | None) -> Decimal | None:
    return Decimal(text) if text not in (None, "") else None


def gpu_prices(rows: Iterable[Mapping[str, str]], excluded: set[tuple[str, str, str]]) -> Table:
    """Per-GPU on-demand and Spot prices from accelerator rows (smallest AcceleratorCount wins)."""
    best: dict[tuple[str, str], tuple[int, Mapping[str, str]]] = {}
    for row in rows:
        name = row.get("AcceleratorName") or ""
        if row.get("InstanceType") or not name or name.lower().startswith("tpu"):
            continue
        key, count = (name, row["Region"]), int(float(row["AcceleratorCount"]))
        if key not in best or count < best[key][0]:
            best[key] = (count, row)
    out: Table = {}
    for (name, region), (count, row) in sorted(best.items()):
        model = normalize_gpu_model(name)
        if model is None:
            continue
        for kind, column in (("on_demand", "Price"), ("spot", "SpotPrice")):
            price = _dec(row.get(column))
            if price is not None and price > 0 and (name, region, kind) not in excluded:
                out[(model.value, region, kind)] = (price / count).normalize()
    return out


def a2_rates(rows: Iterable[Mapping[str, str]]) -> tuple[Table, Table]:
    """A2 (vCPU-hour, GiB-hour) rates per region and kind, from the two host-only A2 shapes."""
    hosts: dict[tuple[str, str], Mapping[str, str]] = {}
    for row in rows:
        if row.get("InstanceType") in ("a2-highgpu-1g", "a2-ultragpu-1g"):
            hosts.setdefault((row["InstanceType"], row["Region"]), row)
    cores: Table = {}
    ram: Table = {}
    for (shape, region), small in sorted(hosts.items()):
        big = hosts.get(("a2-ultragpu-1g", region))
        if shape != "a2-highgpu-1g" or big is None or small["vCPUs"] != big["vCPUs"]:
            continue
        c, m1, m2 = Decimal(small["vCPUs"]), Decimal(small["MemoryGiB"]), Decimal(big["MemoryGiB"])
        for kind, column in (("on_demand", "Price"), ("spot", "SpotPrice")):
            p1, p2 = _dec(small.get(column)), _dec(big.get(column))
            if p1 is None or p2 is None:
                continue
            gib = (p2 - p1) / (m2 - m1)
            ram[("A2", region, kind)] = gib.quantize(_MICRO)
            cores[("A2", region, kind)] = ((p1 - m1 * gib) / c).quantize(_MICRO)
    return cores, ram


def sku_line_prices(rows: Iterable[Mapping[str, str]]) -> tuple[Table, dict[tuple[str, str, str], str]]:
    """GPU prices from reviewed SKU lines, classified by `parse_sku_description` like the catalog."""
    out: Table = {}
    origin: dict[tuple[str, str, str], str] = {}
    for row in rows:
        parsed = parse_sku_description(row["description"])
        kind = _USAGE.get(row["usage_type"])
        if parsed.resource != "gpu" or parsed.model is None or parsed.variant is not None:
            raise ValueError(f"sku-prices: {row['description']!r} is not a plain GPU SKU")
        if kind != parsed.kind.value:
            raise ValueError(
                f"sku-prices: {row['description']!r} reads as {parsed.kind.value}, usage_type says {kind}"
            )
        for region in row["regions"].split():
            out[(parsed.model.value, region, kind)] = Decimal(row["price"])
            origin[(parsed.model.value, region, kind)] = row["source"]
    return out, origin


def _nest(table: Table) -> dict[str, dict[str, dict[str, str]]]:
    nested: dict[str, dict[str, dict[str, str]]] = {}
    order = [k.value for k in PriceKind]
    for (item, region, kind), price in sorted(
        table.items(), key=lambda kv: (kv[0][0], kv[0][1], order.index(kv[0][2]))
    ):
        nested.setdefault(item, {}).setdefault(region, {})[kind] = f"{price:f}"
    return nested


def build_snapshot(
    vms: list[Mapping[str, str]],
    sku_lines: list[Mapping[str, str]],
    exclusions: list[Mapping[str, str]],
    sources: list[dict[str, Any]],
    as_of: str,
    regions: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The snapshot document. `regions` keeps only those regions (other rows of the inputs are the
    evidence behind an exclusion, not prices the snapshot needs)."""
    excluded = {(e["accelerator"], e["region"], e["kind"]) for e in exclusions}
    gpu = gpu_prices(vms, excluded)
    reviewed, origin = sku_line_prices(sku_lines)
    gpu.update(reviewed)
    cores, ram = a2_rates(vms)
    if regions is not None:
        gpu, cores, ram = ({k: v for k, v in t.items() if k[1] in regions} for t in (gpu, cores, ram))
    origins: dict[str, Any] = {}
    for (item, region, kind), source_id in sorted(origin.items()):
        if (item, region, kind) in gpu:
            origins.setdefault("gpu", {}).setdefault(item, {}).setdefault(region, {})[kind] = source_id
    return {
        "format": 1,
        "as_of": f"{as_of}T00:00:00Z",
        "source": "snapshot",
        "currency": "USD",
        "approximate": True,
        "note": (
            "Bundled Compute Engine list prices (USD) for when the Cloud Billing Catalog API is not used "
            "or not reachable. Generated by scripts/price_snapshot.py from the sources below; every "
            "price is one source figure (per-GPU rows of SkyPilot's catalog, reviewed catalog SKU "
            "lines); none is a ratio of another. A price no source gives is absent (unknown), not "
            'estimated. Spot prices change up to once a day: use pricing.source = "catalog" for '
            "current prices."
        ),
        "generated_by": (
            "scripts/price_snapshot.py --vms scripts/price_sources/skypilot_gcp_vms_extract.csv "
            "--sku-prices scripts/price_sources/sku_prices.csv --exclusions "
            "scripts/price_sources/exclusions.csv --sources scripts/price_sources/sources.json "
            f"--as-of {as_of}" + (f" --regions {','.join(sorted(regions))}" if regions else "")
        ),
        "sources": [{k: v for k, v in s.items() if k != "file"} for s in sources],
        "default_source": sources[0]["id"],
        "origins": origins,
        "excluded": [dict(e) for e in exclusions],
        "gpu": _nest(gpu),
        "cpu_core": _nest(cores),
        "ram_gib": _nest(ram),
        "egress_gib": {},
    }


def _csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vms", required=True, help="skypilot-catalog catalogs/v7/gcp/vms.csv (or an extract)")
    ap.add_argument("--sku-prices", required=True, help="reviewed catalog SKU lines (CSV)")
    ap.add_argument("--exclusions", required=True, help="vms.csv figures that are not the plain SKU (CSV)")
    ap.add_argument("--sources", required=True, help="JSON list naming each source")
    ap.add_argument("--as-of", required=True, help="the snapshot's date, YYYY-MM-DD")
    ap.add_argument("--regions", help="comma-separated regions to keep (default: every region)")
    ap.add_argument("--out", help="output path (default: stdout)")
    args = ap.parse_args(argv)
    doc = build_snapshot(
        _csv(args.vms),
        _csv(args.sku_prices),
        _csv(args.exclusions),
        json.loads(Path(args.sources).read_text(encoding="utf-8")),
        args.as_of,
        frozenset(args.regions.split(",")) if args.regions else None,
    )
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
