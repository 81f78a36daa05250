"""idle_gpu: runs of idle hours per instance, the two stories, gaps, and estimated -> billed."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from monitor.detectors.idle_gpu import MPS_FALLBACK, IdleGpu, IdleGpuConfig
from monitor.model import Severity
from tests.test_detectors_common import D, FakePrices, at, gpu, inputs


def pattern(spec: str, **kw) -> list:
    """One char per hour from hour 0: B busy, I all 8 GPUs idle, P 2 of 8 idle, U unmonitored, . no row."""
    rows = []
    for h, c in enumerate(spec):
        if c == "B":
            rows.append(gpu(h, util=90.0, **kw))
        elif c == "I":
            rows.append(gpu(h, util=1.0, idle=8, **kw))
        elif c == "P":
            rows.append(gpu(h, util=60.0, idle=2, **kw))
        elif c == "U":
            rows.append(gpu(h, util=None, **kw))
    return rows


def run(rows, cfg: IdleGpuConfig | None = None, **kw):
    inp = inputs(gpu_hours=rows, **kw)
    return IdleGpu(cfg).evaluate(inp, inp.window_end)


CASES = [
    # spec, expected variant (None = no finding), idle hours counted
    ("BBBB", None, 0),
    ("BBIB", None, 0),  # one idle hour between jobs is a pause, not waste
    ("BBIIBB", "went_idle", 2),
    ("BBIIIIII", "went_idle", 6),
    ("IIIIIIII", "never_used", 8),
    ("UUIIII", "never_used", 4),  # unmonitored hours are not busy
    ("II.II", "never_used", 4),  # one missing hour does not break a run (max_gap_hours = 1)
    ("BI..IB", None, 0),  # two missing hours do: runs of 1 and 1
    ("BIUIB", "went_idle", 2),  # an unmonitored hour is a gap, not a busy hour
    ("BIIBIIIB", "went_idle", 5),  # two runs, both counted in one finding
    ("BPPPB", "went_idle", 3),  # 2 of 8 GPUs idle: their cost only
]


@pytest.mark.parametrize(("spec", "variant", "hours"), CASES)
def test_idle_runs(spec, variant, hours) -> None:
    findings = run(pattern(spec))
    if variant is None:
        assert findings == []
        return
    (f,) = findings
    assert f.evidence["variant"] == variant
    assert f.evidence["idle_hours"] == hours
    idle_per_hour = {"I": D(88), "P": D(22)}  # 8 or 2 GPUs x $11
    expected = sum((idle_per_hour[c] for c in spec if c in "IP"), Decimal(0))
    assert f.impact_usd == expected  # in these cases every idle hour belongs to a long-enough run
    # evidence adds up to the impact, hour by hour and run by run
    assert sum(D(str(h["idle_cost_usd"])) for h in f.evidence["hours"]) == f.impact_usd
    assert sum(D(str(r["idle_cost_usd"])) for r in f.evidence["runs"]) == f.impact_usd


def test_wording_differs_between_forgotten_vm_and_hung_job() -> None:
    (forgotten,) = run(pattern("IIII"))
    (hung,) = run(pattern("BBIIII"))
    assert forgotten.title.startswith("Forgotten GPU VM train-0: 8× H100 unused for 4 h")
    assert "Stop or delete train-0" in forgotten.recommendation
    assert hung.title == "Idle GPUs on train-0: 8× H100 idle for 4 h, $352.00"
    assert "hung or finished job" in hung.recommendation
    assert hung.evidence["last_busy"] == "2026-11-02T01:00:00Z"
    assert hung.evidence["idle_since"] == "2026-11-02T02:00:00Z"
    assert hung.window_start == at(2) and hung.window_end == at(6)
    assert hung.scope.instance == "train-0" and hung.scope.zone == "us-central1-a"


def test_memory_held_is_called_out() -> None:
    rows = pattern("BB") + [gpu(h, util=0.0, idle=8, memory_held=True) for h in range(2, 5)]
    (f,) = run(rows)
    assert f.evidence["memory_held_hours"] == 3
    assert "GPU memory stayed allocated" in f.summary


@pytest.mark.parametrize(
    ("impact_hours", "severity"),
    [(1, None), (2, Severity.WARNING), (11, Severity.WARNING), (12, Severity.CRITICAL)],
)
def test_severity_by_impact(impact_hours, severity) -> None:
    # 1 idle L4-priced GPU: $44/h with a 4-GPU VM, min 2 hours
    rows = [gpu(0, util=90.0, gpus=4, price="1")]
    rows += [gpu(h, util=0.0, idle=4, gpus=4, price="22") for h in range(1, 1 + impact_hours)]
    findings = run(rows)
    if severity is None:
        assert findings == []
    else:
        assert findings[0].severity is severity
        assert findings[0].impact_usd == 88 * impact_hours


def test_min_impact_drops_small_findings() -> None:
    rows = [gpu(h, util=0.0, idle=1, gpus=1, price="0.56") for h in range(5)]  # $2.80 of idle L4
    assert run(rows) == []
    (f,) = run(rows, IdleGpuConfig(min_impact_usd=D(1)))
    assert f.severity is Severity.INFO and f.impact_usd == D("2.80")


def test_min_idle_share() -> None:
    assert run(pattern("BPPPB"), IdleGpuConfig(min_idle_share=0.5)) == []
    assert len(run(pattern("BIIIB"), IdleGpuConfig(min_idle_share=0.5))) == 1


def test_estimated_then_billed_keeps_the_fingerprint_and_replaces_the_impact() -> None:
    estimated = pattern("BBIIII", estimated=True, labels={"team": "research"})
    (early,) = run(estimated, provisional_hours=400)
    assert early.estimated and early.provisional
    assert (early.evidence["estimated_hours"], early.evidence["estimated_cost_usd"]) == (4, 352.0)
    assert "4 of the hours ($352.00) are priced from list prices" in early.summary
    (sourced,) = run(estimated, provisional_hours=400, prices=FakePrices())
    assert sourced.evidence["price_source"] == "test price table"
    assert "priced from list prices (test price table)" in sourced.summary
    # billing lands: slightly different price, labels from the billing row, no estimate
    billed = pattern("BBIIII", price="10.50", labels={"team": "research", "job": "llm-7b"})
    (late,) = run(billed, provisional_hours=0)
    assert not late.estimated and not late.provisional
    assert late.fingerprint == early.fingerprint
    assert (early.impact_usd, late.impact_usd) == (D(352), D(336))
    # both at once (reconciliation in progress): billed hours win, nothing counted twice
    (mixed,) = run(estimated + billed)
    assert mixed.impact_usd == D(336) and not mixed.estimated
    assert mixed.evidence["estimated_hours"] == 0 and "list prices" not in mixed.summary


def test_each_instance_is_its_own_finding() -> None:
    rows = pattern("IIII", instance="a") + pattern("BBII", instance="b") + pattern("BBBB", instance="c")
    findings = run(rows)
    assert sorted(f.scope.instance for f in findings) == ["a", "b"]
    assert len({f.fingerprint for f in findings}) == 2


def test_hours_outside_the_window_or_after_now_are_ignored() -> None:
    rows = pattern("BBIIII")
    inp = inputs(gpu_hours=rows)
    assert IdleGpu().evaluate(inp, at(3)) == []  # only idle hour 2 is before now
    assert IdleGpu().evaluate(inp, at(4))[0].evidence["idle_hours"] == 2
    (f,) = IdleGpu().evaluate(inp, at(5))
    assert f.evidence["idle_hours"] == 3
    short = inputs(gpu_hours=rows)
    short = type(short)(**{**short.__dict__, "window_start": at(3)})
    assert IdleGpu().evaluate(short, at(5))[0].evidence["idle_hours"] == 2
    assert IdleGpu().evaluate(short, at(4)) == []


def test_still_idle_only_when_the_idle_run_reaches_the_end_of_the_data() -> None:
    rows = pattern("BBIIII")
    inp = inputs(gpu_hours=rows)
    (now_idle,) = IdleGpu().evaluate(inp, at(6))
    (stopped,) = IdleGpu().evaluate(inp, at(12))  # no rows after hour 5: the VM was stopped
    assert now_idle.evidence["still_idle"] and "Still idle" in now_idle.summary
    assert not stopped.evidence["still_idle"] and "Still idle" not in stopped.summary


# ------------------------------------------------------------------- GKE identity, effective price

NODE = "gke-h100-train-a3-pool-1a2b3c4d-x9k2"  # gke-<cluster>-<pool>-<8 hex>-<4>, see test_gke_identity


def gke(rows: list, *, estimated: bool = False) -> list:
    """The rows as a GKE node's: estimated rows (from node samples) have no instance id."""
    return [
        replace(
            r,
            instance=NODE,
            instance_id=None if estimated else "4242",
            cluster="h100-train",
            node_pool="a3-pool",
            estimated=estimated,
            signal="node_duty_cycle",
            container_metrics=False,
        )
        for r in rows
    ]


def test_gke_estimated_then_billed_keeps_one_fingerprint_and_names_the_pool() -> None:
    (early,) = run(gke(pattern("BBIIII"), estimated=True))
    (late,) = run(gke(pattern("BBIIII")))
    assert early.fingerprint == late.fingerprint
    gce = run(pattern("BBIIII", instance=NODE))  # the same name as a plain VM is another node
    assert gce[0].fingerprint != late.fingerprint
    assert late.title.startswith(f"Idle GPUs on GKE node {NODE} (h100-train/a3-pool)")
    assert "kubectl get pods -A --field-selector spec.nodeName=" in late.recommendation
    assert (late.evidence["cluster"], late.evidence["node_pool"]) == ("h100-train", "a3-pool")
    assert late.evidence["signal_note"] == MPS_FALLBACK and "time-shared/MPS" in late.summary


def test_idle_dollars_at_the_effective_price_and_the_on_demand_equivalent() -> None:
    # $88 gross per hour, a $60 commitment credit: idle dollars are $28 per all-idle hour
    rows = [
        replace(r, gpu_credits=D(-60), idle_cost=D(28) if r.idle_gpu_hours else D(0)) for r in pattern("BIII")
    ]
    (f,) = run(rows)
    assert f.impact_usd == D(84) and f.evidence["idle_cost_on_demand_usd"] == 264.0
    assert f.evidence["hours"][0]["gpu_credits_usd"] == -60.0
    assert "$264.00 on demand" in f.summary and not f.evidence["reserved"]


def test_reserved_gpus_at_zero_dollars_raise_an_info_finding() -> None:
    rows = [replace(r, gpu_cost=D(0), idle_cost=D(0), pricing_model="reserved") for r in pattern("IIII")]
    (f,) = run(rows, prices=FakePrices())
    assert (f.impact_usd, f.severity, f.evidence["reserved"]) == (D(0), Severity.INFO, True)
    assert f.evidence["idle_gpu_hours"] == 32.0 and f.evidence["idle_cost_on_demand_usd"] == 352.0
    assert run([replace(r, gpu_cost=D(0), idle_cost=D(0)) for r in pattern("I")]) == []  # one hour: a pause
