"""Spot and commitment advice say where their prices came from (Catalog API or the bundled snapshot
and its date), and give no advice from a price nobody published. When a VM's machine type has
whole-machine prices (the snapshot's Cyclenerd pricing.yml figures) the saving is priced per machine.

Prices come from real `PriceBook`s: one parsed from the real-SKU catalog of
`tests/fakes/catalog_server.py` (`book_from_skus`, the Catalog source's parser), one the bundled
snapshot. Nothing of ours is mocked.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from monitor.detectors.commitment_opportunity import CommitmentOpportunity, CommitmentOpportunityConfig
from monitor.detectors.opportunities import price_source
from monitor.detectors.spot_opportunity import SpotOpportunity
from monitor.pricebook import PriceBook
from monitor.sources.pricing import SnapshotPriceSource, book_from_skus
from tests.fakes.catalog_server import REAL_SKUS
from tests.test_detectors_common import T0, D, FakePrices, cost, gpu, inputs

FETCHED = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
CATALOG_TEXT = "Cloud Billing Catalog API (fetched 2026-11-02T08:00:00Z)"


def ev(det, inp):
    return det.evaluate(inp, inp.window_end)


def _catalog() -> PriceBook:
    return book_from_skus(REAL_SKUS, FETCHED)


def _snapshot() -> PriceBook:
    return SnapshotPriceSource().price_book(FETCHED)


def _sweep(
    model: str = "H100", zone: str = "us-central1-a", hours: int = 10, machine_type: str | None = None
) -> list:
    """A restartable sweep VM; its machine type unknown unless given (then priced per machine)."""
    rows = [gpu(h, "sweep-lr-3", gpu_model=model, zone=zone, gpus=8) for h in range(hours)]
    return [replace(r, machine_type=machine_type) for r in rows]


def test_spot_advice_from_the_catalog_says_so_with_the_fetch_time() -> None:
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(), prices=_catalog()))
    # catalog: H100 on demand 9.796550569, Spot 5.8632 in us-central1
    assert f.impact_usd == (D(80) * (D("9.796550569") - D("5.8632"))).quantize(D("0.000001"))
    assert f.evidence["price_source"] == CATALOG_TEXT
    assert f.evidence["instances"][0]["price_source"] == CATALOG_TEXT
    assert f.summary.endswith(f"Prices: {CATALOG_TEXT}.")
    assert f.summary.startswith("1 on-demand GPU instance in ml-prod (sweep-lr-3) looks restartable")


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
    # T4s attach to N1 VMs, whose machine price (without GPUs) the snapshot does not carry: per GPU
    rows = [
        replace(gpu(h, f"infer-{i}", gpu_model="T4", gpus=4), machine_type="n1-standard-16")
        for h in range(14 * 24)
        for i in range(2)
    ]
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_catalog()))
    assert f.evidence["steady_gpus"] == 8 and f.evidence["priced_per"] == "gpu"
    assert f.impact_usd == D(8 * 336) * (D("0.35") - D("0.22"))
    assert f.evidence["price_source"] == CATALOG_TEXT
    assert f.summary.endswith(f"Prices: {CATALOG_TEXT}.")
    (s,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_snapshot()))
    assert s.evidence["price_source"] == (
        "bundled snapshot (2026-12-02, djwar42/arr-coc-0-1 "
        "PLAN-MD-FILES/november/15th/EXCESSIVE_POKING_AROUND_STUDY.md@a89b4249 of 2025-11-16)"
    )


def test_no_commitment_advice_without_a_published_commitment_price() -> None:
    # H100 has on-demand prices in both books but no commitment SKU price in either: no guess
    # (the machine type unknown, so no whole-machine price either)
    rows = [replace(gpu(h, "train-0"), machine_type=None) for h in range(14 * 24)]
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


# --- whole-machine prices (snapshot: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml
# @fd66b26f of 2026-07-30, a3-highgpu-8g us-central1: hour 88.4899999025753, hour_spot
# 50.6095408219178, month_1y 44810.08066464, month_3y 28370.99821392; 730 hours per month) ---

A3_OD = D("88.4899999025753")
A3_SPOT = D("50.6095408219178")
A3_1Y = D("61.383672143")  # 44810.08066464 / 730, to the nano-dollar
A3_3Y = D("38.864381115")  # 28370.99821392 / 730
CYCLENERD = (
    "bundled snapshot (2026-12-02, Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml@fd66b26f "
    "of 2026-07-30)"
)


def _a3_fleet(n: int = 2, days: int = 14, pricing_model: str = "on_demand", gaps: int = 0) -> list:
    """`n` a3-highgpu-8g VMs (8 H100 each) running every hour; the last one misses its first `gaps`
    hours."""
    return [
        gpu(h, f"train-{i}", pricing_model=pricing_model)
        for h in range(days * 24)
        for i in range(n)
        if not (i == n - 1 and h < gaps)
    ]


def _lines_sum(f) -> Decimal:
    """What the evidence adds up to: the per-VM savings plus the (negative) unused commitment."""
    lines = sum((D(str(i["savings_usd"])) for i in f.evidence["instances"]), D(0))
    return lines + D(str(f.evidence["unused_commitment"]["usd"]))


def test_commitment_for_a_steady_a3_fleet_is_priced_per_machine() -> None:
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=_a3_fleet(), prices=_snapshot()))
    per_vm = (D(336) * (A3_OD - A3_1Y)).quantize(D("0.000001"))
    assert f.impact_usd == 2 * per_vm
    ev_ = f.evidence
    assert (ev_["priced_per"], ev_["machine_type"], ev_["steady_machines"], ev_["steady_gpus"]) == (
        "machine",
        "a3-highgpu-8g",
        2,
        16,
    )
    assert ev_["on_demand_usd_per_machine_hour"] == float(A3_OD.quantize(D("0.000001")))
    assert ev_["term_usd_per_machine_hour"] == {
        "commit_1y": float(A3_1Y.quantize(D("0.000001"))),
        "commit_3y": float(A3_3Y.quantize(D("0.000001"))),
    }
    assert [(i["instance"], i["committed_machine_hours"], i["savings_usd"]) for i in ev_["instances"]] == [
        ("train-0", 336.0, float(per_vm)),
        ("train-1", 336.0, float(per_vm)),
    ]
    assert ev_["unused_commitment"] == {"machine_hours": 0.0, "usd": 0.0}
    assert str(ev_["unused_commitment"]["usd"]) == "0.0"  # not -0.0, which == 0.0 too
    assert _lines_sum(f) == f.impact_usd
    assert ev_["price_source"] == CYCLENERD and f.summary.endswith(f"Prices: {CYCLENERD}.")
    assert "ran at least 2 a3-highgpu-8g VMs (8 H100 GPUs each) on demand" in f.summary
    assert "$61.38/h instead of $88.49/h" in f.summary and "a3-highgpu-8g" in f.title
    (three,) = ev(
        CommitmentOpportunity(CommitmentOpportunityConfig(term="commit_3y")),
        inputs(gpu_hours=_a3_fleet(), prices=_snapshot()),
    )
    assert three.impact_usd == 2 * (D(336) * (A3_OD - A3_3Y)).quantize(D("0.000001"))


def test_committed_hours_no_vm_used_are_paid_for_in_the_saving() -> None:
    # the second VM misses 20 of 336 hours (6%, within the 10th percentile): still 2 steady
    # machines, but 20 committed machine-hours run empty at the committed price
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=_a3_fleet(gaps=20), prices=_snapshot()))
    assert f.evidence["steady_machines"] == 2
    assert f.evidence["unused_commitment"]["machine_hours"] == 20.0
    q = D("0.000001")
    expected = (D(336) * (A3_OD - A3_1Y)).quantize(q) + (D(316) * (A3_OD - A3_1Y)).quantize(q)
    assert f.impact_usd == expected - (D(20) * A3_1Y).quantize(q)
    assert _lines_sum(f) == f.impact_usd
    # a year at the window's rate pays for the unused hours too, not 2 x 8760 x (on-demand - 1y)
    year = (D(652) * (A3_OD - A3_1Y) - D(20) * A3_1Y) * 8760 / 336
    assert f.evidence["savings_per_year_usd"]["commit_1y"] == float(year.quantize(q))


def test_per_gpu_commitment_pays_for_the_gpu_hours_no_vm_used() -> None:
    """The per-GPU path counted every committed GPU-hour as used: two n1-standard-16 VMs with 4 T4
    each (real catalog prices, $0.35 on demand, $0.22 for a year), the second missing its first 30
    of 336 hours (within the 10th percentile, so 8 GPUs steady), read $349.44 = 8 x 336 x $0.13.
    The commitment is paid for all 2,688 GPU-hours and avoids the on-demand cost of the 2,568 that
    ran: $307.44 (helper 59's audit)."""
    rows = [
        replace(gpu(h, f"infer-{i}", gpu_model="T4", gpus=4), machine_type="n1-standard-16", gpu_hours=D(4))
        for h in range(336)
        for i in range(2)
        if not (i == 1 and h < 30)
    ]
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_catalog()))
    od, c1, c3 = D("0.35"), D("0.22"), D(str(f.evidence["term_usd_per_gpu_hour"]["commit_3y"]))
    assert (f.evidence["priced_per"], f.evidence["steady_gpus"]) == ("gpu", 8)
    assert f.impact_usd == D(2568) * od - D(2688) * c1 == D("307.44")
    assert f.evidence["committed_gpu_hours"] == 2568.0
    assert f.evidence["unused_commitment"] == {"gpu_hours": 120.0, "usd": -26.4}
    assert D(2568) * (od - c1) - D("26.40") == f.impact_usd
    assert f.evidence["savings_per_year_usd"] == {
        "commit_1y": float((D("307.44") * 8760 / 336).quantize(D("0.000001"))),
        "commit_3y": float(((D(2568) * (od - c3) - D(120) * c3) * 8760 / 336).quantize(D("0.000001"))),
    }
    assert "would have saved $307.44 in this window (after $26.40 of committed T4 GPU-hours" in f.summary
    assert "save $307.44" in f.title


def test_no_commitment_or_spot_advice_for_a_vm_that_did_no_work() -> None:
    """Seed 7's forgotten bob-a100-debug (8x A100 idle for 336 h) was advised a commitment beside
    its idle finding: a VM whose every hour read was idle is no demand to buy cheaper, but one to
    delete. A VM idle for a day between jobs is still steady demand."""
    busy = _a3_fleet(n=1)
    forgotten = [gpu(h, "train-1", util=0.0, idle=8) for h in range(336)]
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=busy + forgotten, prices=_snapshot()))
    assert [i["instance"] for i in f.evidence["instances"]] == ["train-0"]
    assert f.evidence["steady_machines"] == 1
    pausing = [gpu(h, "train-1", util=0.0 if h < 24 else 90.0, idle=8 if h < 24 else 0) for h in range(336)]
    (g,) = ev(CommitmentOpportunity(), inputs(gpu_hours=busy + pausing, prices=_snapshot()))
    assert g.evidence["steady_machines"] == 2
    restartable = {"job": "sweep-1"}
    idle_sweep = [gpu(h, "sweep-0", util=0.0, idle=8, labels=restartable) for h in range(336)]
    assert ev(SpotOpportunity(), inputs(gpu_hours=idle_sweep, prices=_snapshot())) == []
    working_sweep = [gpu(h, "sweep-0", labels=restartable) for h in range(336)]
    assert ev(SpotOpportunity(), inputs(gpu_hours=working_sweep, prices=_snapshot()))


def test_hours_before_the_export_begins_are_no_unused_commitment() -> None:
    """A window reaching a day before the export's first row (seed 11 read from Oct 31, its export
    from Nov 1) counted the 4 committed VMs' 24 hours before it as unused ($5,892.83 off a
    $36,430.90 saving); the saving is stated for the hours analysed, whole days or not."""
    fleet = [replace(r, hour=r.hour + timedelta(days=1)) for r in _a3_fleet()]
    billed = [cost(24 + h) for h in range(336)]
    (f,) = ev(CommitmentOpportunity(), inputs(billed, fleet, days=15, prices=_snapshot()))
    assert f.evidence["unused_commitment"]["machine_hours"] == 0.0
    assert f.impact_usd == 2 * (D(336) * (A3_OD - A3_1Y)).quantize(D("0.000001"))
    assert f.title.endswith("over 14 days") and "of the 336 hours analysed" in f.summary
    assert (f.window_start, f.window_end) == (T0 + timedelta(days=1), T0 + timedelta(days=15))
    short = replace(inputs(billed, fleet, days=15, prices=_snapshot()), window_end=T0 + timedelta(hours=24 + 180))
    (g,) = ev(CommitmentOpportunity(), short)
    assert g.title.endswith("over 7 days 12 hours")
    odd = replace(short, window_end=T0 + timedelta(hours=24 + 181))
    (h,) = ev(CommitmentOpportunity(), odd)
    assert h.title.endswith("over 7 days 13 hours")


def test_no_commitment_advice_for_spot_hours() -> None:
    rows = _a3_fleet(pricing_model="spot")
    assert ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=_snapshot())) == []


def test_per_gpu_pricing_when_the_machine_type_is_unknown_or_unpriced() -> None:
    rows = [replace(r, gpu_model="T4", gpus=4, gpu_hours=D(4)) for r in _a3_fleet()]
    for machine in (None, "n1-standard-16"):  # unknown; known but not in the book (GPUs extra)
        (f,) = ev(
            CommitmentOpportunity(),
            inputs(gpu_hours=[replace(r, machine_type=machine) for r in rows], prices=_snapshot()),
        )
        assert f.evidence["priced_per"] == "gpu" and f.evidence["steady_gpus"] == 8
        assert f.impact_usd == D(8 * 336) * (D("0.35") - D("0.22"))
    # a3 rows with a book that has no machine prices (the Catalog API): per GPU, and H100 has no
    # published commitment price there, so no advice rather than a guess
    assert ev(CommitmentOpportunity(), inputs(gpu_hours=_a3_fleet(), prices=_catalog())) == []


def test_spot_advice_for_a_known_machine_type_is_priced_per_machine() -> None:
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(machine_type="a3-highgpu-8g"), prices=_snapshot()))
    (line,) = f.evidence["instances"]
    assert (line["priced_per"], line["machine_type"], line["machine_hours"]) == (
        "machine",
        "a3-highgpu-8g",
        10.0,
    )
    assert f.impact_usd == (D(10) * (A3_OD - A3_SPOT)).quantize(D("0.000001"))
    assert line["price_source"] == f.evidence["price_source"] == CYCLENERD
    assert "priced per whole VM for a3-highgpu-8g" in f.summary
    # the Catalog API book has no machine prices: the same VM is priced per GPU
    (c,) = ev(SpotOpportunity(), inputs(gpu_hours=_sweep(machine_type="a3-highgpu-8g"), prices=_catalog()))
    assert c.evidence["instances"][0]["priced_per"] == "gpu"


def test_both_detectors_read_one_on_demand_view_and_a_narrower_window_its_own() -> None:
    """`on_demand_hours` is built once per inputs for the two detectors that read it; the narrower
    inputs `run_in_window` makes with `dataclasses.replace` must not reuse the wider one's."""
    from monitor.detectors.opportunities import on_demand_hours

    inp = inputs(gpu_hours=_a3_fleet(n=1), prices=_snapshot())
    first = on_demand_hours(inp, inp.window_end)
    assert on_demand_hours(inp, inp.window_end) is first and len(first) == 336
    later = T0 + timedelta(days=7)
    narrow = replace(inp, window_start=later)
    assert len(on_demand_hours(narrow, narrow.window_end)) == 168
    assert min(on_demand_hours(narrow, narrow.window_end)["hour"]) == later
    assert on_demand_hours(inp, inp.window_end) is first
    assert len(on_demand_hours(inp, T0 + timedelta(days=1))) == 24  # asked at another time: its own
