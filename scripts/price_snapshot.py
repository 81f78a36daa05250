"""Regenerate `monitor/data/price_snapshot.json` from downloaded catalog-derived source files.

Why a script: the bundled snapshot is what gpucost prices with when the Cloud Billing Catalog API is
not used or not reachable, so it must be made of real per-SKU prices and be refreshable, never of
ratios. Every price in the output comes from one input line; a price no input has is left out.

    .venv/bin/python scripts/price_snapshot.py \\
        --vms scripts/price_sources/skypilot_gcp_vms_extract.csv \\
        --sku-prices scripts/price_sources/sku_prices.csv \\
        --exclusions scripts/price_sources/exclusions.csv \\
        --sources scripts/price_sources/sources.json \\
        --machines scripts/price_sources/cyclenerd_machines.csv \\
        [--pricing-yml /path/to/Cyclenerd/pricing.yml] \\
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
- `--machines`: whole-machine prices of the accelerator-optimized machine types (A2, A3, G2), one
  line per (machine type, region), the fields of Cyclenerd/google-cloud-pricing-cost-calculator's
  `pricing.yml` (`compute.instance.<type>.cost.<region>`) kept verbatim. With `--pricing-yml PATH`
  the lines are first (re)extracted from that file into `--machines` (`extract_machines`), for the
  regions of `--regions`. Cyclenerd's builder (`build/pricing.pl`, run as `perl pricing.pl
  -details=0` by `.github/workflows/build-pricing.yml`) sums the catalog SKU prices of a machine's
  vCPUs, RAM, GPUs and bundled Local SSD per usage type: `hour` (on demand) and `hour_spot` are
  per hour; commitments exist only per month, `month_1y = (sum of 1-year SKU prices) x 730 + Local
  SSD 1-year month` (its `-hours` option, default 730 "same as Google Cloud Pricing Calculator"), so
  `month_1y / 730` is the 1-year price per hour: a unit conversion of one figure, not a ratio of
  two prices. When no commitment SKU exists the builder writes `month_1y = month` and `month_3y =
  month_1y` as placeholders (and leaves A2 Ultra's commitments out, "connect with your sales
  team"); such placeholders are dropped here, so those prices stay unknown.
- `--sources`: JSON list naming each source (id, repository, path, commit, date, supplies); the
  first is the `--vms` source (`default_source`), SKU lines name theirs (`origins`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.gpu_models import PriceKind, normalize_gpu_model, parse_sku_description

__all__ = [
    "MACHINE_FAMILIES",
    "a2_rates",
    "build_snapshot",
    "extract_machines",
    "gpu_prices",
    "machine_prices",
    "main",
    "read_instance_costs",
    "sku_line_prices",
]

Table = dict[tuple[str, str, str], Decimal]  # (item, region, kind) -> USD
_USAGE = {"OnDemand": "on_demand", "Preemptible": "spot", "Commit1Yr": "commit_1y", "Commit3Yr": "commit_3y"}
_MICRO = Decimal("0.000001")
_NANO = Decimal("0.000000001")  # google.type.Money precision
#: Cyclenerd `build/pricing.pl` `-hours` default: "Hours per month [DEFAULT: 730, same as Google
#: Cloud Pricing Calculator]"; its `month_1y` / `month_3y` are hourly SKU sums times this.
HOURS_PER_MONTH = Decimal(730)
#: Machine-type prefixes extracted from `pricing.yml`: the accelerator-optimized types whose price
#: includes their GPUs (A2 highgpu/megagpu/ultragpu, A3 highgpu/megagpu/ultragpu..., G2 standard).
MACHINE_FAMILIES = ("a2-", "a3-", "g2-standard-")
MACHINE_FIELDS = ("hour", "hour_spot", "month", "month_1y", "month_3y")


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


def read_instance_costs(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`compute.instance` of a Cyclenerd `pricing.yml`: {type: {attr: text, "cost": {region:
    {field: text}}}}, numbers kept as written. A reader of that file's plain block layout (two-space
    indentation, `key: value` scalars), so the script needs no YAML library."""
    out: dict[str, dict[str, Any]] = {}
    stack: list[tuple[int, str]] = []
    for raw in lines:
        text = raw.rstrip("\n")
        body = text.lstrip(" ")
        if not body or body.startswith(("#", "---")):
            continue
        indent = len(text) - len(body)
        key, sep, value = body.partition(":")
        if not sep:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key.strip()]
        stack.append((indent, key.strip()))
        value = value.strip()
        if path[:2] != ["compute", "instance"] or not value:
            continue
        if len(path) == 4:
            out.setdefault(path[2], {})[path[3]] = value
        elif len(path) == 6 and path[3] == "cost":
            out.setdefault(path[2], {}).setdefault("cost", {}).setdefault(path[4], {})[path[5]] = value
    return out


def extract_machines(
    instances: Mapping[str, Mapping[str, Any]], regions: frozenset[str] | None
) -> list[dict[str, str]]:
    """CSV lines for `--machines`: each `MACHINE_FAMILIES` type x region, its accelerator (the
    type's GPU attribute, e.g. `h100-80gb: 8`) and the `MACHINE_FIELDS` verbatim."""
    rows = []
    for machine in sorted(instances):
        if not machine.startswith(MACHINE_FAMILIES):
            continue
        attrs = instances[machine]
        gpus = [(k, v) for k, v in attrs.items() if k != "cost" and normalize_gpu_model(k) is not None]
        if len(gpus) != 1:
            raise ValueError(f"pricing.yml: {machine} names {len(gpus)} GPU kinds, expected one")
        for region in sorted(attrs.get("cost", {})):
            if regions is None or region in regions:
                cost = attrs["cost"][region]
                rows.append(
                    {
                        "machine_type": machine,
                        "accelerator": gpus[0][0],
                        "accelerator_count": gpus[0][1],
                        "region": region,
                        **{f: cost.get(f, "") for f in MACHINE_FIELDS},
                    }
                )
    return rows


def machine_prices(rows: Iterable[Mapping[str, str]]) -> Table:
    """Per-hour machine prices per usage type from `--machines` lines (see the module docstring:
    commitments are `month_* / HOURS_PER_MONTH`, placeholders dropped)."""
    out: Table = {}
    for row in rows:
        key = (row["machine_type"], row["region"])
        month, m1, m3 = (_dec(row.get(f)) for f in ("month", "month_1y", "month_3y"))
        figures = {
            "on_demand": _dec(row.get("hour")),
            "spot": _dec(row.get("hour_spot")),
            "commit_1y": m1 / HOURS_PER_MONTH if m1 is not None and m1 != month else None,
            "commit_3y": m3 / HOURS_PER_MONTH if m3 is not None and m3 not in (month, m1) else None,
        }
        for kind, price in figures.items():
            if price is not None and price > 0:
                out[(*key, kind)] = (
                    price.quantize(_NANO) if kind.startswith("commit") else price
                ).normalize()
    return out


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
    machines: Sequence[Mapping[str, str]] = (),
    machine_source: str = "",
) -> dict[str, Any]:
    """The snapshot document. `regions` keeps only those regions (other rows of the inputs are the
    evidence behind an exclusion, not prices the snapshot needs). `machines` (`--machines` lines)
    give the `machine` table, every price of it attributed to `machine_source` in `origins`."""
    excluded = {(e["accelerator"], e["region"], e["kind"]) for e in exclusions}
    gpu = gpu_prices(vms, excluded)
    reviewed, origin = sku_line_prices(sku_lines)
    gpu.update(reviewed)
    cores, ram = a2_rates(vms)
    machine = machine_prices(machines)
    if regions is not None:
        gpu, cores, ram, machine = (
            {k: v for k, v in t.items() if k[1] in regions} for t in (gpu, cores, ram, machine)
        )
    origins: dict[str, Any] = {}
    for (item, region, kind), source_id in sorted(origin.items()):
        if (item, region, kind) in gpu:
            origins.setdefault("gpu", {}).setdefault(item, {}).setdefault(region, {})[kind] = source_id
    if machine and not machine_source:
        raise ValueError("machine prices need their source id (sources.json entry with their file)")
    for item, region, kind in sorted(machine):
        origins.setdefault("machine", {}).setdefault(item, {}).setdefault(region, {})[kind] = machine_source
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
            "lines, whole-machine prices of Cyclenerd's pricing.yml, whose per-month commitment "
            "figures are divided by its 730 hours per month); none is a ratio of another. A price no source gives is absent (unknown), not "
            'estimated. Spot prices change up to once a day: use pricing.source = "catalog" for '
            "current prices."
        ),
        "generated_by": (
            "scripts/price_snapshot.py --vms scripts/price_sources/skypilot_gcp_vms_extract.csv "
            "--sku-prices scripts/price_sources/sku_prices.csv --exclusions "
            "scripts/price_sources/exclusions.csv --sources scripts/price_sources/sources.json "
            + ("--machines scripts/price_sources/cyclenerd_machines.csv " if machines else "")
            + f"--as-of {as_of}"
            + (f" --regions {','.join(sorted(regions))}" if regions else "")
        ),
        "sources": [{k: v for k, v in s.items() if k != "file"} for s in sources],
        "default_source": sources[0]["id"],
        "origins": origins,
        "excluded": [dict(e) for e in exclusions],
        "gpu": _nest(gpu),
        "cpu_core": _nest(cores),
        "ram_gib": _nest(ram),
        "egress_gib": {},
        "machine": _nest(machine),
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
    ap.add_argument("--machines", help="whole-machine price lines (CSV, see --pricing-yml)")
    ap.add_argument("--pricing-yml", help="Cyclenerd pricing.yml: (re)write --machines from it first")
    ap.add_argument("--out", help="output path (default: stdout)")
    args = ap.parse_args(argv)
    regions = frozenset(args.regions.split(",")) if args.regions else None
    sources = json.loads(Path(args.sources).read_text(encoding="utf-8"))
    if args.pricing_yml:
        if not args.machines:
            ap.error("--pricing-yml needs --machines (where the extracted lines go)")
        with open(args.pricing_yml, encoding="utf-8") as f:
            rows = extract_machines(read_instance_costs(f), regions)
        with open(args.machines, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["machine_type"])
            writer.writeheader()
            writer.writerows(rows)
    machine_source = ""
    if args.machines:
        name = Path(args.machines).name
        ids = [s["id"] for s in sources if s.get("file") == name]
        if len(ids) != 1:
            ap.error(f'--sources must have one entry with "file": "{name}" (the --machines source)')
        machine_source = ids[0]
    doc = build_snapshot(
        _csv(args.vms),
        _csv(args.sku_prices),
        _csv(args.exclusions),
        sources,
        args.as_of,
        regions,
        _csv(args.machines) if args.machines else [],
        machine_source,
    )
    text = json.dumps(doc, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
