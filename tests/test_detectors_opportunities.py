"""Spot and commitment advice say where their prices came from (Catalog API or the bundled snapshot
and its date), and give no advice from a price nobody published.

Prices come from real `PriceBook`s: one parsed from the real-SKU catalog of
`tests/fakes/catalog_server.py` (`book_from_skus`, the Catalog source's parser), one the bundled
snapshot. Nothing of ours is mocked.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from monitor.detectors.opportunities import CommitmentOpportunity, SpotOpportunity, price_source
from monitor.pricebook import PriceBook
from monitor.sources.pricing import SnapshotPriceSource, book_from_skus
from tests.fakes.catalog_server import REAL_SKUS
from tests.test_detectors_common import D, FakePrices, gpu, inputs

FETCHED = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
CATALOG_TEXT = "Cloud Billing Catalog API (fetched 2026-11-02T08:00:00Z)"


def ev(det, inp):
    return det.evaluate(inp, inp.window_end)


def _catalog() -> PriceBook:
    return book_from_skus(REAL_SKUS, FETCHED)


def _snapshot() -> PriceBook:
    return SnapshotPriceSource().price_book(FETCHED)


def _sweep(model: str = "H100", zone: str = "us-central1-a", hours: int = 10) -> list:
    return [gpu(h, "sweep-lr-3", gpu_model=model, zone=zone, gpus=8) for h in range(hours)]


def test_spot_advice_from_the_catalog_says_so_with_the_fetch_time() -> None:
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(), prices=_catalog()))
    # catalog: H100 on demand 9.796550569, Spot 5.8632 in us-central1
    assert f.impact_usd == (D(80) * (D("9.796550569") - D("5.8632"))).quantize(D("0.000001"))
    assert f.evidence["price_source"] == CATALOG_TEXT
    assert f.evidence["instances"][0]["price_source"] == CATALOG_TEXT
    assert f.summary.endswith(f"Prices: {CATALOG_TEXT}.")


def test_spot_advice_from_the_snapshot_names_its_date_and_sources() -> None:
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(model="L4", hours=100), prices=_snapshot()))
    # snapshot (vms.csv @017e2502): L4 us-central1 0.56004 on demand, 0.2231 Spot
    assert f.impact_usd == D(800) * (D("0.56004") - D("0.2231"))
    text = "bundled snapshot (2026-12-02, skypilot-org/skypilot-catalog catalogs/v7/gcp/vms.csv@017e2502)"
    assert f.evidence["price_source"] == text
    assert f"Prices: {text}." in f.summary


def test_two_sources_behind_one_saving_are_both_named() -> None:
    # H100 us-central1 in the snapshot: on demand from the catalog-row fixture, Spot from
    # tgarg01/silybench-data (2026-09-26)
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(), prices=_snapshot()))
    names = f.evidence["price_source"].split("; ")
    assert len(names) == 2 and all(n.startswith("bundled snapshot (2026-12-02, ") for n in names)
    assert "record 55513368414" in names[0] and "silybench-data" in names[1]


def test_no_spot_advice_where_the_region_has_no_price() -> None:
    # the catalog lists H100 Spot for us-central1 only: us-east4 is unknown, not borrowed
    rows = _sweep(zone="us-east4-a")
    assert ev(SpotOpportunity(), inputs(gpu_hours=rows, prices=_catalog())) == []


def test_commitment_advice_names_its_source() -> None:
    rows = [gpu(h, f"infer-{i}", gpu_model="T4", gpus=4) for h in range(14 * 24) for i in range(2)]
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_catalog()))
    assert f.evidence["steady_gpus"] == 8
    assert f.impact_usd == D(8 * 336) * (D("0.35") - D("0.22"))
    assert f.evidence["price_source"] == CATALOG_TEXT
    assert f.summary.endswith(f"Prices: {CATALOG_TEXT}.")
    (s,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_snapshot()))
    assert s.evidence["price_source"] == (
        "bundled snapshot (2026-12-02, djwar42/arr-coc-0-1 "
        "PLAN-MD-FILES/november/15th/EXCESSIVE_POKING_AROUND_STUDY.md@a89b4249)"
    )


def test_no_commitment_advice_without_a_published_commitment_price() -> None:
    # H100 has on-demand prices in both books but no commitment SKU price in either: no guess
    rows = [gpu(h, "train-0") for h in range(14 * 24)]
    assert ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_catalog())) == []
    assert ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_snapshot())) == []


class _NoProvenance:
    """A PriceLookup written before `gpu_price_source` existed (a user's own, say)."""

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        return FakePrices().gpu_hourly(gpu_model, region, pricing_model)


def test_a_lookup_without_provenance_is_reported_as_such() -> None:
    assert (
        price_source(_NoProvenance(), "H100", "us-central1", ("on_demand", "spot"))
        == "price source not reported"
    )
    assert price_source(FakePrices(), "H100", "us-central1", ("on_demand", "spot")) == "test price table"
    assert price_source(_catalog(), "T4", "us-central1", ("on_demand", "commit_3y")) == CATALOG_TEXT
