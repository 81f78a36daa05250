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
    # excluded: each vms.csv figure is far from the GPU's share of Cyclenerd's whole-machine price of
    # its a2 machine (e.g. A100 80GB us-central1: 1.8462 where a2-ultragpu-1g less its host is 3.928)
    ("A100 40GB", "europe-west4"): "excluded: 1.61365, where a2-highgpu-1g less its host is 2.93391",
    ("A100 40GB", "asia-southeast1"): "excluded: 1.70586, where a2-highgpu-1g less its host is 3.10156",
    ("A100 80GB", "us-central1"): "excluded: 1.8462, where a2-ultragpu-1g less its host and SSD is 3.928",
    ("A100 80GB", "us-east4"): "excluded: 2.07937, where a2-ultragpu-1g less its host and SSD is ~4.424",
    ("A100 80GB", "europe-west4"): "excluded: 2.03285, where a2-ultragpu-1g less its host and SSD is ~4.325",
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
        "PLAN-MD-FILES/november/15th/EXCESSIVE_POKING_AROUND_STUDY.md@a89b4249 of 2025-11-16)"
    )
    assert "record 55513368414" in (book.gpu_price_source("H100", "us-west1", "on_demand") or "")


def test_snapshot_spot_prefers_the_newest_dated_source() -> None:
    """Spot prices float: the H100 us-central1 Spot price is the Catalog API figure of 2026-09-26
    (tgarg01/silybench-data), not the undated skypilot row (2.253); regions that newer source does
    not cover keep their skypilot figure, each price naming its own source."""
    book = _snapshot()
    assert book.gpu_hourly(GpuModel.H100_80GB, "us-central1", "spot") == D("5.8632")
    assert book.gpu_price_source("H100", "us-central1", "spot") == (
        "bundled snapshot (2026-12-02, tgarg01/silybench-data derived/csv/gpu_prices.csv@045df3bf of 2026-09-26)"
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
    kw.setdefault("machines", _read_csv(root / "cyclenerd_machines.csv"))
    kw.setdefault("machine_source", "cyclenerd")
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


# --- whole-machine prices: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml @fd66b26f
# (2026-07-30), extracted into scripts/price_sources/cyclenerd_machines.csv ----------------------

A3 = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-highgpu-8g")
A2 = ("a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g", "a2-megagpu-16g")
A2_ULTRA = ("a2-ultragpu-1g", "a2-ultragpu-2g", "a2-ultragpu-4g", "a2-ultragpu-8g")
G2 = tuple(f"g2-standard-{n}" for n in (4, 8, 12, 16, 24, 32, 48, 96))
CYCLENERD = "Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml@fd66b26f of 2026-07-30"
KINDS = ("on_demand", "spot", "commit_1y", "commit_3y")


def _machine_rows() -> list[dict[str, str]]:
    return _read_csv(
        Path(__file__).resolve().parents[1] / "scripts" / "price_sources" / "cyclenerd_machines.csv"
    )


def test_snapshot_prices_accelerator_optimized_machines_in_every_region() -> None:
    book = _snapshot()
    for region in REGIONS:
        for machine in A3 + A2 + G2:
            for kind in KINDS:
                assert book.machine_hourly(machine, region, kind) is not None, (machine, region, kind)
        for machine in A2_ULTRA:
            # on demand and Spot only: the source has no A2 Ultra commitment ("connect with your
            # sales account team", build/pricing.pl), so none is made up
            assert book.machine_hourly(machine, region, "on_demand") is not None
            assert book.machine_hourly(machine, region, "spot") is not None
            assert book.machine_hourly(machine, region, "commit_1y") is None
            assert book.machine_hourly(machine, region, "commit_3y") is None
    # A3 Mega: only where the source lists it
    assert {r for r in REGIONS if book.machine_hourly("a3-megagpu-8g", r, "on_demand")} == {
        "us-east4",
        "europe-west4",
        "asia-southeast1",
    }
    assert book.machine_hourly("n1-standard-8", "us-central1", "on_demand") is None  # GPUs extra: not carried
    assert book.machine_hourly("a3-highgpu-8g", "us-east1", "on_demand") is None  # region not kept


def test_a3_highgpu_8g_figures_and_their_source() -> None:
    # pricing.yml @fd66b26f compute.instance.a3-highgpu-8g.cost.us-central1: hour 88.4899999025753,
    # hour_spot 50.6095408219178, month_1y 44810.08066464, month_3y 28370.99821392 (730 h a month)
    book = _snapshot()
    got = {k: book.machine_hourly("A3-HIGHGPU-8G", "us-central1-a", k) for k in KINDS}
    assert got == {
        "on_demand": D("88.4899999025753"),
        "spot": D("50.6095408219178"),
        "commit_1y": D("61.383672143"),
        "commit_3y": D("38.864381115"),
    }
    assert book.machine_price_source("a3-highgpu-8g", "us-central1", "commit_3y") == (
        f"bundled snapshot (2026-12-02, {CYCLENERD})"
    )
    assert book.machine_price_source("a3-highgpu-8g", "us-central1", "commit_3y") != book.gpu_price_source(
        "H100", "us-central1", "on_demand"
    )
    assert book.machine_price_source("a3-highgpu-8g", "us-west4", "on_demand") is None
    assert CYCLENERD in book.provenance


def test_each_commitment_price_is_its_source_month_figure_over_730_hours() -> None:
    book = _snapshot()
    rows = [r for r in _machine_rows() if r["region"] in REGIONS]
    assert rows
    for row in rows:
        for kind, field in (("commit_1y", "month_1y"), ("commit_3y", "month_3y")):
            want = (D(row[field]) / 730).quantize(D("0.000000001")) if row[field] else None
            assert book.machine_hourly(row["machine_type"], row["region"], kind) == want, (row, kind)
        assert book.machine_hourly(row["machine_type"], row["region"], "on_demand") == D(row["hour"])


def test_commitment_discounts_differ_by_machine_type_as_the_source_says() -> None:
    """No constant ratio anywhere: the committed share of the on-demand price is whatever the
    source's SKU sums give, different per family, term and even region (us-central1 vs us-east4
    for A2), so a single discount applied to on-demand prices would be wrong."""
    book = _snapshot()

    def share(machine: str, region: str, term: str) -> Decimal:
        od = book.machine_hourly(machine, region, "on_demand")
        price = book.machine_hourly(machine, region, term)
        assert od is not None and price is not None
        return round(price / od, 4)

    got = {
        (m, r): (share(m, r, "commit_1y"), share(m, r, "commit_3y"))
        for m in ("a3-highgpu-8g", "a2-highgpu-1g", "g2-standard-4")
        for r in ("us-central1", "us-east4")
    }
    assert got == {
        ("a3-highgpu-8g", "us-central1"): (D("0.6937"), D("0.4392")),
        ("a3-highgpu-8g", "us-east4"): (D("0.6936"), D("0.4392")),
        ("a2-highgpu-1g", "us-central1"): (D("0.6300"), D("0.3500")),
        ("a2-highgpu-1g", "us-east4"): (D("0.6245"), D("0.3514")),
        ("g2-standard-4", "us-central1"): (D("0.6300"), D("0.4500")),
        ("g2-standard-4", "us-east4"): (D("0.6300"), D("0.4500")),
    }
    every = {share(m, r, t) for m in A3 + A2 + G2 for r in REGIONS for t in ("commit_1y", "commit_3y")}
    assert len(every) >= 10


def test_the_catalog_book_has_no_machine_prices(catalog: FakeCatalog) -> None:
    book = _source(catalog).refresh(T0)
    assert book.machine == {}
    assert book.machine_hourly("a3-highgpu-8g", "us-central1", "on_demand") is None
    assert book.machine_price_source("a3-highgpu-8g", "us-central1", "on_demand") is None


def test_machine_prices_survive_the_json_round_trip() -> None:
    snap = _snapshot()
    again = PriceBook.from_json(snap.to_json())
    assert again.machine == snap.machine and again.machine
    assert again.machine_price_source("g2-standard-8", "europe-west4", "spot") == snap.machine_price_source(
        "g2-standard-8", "europe-west4", "spot"
    )


# Verbatim lines of pricing.yml @fd66b26f (its header, and a3-highgpu-8g with two of its regions):
# the extractor reads the file's own layout, block scalars with colons included.
PRICING_YML_EXCERPT = """---
about:
  copyright: |2

    Copyright 2022-2025 Nils Knieling. All Rights Reserved.

        http://www.apache.org/licenses/LICENSE-2.0

  generated: Thu Jul 30 06:13:17 2026
  timestamp: 1785391997
  url: https://github.com/Cyclenerd/google-cloud-pricing-cost-calculator
compute:
  instance:
    a3-highgpu-8g:
      cost:
        us-central1:
          hour: 88.4899999025753
          hour_spot: 50.6095408219178
          month: 64597.69992888
          month_1y: 44810.08066464
          month_3y: 28370.99821392
          month_spot: 36944.9648
        us-east1:
          hour: 88.4899999025753
          hour_spot: 50.6095408219178
          month: 64597.69992888
          month_1y: 44810.08066464
          month_3y: 28370.99821392
          month_spot: 36944.9648
      cpu: 208
      h100-80gb: 8
      local-ssd: 6000
      ram: 1872
  license:
    a3-highgpu-8g:
      cost:
        sles:
          hour: 0.11
"""


def test_extractor_reads_the_pricing_yml_layout_into_the_bundled_lines() -> None:
    costs = price_snapshot.read_instance_costs(PRICING_YML_EXCERPT.splitlines(keepends=True))
    assert set(costs) == {"a3-highgpu-8g"}  # compute.license is not an instance
    (row,) = price_snapshot.extract_machines(costs, frozenset({"us-central1"}))
    bundled = next(
        r for r in _machine_rows() if (r["machine_type"], r["region"]) == ("a3-highgpu-8g", "us-central1")
    )
    assert row == bundled


def test_commitment_placeholders_of_the_builder_are_not_prices() -> None:
    """build/pricing.pl writes month_1y = month when no 1-year SKU exists, and month_3y = month_1y
    when no 3-year one does: neither is a commitment price."""
    base = {"machine_type": "x", "region": "r", "hour": "2", "hour_spot": "1", "month": "1460"}
    one = price_snapshot.machine_prices([{**base, "month_1y": "1460", "month_3y": "1460"}])
    assert set(one) == {("x", "r", "on_demand"), ("x", "r", "spot")}
    three = price_snapshot.machine_prices([{**base, "month_1y": "730", "month_3y": "730"}])
    assert three[("x", "r", "commit_1y")] == D(1) and ("x", "r", "commit_3y") not in three
