"""unmonitored_gpu, idle_orchestration, commitment_opportunity, spot_opportunity."""

from __future__ import annotations

import pytest

from monitor.detectors.commitment_opportunity import CommitmentOpportunity, CommitmentOpportunityConfig
from monitor.detectors.idle_orchestration import IdleOrchestration
from monitor.detectors.spot_opportunity import SpotOpportunity, SpotOpportunityConfig
from monitor.detectors.unmonitored_gpu import UnmonitoredGpu
from monitor.model import Severity
from tests.test_detectors_common import D, FakePrices, at, cost, gpu, inputs


def ev(det, inp):
    return det.evaluate(inp, inp.window_end)


# -- unmonitored_gpu ------------------------------------------------------------------------------------


def test_unmonitored_gpu_spend_per_project() -> None:
    rows = [gpu(h, "dark-0", util=None) for h in range(10)]  # 10 h x $88 = $880
    rows += [gpu(h, "dark-1", util=None, gpus=1, price="2") for h in range(3)]  # $6
    rows += [gpu(0, "boot-only", util=None)]  # a single hour: the agent was starting
    rows += [gpu(h, "seen", util=90.0) for h in range(10)]
    rows += [gpu(h, "other", util=None, project="p2", gpus=1, price="1") for h in range(10)]  # $10 < $50
    (f,) = ev(UnmonitoredGpu(), inputs(gpu_hours=rows))
    assert f.scope.project == "ml-prod" and f.impact_usd == 886
    assert [i["instance"] for i in f.evidence["instances"]] == ["dark-0", "dark-1"]
    assert f.severity is Severity.WARNING  # capped: spend without visibility is not proven waste
    assert "Ops Agent" in f.recommendation


def test_unmonitored_big_spend_is_capped_at_warning() -> None:
    rows = [gpu(h, "dark-0", util=None) for h in range(100)]
    (f,) = ev(UnmonitoredGpu(), inputs(gpu_hours=rows))
    assert f.impact_usd == 8800 and f.severity is Severity.WARNING


def test_unmonitored_gke_node_is_named_with_its_latest_cluster_and_node_pool() -> None:
    """A GKE node's hours out of order, its pool renamed midway: the evidence and the scope name
    the pool of its latest hour, whatever order the hours came in."""
    from dataclasses import replace

    rows = [
        replace(
            gpu(h, "gke-node-0", util=None), cluster="train", node_pool="a100-old" if h < 5 else "a100-new"
        )
        for h in (9, 0, 1, 2, 3, 4, 5, 6, 7, 8)
    ]
    (f,) = ev(UnmonitoredGpu(), inputs(gpu_hours=rows))
    (e,) = f.evidence["instances"]
    assert (e["cluster"], e["node_pool"], e["hours"]) == ("train", "a100-new", 10)
    assert (e["first_hour"], e["last_hour"]) == ("2026-11-02T00:00:00Z", "2026-11-02T09:00:00Z")
    assert f.scope.labels == {"goog-k8s-node-pool-name": "a100-new"} and f.scope.cluster == "train"
    assert "GKE node gke-node-0 of train/a100-new" in f.summary


# -- idle_orchestration ---------------------------------------------------------------------------------


def gke_fee(hours, cluster="old-cluster", amount="0.10", **kw):
    return [
        cost(h, "orchestration.gke", amount, cluster=cluster, sku="Regional Kubernetes Clusters", **kw)
        for h in hours
    ]


@pytest.mark.parametrize(
    ("compute_hours", "idle_hours"),
    [
        (range(0), 336),  # no nodes at all for two weeks
        (range(24), 312),  # used on day one, then left behind
        ([h for h in range(336) if h % 24 < 12], None),  # scales to zero every night: fine
        (range(336), None),
    ],
)
def test_idle_gke_cluster(compute_hours, idle_hours) -> None:
    rows = gke_fee(range(336), amount="1.00")
    rows += [cost(h, "compute.gpu", "88", cluster="old-cluster", instance="node") for h in compute_hours]
    findings = ev(IdleOrchestration(), inputs(rows))
    if idle_hours is None:
        assert findings == []
        return
    (f,) = findings
    assert f.evidence["idle_hours"] == idle_hours and f.impact_usd == idle_hours
    assert f.scope.cluster == "old-cluster"
    assert "Delete GKE cluster old-cluster" in f.recommendation


def test_compute_in_another_cluster_does_not_hide_an_idle_one() -> None:
    rows = gke_fee(range(336), amount="0.25")
    rows += [cost(h, "compute.gpu", "88", cluster="busy", instance="n") for h in range(336)]
    (f,) = ev(IdleOrchestration(), inputs(rows))
    assert f.impact_usd == 84


def test_free_tier_credit_nets_the_fee_to_zero() -> None:
    rows = gke_fee(range(336), amount="0.10", credits="-0.10")
    assert ev(IdleOrchestration(), inputs(rows)) == []


def test_filestore_without_compute_in_its_project() -> None:
    rows = [
        cost(h, "storage.filestore", "0.5", instance="share-1", service="Cloud Filestore") for h in range(336)
    ]
    rows += [cost(h, "compute.gpu", "88", project="elsewhere", instance="x") for h in range(336)]
    (f,) = ev(IdleOrchestration(), inputs(rows))
    assert f.scope.instance == "share-1" and f.impact_usd == 168
    assert f.severity is Severity.WARNING and "Filestore instance share-1" in f.title


def test_a_commitment_fee_is_not_compute_running() -> None:
    """A commitment bills every hour whether or not anything runs: it does not keep a GKE fee or a
    Filestore share busy. SKU wording: `Commitment v1: A2 Cpu in Americas for 3 Years` is the form
    of the catalog's commitment SKUs (Cyclenerd/google-cloud-pricing-cost-calculator
    build/mapping.csv, `Commitment v1: A2%3 Year%`)."""
    fee = "Commitment v1: A2 Cpu in Americas for 3 Years"
    rows = gke_fee(range(336), cluster=None, amount="0.10")
    rows += [
        cost(h, "storage.filestore", "0.5", instance="share-1", service="Cloud Filestore") for h in range(336)
    ]
    rows += [cost(h, "compute.commitment_fee", "30", sku=fee, instance=None) for h in range(336)]
    findings = ev(IdleOrchestration(), inputs(rows))
    assert sorted((f.evidence["resource"], f.evidence["idle_hours"]) for f in findings) == [
        ("orchestration.gke", 336),
        ("storage.filestore", 336),
    ]
    # and a commitment fee labelled with the cluster does not count as its compute either
    rows = gke_fee(range(336), amount="1.00")
    rows += [cost(h, "compute.commitment_fee", "30", cluster="old-cluster", sku=fee) for h in range(336)]
    (f,) = ev(IdleOrchestration(), inputs(rows))
    assert f.scope.cluster == "old-cluster" and f.impact_usd == 336


def test_idle_runs_bridge_missing_hours_break_at_compute_and_keep_the_long_ones() -> None:
    """A run of idle fee hours survives `max_gap_hours` hours with no fee row (late data) but not a
    longer hole, and any fee hour with compute behind it ends it; only runs of `min_idle_hours` count,
    each with its own cost in the evidence."""
    fee_hours = [h for h in range(200) if h not in (10, 60, 61)]  # 10: a 1 h hole, 60-61: 2 h
    rows = gke_fee(fee_hours, amount="1.00")
    rows += [cost(h, "compute.gpu", "88", cluster="old-cluster", instance="n") for h in (120, 121)]
    (f,) = ev(IdleOrchestration(), inputs(rows))
    runs = [(r["start"][11:13], r["hours"], r["cost_usd"]) for r in f.evidence["runs"]]
    # 0-59 (the 1 h hole bridged: 59 fee hours), 62-119 (58), 122-199 (78); a run's end is its last hour + 1
    assert [r["hours"] for r in f.evidence["runs"]] == [59, 58, 78]
    assert [r[2] for r in runs] == [59.0, 58.0, 78.0]
    assert f.evidence["idle_hours"] == 195 and f.impact_usd == 195
    assert f.evidence["fee_cost_in_window_usd"] == 197.0  # the two busy hours' fees are not idle
    assert f.window_start == at(0) and f.window_end == at(200)
    short = gke_fee(range(47), cluster="brief", amount="1") + gke_fee(
        range(100, 148), cluster="long", amount="1"
    )
    (g,) = ev(IdleOrchestration(), inputs(short))
    assert g.scope.cluster == "long" and g.evidence["idle_hours"] == 48


def test_idle_fees_are_keyed_by_cluster_else_by_share_and_checked_against_the_project() -> None:
    """A GKE fee row without a cluster name and each Filestore share are their own resource, judged
    against their project's compute; two clusters of one project are judged apart."""
    rows = gke_fee(range(100), cluster=None, amount="0.5")
    rows += [
        cost(h, "storage.filestore", "0.25", instance=s, service="Cloud Filestore")
        for h in range(100)
        for s in ("a", "b")
    ]
    rows += gke_fee(range(100), cluster="busy", amount="0.5")
    rows += [
        cost(h, "compute.gpu", "88", project="ml-prod", cluster="busy", instance="n") for h in range(50, 100)
    ]
    findings = ev(IdleOrchestration(), inputs(rows))
    got = sorted(
        (f.evidence["resource"], f.scope.cluster or "", f.scope.instance or "", f.evidence["idle_hours"])
        for f in findings
    )
    assert got == [
        ("orchestration.gke", "", "", 50),
        ("orchestration.gke", "busy", "", 50),
        ("storage.filestore", "", "a", 50),
        ("storage.filestore", "", "b", 50),
    ]


def test_each_filestore_share_is_its_own_finding_through_the_export_query(tmp_path, capsys) -> None:
    """End to end from export rows through `queries/hourly.sql`: the query kept `resource.name` only
    for GPU, traffic and orchestration rows, so a project's shares summed into one "Filestore
    instance (unnamed) ... $75.00" where share-a billed $50.00 and share-b $25.00 (helper 59's
    audit). The hand-built rows above never went through the query."""
    import json
    from datetime import timedelta

    from monitor.cli import main
    from tests.export_rows import export_row, write_ndjson

    def share(h: int, name: str, amount: float) -> dict:
        t = at(h)
        return export_row(
            {
                "service": {"id": "D97E-AB26-5D95", "description": "Cloud Filestore"},
                "sku": {"id": "F5E8-E8E3-F1CE", "description": "Filestore Capacity Basic HDD (Standard) Iowa"},
                "usage_start_time": f"{t:%Y-%m-%d %H:%M:%S} UTC",
                "usage_end_time": f"{t + timedelta(hours=1):%Y-%m-%d %H:%M:%S} UTC",
                "export_time": f"{t + timedelta(hours=5):%Y-%m-%d %H:%M:%S} UTC",
                "project.id": "data",
                "project.name": "data",
                "labels": [],
                "system_labels": [],
                "resource": {
                    "name": name,
                    "global_name": f"//file.googleapis.com/projects/441570621172/locations/us-central1-a/instances/{name}",
                },
                "credits": [],
                "usage.amount_in_pricing_units": 1.0,
                "usage.pricing_unit": "gibibyte month",
            },
            cost=amount,
            cost_at_list=amount,
        )

    rows = [share(h, name, amount) for h in range(100) for name, amount in (("share-a", 0.5), ("share-b", 0.25))]
    path = write_ndjson(tmp_path / "export.ndjson", rows)
    args = ["analyze", "--billing", str(path), "--start", "2026-11-02", "--end", "2026-11-07", "--format", "json"]
    assert main(args) == 0
    findings = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "idle_orchestration"]
    got = sorted((f["scope"]["instance"], f["impact_usd"], f["evidence"]["idle_hours"]) for f in findings)
    assert got == [("share-a", 50.0, 100), ("share-b", 25.0, 100)]
    assert sorted(f["title"] for f in findings) == [
        "Filestore instance share-a billed with no compute behind it: $50.00",
        "Filestore instance share-b billed with no compute behind it: $25.00",
    ]
    assert all(f["scope"]["instance_id"] is None for f in findings)  # a share is no VM to join


def test_only_the_idle_resources_fee_rows_leave_the_engine() -> None:
    """The idle runs are found in the engine: a busy cluster's fees and the compute rows behind them
    never cross into Python, only the idle cluster's own fee rows and its one run do."""
    rows = gke_fee(range(336), cluster="busy", amount="1") + gke_fee(range(100), cluster="old", amount="1")
    rows += [cost(h, "compute.gpu", "88", cluster="busy", instance="n") for h in range(336)]
    inp = inputs(rows)
    (f,) = ev(IdleOrchestration(), inp)
    assert f.scope.cluster == "old" and f.impact_usd == 100
    assert inp.hourly.fetched == 1 + 100  # the run, then the old cluster's fee rows


# -- opportunities --------------------------------------------------------------------------------------


def steady_fleet(days=14, n=3, spiky=0):
    rows = []
    for h in range(days * 24):
        rows += [gpu(h, f"train-{i}") for i in range(n)]
        if spiky and h % 24 < 6:
            rows += [gpu(h, f"burst-{i}") for i in range(spiky)]
    return rows


def test_commitment_for_the_steady_part_only() -> None:
    inp = inputs(gpu_hours=steady_fleet(n=2, spiky=3), prices=FakePrices())
    (f,) = ev(CommitmentOpportunity(), inp)
    assert f.evidence["steady_gpus"] == 16  # 2 VMs x 8 GPUs always; bursts excluded
    assert f.impact_usd == D(16 * 336) * D("3.30")
    assert f.evidence["savings_per_year_usd"] == {
        "commit_1y": float(16 * 8760 * D("3.30")),
        "commit_3y": float(16 * 8760 * D("6.05")),
    }
    three = ev(CommitmentOpportunity(CommitmentOpportunityConfig(term="commit_3y")), inp)
    assert three[0].impact_usd == D(16 * 336) * D("6.05")


@pytest.mark.parametrize(
    ("prices", "days", "pricing_model"),
    [
        (None, 14, "on_demand"),  # prices unknown: no guess
        (FakePrices(table={("H100", "on_demand"): D(11)}), 14, "on_demand"),  # no commitment price
        (FakePrices(), 3, "on_demand"),  # too short to call steady
        (FakePrices(), 14, "committed"),  # already committed
        (FakePrices(), 14, "spot"),
    ],
)
def test_no_commitment_finding(prices, days, pricing_model) -> None:
    rows = [gpu(h, "t", pricing_model=pricing_model) for h in range(days * 24)]
    assert ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=prices, days=days)) == []


def test_data_gaps_within_the_percentile_still_count_as_steady() -> None:
    rows = [r for r in steady_fleet(n=1) if r.hour.hour != 3]  # one hour a day missing: ~4% of hours
    (f,) = ev(CommitmentOpportunity(), inputs(gpu_hours=rows, prices=FakePrices()))
    assert f.evidence["steady_gpus"] == 8
    assert (
        ev(
            CommitmentOpportunity(CommitmentOpportunityConfig(steady_percentile=1)),
            inputs(gpu_hours=rows, prices=FakePrices()),
        )
        == []
    )


def test_spot_for_restartable_work() -> None:
    rows = [gpu(h, "sweep-lr-3") for h in range(10)]  # by name
    rows += [gpu(h, "job-x", labels={"restartable": "true"}) for h in range(5)]  # by label
    rows += [gpu(h, "train-llm") for h in range(100)]  # long training: not restartable
    rows += [gpu(h, "eval-spot", pricing_model="spot") for h in range(10)]  # already Spot
    (f,) = ev(SpotOpportunity(), inputs(gpu_hours=rows, prices=FakePrices()))
    reasons = {i["instance"]: i["reason"] for i in f.evidence["instances"]}
    assert reasons == {"sweep-lr-3": "name pattern", "job-x": "label restartable=true"}
    assert f.impact_usd == D(15 * 8) * D("7.70")
    assert f.severity is Severity.INFO  # $924: an opportunity is info unless large ($1,000)


def test_spot_short_jobs_when_enabled() -> None:
    rows = [gpu(h, "short") for h in (0, 1, 2, 10, 11, 30, 31, 32)]
    rows += [gpu(h, "long") for h in range(40, 48)]
    assert ev(SpotOpportunity(), inputs(gpu_hours=rows, prices=FakePrices())) == []
    cfg = SpotOpportunityConfig(max_job_hours=4)
    (f,) = ev(SpotOpportunity(cfg), inputs(gpu_hours=rows, prices=FakePrices()))
    assert [i["reason"] for i in f.evidence["instances"]] == ["short jobs (longest 3 h)"]
    assert ev(SpotOpportunity(cfg), inputs(gpu_hours=rows, prices=None)) == []
