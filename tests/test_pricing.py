"""Prices: the PriceBook lookups, the bundled snapshot, and the Catalog source through the real
`CloudCatalogClient` against a local gRPC server serving `google.cloud.billing.v1.CloudCatalog`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from importlib import resources
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
from scripts import price_snapshot
from tests.fakes.catalog_server import REAL_SKUS, FakeCatalog, sku

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
D = Decimal
CATALOG = REAL_SKUS  # real SKU descriptions and prices, cited in tests/fakes/catalog_server.py


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
    assert book.gpu_hourly(H100, "us-east4", "on_demand") == D("9.796550569")  # one Americas SKU
    assert book.gpu_hourly(H100, "europe-west4", "on_demand") == D("12.73552")  # "... in Netherlands"
    # the Spot INFIX wording, priced for the regions its serviceRegions list, and nowhere else
    assert book.gpu_hourly(H100, "us-central1", "spot") == D("5.8632")
    assert book.gpu_hourly(H100, "us-east4", "spot") is None
    assert book.gpu_hourly(H100, "us-central1", "commit_1y") is None  # no commitment SKU: unknown
    assert book.gpu_hourly(GpuModel.H100_MEGA_80GB, "us-west1", "on_demand") == D("10.344275712")
    assert book.gpu_hourly(GpuModel.H200_141GB, "us-east4", "on_demand") == D("9.31174")
    assert book.gpu_hourly(GpuModel.A100_40GB, "us-central1", "on_demand") == D("2.93391")
    assert book.gpu_hourly(GpuModel.A100_40GB, "us-west1", "spot") == D("1.1472")
    assert book.gpu_hourly(GpuModel.A100_40GB, "me-west1", "on_demand") == D("3.2273")
    assert book.gpu_hourly(GpuModel.A100_40GB, "europe-west4", "on_demand") is None  # not in serviceRegions
    # L4 SKUs name the city; serviceRegions map "Iowa" and "Virginia" to regions, with their own prices
    assert book.gpu_hourly(GpuModel.L4, "us-central1", "on_demand") == D("0.56004")
    assert book.gpu_hourly(GpuModel.L4, "us-central1", "spot") == D("0.2231")
    assert book.gpu_hourly(GpuModel.L4, "us-east4", "on_demand") == D("0.55821")
    T4 = GpuModel.T4
    assert [book.gpu_hourly(T4, "us-central1", k) for k in PriceKind] == [
        D("0.35"),
        D("0.14"),
        D("0.22"),
        D("0.16"),
    ]
    assert book.cpu_core_hourly("A2", "us-central1", "on_demand") == D("0.031611")
    assert book.ram_gib_hourly("a2", "us-central1", "on_demand") == D("0.004237")
    assert book.cpu_core_hourly("A2", "us-central1", "spot") == D("0.01264")
    assert book.ram_gib_hourly("A2", "us-central1", "spot") == D("0.001695")
    # a RAM SKU in an unexpected unit (per month) is skipped, not read as an hourly price
    assert book.ram_gib_hourly("G2", "us-central1", "on_demand") is None
    assert book.egress_per_gib(EgressKind.INTER_ZONE, "us-central1") == D("0.01")
    # first paid tier (the free first tier is skipped)
    assert book.egress_per_gib("internet", "us-east4") == D("0.12")


def test_catalog_prices_say_where_they_came_from(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)
    assert book.provenance == "Cloud Billing Catalog API (fetched 2026-11-02T08:00:00Z)"
    assert book.gpu_price_source("NVIDIA L4", "us-central1-b", "spot") == book.provenance
    assert book.gpu_price_source("NVIDIA L4", "us-central1", "commit_1y") is None  # no price, no source
    quote = book.gpu_quote(GpuModel.H100_80GB, "us-east4-c", "on_demand")
    assert quote is not None and (quote.region, quote.provenance) == ("us-east4", book.provenance)


def test_variants_do_not_shadow_the_plain_price(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)
    # the DWS SKU comes first in the catalog, the Reserved Mega one ($0) later: neither may win
    on_demand = {(m, r): p for (m, r, k), p in book.gpu.items() if k is PriceKind.ON_DEMAND}
    assert {p for (m, _), p in on_demand.items() if m == "H100 80GB"} == {D("9.796550569"), D("12.73552")}
    assert {p for (m, _), p in on_demand.items() if m == "H100 Mega 80GB"} == {D("10.344275712")}


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
    assert book.provenance.startswith("bundled snapshot (2026-12-02, sources: skypilot-org/skypilot-catalog")


def test_transient_error_is_retried_by_the_client(catalog: FakeCatalog) -> None:
    catalog.fail_next(grpc.StatusCode.UNAVAILABLE)
    book = _source(catalog, retry_deadline_s=5.0).refresh(T0)
    assert catalog.tokens()[:2] == ["", ""]
    assert book.gpu_hourly(GpuModel.L4, "us-central1", "on_demand") == D("0.56004")


def test_failure_on_a_later_page_caches_nothing(catalog: FakeCatalog, store: SQLiteStore) -> None:
    catalog.fail_tokens["page-6"] = grpc.StatusCode.PERMISSION_DENIED  # the 3rd of 9 pages
    src = _source(catalog, store)
    with pytest.raises(PermanentSourceError):
        src.refresh(T0)
    assert "page-6" in catalog.tokens()
    assert src.cached() is None and _source(catalog, store).cached() is None


def test_catalog_without_gpu_prices_is_an_error() -> None:
    only_disks = [sku("Balanced PD Capacity in Iowa", family="Storage", price=(0, 1))]
    with FakeCatalog(only_disks) as fake, pytest.raises(PermanentSourceError, match="no GPU prices"):
        _source(fake).refresh(T0)  # type: ignore[arg-type]


# --- lookups: exact region or unknown ----------------------------------------------------


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
    ("model", "region", "kind", "price"),
    [
        ("H100 80GB", "us-central1", "on_demand", "10"),
        ("H100 80GB", "us-east4-b", "on_demand", "11"),  # a zone is read as its region
        ("H100 80GB", "US-EAST4", "on_demand", "11"),
        # another region's price is never borrowed, not even from the same continent
        ("H100 80GB", "us-west1", "on_demand", None),
        ("H100 80GB", "europe-west1", "on_demand", None),
        ("H100 80GB", None, "on_demand", None),
        ("H100 80GB", "europe-west4", "spot", None),
        # no proxy model: H100 Mega is not priced as an H100
        ("H100 Mega 80GB", "us-central1", "on_demand", None),
        ("A100 40GB", "us-central1", "on_demand", None),
        # no commitment price derived from on-demand
        ("H100 80GB", "us-central1", "commit_1y", None),
    ],
)
def test_gpu_lookup_is_exact_or_unknown(model, region, kind, price) -> None:
    book = _book()
    quote = book.gpu_quote(model, region, kind)
    assert book.gpu_hourly(model, region, kind) == (None if price is None else D(price))
    if price is None:
        assert quote is None and book.gpu_price_source(model, region, kind) is None
    else:
        assert (
            quote is not None
            and quote.provenance == "Cloud Billing Catalog API (fetched 2026-11-02T08:00:00Z)"
        )


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
    snap = SnapshotPriceSource().price_book(T0)
    again = PriceBook.from_json(snap.to_json())
    assert again == snap and again.gpu_price_source(
        "T4", "us-central1", "commit_1y"
    ) == snap.gpu_price_source("T4", "us-central1", "commit_1y")
    with pytest.raises(ValueError, match="cache: not a valid price book"):
        PriceBook.from_json('{"format": 1, "gpu": {}}', origin="cache")


# --- the bundled snapshot --------------------------------------------------------------------

REGIONS = ("us-central1", "us-east4", "us-west1", "europe-west4", "asia-southeast1")
# What the sources offer (scripts/price_sources/): every other pair of the five regions and eight
# common models is absent, for the reason given, never filled in from another region or model.
ABSENT = {
    ("H100 80GB", "asia-southeast1"): "excluded: the vms.csv figure is a non-plain SKU",
    ("A100 80GB", "us-west1"): "no A100 80GB row for us-west1",
    ("A100 40GB", "us-east4"): "no A100 row for us-east4",
    ("A100 40GB", "europe-west4"): "excluded: differs from the EMEA SKU price of me-west1",
    ("V100", "us-east4"): "no V100 row",
    ("V100", "asia-southeast1"): "no V100 row",
    ("P100", "us-east4"): "no P100 row",
    ("P100", "asia-southeast1"): "no P100 row",
    ("P4", "us-west1"): "no P4 row",
}


def _snapshot() -> PriceBook:
    return SnapshotPriceSource().price_book(T0)


def test_snapshot_has_on_demand_for_every_offered_region_and_model() -> None:
    book = _snapshot()
    assert (book.source, book.approximate) == ("snapshot", True)
    assert book.as_of == datetime(2026, 12, 2, tzinfo=UTC)
    assert set(COMMON_MODELS) <= book.gpu_models()
    for model in COMMON_MODELS:
        for region in REGIONS:
            od = book.gpu_hourly(model, region, "on_demand")
            assert (od is None) == ((model.value, region) in ABSENT), (model, region)
            if od is not None:
                spot = book.gpu_hourly(model, region, "spot")
                assert spot is not None and D(0) < spot < od, (model, region)
    assert book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "on_demand") == D("9.796550569")
    assert book.gpu_hourly(GpuModel.H100_80GB, "europe-west4", "on_demand") == D("12.73552")
    assert book.gpu_hourly(GpuModel.L4, "us-east4", "on_demand") == D("0.55821")
    assert book.gpu_hourly(GpuModel.V100, "us-central1", "on_demand") == D("2.48")  # an 8-GPU row / 8
    assert book.gpu_hourly(GpuModel.H200_141GB, "us-central1", "on_demand") == D("9.31174")
    assert book.cpu_core_hourly("A2", "us-central1", "spot") == D("0.012641")  # cf. the Spot page's 0.01264
    assert book.ram_gib_hourly("A2", "us-central1", "spot") == D("0.001695")


def test_snapshot_prices_are_not_ratios_of_each_other() -> None:
    book = _snapshot()

    def ratio(model: GpuModel, a: tuple[str, str], b: tuple[str, str]) -> Decimal:
        num, den = book.gpu_hourly(model, *a), book.gpu_hourly(model, *b)
        assert num is not None and den is not None, model
        return num / den

    spot_share = {
        m: ratio(m, ("us-central1", "spot"), ("us-central1", "on_demand"))
        for m in (GpuModel.A100_40GB, GpuModel.L4, GpuModel.H100_80GB)
    }
    # vms.csv: A100 1.1472 / 2.93391, L4 0.2231 / 0.56004; H100 5.8632 (tgarg01/silybench-data, the
    # Spot SKU as the Catalog API gave it on 2026-09-26) / 9.796550569. Each is one source figure.
    assert [round(v, 3) for v in spot_share.values()] == [D("0.391"), D("0.398"), D("0.598")]
    west4 = {
        m: ratio(m, ("europe-west4", "on_demand"), ("us-central1", "on_demand"))
        for m in (GpuModel.H100_80GB, GpuModel.L4, GpuModel.T4, GpuModel.P4)
    }
    assert [round(v, 3) for v in west4.values()] == [D("1.300"), D("1.050"), D("1.050"), D("1.050")]
    east4 = {
        m: ratio(m, ("us-east4", "on_demand"), ("us-central1", "on_demand"))
        for m in (GpuModel.H100_80GB, GpuModel.L4, GpuModel.T4)
    }
    assert [round(v, 4) for v in east4.values()] == [D("1.0000"), D("0.9967"), D("1.0571")]


def test_snapshot_commitments_only_where_a_source_gives_them() -> None:
    book = _snapshot()
    commits = {(m, r, k.value): p for (m, r, k), p in book.gpu.items() if k.value.startswith("commit")}
    assert commits == {
        ("T4", "us-central1", "commit_1y"): D("0.22"),
        ("T4", "us-central1", "commit_3y"): D("0.16"),
    }


def test_snapshot_names_its_sources_and_each_price_says_which() -> None:
    doc = json.loads(resources.files("monitor").joinpath("data/price_snapshot.json").read_text("utf-8"))
    assert doc["generated_by"].startswith("scripts/price_snapshot.py ")
    for src in doc["sources"]:
        assert {"id", "repository", "path", "commit", "date", "supplies"} <= set(src), src
    assert doc["sources"][0]["commit"] == "017e2502fb63c7a28757acd94002b2d6099d3e3d"
    book = _snapshot()
    assert book.gpu_price_source("L4", "us-central1", "spot") == (
        "bundled snapshot (2026-12-02, skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv@017e2502)"
    )
    assert book.gpu_price_source("T4", "us-central1", "commit_3y") == (
        "bundled snapshot (2026-12-02, djwar42/arr-coc-0-1 "
        "PLAN-MD-FILES/november/15th/EXCESSIVE_POKING_AROUND_STUDY.md@a89b4249)"
    )
    assert "record 55513368414" in (book.gpu_price_source("H100", "us-west1", "on_demand") or "")


def test_snapshot_spot_prefers_the_newest_dated_source() -> None:
    """Spot prices float: the H100 us-central1 Spot price is the Catalog API figure of 2026-09-26
    (tgarg01/silybench-data), not the undated skypilot row (2.253); regions that newer source does
    not cover keep their skypilot figure, each price naming its own source."""
    book = _snapshot()
    assert book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "spot") == D("5.8632")
    assert book.gpu_price_source("H100", "us-central1", "spot") == (
        "bundled snapshot (2026-12-02, tgarg01/silybench-data derived/csv/gpu_prices.csv@045df3bf)"
    )
    assert book.gpu_hourly(GpuModel.H100_80GB, "us-west1", "spot") == D("2.253")
    assert "skypilot-org/skypilot-catalog" in (book.gpu_price_source("H100", "us-west1", "spot") or "")
    doc = json.loads(resources.files("monitor").joinpath("data/price_snapshot.json").read_text("utf-8"))
    dated = {s["id"]: s["date"] for s in doc["sources"]}
    assert dated[doc["origins"]["gpu"]["H100 80GB"]["us-central1"]["spot"]].startswith("2026-09-26")


def _generate(**kw: object) -> dict:
    root = Path(__file__).resolve().parents[1] / "scripts" / "price_sources"
    rows = {
        n: _read_csv(root / f)
        for n, f in (("vms", "skypilot_gcp_vms_extract.csv"), ("sku", "sku_prices.csv"))
    }
    exclusions = kw.pop("exclusions", _read_csv(root / "exclusions.csv"))
    sources = json.loads((root / "sources.json").read_text("utf-8"))
    return price_snapshot.build_snapshot(rows["vms"], rows["sku"], exclusions, sources, "2026-12-02", **kw)  # type: ignore[arg-type]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_bundled_snapshot_is_what_the_generator_makes_of_its_sources() -> None:
    bundled = json.loads(resources.files("monitor").joinpath("data/price_snapshot.json").read_text("utf-8"))
    assert _generate(regions=frozenset(REGIONS)) == bundled


def test_generator_leaves_excluded_figures_out_and_reads_sku_lines_with_the_catalog_parser() -> None:
    everything = _generate(exclusions=[])
    assert everything["gpu"]["H100 80GB"]["asia-southeast1"]["on_demand"] == "4.20076"  # the variant figure
    assert "on_demand" not in _generate()["gpu"]["H100 80GB"]["asia-southeast1"]
    with pytest.raises(ValueError, match="reads as commit_1y, usage_type says on_demand"):
        price_snapshot.sku_line_prices(
            [
                {
                    "description": "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year",
                    "usage_type": "OnDemand",
                    "regions": "us-central1",
                    "price": "0.22",
                    "source": "x",
                }
            ]
        )


def test_factory_picks_the_configured_source(store: SQLiteStore) -> None:
    google = GoogleConfig()
    assert isinstance(price_source_from_config(PricingConfig(), google, None), SnapshotPriceSource)
    src = price_source_from_config(PricingConfig(source="catalog"), google, store)
    assert isinstance(src, CatalogPriceSource) and src.cached() is None
