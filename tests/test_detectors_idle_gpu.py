"""idle_gpu: runs of idle hours per instance, the three stories and what was read, gaps, past runs,
and estimated -> billed."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from monitor.detectors.idle_gpu import MPS_FALLBACK, IdleGpu, IdleGpuConfig
from monitor.gpu_identity import row_identity
from monitor.model import Severity, fingerprint
from tests.test_detectors_common import D, FakePrices, H, at, cost, gpu, inputs


def pattern(spec: str, **kw) -> list:
    """One char per hour from hour 0: B busy, I all 8 GPUs idle (1% busy), L all idle at 8% busy (low, not
    ~0), P 2 of 8 idle, U unmonitored (billed, no utilization read), . no row."""
    rows = []
    for h, c in enumerate(spec):
        if c == "B":
            rows.append(gpu(h, util=90.0, **kw))
        elif c == "I":
            rows.append(gpu(h, util=1.0, idle=8, **kw))
        elif c == "L":
            rows.append(gpu(h, util=8.0, idle=8, **kw))
        elif c == "P":
            rows.append(gpu(h, util=60.0, idle=2, **kw))
        elif c == "U":
            rows.append(gpu(h, util=None, **kw))
    return rows


def run(rows, cfg: IdleGpuConfig | None = None, **kw):
    inp = inputs(gpu_hours=rows, **kw)
    return IdleGpu(cfg).evaluate(inp, inp.window_end)


CASES = [
    # spec, expected findings as (variant, idle hours), one per run of idle hours
    ("BBBB", []),
    ("BBIB", []),  # one idle hour between jobs is a pause, not waste
    ("BBIIBB", [("went_idle", 2)]),
    ("BBIIIIII", [("went_idle", 6)]),
    ("IIIIIIII", [("never_used", 8)]),
    ("UUIIII", [("idle", 4)]),  # utilization read from hour 2 only: nothing known about hours 0-1
    ("II.II", [("never_used", 4)]),  # one missing hour does not break a run (max_gap_hours = 1)
    ("BI..IB", []),  # two missing hours do: runs of 1 and 1
    ("BIUIB", [("went_idle", 2)]),  # an unmonitored hour is a gap, not a busy hour
    ("BIIBIIIB", [("went_idle", 2), ("went_idle", 3)]),  # two past runs: two findings
    ("BPPPB", [("went_idle", 3)]),  # 2 of 8 GPUs idle: their cost only
    ("IIIBBB", [("idle", 3)]),  # idle, then busy: neither forgotten nor "went idle"
]


@pytest.mark.parametrize(("spec", "expected"), CASES)
def test_idle_runs(spec, expected) -> None:
    findings = run(pattern(spec))
    assert [(f.evidence["variant"], f.evidence["idle_hours"]) for f in findings] == expected
    if not findings:
        return
    idle_per_hour = {"I": D(88), "P": D(22)}  # 8 or 2 GPUs x $11
    expected_usd = sum((idle_per_hour[c] for c in spec if c in "IP"), Decimal(0))
    assert sum(f.impact_usd for f in findings) == expected_usd  # every idle hour is in a long-enough run
    for f in findings:
        # evidence adds up to the impact, hour by hour and run by run
        assert sum(D(str(h["idle_cost_usd"])) for h in f.evidence["hours"]) == f.impact_usd
        assert sum(D(str(r["idle_cost_usd"])) for r in f.evidence["runs"]) == f.impact_usd
    assert len({f.fingerprint for f in findings}) == len(findings)


def test_wording_differs_between_forgotten_vm_and_hung_job() -> None:
    (forgotten,) = IdleGpu().evaluate(inputs(gpu_hours=pattern("IIII")), at(4))
    (hung,) = IdleGpu().evaluate(inputs(gpu_hours=pattern("BBIIII")), at(6))
    assert forgotten.title.startswith("Forgotten GPU VM train-0: 8× H100 unused for 4 h")
    assert "Stop or delete train-0" in forgotten.recommendation
    assert (
        hung.title == "Idle GPUs on train-0: 8× H100 went idle (possibly hung), idle for 4 h so far, $352.00"
    )
    assert "hung or finished job" in hung.recommendation
    assert hung.evidence["last_busy"] == "2026-11-02T01:00:00Z"
    assert hung.evidence["idle_since"] == "2026-11-02T02:00:00Z"
    assert hung.window_start == at(2) and hung.window_end == at(6)
    assert hung.scope.instance == "train-0" and hung.scope.zone == "us-central1-a"


B30 = "B" * 30
WORDING = [
    # spec, now (hour; None: the end of the 14-day window), variant, still idle, said, never said
    pytest.param(
        B30 + "I" * 6,
        36,
        "went_idle",
        True,
        [
            "Idle GPUs on train-0: 8× H100 went idle (possibly hung), idle for 6 h so far, $528.00",
            "was busy until 2026-11-03 06:00 UTC",
            "~0% busy",
            "Still idle",
            "job's logs",
            "NCCL",
        ],
        ["Forgotten", "unused", "no GPU activity"],
        id="the issue's hung VM: busy until 6 hours ago",
    ),
    pytest.param(
        B30 + "L" * 6,
        36,
        "went_idle",
        True,
        ["Idle GPUs on train-0: 8× H100 went idle, idle for 6 h so far, $528.00", "was busy until"],
        ["possibly hung", "Forgotten"],
        id="busy, then low but not ~0: went idle, not hung",
    ),
    pytest.param(
        "U" * 30 + "I" * 6,
        36,
        "idle",
        True,
        [
            "Idle GPUs on train-0: 8× H100 idle for 6 h, $528.00",
            "in the 6 hours of utilization read since 2026-11-03 06:00 UTC",
            "of 36 hours billed",
        ],
        ["Forgotten", "went idle", "any hour", "since 2026-11-02 00:00 UTC:"],
        id="first start: 6 hours read of 36 billed, no Forgotten claim",
    ),
    pytest.param(
        "I" * 36,
        36,
        "never_used",
        True,
        [
            "Forgotten GPU VM train-0: 8× H100 unused for 36 h, $3,168.00",
            "no GPU activity in any hour since 2026-11-02 00:00 UTC",
            "Stop or delete train-0",
        ],
        ["went idle", "utilization read"],
        id="all idle over the whole history: forgotten",
    ),
    pytest.param(
        "U" * 6 + "I" * (14 * 24 - 6),
        None,
        "never_used",
        True,
        [
            "Forgotten GPU VM train-0: 8× H100 unused for 330 h",
            "no GPU activity in the 330 hours of utilization read since 2026-11-02 06:00 UTC "
            "(of 336 hours billed since 2026-11-02 00:00 UTC)",
        ],
        ["any hour"],
        id="a notebook VM idle for two weeks, read from its 7th hour: forgotten, within what was read",
    ),
    pytest.param(
        "I" * 24,
        48,
        "never_used",
        False,
        ["Forgotten GPU VM train-0: 8× H100 unused for 24 h until 2026-11-03 00:00 UTC, $2,112.00"],
        ["Still idle", "Stop or delete"],
        id="a forgotten VM since deleted: a past finding",
    ),
    pytest.param(
        "B" * 24 + "I" * 24 + "B" * 48,
        96,
        "went_idle",
        False,
        [
            "Idle GPUs on train-0: 8× H100 went idle (possibly hung) for 24 h until 2026-11-04 00:00 UTC, "
            "$2,112.00",
            "then its GPUs sat idle for 24 hours until 2026-11-04 00:00 UTC",
            "job's logs",
        ],
        ["Still idle", "Forgotten"],
        id="a job that hung for a day, then resumed",
    ),
]


@pytest.mark.parametrize(("spec", "now", "variant", "still_idle", "said", "unsaid"), WORDING)
def test_words_never_claim_more_than_was_read(spec, now, variant, still_idle, said, unsaid) -> None:
    inp = inputs(gpu_hours=pattern(spec))
    (f,) = IdleGpu().evaluate(inp, inp.window_end if now is None else at(now))
    assert (f.evidence["variant"], f.evidence["still_idle"]) == (variant, still_idle)
    text = "\n".join([f.title, f.summary, f.recommendation])
    assert [s for s in said if s not in text] == []
    assert [s for s in unsaid if s in text] == []


def test_a_past_run_is_its_own_finding_reported_once() -> None:
    spec = "B" * 24 + "I" * 24 + "B" * 100 + "I" * 6  # hung for a day last week, resumed; hung again now
    rows = pattern(spec)
    now = at(len(spec))
    past, ongoing = IdleGpu().evaluate(inputs(gpu_hours=rows), now)
    assert (past.window_start, past.window_end, past.impact_usd) == (at(24), at(48), D(88 * 24))
    assert "until 2026-11-04 00:00 UTC" in past.title and not past.evidence["still_idle"]
    assert (ongoing.window_start, ongoing.impact_usd, ongoing.evidence["still_idle"]) == (
        at(148),
        D(528),
        True,
    )
    # the ongoing finding keeps the node's fingerprint (open findings and estimated -> billed carry over)
    assert ongoing.fingerprint == fingerprint("idle_gpu", row_identity(rows[-1]).scope())
    assert past.fingerprint != ongoing.fingerprint
    # reported once: the same fingerprints an hour later, and while the window slides over the run
    later = IdleGpu().evaluate(inputs(gpu_hours=pattern(spec + "I")), now + H)
    assert [f.fingerprint for f in later] == [past.fingerprint, ongoing.fingerprint]
    slid = replace(inputs(gpu_hours=rows), window_start=at(30))
    assert [f.fingerprint for f in IdleGpu().evaluate(slid, now)] == [past.fingerprint, ongoing.fingerprint]


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
    # the stretch is over: it is now a past run with its own fingerprint (its final length and cost)
    assert stopped.fingerprint != now_idle.fingerprint
    assert (
        "until 2026-11-02 06:00 UTC" in stopped.title and "went idle (possibly hung) for 4 h" in stopped.title
    )
    # the current hour's samples may not be polled yet: an hour late is still ongoing, even without gaps
    (polled_late,) = IdleGpu(IdleGpuConfig(max_gap_hours=0)).evaluate(inp, at(6) + H / 2)
    assert polled_late.evidence["still_idle"] and polled_late.fingerprint == now_idle.fingerprint


def test_a_run_ends_when_the_export_bills_on_without_it_not_when_the_clock_moves() -> None:
    """The demo's daemon flipped bob-a100-debug between "still idle" and a past run (two
    fingerprints, re-alerted) nine times in two minutes: measured to the clock, its latest hours
    not yet billed read as a stop. The run ends when the rest of the export is billed past it."""
    rows = pattern("BBIIII")
    disk = [cost(h, "storage.persistent_disk", "0.1", instance="data-disk") for h in range(6)]
    (at_six,) = IdleGpu().evaluate(inputs(disk, rows), at(6))
    (lagging,) = IdleGpu().evaluate(inputs(disk, rows), at(12))  # the whole export 6 h behind
    assert lagging.evidence["still_idle"] and lagging.fingerprint == at_six.fingerprint
    billed_on = disk + [cost(h, "storage.persistent_disk", "0.1", instance="data-disk") for h in range(6, 12)]
    (stopped,) = IdleGpu().evaluate(inputs(billed_on, rows), at(12))
    assert not stopped.evidence["still_idle"] and stopped.fingerprint != at_six.fingerprint
    # an export silent for over a day: measured to the clock less a day, the run is over
    (silent,) = IdleGpu().evaluate(inputs(disk, rows), at(40))
    assert not silent.evidence["still_idle"]
    # the rest billed on, but utilization (the node's only sign after its own lagging billing) was
    # read to hour 6 only: not seen stopping yet (the demo's bob-a100-debug, read to 12:00 of 17:00)
    read = {"*": ((at(0), at(6)),)}
    (unread,) = IdleGpu().evaluate(replace(inputs(billed_on, rows), utilization_coverage=read), at(12))
    assert unread.evidence["still_idle"] and unread.fingerprint == at_six.fingerprint
    read = {"*": ((at(0), at(12)),)}
    (read_on,) = IdleGpu().evaluate(replace(inputs(billed_on, rows), utilization_coverage=read), at(12))
    assert not read_on.evidence["still_idle"]


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
    assert "was busy until 2026-11-02 02:00 UTC" in late.summary and "hung job" in late.summary
    assert "Forgotten" not in late.title + late.summary
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


def test_a_stalled_utilization_poll_does_not_end_an_ongoing_run() -> None:
    # Billing keeps landing for hours whose utilization was not read (polling stalled): the idle run
    # is still the ongoing finding, under the same fingerprint, not a "past" one alerted anew.
    def evaluate(spec: str):
        inp = inputs(gpu_hours=pattern(spec))
        (f,) = IdleGpu().evaluate(inp, at(len(spec)))
        return f

    before, stalled = evaluate("BBIIII"), evaluate("BBIIIIUUUU")
    assert before.evidence["still_idle"] and stalled.evidence["still_idle"]
    assert stalled.fingerprint == before.fingerprint
    # a later hour whose utilization WAS read (busy) does end it
    ended = evaluate("BBIIIIB")
    assert not ended.evidence["still_idle"] and ended.fingerprint != before.fingerprint
