"""The `PriceBook`: list prices per GPU model, machine family and traffic kind, per region.

A value object with lookups, built by `monitor.sources.pricing` from the Cloud Billing Catalog API
or the bundled snapshot. Lookups fall back region -> same multi-region (americas/emea/apac) -> any
region; anything but an exact regional price is flagged `approximate` in the `PriceQuote`::

    book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "spot")  # Decimal("3.428793") or None
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any

from monitor.gpu_models import (
    PRICE_PROXIES,
    GpuModel,
    PriceKind,
    geo_of_region,
    normalize_gpu_model,
    region_of,
)
from monitor.timeutil import parse_timestamp, to_iso

__all__ = ["BOOK_FORMAT", "TABLES", "EgressKind", "PriceBook", "PriceQuote", "PriceTable"]

BOOK_FORMAT = 1


class EgressKind(StrEnum):
    INTER_ZONE = "inter_zone"
    INTERNET = "internet"


PriceTable = dict[tuple[str, str, PriceKind], Decimal]  # (item, region, kind) -> USD per unit
TABLES = ("gpu", "cpu_core", "ram_gib", "egress_gib")


@dataclass(frozen=True)
class PriceQuote:
    """A looked-up price and how it was found: `basis` is "region", "multi-region",
    "any-region" or "proxy:<model>"; anything but "region" is `approximate`."""

    price: Decimal
    region: str
    basis: str
    approximate: bool


@dataclass(frozen=True)
class PriceBook:
    """List prices in USD: per GPU-hour, per vCPU-hour and per GiB-hour of RAM (by machine family),
    per GiB of egress. Treat as immutable. `approximate` marks a whole book as indicative (the
    snapshot); `note` says where it came from and, for a fallback, why."""

    as_of: datetime
    source: str  # "catalog" | "snapshot"
    gpu: PriceTable = field(default_factory=dict)
    cpu_core: PriceTable = field(default_factory=dict)
    ram_gib: PriceTable = field(default_factory=dict)
    egress_gib: PriceTable = field(default_factory=dict)
    approximate: bool = False
    note: str = ""
    currency: str = "USD"

    def gpu_quote(
        self, gpu_model: GpuModel | str, region: str | None, kind: PriceKind | str
    ) -> PriceQuote | None:
        """Price per GPU-hour and how it was found. `gpu_model` may be any spelling
        `normalize_gpu_model` knows ("NVIDIA H100 80GB HBM3"); an unknown model gives None, an
        unknown `kind` is a ValueError (a programming error, not missing data)."""
        k = PriceKind(kind)
        m = gpu_model if isinstance(gpu_model, GpuModel) else normalize_gpu_model(gpu_model)
        if m is None:
            return None
        quote = _lookup(self._index.get(("gpu", m.value, k)), region)
        if quote is None and m in PRICE_PROXIES:
            proxy = _lookup(self._index.get(("gpu", PRICE_PROXIES[m].value, k)), region)
            if proxy is not None:
                return replace(proxy, basis=f"proxy:{PRICE_PROXIES[m].value}", approximate=True)
        return quote

    def gpu_hourly(
        self, gpu_model: GpuModel | str, region: str | None, pricing_model: PriceKind | str
    ) -> Decimal | None:
        """USD per GPU-hour, with the documented fallback (see `gpu_quote` for the flag)."""
        q = self.gpu_quote(gpu_model, region, pricing_model)
        return None if q is None else q.price

    def cpu_core_quote(self, family: str, region: str | None, kind: PriceKind | str) -> PriceQuote | None:
        return _lookup(self._index.get(("cpu_core", family.upper(), PriceKind(kind))), region)

    def ram_gib_quote(self, family: str, region: str | None, kind: PriceKind | str) -> PriceQuote | None:
        return _lookup(self._index.get(("ram_gib", family.upper(), PriceKind(kind))), region)

    def cpu_core_hourly(self, family: str, region: str | None, kind: PriceKind | str) -> Decimal | None:
        q = self.cpu_core_quote(family, region, kind)
        return None if q is None else q.price

    def ram_gib_hourly(self, family: str, region: str | None, kind: PriceKind | str) -> Decimal | None:
        q = self.ram_gib_quote(family, region, kind)
        return None if q is None else q.price

    def egress_quote(self, kind: EgressKind | str, region: str | None) -> PriceQuote | None:
        return _lookup(self._index.get(("egress_gib", EgressKind(kind).value, PriceKind.ON_DEMAND)), region)

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


def _lookup(prices: Mapping[str, Decimal] | None, region: str | None) -> PriceQuote | None:
    """Exact region, else the median-priced region of the same multi-region, else of all regions.

    The median (lower middle, by price then region name) keeps the fallback deterministic and
    representative rather than the cheapest or dearest outlier.
    """
    if not prices:
        return None
    want = region_of(region)
    if want in prices:
        return PriceQuote(prices[want], want, "region", False)
    geo = geo_of_region(want)
    same_geo = {r: p for r, p in prices.items() if geo is not None and geo_of_region(r) == geo}
    pool, basis = (same_geo, "multi-region") if same_geo else (prices, "any-region")
    ranked = sorted(pool.items(), key=lambda rp: (rp[1], rp[0]))
    r, p = ranked[(len(ranked) - 1) // 2]
    return PriceQuote(p, r, basis, True)


# --- Catalog SKUs -> PriceBook -------------------------------------------------------------
