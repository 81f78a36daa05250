"""The Markdown report and the terminal table, from real detector findings."""

from __future__ import annotations

import json

from monitor.detectors import build_detectors, run_detectors
from monitor.jobs.config import JobsConfig
from monitor.render import findings_markdown, findings_table, findings_text
from tests.test_detectors_common import cost, gpu, inputs


def findings():
    gpus = [gpu(h, "train-0", util=90.0) for h in range(4)]
    gpus += [gpu(h, "train-0", util=0.5, idle=8, estimated=h >= 10) for h in range(4, 14)]
    gpus += [
        gpu(h, "forgotten-l4", util=0.0, idle=1, gpus=1, price="0.7", labels={"team": "research"})
        for h in range(60)
    ]
    hourly = [
        cost(h, "network.inter_zone", "3", instance="w|0", gib="300", sku="Network Inter Zone")
        for h in range(24)
    ]
    inp = inputs(hourly, gpus, days=1, provisional_hours=6)
    jobs = JobsConfig(budgets={"steady": 30000.0})
    return inp, run_detectors(inp, build_detectors({}, jobs=jobs), inp.window_end)


TOTALS = {"cost": 10500.0, "credits": -500.0, "net_cost": 10000.0}
ATTRIBUTION = [
    {
        "category": "compute",
        "subcategory": "compute.gpu",
        "pricing_model": "on_demand",
        "cost": 9000.0,
        "credits": -500.0,
        "net_cost": 8500.0,
    },
    {
        "category": "network",
        "subcategory": "network.inter_zone",
        "pricing_model": None,
        "cost": 1500.0,
        "credits": 0.0,
        "net_cost": 1500.0,
    },
]


def test_the_spend_sentence_adds_up_as_shown() -> None:
    # the analyze JSON rounds each total on its own (cost 10.006, credits -0.003, net 10.003):
    # "$10.00 net ($10.01 before $0.00 credits)" did not add up; credits are what the two differ by
    totals = {"cost": 10.01, "credits": 0.0, "net_cost": 10.0}
    md = findings_markdown([], totals, [], {"start": None, "end": None})
    assert "**Spend:** $10.00 net ($10.01 before -$0.01 credits), in USD." in md


def test_markdown_report_leads_with_impact_why_and_what_to_do() -> None:
    inp, fs = findings()
    window = {"start": inp.window_start, "end": inp.window_end, "provisional_from": inp.provisional_from}
    md = findings_markdown(fs, TOTALS, ATTRIBUTION, window)
    assert md.startswith("# GPU cost report: 2026-11-02 00:00 UTC → 2026-11-03 00:00 UTC\n")
    assert "**Spend:** $10,000.00 net ($10,500.00 before -$500.00 credits), in USD." in md
    assert "3 findings, $968.80 total impact (0 critical, 2 warning, 1 info)." in md
    # largest first; the idle job found partly from estimated prices says so
    first = md.index("### 1. [WARNING] Idle GPUs on train-0")
    assert first < md.index("### 2. [WARNING] Cross-zone traffic in VM w|0")
    assert "- **Impact:** $880.00 between 2026-11-02 04:00 UTC and 2026-11-02 14:00 UTC (estimated)" in md
    assert "- **What to do:** Check the job on train-0" in md
    # busy, then ~0% until its rows stop at 14:00: a past stretch, worded as such (not "Forgotten")
    assert "Idle GPUs on train-0: 8× H100 went idle (possibly hung) for 10 h until 2026-11-02 14:00 UTC" in md
    assert "Forgotten GPU VM forgotten-l4" in md  # idle in every hour read, from the window's first hour
    assert "- **Evidence:** 10 idle hours, 80.0 idle GPU-hours of 8× H100 = $880.00" in md
    assert "| 1 | warning | $880.00 | Idle GPUs on train-0" in md
    assert "w\\|0" in md  # table cells are escaped
    assert "forgotten-l4 (us-central1-a) [team=research]" in md
    assert "| compute.gpu | on_demand | $8,500.00 | 85.0% |" in md
    assert "*provisional*" in md


def test_markdown_accepts_the_json_form_and_an_empty_result() -> None:
    _, fs = findings()
    as_json = json.loads(json.dumps([f.to_dict() for f in fs]))
    assert findings_markdown(as_json, TOTALS, ATTRIBUTION) == findings_markdown(fs, TOTALS, ATTRIBUTION)
    empty = findings_markdown(
        [], TOTALS, [], {"start": "2026-11-02T00:00:00Z", "end": "2026-11-16T00:00:00Z"}
    )
    assert "No hidden costs found in this window." in empty


def test_table_and_plain_text() -> None:
    _, fs = findings()
    table = findings_table(fs)
    assert [c.header for c in table.columns] == ["Severity", "Impact", "Kind", "Scope", "Finding", "Notes"]
    assert table.row_count == 3
    text = findings_text(fs, width=200)
    assert "\x1b[" not in text
    lines = [ln for ln in text.splitlines() if "$" in ln]
    assert "$880.00" in lines[0] and "estimated" in lines[0]
    assert "[team=research]" in text  # label brackets are not swallowed as markup
    assert "Savings opportunities" not in text  # no advice among them: no second table


def every_kind():
    """One fleet with one problem of each kind."""
    from monitor.detectors import BudgetSpec
    from tests.test_detectors_common import D, FakePrices

    gpus, hourly = [], []
    for h in range(14 * 24):
        gpus.append(gpu(h, "steady-0"))
        gpus.append(gpu(h, "dark-0", util=None))
        day = h // 24
        hourly.append(
            cost(h, "compute.gpu", "100" if day != 12 else "400", instance="steady-0", labels={"job": "steady"})
        )
        hourly.append(cost(h, "orchestration.gke", "1", cluster="old", instance=None))
    gpus += [gpu(h, "hung-0", util=0.0, idle=8) for h in range(100, 110)]
    gpus += [gpu(h, "sweep-1") for h in range(10)]
    hourly += [cost(h, "network.inter_zone", "3", instance="w-0", gib="300") for h in range(24)]
    hourly += [cost(h, "network.inter_region", "3", instance="w-0", gib="150") for h in range(24)]
    inp = inputs(
        hourly,
        gpus,
        provisional_hours=48,
        prices=FakePrices(),
        budgets=(BudgetSpec(name="total", amount=D(10000)),),
    )
    jobs = JobsConfig(budgets={"steady": 30000.0})
    return inp, run_detectors(inp, build_detectors({}, jobs=jobs), inp.window_end)


def test_every_kind_renders_and_its_json_round_trips() -> None:
    from monitor.detectors import registered

    inp, fs = every_kind()
    assert {f.kind for f in fs} == set(registered())
    for f in fs:
        d = json.loads(json.dumps(f.to_dict()))
        assert d["impact_usd"] > 0 and d["fingerprint"] and d["recommendation"]
    md = findings_markdown(
        fs, TOTALS, ATTRIBUTION, {"start": inp.window_start, "end": inp.window_end}, top=20
    )
    assert md.count("- **What to do:**") == len(fs) == 10
    assert "- **Evidence:** 2026-11-14 (provisional): $9,624.00 vs $2,424.00 (+$7,200.00)" in md
    assert "dark-0 (us-central1-a): 336 h of 8× H100, $29,568.00" in md
    assert "16 H100 GPUs on demand in 336 of 336 hours" in md
    assert "sweep-1: 80.0 GPU-h (name pattern), $11.00 → $3.30/GPU-h" in md
    assert "336 hours with no compute in cluster old: $336.00 of $336.00" in md
    assert "Still idle" not in md  # hung-0 stopped reporting long before the end


def test_hourly_anomaly_evidence_lists_the_hours() -> None:
    from monitor.render import evidence_line

    hours = [
        {"hour": f"2026-11-13T{h:02d}:00:00Z", "spend_usd": 120.5, "baseline_usd": 40.0, "provisional": h > 6}
        for h in range(3, 9)
    ]
    line = evidence_line({"kind": "spend_anomaly", "evidence": {"granularity": "hourly", "hours": hours}})
    assert line == (
        "6 hours above baseline: 03:00Z: $120.50 vs $40.00; 04:00Z: $120.50 vs $40.00; "
        "05:00Z: $120.50 vs $40.00; 06:00Z: $120.50 vs $40.00 (+2 more hours)"
    )


def test_evidence_of_machine_priced_advice_reads_its_own_keys() -> None:
    """Seed 11's report read "(mean None, max None); per GPU-hour: on demand $0.00" and
    "$0.00 → $0.00/GPU-h": the advice is priced per whole machine and names machine keys."""
    from monitor.render import evidence_line

    commit = {
        "kind": "commitment_opportunity",
        "evidence": {
            "priced_per": "machine", "machine_type": "a3-highgpu-8g", "gpu_model": "H100 80GB",
            "steady_machines": 4, "hours": 336, "hours_at_or_above_steady": 336, "max_machines": 4.0,
            "mean_machines": 4.0, "on_demand_usd_per_machine_hour": 88.49,
            "term_usd_per_machine_hour": {"commit_1y": 61.38},
        },
    }  # fmt: skip
    assert evidence_line(commit) == (
        "4× a3-highgpu-8g (H100 80GB) on demand in 336 of 336 hours (mean 4.0, max 4.0);"
        " per machine-hour: on demand $88.49, commit_1y $61.38"
    )
    spot = {
        "kind": "spot_opportunity",
        "evidence": {
            "instances": [
                {"instance": "hp-2", "reason": "name pattern", "priced_per": "machine", "machine_type":
                 "a2-highgpu-8g", "machine_hours": 72.0, "gpu_hours": 576.0,
                 "on_demand_usd_per_machine_hour": 29.39, "spot_usd_per_machine_hour": 15.42},
                {"instance": "l4", "reason": "Spot elsewhere", "priced_per": "gpu", "gpu_hours": 10.0,
                 "on_demand_usd_per_gpu_hour": 0.56, "spot_usd_per_gpu_hour": 0.31},
            ]
        },
    }  # fmt: skip
    assert evidence_line(spot) == (
        "hp-2: 72.0 a2-highgpu-8g-h (name pattern), $29.39 → $15.42/a2-highgpu-8g-h; "
        "l4: 10.0 GPU-h (Spot elsewhere), $0.56 → $0.31/GPU-h"
    )
