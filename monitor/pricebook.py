"""The `PriceBook`: list prices per GPU model, machine family, machine type and traffic kind, per region.

A value object with lookups, built by `monitor.sources.pricing` from the Cloud Billing Catalog API
or the bundled snapshot. A price is the one its source gives for that exact region (the Catalog API
lists each SKU's `serviceRegions`; the snapshot was generated per region from catalog-derived data),
or it is unknown (None): no fallback to another region, no proxy model, no ratio. Every price says
where it came from (`provenance`)::

    book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "spot")  # Decimal("5.8632") or None
    book.machine_hourly("a3-highgpu-8g", "us-central1", "commit_1y")  # Decimal("61.383672143")
    book.provenance  # "bundled snapshot (2026-12-02, sources: skypilot-org/skypilot-catalog ...)"
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any

from monitor.gpu_models import GpuModel, PriceKind, normalize_gpu_model, region_of
from monitor.timeutil import parse_timestamp, to_iso

__all__ = ["BOOK_FORMAT", "TABLES", "EgressKind", "PriceBook", "PriceQuote", "PriceTable"]

BOOK_FORMAT = 1


class EgressKind(StrEnum):
    INTER_ZONE = "inter_zone"
    INTERNET = "internet"


PriceTable = dict[tuple[str, str, PriceKind], Decimal]  # (item, region, kind) -> USD per unit
TABLES = ("gpu", "cpu_core", "ram_gib", "egress_gib", "machine")


@dataclass(frozen=True)
class PriceQuote:
    """A looked-up price, the region it is for, and where it came from (the book's `provenance`,
    e.g. "Cloud Billing Catalog API (fetched 2026-11-02T08:00:00Z)")."""

    price: Decimal
    region: str
    provenance: str


@dataclass(frozen=True)
class PriceBook:
    """List prices in USD: per GPU-hour, per vCPU-hour and per GiB-hour of RAM (by machine family),
    per GiB of egress, and per hour of a whole machine type (`machine`: an accelerator-optimized
    type's vCPUs, RAM, GPUs and bundled Local SSD together, the unit commitments are sold in; only
    the snapshot has them, from Cyclenerd's catalog-derived pricing.yml). Treat as immutable. `approximate` marks a whole book as indicative (the
    snapshot); `note` says where it came from and, for a fallback, why. A snapshot also names its
    public `sources` (id -> "owner/repo path@commit") and, per price, which one gave it (`origins`,
    keyed like the tables with the table name first; a price without an entry came from
    `default_source`). A Catalog API book has none of these: every price is the catalog's."""

    as_of: datetime
    source: str  # "catalog" | "snapshot"
    gpu: PriceTable = field(default_factory=dict)
    cpu_core: PriceTable = field(default_factory=dict)
    ram_gib: PriceTable = field(default_factory=dict)
    egress_gib: PriceTable = field(default_factory=dict)
    machine: PriceTable = field(default_factory=dict)
    approximate: bool = False
    note: str = ""
    currency: str = "USD"
    sources: dict[str, str] = field(default_factory=dict)
    origins: dict[tuple[str, str, str, PriceKind], str] = field(default_factory=dict)
    default_source: str = ""

    @property
    def provenance(self) -> str:
        """Where the prices of this book came from, for findings and logs."""
        if self.source == "catalog":
            return f"Cloud Billing Catalog API (fetched {to_iso(self.as_of)})"
        named = f", sources: {'; '.join(self.sources.values())}" if self.sources else ""
        return f"bundled snapshot ({self.as_of:%Y-%m-%d}{named})"

    def _provenance_of(self, key: tuple[str, str, str, PriceKind]) -> str:
        """One price's provenance: the snapshot source that gave it, when the book knows it."""
        origin = self.origins.get(key, self.default_source)
        if self.source == "catalog" or origin not in self.sources:
            return self.provenance
        return f"bundled snapshot ({self.as_of:%Y-%m-%d}, {self.sources[origin]})"

    def gpu_quote(
        self, gpu_model: GpuModel | str, region: str | None, kind: PriceKind | str
    ) -> PriceQuote | None:
        """Price per GPU-hour in that region, with its provenance. `gpu_model` may be any spelling
        `normalize_gpu_model` knows ("NVIDIA H100 80GB HBM3"); an unknown model, region or price
        gives None; an unknown `kind` is a ValueError (a programming error, not missing data)."""
        k = PriceKind(kind)
        m = gpu_model if isinstance(gpu_model, GpuModel) else normalize_gpu_model(gpu_model)
        if m is None:
            return None
        return self._lookup("gpu", m.value, k, region)

    def gpu_hourly(
        self, gpu_model: GpuModel | str, region: str | None, pricing_model: PriceKind | str
    ) -> Decimal | None:
        """USD per GPU-hour in that region, or None when the price is not known."""
        q = self.gpu_quote(gpu_model, region, pricing_model)
        return None if q is None else q.price

    def gpu_price_source(
        self, gpu_model: GpuModel | str, region: str | None, pricing_model: PriceKind | str
    ) -> str | None:
        """Where `gpu_hourly(...)` of the same arguments came from; None when it is None."""
        q = self.gpu_quote(gpu_model, region, pricing_model)
        return None if q is None else q.provenance

    def cpu_core_quote(self, family: str, region: str | None, kind: PriceKind | str) -> PriceQuote | None:
        return self._lookup("cpu_core", family.upper(), PriceKind(kind), region)

    def ram_gib_quote(self, family: str, region: str | None, kind: PriceKind | str) -> PriceQuote | None:
        return self._lookup("ram_gib", family.upper(), PriceKind(kind), region)

    def cpu_core_hourly(self, family: str, region: str | None, kind: PriceKind | str) -> Decimal | None:
        q = self.cpu_core_quote(family, region, kind)
        return None if q is None else q.price

    def ram_gib_hourly(self, family: str, region: str | None, kind: PriceKind | str) -> Decimal | None:
        q = self.ram_gib_quote(family, region, kind)
        return None if q is None else q.price

    def machine_quote(
        self, machine_type: str, region: str | None, kind: PriceKind | str
    ) -> PriceQuote | None:
        """Price per hour of a whole VM of `machine_type` ("a3-highgpu-8g") in that region, with its
        provenance; None when the book has no such price (a Catalog API book never has: the catalog
        sells vCPUs, RAM and GPUs as separate SKUs)."""
        return self._lookup("machine", machine_type.strip().lower(), PriceKind(kind), region)

    def machine_hourly(self, machine_type: str, region: str | None, kind: PriceKind | str) -> Decimal | None:
        """USD per hour of a whole `machine_type` VM (GPUs included) in that region, or None."""
        q = self.machine_quote(machine_type, region, kind)
        return None if q is None else q.price

    def machine_price_source(
        self, machine_type: str, region: str | None, kind: PriceKind | str
    ) -> str | None:
        """Where `machine_hourly(...)` of the same arguments came from; None when it is None."""
        q = self.machine_quote(machine_type, region, kind)
        return None if q is None else q.provenance

    def egress_quote(self, kind: EgressKind | str, region: str | None) -> PriceQuote | None:
        return self._lookup("egress_gib", EgressKind(kind).value, PriceKind.ON_DEMAND, region)

    def _lookup(self, table: str, item: str, kind: PriceKind, region: str | None) -> PriceQuote | None:
        """The exact region's price (a zone is read as its region), or None: never another
        region's, because real prices differ per region in no fixed proportion."""
        want = region_of(region)
        price = self._index.get((table, item, kind), {}).get(want) if want else None
        if price is None or want is None:
            return None
        return PriceQuote(price, want, self._provenance_of((table, item, want, kind)))

    def egress_per_gib(self, kind: EgressKind | str, region: str | None = None) -> Decimal | None:
        q = self.egress_quote(kind, region)
        return None if q is None else q.price

    @cached_property
    def _index(self) -> dict[tuple[str, str, PriceKind], dict[str, Decimal]]:
        """(table, item, kind) -> {region: price}, built once so lookups in hot loops are cheap."""
        index: dict[tuple[str, str, PriceKind], dict[str, Decimal]] = {}
        for name in TABLES:
            for (item, region, kind), price in getattr(self, name).items():
                index.setdefault((name, item, kind), {})[region] = price
        return index

    def gpu_models(self) -> set[GpuModel]:
        return {GpuModel(item) for item, _, _ in self.gpu}

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "format": BOOK_FORMAT,
            "as_of": to_iso(self.as_of),
            "source": self.source,
            "currency": self.currency,
            "approximate": self.approximate,
            "note": self.note,
        }
        if self.sources:
            doc["sources"] = [{"id": i, "name": n} for i, n in self.sources.items()]
            doc["default_source"] = self.default_source
            origins: dict[str, Any] = {}
            for (table, item, region, kind), origin in sorted(self.origins.items()):
                origins.setdefault(table, {}).setdefault(item, {}).setdefault(region, {})[kind.value] = origin
            doc["origins"] = origins
        for name in TABLES:
            nested: dict[str, dict[str, dict[str, str]]] = {}
            for (item, region, kind), price in sorted(getattr(self, name).items()):
                nested.setdefault(item, {}).setdefault(region, {})[kind.value] = str(price)
            doc[name] = nested
        return json.dumps(doc, indent=1, sort_keys=False)

    @classmethod
    def from_json(cls, text: str, *, origin: str = "price book") -> PriceBook:
        """Inverse of `to_json`; the snapshot file uses the same format. Prices are strings."""
        try:
            doc = json.loads(text)
            if doc.get("format") != BOOK_FORMAT:
                raise ValueError(f"unsupported format {doc.get('format')!r} (expected {BOOK_FORMAT})")
            tables = {name: _parse_table(doc.get(name, {})) for name in TABLES}
            return cls(
                as_of=parse_timestamp(doc["as_of"]),
                source=doc["source"],
                currency=doc.get("currency", "USD"),
                approximate=bool(doc.get("approximate", False)),
                note=doc.get("note", ""),
                sources={str(s["id"]): _source_name(s) for s in doc.get("sources", ())},
                origins=_parse_origins(doc.get("origins", {})),
                default_source=doc.get("default_source", ""),
                **tables,
            )
        except (ValueError, KeyError, TypeError, ArithmeticError) as e:
            raise ValueError(f"{origin}: not a valid price book ({e})") from None


def _parse_table(nested: Mapping[str, Mapping[str, Mapping[str, str]]]) -> PriceTable:
    table: PriceTable = {}
    for item, regions in nested.items():
        for region, kinds in regions.items():
            for kind, price in kinds.items():
                table[(item, region, PriceKind(kind))] = Decimal(price)
    return table


def _parse_origins(nested: Mapping[str, Any]) -> dict[tuple[str, str, str, PriceKind], str]:
    return {
        (table, item, region, PriceKind(kind)): str(origin)
        for table, items in nested.items()
        for item, regions in items.items()
        for region, kinds in regions.items()
        for kind, origin in kinds.items()
    }


def _source_name(src: Mapping[str, Any]) -> str:
    """A snapshot source as one line: "owner/repo path@commit8 of YYYY-MM-DD" (the generator's
    entry; the date when the entry's `date` starts with one, because a price's age matters to
    whoever acts on it), or the `name` a serialised book already carries."""
    if "name" in src:
        return str(src["name"])
    commit = str(src.get("commit", ""))
    at = f"@{commit[:8]}" if commit and commit != "unknown" else ""
    date = str(src.get("date", ""))[:10]
    dated = f" of {date}" if re.fullmatch(r"\d{4}-\d\d-\d\d", date) else ""
    return f"{src.get('repository', '?')} {src.get('path', '')}{at}{dated}".strip()
