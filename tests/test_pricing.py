"""Prices: the PriceBook lookups, the bundled snapshot, and the Catalog source through the real
`CloudCatalogClient` against a local gRPC server serving `google.cloud.billing.v1.CloudCatalog`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import grpc
import pytest

from monitor.config import GoogleConfig, PricingConfig
from monitor.errors import PermanentSourceError, RetryableSourceError
from monitor.gpu_models import COMMON_MODELS, GpuModel, PriceKind
from monitor.sources.pricing import (
    CatalogPriceSource,
    EgressKind,
    PriceBook,
    SnapshotPriceSource,
    price_source_from_config,
)
from monitor.state.store import SQLiteStore
from tests.fakes.catalog_server import FakeCatalog, sku

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
D = Decimal
AMERICAS = ("us-central1", "us-east4", "us-west1")

CATALOG = [
    sku("Nvidia H100 80GB GPU DWS Defined Duration running in Americas", "OnDemand", AMERICAS, (7, 0)),
    sku("Nvidia H100 80GB GPU running in Americas", "OnDemand", AMERICAS, (9, 796550569)),
    sku(
        "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas",
        "Preemptible",
        AMERICAS,
        (2, 253000000),
    ),
    sku(
        "Commitment v1: Nvidia H100 80GB GPU running in Americas for 1 Year",
        "Commit1Yr",
        AMERICAS,
        (6, 798808570),
    ),
    sku(
        "Commitment v1: Nvidia H100 80GB GPU running in Americas for 3 Years",
        "Commit3Yr",
        AMERICAS,
        (4, 308000000),
    ),
    sku("Reserved Nvidia H100 80GB GPU running in Americas", "OnDemand", AMERICAS, (0, 0)),
    sku("Nvidia Tesla A100 GPU running in Americas", "OnDemand", AMERICAS, (2, 933908000)),
    sku("Nvidia Tesla A100 GPU running in EMEA", "OnDemand", ("europe-west4",), (3, 227300000)),
    sku(
        "Spot Preemptible Nvidia Tesla A100 GPU running in Americas", "Preemptible", AMERICAS, (1, 170000000)
    ),
    sku("Nvidia Tesla A100 80GB GPU running in Americas", "OnDemand", ("us-central1",), (3, 928080000)),
    sku("Nvidia L4 GPU running in Americas", "OnDemand", AMERICAS, (0, 560040239)),
    sku(
        "Nvidia Tesla T4 GPU attached to Sole Tenancy VMs running in Americas",
        "OnDemand",
        AMERICAS,
        (0, 385000000),
    ),
    sku("Nvidia Tesla T4 GPU running in Americas", "OnDemand", AMERICAS, (0, 350000000)),
    sku("A3 Instance Core running in Americas", "OnDemand", AMERICAS, (0, 32220000), group="CPU"),
    sku(
        "A3 Instance Ram running in Americas", "OnDemand", AMERICAS, (0, 2817000), group="RAM", unit="GiBy.h"
    ),
    sku(
        "Spot Preemptible A2 Instance Core running in Americas",
        "Preemptible",
        AMERICAS,
        (0, 9483000),
        group="CPU",
    ),
    sku(
        "Commitment v1: G2 Ram in Americas for 1 Year",
        "Commit1Yr",
        AMERICAS,
        (0, 1844000),
        group="RAM",
        unit="GiBy.h",
    ),
    sku(
        "G2 Instance Ram running in Americas", "OnDemand", AMERICAS, (0, 2927000), group="RAM", unit="GiBy.mo"
    ),
    sku(
        "Network Inter Zone Data Transfer Out",
        "OnDemand",
        AMERICAS,
        (0, 10000000),
        family="Network",
        group="InterzoneEgress",
        unit="GiBy",
    ),
    sku(
        "Network Internet Data Transfer Out from Americas to Americas",
        "OnDemand",
        AMERICAS,
        family="Network",
        group="PremiumInternetEgress",
        unit="GiBy",
        tiers=[(0.0, 0, 0), (1.0, 0, 120000000), (1024.0, 0, 85000000)],
    ),
    sku(
        "Network Internet Data Transfer Out from Americas to EMEA",
        "OnDemand",
        AMERICAS,
        (0, 190000000),
        family="Network",
        group="PremiumInternetEgress",
        unit="GiBy",
    ),
    sku(
        "Balanced PD Capacity in Iowa",
        "OnDemand",
        ("us-central1",),
        (0, 100000000),
        family="Storage",
        group="SSD",
        unit="GiBy.mo",
    ),
]


@pytest.fixture
def catalog() -> Iterator[FakeCatalog]:
    with FakeCatalog(CATALOG, page_size=3) as fake:
        yield fake  # type: ignore[misc]


def _source(fake: FakeCatalog, store: SQLiteStore | None = None, **kw) -> CatalogPriceSource:
    cfg = PricingConfig(source="catalog", api_endpoint=fake.address, insecure=True, cache_hours=24)
    return CatalogPriceSource(
        cfg,
        GoogleConfig(credentials="anonymous"),
        store=store,
        retry_deadline_s=kw.pop("retry_deadline_s", 0.5),
        **kw,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "state.sqlite")
    yield s
    s.close()


# --- the catalog, through the real client ----------------------------------------------------


def test_catalog_pages_request_fields_and_exact_prices(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)

    pages = -(-len(CATALOG) // 3)
    assert catalog.tokens() == [""] + [f"page-{3 * i}" for i in range(1, pages)]
    first = catalog.requests[0]
    assert first.parent == "services/6F81-5844-456A"
    assert first.currency_code == "USD"
    assert first.page_size == 5000

    assert (book.source, book.as_of, book.approximate) == ("catalog", T0, False)
    H100 = GpuModel.H100_80GB
    assert book.gpu_hourly(H100, "us-central1", PriceKind.ON_DEMAND) == D("9.796550569")
    assert book.gpu_hourly(H100, "us-east4", "spot") == D("2.253")
    assert book.gpu_hourly(H100, "us-west1", "commit_1y") == D("6.79880857")
    assert book.gpu_hourly(H100, "us-central1", "commit_3y") == D("4.308")
    assert book.gpu_hourly(GpuModel.A100_40GB, "us-central1", "on_demand") == D("2.933908")
    assert book.gpu_hourly(GpuModel.A100_40GB, "europe-west4", "on_demand") == D("3.2273")
    assert book.gpu_hourly(GpuModel.A100_40GB, "us-central1", "spot") == D("1.17")
    assert book.gpu_hourly(GpuModel.A100_80GB, "us-central1", "on_demand") == D("3.92808")
    assert book.gpu_hourly(GpuModel.L4, "us-east4", "on_demand") == D("0.560040239")
    # the Sole Tenancy T4 SKU (a different price) is not mistaken for the plain rate
    assert book.gpu_hourly(GpuModel.T4, "us-central1", "on_demand") == D("0.35")
    assert book.cpu_core_hourly("A3", "us-central1", "on_demand") == D("0.03222")
    assert book.ram_gib_hourly("a3", "us-central1", "on_demand") == D("0.002817")
    assert book.cpu_core_hourly("A2", "us-central1", "spot") == D("0.009483")
    assert book.ram_gib_hourly("G2", "us-central1", "commit_1y") == D("0.001844")
    # a RAM SKU in an unexpected unit (per month) is skipped, not read as an hourly price
    assert book.ram_gib_hourly("G2", "us-central1", "on_demand") is None
    assert book.egress_per_gib(EgressKind.INTER_ZONE, "us-central1") == D("0.01")
    # first paid tier (the free first tier is skipped); the EMEA destination is not "internet"
    assert book.egress_per_gib("internet", "us-east4") == D("0.12")


def test_variants_do_not_shadow_the_plain_price(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)
    # the DWS SKU ($7) comes first in the catalog, the Reserved one ($0) later: neither may win
    assert {p for (m, _, k), p in book.gpu.items() if m == "H100 80GB" and k is PriceKind.ON_DEMAND} == {
        D("9.796550569")
    }


def test_cache_second_call_makes_no_rpc_and_survives_restart(
    catalog: FakeCatalog, store: SQLiteStore
) -> None:
    src = _source(catalog, store)
    book = src.price_book(T0)
    calls = len(catalog.requests)
    assert calls > 1 and book.source == "catalog"

    assert src.price_book(T0 + timedelta(hours=23)) is book
    assert len(catalog.requests) == calls

    again = _source(catalog, store).price_book(T0 + timedelta(hours=23, minutes=59))  # a restarted daemon
    assert len(catalog.requests) == calls
    assert again == book

    refreshed = src.price_book(T0 + timedelta(hours=24))
    assert len(catalog.requests) == 2 * calls
    assert refreshed.as_of == T0 + timedelta(hours=24)


def test_failing_refresh_keeps_last_good_book(catalog: FakeCatalog, store: SQLiteStore) -> None:
    src = _source(catalog, store)
    good = src.price_book(T0)
    catalog.fail_always = grpc.StatusCode.UNAVAILABLE
    later = T0 + timedelta(hours=30)

    with pytest.raises(RetryableSourceError, match="price catalog"):
        src.refresh(later)
    assert src.price_book(later) is good  # logged, not raised
    assert _source(catalog, store).cached() == good  # the store still holds the good book

    calls = len(catalog.requests)
    assert src.price_book(later + timedelta(minutes=5)) is good  # within the failure backoff: no RPC
    assert len(catalog.requests) == calls
    src.price_book(later + timedelta(minutes=16))
    assert len(catalog.requests) > calls


def test_no_cached_book_falls_back_to_the_snapshot_flagged(catalog: FakeCatalog) -> None:
    catalog.fail_always = grpc.StatusCode.PERMISSION_DENIED
    src = _source(catalog)
    with pytest.raises(PermanentSourceError, match=r"^price catalog: PERMISSION_DENIED: "):
        src.refresh(T0)
    book = src.price_book(T0)
    assert (book.source, book.approximate) == ("snapshot", True)
    assert "catalog unavailable" in book.note
    assert book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "on_demand") is not None


def test_transient_error_is_retried_by_the_client(catalog: FakeCatalog) -> None:
    catalog.fail_next(grpc.StatusCode.UNAVAILABLE)
    book = _source(catalog, retry_deadline_s=5.0).refresh(T0)
    assert catalog.tokens()[:2] == ["", ""]
    assert book.gpu_hourly(GpuModel.L4, "us-central1", "on_demand") == D("0.560040239")


def test_failure_on_a_later_page_caches_nothing(catalog: FakeCatalog, store: SQLiteStore) -> None:
    catalog.fail_tokens["page-6"] = grpc.StatusCode.PERMISSION_DENIED
    src = _source(catalog, store)
    with pytest.raises(PermanentSourceError):
        src.refresh(T0)
    assert "page-6" in catalog.tokens()
    assert src.cached() is None and _source(catalog, store).cached() is None


def test_catalog_without_gpu_prices_is_an_error() -> None:
    only_disks = [sku("Balanced PD Capacity in Iowa", family="Storage", price=(0, 1))]
    with FakeCatalog(only_disks) as fake, pytest.raises(PermanentSourceError, match="no GPU prices"):
        _source(fake).refresh(T0)  # type: ignore[arg-type]


# --- lookups and fallbacks ------------------------------------------------------------------


def _book() -> PriceBook:
    od, spot = PriceKind.ON_DEMAND, PriceKind.SPOT
    gpu = {
        ("H100 80GB", "us-central1", od): D("10"),
        ("H100 80GB", "us-east4", od): D("11"),
        ("H100 80GB", "northamerica-northeast1", od): D("12"),
        ("H100 80GB", "europe-west4", od): D("13"),
        ("H100 80GB", "us-central1", spot): D("3"),
    }
    return PriceBook(as_of=T0, source="catalog", gpu=gpu)


@pytest.mark.parametrize(
    ("model", "region", "kind", "price", "where", "basis", "approximate"),
    [
        ("H100 80GB", "us-central1", "on_demand", "10", "us-central1", "region", False),
        ("H100 80GB", "us-east4-b", "on_demand", "11", "us-east4", "region", False),  # a zone
        ("H100 80GB", "us-west1", "on_demand", "11", "us-east4", "multi-region", True),  # median of 3
        ("H100 80GB", "europe-west1", "on_demand", "13", "europe-west4", "multi-region", True),
        ("H100 80GB", "asia-east1", "on_demand", "11", "us-east4", "any-region", True),  # lower median of 4
        ("H100 80GB", None, "on_demand", "11", "us-east4", "any-region", True),
        ("H100 80GB", "europe-west4", "spot", "3", "us-central1", "any-region", True),
        ("H100 Mega 80GB", "us-central1", "on_demand", "10", "us-central1", "proxy:H100 80GB", True),
        ("A100 40GB", "us-central1", "on_demand", None, None, None, None),
        ("H100 80GB", "us-central1", "commit_1y", None, None, None, None),
    ],
)
def test_gpu_lookup_fallback(model, region, kind, price, where, basis, approximate) -> None:
    book = _book()
    quote = book.gpu_quote(model, region, kind)
    assert book.gpu_hourly(model, region, kind) == (None if price is None else D(price))
    if price is None:
        assert quote is None
    else:
        assert quote is not None
        assert (quote.region, quote.basis, quote.approximate) == (where, basis, approximate)


def test_models_in_any_spelling_unknown_kind_is_an_error() -> None:
    book = _book()
    for spelling in ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb", GpuModel.H100_80GB):
        assert book.gpu_hourly(spelling, "us-central1", "on_demand") == D("10")
    assert book.gpu_hourly("GTX 1080", "us-central1", "on_demand") is None
    assert book.gpu_hourly("", "us-central1", "on_demand") is None
    with pytest.raises(ValueError):
        book.gpu_hourly("H100 80GB", "us-central1", "committed")


def test_json_round_trip_is_exact(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)
    assert PriceBook.from_json(book.to_json()) == book
    with pytest.raises(ValueError, match="cache: not a valid price book"):
        PriceBook.from_json('{"format": 1, "gpu": {}}', origin="cache")


# --- the bundled snapshot --------------------------------------------------------------------


def test_snapshot_loads_and_covers_every_common_model() -> None:
    book = SnapshotPriceSource().price_book(T0)
    assert (book.source, book.approximate) == ("snapshot", True)
    assert book.as_of.tzinfo is not None and "approximate" in book.note
    assert set(COMMON_MODELS) <= book.gpu_models()
    for model in COMMON_MODELS:
        q = {k: book.gpu_quote(model, "us-central1", k) for k in PriceKind}
        assert all(v is not None and not v.approximate for v in q.values()), model
        od, spot = q[PriceKind.ON_DEMAND].price, q[PriceKind.SPOT].price  # type: ignore[union-attr]
        c1, c3 = q[PriceKind.COMMIT_1Y].price, q[PriceKind.COMMIT_3Y].price  # type: ignore[union-attr]
        assert spot < c3 < c1 < od, model
        assert D("0.60") <= 1 - spot / od <= D("0.70")  # Spot ~60-70% off
        assert abs((1 - c1 / od) - D("0.37")) < D("0.005")  # 1-year CUD ~37% off
        assert abs((1 - c3 / od) - D("0.55")) < D("0.005")  # 3-year CUD ~55% off
    assert book.gpu_hourly(GpuModel.A100_40GB, "us-central1", "on_demand") == D("2.933908")
    assert D("3.9") < book.gpu_hourly(GpuModel.A100_80GB, "us-central1", "on_demand") < D("4")  # type: ignore[operator]
    assert D("9.7") <= book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "on_demand") <= D("11")  # type: ignore[operator]
    assert D("0.56") <= book.gpu_hourly(GpuModel.L4, "us-central1", "on_demand") <= D("0.71")  # type: ignore[operator]
    assert book.gpu_hourly(GpuModel.T4, "us-central1", "on_demand") == D("0.35")
    for family in ("A2", "A3", "G2"):
        assert book.cpu_core_quote(family, "us-central1", "on_demand") is not None
        assert book.ram_gib_quote(family, "us-central1", "on_demand") is not None
    assert book.egress_per_gib("inter_zone", "us-central1") == D("0.01")
    assert book.egress_per_gib("internet", "europe-west4") == D("0.12")
    assert {r for _, r, _ in book.gpu} >= {"us-central1", "europe-west4", "asia-southeast1"}


def test_factory_picks_the_configured_source(store: SQLiteStore) -> None:
    google = GoogleConfig()
    assert isinstance(price_source_from_config(PricingConfig(), google, None), SnapshotPriceSource)
    src = price_source_from_config(PricingConfig(source="catalog"), google, store)
    assert isinstance(src, CatalogPriceSource) and src.cached() is None
