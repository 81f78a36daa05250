"""Prices: a `PriceBook` from the Cloud Billing Catalog API, cached, or from the bundled snapshot.

Savings (Spot, commitments) and live cost estimates for hours the billing export has not caught up
with need list prices per GPU model and region. The Catalog API has them (Compute Engine service
`6F81-5844-456A`, one SKU per model x multi-region x usage type); it is slow (tens of thousands of
SKUs, many pages), so the parsed book is kept in the state store and reused for
`pricing.cache_hours`. When the catalog cannot be reached the last good book is kept; with none,
the bundled snapshot (`monitor/data/price_snapshot.json`, approximate list prices) stands in and
the book says so (`source == "snapshot"`, `approximate`).

Lookups fall back region -> same multi-region (americas/emea/apac) -> any region; anything but an
exact regional price is flagged `approximate` in the `PriceQuote`::

    book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "spot")  # Decimal("3.428793") or None
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from importlib import resources
from typing import Any, Protocol, TypeVar

from monitor.config import GoogleConfig, PricingConfig
from monitor.errors import PermanentSourceError, SourceError
from monitor.gpu_models import (
    PriceKind,
    parse_sku_description,
    region_of,
)
from monitor.pricebook import TABLES, EgressKind, PriceBook, PriceQuote, PriceTable
from monitor.sources._google import call_google, grpc_target
from monitor.state.store import StateStore
from monitor.timeutil import to_iso

__all__ = [
    "COMPUTE_ENGINE_SERVICE",
    "CatalogPriceSource",
    "EgressKind",
    "PriceBook",
    "PriceKind",
    "PriceQuote",
    "PriceSource",
    "SnapshotPriceSource",
    "book_from_skus",
    "call_google",
    "grpc_target",
    "money_to_decimal",
    "price_source_from_config",
]

log = logging.getLogger(__name__)

COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
_MIGRATIONS = (
    "CREATE TABLE pricing_book (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " fetched_at TEXT NOT NULL, book TEXT NOT NULL)",
)
T = TypeVar("T")


_USAGE_TYPES = {
    "OnDemand": PriceKind.ON_DEMAND,
    "Preemptible": PriceKind.SPOT,
    "Commit1Yr": PriceKind.COMMIT_1Y,
    "Commit3Yr": PriceKind.COMMIT_3Y,
}
_UNITS = {"gpu": "h", "cpu_core": "h", "ram_gib": "GiBy.h", "egress_gib": "GiBy"}


def money_to_decimal(money: Any) -> Decimal:
    """`google.type.Money` {units, nanos} -> exact Decimal (nanos carry the units' sign)."""
    return Decimal(int(money.units)) + Decimal(int(money.nanos)).scaleb(-9)


def _first_paid_rate(sku: Any) -> tuple[Decimal, str] | None:
    """Tier logic: the first tier with a non-zero price. GPU/CPU/RAM SKUs have one tier; egress
    SKUs may start with a free tier, and the first paid tier is the rate a fleet actually pays."""
    if not sku.pricing_info:
        return None
    expr = sku.pricing_info[0].pricing_expression
    for tier in sorted(expr.tiered_rates, key=lambda t: t.start_usage_amount):
        price = money_to_decimal(tier.unit_price)
        if price > 0:
            return price, expr.usage_unit
    return None


def _classify(sku: Any) -> tuple[str, str, PriceKind] | None:
    """(table, item, kind) for the SKUs a PriceBook holds; None for everything else."""
    kind = _USAGE_TYPES.get(sku.category.usage_type)
    if kind is None:
        return None
    desc = " ".join(sku.description.split()).lower()
    if sku.category.resource_family == "Network" and kind is PriceKind.ON_DEMAND:
        if desc in ("network inter zone data transfer out", "network inter zone egress"):
            return "egress_gib", EgressKind.INTER_ZONE.value, kind
        internet = desc.startswith(
            ("network internet data transfer out from", "network internet egress from")
        )
        if internet and desc.endswith((" to americas", " to north america")):
            return "egress_gib", EgressKind.INTERNET.value, kind
        return None
    if sku.category.resource_family != "Compute":
        return None
    parsed = parse_sku_description(sku.description)
    if parsed.variant is not None:
        return None
    if parsed.resource == "gpu" and parsed.model is not None:
        return "gpu", parsed.model.value, kind
    if parsed.resource in ("cpu", "ram") and parsed.family:
        return ("cpu_core" if parsed.resource == "cpu" else "ram_gib"), parsed.family, kind
    return None


def book_from_skus(skus: Iterable[Any], fetched_at: datetime) -> PriceBook:
    """Parse Catalog `Sku` messages into a book; one entry per `service_regions` region.

    SKUs with an unexpected `usage_unit` are skipped (a unit change must not become a 1000x price);
    on duplicates the first SKU wins (the catalog lists the plain SKU before look-alikes we did
    not recognise as variants), and the count is logged.
    """
    tables: dict[str, PriceTable] = {name: {} for name in TABLES}
    seen = kept = dupes = bad_unit = 0
    for sku in skus:
        seen += 1
        target = _classify(sku)
        rate = _first_paid_rate(sku) if target else None
        if target is None or rate is None:
            continue
        name, item, kind = target
        price, unit = rate
        if unit != _UNITS[name]:
            bad_unit += 1
            continue
        for region in sku.service_regions:
            key = (item, region_of(region) or region, kind)
            if key in tables[name]:
                dupes += 1
            else:
                tables[name][key] = price
                kept += 1
    log.info(
        "price catalog parsed",
        extra={"skus": seen, "prices": kept, "duplicates": dupes, "unexpected_unit": bad_unit},
    )
    note = f"Cloud Billing Catalog API, {seen} Compute Engine SKUs, list prices in USD"
    return PriceBook(as_of=fetched_at, source="catalog", note=note, **tables)


# --- Sources -------------------------------------------------------------------------------


class PriceSource(Protocol):
    def price_book(self, now: datetime) -> PriceBook:
        """A usable book; never raises for a remote failure (falls back and flags instead)."""
        ...

    def refresh(self, now: datetime) -> PriceBook:
        """Fetch now; raises `SourceError` on failure and leaves the cached book untouched."""
        ...


class SnapshotPriceSource:
    """The bundled approximate list prices (the embedded default; no network)."""

    def __init__(self) -> None:
        self._book: PriceBook | None = None

    def price_book(self, now: datetime | None = None) -> PriceBook:
        if self._book is None:
            ref = resources.files("monitor").joinpath("data/price_snapshot.json")
            self._book = PriceBook.from_json(ref.read_text(encoding="utf-8"), origin=str(ref))
        return self._book

    def refresh(self, now: datetime | None = None) -> PriceBook:
        return self.price_book(now)


def _catalog_client(cfg: PricingConfig, google: GoogleConfig) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import billing_v1

    if cfg.api_endpoint and cfg.insecure:
        import grpc
        from google.cloud.billing_v1.services.cloud_catalog.transports import CloudCatalogGrpcTransport

        channel = grpc.insecure_channel(grpc_target(cfg.api_endpoint))
        return billing_v1.CloudCatalogClient(transport=CloudCatalogGrpcTransport(channel=channel))
    creds = AnonymousCredentials() if google.credentials == "anonymous" else None
    opts = ClientOptions(api_endpoint=cfg.api_endpoint) if cfg.api_endpoint else None
    return billing_v1.CloudCatalogClient(credentials=creds, client_options=opts)


class CatalogPriceSource:
    """Catalog API prices, cached in the state store (component "pricing") for `cache_hours`.

    `price_book(now)` serves the cached book while fresh, refreshes when stale, and on failure keeps
    the last good book (logged) or, with none, the bundled snapshot flagged as a fallback. After a
    failure it waits `failure_backoff` before calling the API again, so a scheduler calling it every
    few minutes does not hammer a broken endpoint.
    """

    def __init__(
        self,
        cfg: PricingConfig,
        google: GoogleConfig,
        client: Any = None,
        *,
        store: StateStore | None = None,
        retry_deadline_s: float = 60.0,
        failure_backoff: timedelta = timedelta(minutes=15),
        page_size: int = 5000,
    ):
        self.cfg, self.google = cfg, google
        self._client = client
        self._store = store
        self._deadline = retry_deadline_s
        self._backoff = failure_backoff
        self._page_size = page_size
        self._lock = threading.Lock()
        self._book: PriceBook | None = None
        self._not_before: datetime | None = None
        self._snapshot = SnapshotPriceSource()
        self._fallback: PriceBook | None = None
        if store is not None:
            store.migrate("pricing", _MIGRATIONS)
            self._book = self._load_cached()

    def cached(self) -> PriceBook | None:
        return self._book

    def price_book(self, now: datetime) -> PriceBook:
        with self._lock:
            book = self._book
            if book is not None and now - book.as_of < timedelta(hours=self.cfg.cache_hours):
                return book
            if self._not_before is None or now >= self._not_before:
                try:
                    return self._refresh_locked(now)
                except SourceError as e:
                    self._not_before = now + self._backoff
                    log.warning("price catalog refresh failed; keeping %s: %s", _kept(book), e)
            if book is not None:
                return book
            if self._fallback is None:
                snap = self._snapshot.price_book(now)
                self._fallback = replace(snap, note=f"{snap.note} (catalog unavailable; snapshot fallback)")
            return self._fallback

    def refresh(self, now: datetime) -> PriceBook:
        with self._lock:
            return self._refresh_locked(now)

    def _refresh_locked(self, now: datetime) -> PriceBook:
        book = call_google("price catalog", lambda: book_from_skus(self._list_skus(), now))
        if not book.gpu:
            raise PermanentSourceError(
                f"price catalog: {COMPUTE_ENGINE_SERVICE} returned no GPU prices; "
                'check pricing.api_endpoint or set pricing.source = "snapshot"'
            )
        self._book, self._not_before = book, None
        if self._store is not None:
            with self._store.transaction() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO pricing_book (id, fetched_at, book) VALUES (1, ?, ?)",
                    (to_iso(now), book.to_json()),
                )
        return book

    def _list_skus(self) -> Iterable[Any]:
        """Every Compute Engine SKU, pages fetched lazily by the pager while the book is parsed
        (inside `call_google`, so a failure on page 7 is a SourceError and nothing is cached)."""
        from google.api_core import retry as retries
        from google.cloud import billing_v1

        if self._client is None:
            self._client = _catalog_client(self.cfg, self.google)
        request = billing_v1.ListSkusRequest(
            parent=COMPUTE_ENGINE_SERVICE, currency_code="USD", page_size=self._page_size
        )
        retry = retries.Retry(
            initial=min(1.0, self._deadline / 4), maximum=10.0, multiplier=2.0, timeout=self._deadline
        )
        return self._client.list_skus(request=request, retry=retry, timeout=max(self._deadline, 1.0))

    def _load_cached(self) -> PriceBook | None:
        assert self._store is not None
        with self._store.transaction() as conn:
            row = conn.execute("SELECT fetched_at, book FROM pricing_book WHERE id = 1").fetchone()
        if row is None:
            return None
        try:
            return PriceBook.from_json(row["book"], origin="state store pricing_book")
        except ValueError as e:
            log.warning("ignoring unreadable cached price book: %s", e)
            return None


def _kept(book: PriceBook | None) -> str:
    return "the snapshot" if book is None else f"the book fetched at {to_iso(book.as_of)}"


def price_source_from_config(
    cfg: PricingConfig, google: GoogleConfig, store: StateStore | None
) -> PriceSource:
    """`[pricing] source = "snapshot"` (default, no network) or `"catalog"` (cached in `store`)."""
    if cfg.source == "catalog":
        return CatalogPriceSource(cfg, google, store=store)
    return SnapshotPriceSource()
