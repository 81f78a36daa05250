"""GPU hours a commitment covers only in part: the uncovered rest is on demand to the opportunities.

The export bills committed GPU-hours at the on-demand SKU and offsets them with a
`COMMITTED_USAGE_DISCOUNT` credit (../shared/reference/gcp.md), which Google spreads over the usage
rows it covers, so a commitment smaller than the fleet leaves rows whose CUD credit is smaller than
their cost. Google's own CUD attribution tool tests on such rows
(GoogleCloudPlatform/professional-services@25d36a10, tools/cuds-prioritized-attribution/test/tests/,
hand-made rows in the real export schema, copied to ../shared/data/external/gcp-billing-schema-psp):
`N1 Standard Instance Ram running in Americas`, cost 100 with `Committed Usage Discount: RAM` -10.00
and cost 70 with -20.00 (test_6_1/export.json), cost 35 with -20.0 and cost 70 with -30.0
(test_10_1/export.json); the same file has cost 35 with -50.0, a credit larger than its row. Any row
with a CUD credit is `committed` in the attribution (`GPUCOST_PRICING_MODEL`), so the opportunity
detectors, which priced `on_demand` rows only, missed the uncovered GPU-hours of those rows.

Billing goes through the aggregate store and the SQL the daemon runs (`tests.aggregates.stored`);
prices are real price books (the Catalog parser over `tests/fakes/catalog_server.py`'s real SKUs,
the bundled snapshot). Nothing of ours is mocked.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from monitor.assemble import assemble_inputs, gpu_hours, gpu_node_hours, judged_gpu_hours
from monitor.billing_poll import HourlyCost, NodeHours
from monitor.detectors.commitment_opportunity import CommitmentOpportunity
from monitor.detectors.inputs import (
    DetectorInputs,
    GpuHour,
    JudgedGpuHours,
    PriceLookup,
    UnmonitoredGpuHours,
    with_on_demand_part,
)
from monitor.detectors.spot_opportunity import SpotOpportunity
from monitor.sources.pricing import SnapshotPriceSource, book_from_skus
from monitor.state import SQLiteStore
from monitor.utilization import util_hours
from monitor.utilization.hourly import UtilHours
from monitor.utilization.state import migrate as migrate_utilization
from tests.aggregates import stored
from tests.fakes.catalog_server import REAL_SKUS
from tests.test_analyze import samples
from tests.test_detectors_common import gpu, inputs

D = Decimal
T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
DAYS = 7  # `commitment_opportunity`'s least window
END = T0 + DAYS * 24 * H
Q6 = D("0.000001")
CATALOG = book_from_skus(REAL_SKUS, datetime(2026, 11, 2, 8, tzinfo=UTC))
# catalog (tests/fakes/catalog_server.py): T4 us-central1 on demand 0.35, 1-year 0.22, Spot 0.14
T4_OD, T4_1Y = D("0.35"), D("0.22")
# snapshot (Cyclenerd pricing.yml@fd66b26f, as tests/test_detectors_opportunities.py): a3-highgpu-8g
# us-central1 per hour on demand 88.4899999025753, Spot 50.6095408219178, 1-year 44810.08066464 / 730
A3_OD, A3_SPOT, A3_1Y = D("88.4899999025753"), D("50.6095408219178"), D("61.383672143")


def _snapshot() -> PriceLookup:
    return SnapshotPriceSource().price_book(datetime(2026, 12, 2, tzinfo=UTC))


def _t4(hour: int, name: str, cud: int, gross: int = 350_000) -> HourlyCost:
    """One T4-hour of an n1-standard-4 VM (its machine price unknown: priced per GPU) with `cud`
    micros of CUD credit; `committed` when it has one, as `GPUCOST_PRICING_MODEL` says."""
    return HourlyCost(
        usage_hour=T0 + hour * H,
        subcategory="compute.gpu",
        gross_micros=gross,
        cud_micros=cud,
        sud_micros=0,
        other_credit_micros=0,
        credit_micros=cud,
        net_micros=gross + cud,
        row_count=1,
        provisional=False,
        keys={
            "project_id": "ml",
            "zone": "us-central1-a",
            "region": "us-central1",
            "resource_name": name,
            "instance_id": f"id-{name}",
            "machine_type": "n1-standard-4",
            "sku_description": "Nvidia Tesla T4 GPU running in Americas",
            "pricing_model": "committed" if cud else "on_demand",
            "currency": "USD",
        },
        usage_amount=1.0,
    )


def _twelve_t4s() -> list[HourlyCost]:
    """12 VMs of one T4 under a commitment of 8: the credit covers 7 VMs whole and 2 by half;
    3 run on demand. 4 GPUs an hour are uncovered."""
    cud = [-350_000] * 7 + [-175_000] * 2 + [0] * 3
    return [_t4(h, f"infer-{i:02}", cud[i]) for h in range(DAYS * 24) for i in range(12)]


def _billed(rows: list[HourlyCost]) -> list[GpuHour]:
    """The GPU hours of `rows`, as the daemon joins them (no utilization)."""
    return gpu_hours(gpu_node_hours(stored(rows), T0, END, END), UtilHours.of([]), 10.0, None, END, END)


def _inputs(hours: list[GpuHour], prices: PriceLookup) -> DetectorInputs:
    return DetectorInputs(
        window_start=T0, window_end=END, provisional_from=END, gpu_hours=hours, prices=prices
    )


def test_a_commitment_short_of_the_fleet_leaves_its_uncovered_gpus_to_commit() -> None:
    hours = _billed(_twelve_t4s())
    half = next(h for h in hours if h.instance == "infer-07")
    assert (half.pricing_model, half.gpu_cost, half.gpu_cud) == ("committed", D("0.35"), D("-0.175"))
    assert half.on_demand_share == D("0.5") and half.on_demand_gpu_hours == D("0.5")
    (f,) = CommitmentOpportunity().evaluate(_inputs(hours, CATALOG), END)
    # 4 uncovered GPUs every hour (read as 3 when half-covered rows counted as committed whole:
    # $65.52 for 3 x 168 GPU-hours)
    assert (f.evidence["steady_gpus"], f.evidence["committed_gpu_hours"]) == (4, 672.0)
    assert f.evidence["unused_commitment"] == {"gpu_hours": 0.0, "usd": 0.0}
    assert f.impact_usd == 4 * 168 * (T4_OD - T4_1Y) == D("87.36")


def test_a_credit_spread_over_every_vm_leaves_a_whole_uncovered_vm_to_commit() -> None:
    # 3 a3-highgpu-8g under a commitment of 2, its credit spread alike over the 3 (2/3 of each
    # row's $90.00): 1 VM an hour uncovered, a third of each. Each third is 1/3 to Decimal's 28
    # digits, the hour's sum 0.999...9: still 1 steady VM (`STEADY_SLACK`)
    rows = [
        replace(gpu(h, f"train-{i}", price="11.25", pricing_model="committed"), gpu_cud=D("-60.00"))
        for h in range(DAYS * 24)
        for i in range(3)
    ]
    assert sum(r.on_demand_share for r in rows[:3]) < 1
    (f,) = CommitmentOpportunity().evaluate(inputs(gpu_hours=rows, days=DAYS, prices=_snapshot()), END)
    e = f.evidence
    assert (e["priced_per"], e["steady_machines"]) == ("machine", 1)
    assert [(i["instance"], round(i["committed_machine_hours"], 6)) for i in e["instances"]] == [
        ("train-0", 56.0),
        ("train-1", 56.0),
        ("train-2", 56.0),
    ]
    # 168 x 3 thirds short of 168 machine-hours by 1e-24: nothing to pay for
    assert e["unused_commitment"]["usd"] == 0.0 and e["unused_commitment"]["machine_hours"] < 1e-20
    assert f.impact_usd.quantize(D("0.01")) == (168 * (A3_OD - A3_1Y)).quantize(D("0.01")) == D("4553.86")
    # credits rounded to the micro, as the export's are (-58.666667 of 88.00): the same VM
    rounded = [replace(gpu(h, f"train-{i}", pricing_model="committed"), gpu_cud=D("-58.666667"))
               for h in range(DAYS * 24) for i in range(3)]  # fmt: skip
    (g,) = CommitmentOpportunity().evaluate(inputs(gpu_hours=rounded, days=DAYS, prices=_snapshot()), END)
    assert g.evidence["steady_machines"] == 1
    assert g.impact_usd.quantize(D("0.01")) == D("4553.86")


def half_covered(*names: str) -> list[GpuHour]:
    """10 hours of each of the VMs `names` (a3-highgpu-8g at $88, `gpu`'s), half of each hour's
    cost covered by a CUD credit ($44)."""
    return [
        replace(gpu(h, name, pricing_model="committed"), gpu_cud=D("-44.00"))
        for h in range(10)
        for name in names
    ]


def test_a_partly_covered_restartable_vm_is_priced_for_spot_as_the_fleet_frees_it() -> None:
    # a sweep VM beside a training VM of its type, a commitment of one VM spread over both (each
    # half covered): moved to Spot, the commitment covers the training VM whole, so the sweep VM's
    # 10 hours each save on-demand - Spot (helper 77: priced on its uncovered half, $189.40)
    rows = half_covered("sweep-lr-3", "train-0")
    inp = inputs(gpu_hours=rows, prices=_snapshot())
    (f,) = SpotOpportunity().evaluate(inp, inp.window_end)
    (line,) = f.evidence["instances"]
    assert (line["instance"], line["machine_hours"], line["gpu_hours"]) == ("sweep-lr-3", 10.0, 80.0)
    assert "committed_machine_hours_left" not in line
    assert f.impact_usd == (10 * (A3_OD - A3_SPOT)).quantize(Q6) == D("378.804591")
    # covered whole: nothing on demand, no advice
    whole = replace(inp, gpu_hours=[replace(r, gpu_cud=D("-88.00")) for r in rows])
    assert SpotOpportunity().evaluate(whole, inp.window_end) == []


@pytest.mark.parametrize(
    ("pricing", "gross", "cud", "share"),
    [
        ("on_demand", "88.00", "0", "1"),
        ("committed", "88.00", "-88.00", "0"),  # covered whole
        ("committed", "100", "-10.00", "0.9"),  # psp test_6_1: RAM cost 100, CUD -10.00
        ("committed", "70", "-20.00", "0.7142857142857142857142857143"),  # psp test_6_1: 70, -20.00
        ("committed", "35", "-50.0", "0"),  # psp test_10_1: a credit larger than its row, clamped
        ("on_demand", "88.00", "-22.00", "0.75"),  # a node-hour whose first row is on demand
        ("committed", "88.00", "0", "0"),  # committed by a rule, no credit to tell: covered
        ("committed", "0", "-1.00", "0"),  # nothing billed: nothing to buy cheaper
        ("spot", "40.00", "0", "0"),
        ("reserved", "0", "0", "0"),
    ],
)
def test_the_on_demand_share_of_an_hour(pricing: str, gross: str, cud: str, share: str) -> None:
    h = replace(gpu(0, pricing_model=pricing), gpu_cost=D(gross), gpu_cud=D(cud))
    assert h.on_demand_share == D(share)
    assert h.on_demand_gpu_hours == h.gpu_hours * D(share)


def _busy(hours: range) -> UtilHours:
    """Every VM of `_twelve_t4s` monitored and busy: `judged_gpu_hours` reads none of them whole."""
    return UtilHours.of(
        util_hours(
            [s for h in hours for i in range(12)
             for s in samples(h, 90.0, iid=f"id-infer-{i:02}", name=f"infer-{i:02}", gpus=1)]
        )
    )  # fmt: skip


def test_the_store_reads_the_partly_covered_hours_with_the_on_demand_ones() -> None:
    """`analyze` reads only the node-hours the opportunities price (`NodeHours.on_demand_part`,
    `judged_gpu_hours`): the partly covered committed ones are among them, the covered ones not."""
    end = T0 + 2 * H
    store = stored(_twelve_t4s()[:24])  # two hours
    every = gpu_hours(gpu_node_hours(store, T0, end, end), UtilHours.of([]), 10.0, None, end, end)
    wanted = [h for h in every if h.on_demand_share > 0]
    assert [h.instance for h in wanted] == [f"infer-{i:02}" for i in range(7, 12)] * 2
    only = gpu_node_hours(store, T0, end, end, only=NodeHours(on_demand_part=True))
    assert gpu_hours(only, UtilHours.of([]), 10.0, None, end, end) == wanted
    # busy and monitored, over three hours: of the first only those with an on-demand part are read
    # (the others are each node's latest and the hour before it, which an estimate would read)
    store.close()
    store, end = stored(_twelve_t4s()[:36]), T0 + 3 * H
    util = _busy(range(3))
    judged, _ = judged_gpu_hours(store, util, T0, end, end, 10.0, None)
    assert [h.instance for h in judged.rows() if h.hour == T0] == [f"infer-{i:02}" for i in range(7, 12)]
    assert with_on_demand_part(JudgedGpuHours(judged, list, 0).on_demand_table().rows()) == [
        h for h in gpu_hours(gpu_node_hours(store, T0, end, end), util, 10.0, None, end, end)
        if h.on_demand_share > 0
    ]  # fmt: skip


def test_an_estimated_hour_keeps_the_share_its_node_was_covered() -> None:
    """Utilization ahead of billing: the hour is priced from the price book, its CUD credit in
    the ratio of its node's latest billed hour (`monitor.assemble._estimate_hour`)."""
    store = stored(_twelve_t4s()[:24])  # billed hours 0 and 1, utilization up to hour 2
    hours = gpu_hours(
        gpu_node_hours(store, T0, T0 + 2 * H, T0), _busy(range(3)), 10.0, CATALOG, T0 + 3 * H, T0
    )
    estimated = {h.instance: h for h in hours if h.estimated}
    assert len(estimated) == 12 and {h.hour for h in estimated.values()} == {T0 + 2 * H}
    half = estimated["infer-07"]  # (its GPU count is `gpus_from_usage`'s, not asserted here)
    assert (half.pricing_model, half.on_demand_share) == ("committed", D("0.5"))
    assert half.gpu_cud == -(half.gpu_cost / 2).quantize(Q6) < 0
    assert estimated["infer-00"].on_demand_share == 0 and estimated["infer-11"].on_demand_share == 1


def test_billing_only_inputs_defer_to_the_partly_covered_hours_too(tmp_path: Path) -> None:
    state = SQLiteStore(tmp_path / "state.sqlite")
    migrate_utilization(state)
    deferred = assemble_inputs(
        state, T0, END, END, aggregates=stored(_twelve_t4s()), provisional_days=1,
        idle_threshold_pct=10.0, prices=CATALOG, defer=True,
    )  # fmt: skip
    try:
        assert isinstance(deferred.gpu_hours, UnmonitoredGpuHours)
        (f,) = CommitmentOpportunity().evaluate(deferred, END)
        assert (f.evidence["steady_gpus"], f.impact_usd) == (4, D("87.36"))
        assert deferred.gpu_hours.fetched == 5 * DAYS * 24  # the 7 VMs covered whole are not read
    finally:
        deferred.hourly.close()  # type: ignore[union-attr]
        state.close()
