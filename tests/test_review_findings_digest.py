"""Review of the day's commitment, digest and report commits (helper 77): figures found wrong.

A commitment's CUD credit spread over more usage rows than it covers leaves each row a share of a
credit rounded to the micro, as the export's amounts are summed (`GPUCOST_USD_MICROS`): the
on-demand parts of an hour then sum a hair under a whole count. `steady_count` counts that as
whole (`STEADY_SLACK`); the hours that reach it and the commitment nothing would use must count it
so too. Billing goes through the aggregate store and the SQL the daemon runs; prices are real price
books. Nothing of ours is mocked.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from monitor.detectors.commitment_opportunity import CommitmentOpportunity
from monitor.detectors.spot_opportunity import SpotOpportunity, SpotOpportunityConfig
from monitor.render import findings_markdown
from tests.test_detectors_common import gpu, inputs
from tests.test_partial_commitment import (
    A3_OD,
    A3_SPOT,
    CATALOG,
    DAYS,
    END,
    T4_1Y,
    T4_OD,
    _billed,
    _inputs,
    _snapshot,
    _t4,
    half_covered,
)

D = Decimal
T4_SPOT = D("0.14")  # catalog (tests/fakes/catalog_server.py): T4 us-central1 Spot


def test_a_fleet_a_micro_short_of_whole_reaches_its_steady_count_every_hour() -> None:
    # 12 VMs of one T4 under a commitment of 4, its credit spread alike: $0.35 x 4/12 a row, to the
    # micro -0.116667. Each row is 0.66666571 on demand, the hour 7.99998857: 8 steady GPUs, read
    # as reached in 0 of 168 hours, with "$0.00 of committed T4 GPU-hours no VM used"
    hours = _billed([_t4(h, f"infer-{i:02}", -116_667) for h in range(DAYS * 24) for i in range(12)])
    (f,) = CommitmentOpportunity().evaluate(_inputs(hours, CATALOG), END)
    e = f.evidence
    assert e["steady_gpus"] == 8
    assert e["hours_at_or_above_steady"] == 168
    assert (e["max_gpus"], e["mean_gpus"]) == (8.0, 8.0)  # not 7.99998857, as the mean is rounded
    assert e["unused_commitment"] == {"gpu_hours": 0.0, "usd": 0.0}
    assert "no VM used" not in f.summary, f.summary
    assert f.impact_usd.quantize(D("0.01")) == 8 * 168 * (T4_OD - T4_1Y) == D("174.72")


def test_a_machine_fleet_a_micro_short_of_a_whole_vm_reaches_it_every_hour() -> None:
    # 3 a3-highgpu-8g, each two thirds covered by a credit of -58.666667 of $88.00: 0.99999998 of
    # a VM an hour on demand, 1 steady VM. The analyze Markdown said it ran "on demand in 0 of 168
    # hours" under a summary saying 90% of them, "after $0.00 of committed a3-highgpu-8g hours no
    # VM used"
    rows = [
        replace(gpu(h, f"train-{i}", pricing_model="committed"), gpu_cud=D("-58.666667"))
        for h in range(DAYS * 24)
        for i in range(3)
    ]
    (f,) = CommitmentOpportunity().evaluate(inputs(gpu_hours=rows, days=DAYS, prices=_snapshot()), END)
    e = f.evidence
    assert (e["priced_per"], e["steady_machines"], e["hours_at_or_above_steady"]) == ("machine", 1, 168)
    assert (e["max_machines"], e["mean_machines"]) == (1.0, 1.0)  # not 0.99999998
    assert e["unused_commitment"] == {"machine_hours": 0.0, "usd": 0.0}
    assert "no VM used" not in f.summary, f.summary
    assert "on demand in 168 of 168 hours" in findings_markdown([f])
    # the lines, less nothing unused, are the saving
    assert f.impact_usd == sum(D(str(i["savings_usd"])) for i in e["instances"])
    assert f.impact_usd.quantize(D("0.01")) == D("4553.86")


def test_a_real_dip_below_the_steady_count_is_still_paid_for() -> None:
    # the slack is for micro-rounded shares, not for a VM missing: 4 T4s on demand but 3 in one
    # hour leaves 1 committed GPU-hour unused ($0.22 at the 1-year price)
    rows = [_t4(h, f"infer-{i}", 0) for h in range(DAYS * 24) for i in range(4) if h or i]
    (f,) = CommitmentOpportunity().evaluate(_inputs(_billed(rows), CATALOG), END)
    e = f.evidence
    assert (e["steady_gpus"], e["hours_at_or_above_steady"]) == (4, 167)
    assert e["unused_commitment"] == {"gpu_hours": 1.0, "usd": -0.22}
    assert f.impact_usd == 671 * (T4_OD - T4_1Y) - T4_1Y == D("87.01")


def test_a_lone_half_covered_vm_is_not_advised_onto_spot() -> None:
    # the sweep VM alone, a commitment of half of it: on Spot it pays $50.61 an hour and the
    # commitment covers nothing, saving the $44.25 of its uncovered half: $63.65 more over 10 h.
    # It was advised onto Spot "to save $189.40" (5 uncovered hours x $88.49 - $50.61)
    rows = half_covered("sweep-lr-3")
    inp = inputs(gpu_hours=rows, prices=_snapshot())
    assert SpotOpportunity().evaluate(inp, inp.window_end) == []
    # on demand, as before: its 10 hours on Spot
    on_demand = replace(inp, gpu_hours=[replace(r, pricing_model="on_demand", gpu_cud=D(0)) for r in rows])
    (f,) = SpotOpportunity().evaluate(on_demand, inp.window_end)
    assert f.impact_usd == (10 * (A3_OD - A3_SPOT)).quantize(D("0.000001")) == D("378.804591")


def test_a_partly_covered_restartable_gpu_frees_its_whole_hours_to_the_rest_of_the_fleet() -> None:
    # `_twelve_t4s`' fleet (4 T4s an hour uncovered) with its half-covered infer-07 a sweep: moved to
    # Spot, the commitment covers another's uncovered GPU in its place, so each of its 168 hours saves
    # $0.35 - $0.14 = $35.28, not $17.64 on its uncovered half
    cud = [-350_000] * 7 + [-175_000] * 2 + [0] * 3
    names = [f"infer-{i:02}" for i in range(12)]
    names[7] = "sweep-07"
    hours = _billed([_t4(h, names[i], cud[i]) for h in range(DAYS * 24) for i in range(12)])
    (f,) = SpotOpportunity(SpotOpportunityConfig(min_impact_usd=D(0))).evaluate(_inputs(hours, CATALOG), END)
    (line,) = f.evidence["instances"]
    assert (line["instance"], line["priced_per"], line["gpu_hours"]) == ("sweep-07", "gpu", 168.0)
    assert f.impact_usd == 168 * (T4_OD - T4_SPOT) == D("35.28")


def test_restartable_vms_share_what_the_fleet_has_on_demand() -> None:
    # two half-covered sweep VMs and no other, a commitment of one VM over both: the first moved
    # saves its whole hours (the commitment then covers the other whole); the second, moved too,
    # would leave the commitment covering nothing: $50.61 an hour on Spot for nothing saved. Each
    # was advised on its uncovered half, $189.40 twice, where moving both costs $127.29 more
    both = half_covered("sweep-a", "sweep-b")
    inp = inputs(gpu_hours=both, prices=_snapshot())
    (f,) = SpotOpportunity().evaluate(inp, inp.window_end)
    (line,) = f.evidence["instances"]  # one moved, the commitment covers the other whole
    assert (line["instance"], line["machine_hours"]) == ("sweep-a", 10.0)
    assert f.impact_usd == (10 * (A3_OD - A3_SPOT)).quantize(D("0.000001"))
