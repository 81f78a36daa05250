"""`gpucost jobs` end to end on the simulated fleet, against the simulator's per-job ground truth,
and on the real export rows beside the project (skipped when absent).

The fleet is simulated once per module (2 days, the hidden costs of issue 14 injected): the GKE training
JobSet split over two zones (inter-zone dollars) with a hung node (idle dollars), a fine-tuning VM
that goes idle, a never-used debug VM, and a Spot backfill job recreated in another zone. Two runs
read utilization (the whole report, one job's hours); the others read billing only, one day.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.config import Config
from monitor.detectors.inputs import GpuHourTable
from monitor.jobs import JobsConfig
from monitor.jobs.run import jobs_once
from tests.shared_fleets import shared_fleet

CENT = Decimal("0.01")
DAYS = 2
LAST_DAY = ("--start", "2026-11-02T00:00:00Z", "--end", "2026-11-03T00:00:00Z")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out, _ = shared_fleet(tmp_path_factory, 7, DAYS)
    return {
        "billing": str(out / "billing" / "export.parquet"),
        "utilization": str(out / "utilization"),
        "truth": json.loads((out / "ground_truth.json").read_text()),
    }


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def report(fleet: dict) -> dict:
    """The JSON document (run in-process through the command's own code path)."""
    from click.testing import CliRunner

    from monitor.cli import cli

    args = ["jobs", "--billing", fleet["billing"], "--utilization", fleet["utilization"], "--format", "json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _d(v: float) -> Decimal:
    return Decimal(str(v))


def test_jobs_add_up_to_the_export_to_the_cent(report: dict, fleet: dict) -> None:
    totals = fleet["truth"]["totals"]
    assert sum(_d(j["cost_usd"]) for j in report["jobs"]) == _d(totals["cost"])
    assert sum(_d(j["net_cost_usd"]) for j in report["jobs"]) == _d(totals["net_cost"])
    assert report["totals"] == {"cost_usd": totals["cost"], "net_cost_usd": totals["net_cost"]}
    assert [j["job"] for j in report["jobs"]].count(None) == 1 and report["jobs"][-1]["job"] is None
    for j in report["jobs"]:  # the subcategories of a job make up its cost and net as shown, exactly
        assert sum(_d(v) for v in j["by_subcategory"].values()) == _d(j["cost_usd"]), j["job"]
        assert sum(_d(v) for v in j["net_by_subcategory"].values()) == _d(j["net_cost_usd"]), j["job"]


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= 0.005 * max(abs(want), 1.0)


def test_each_job_matches_the_simulators_truth(report: dict, fleet: dict) -> None:
    """Cost, idle dollars and inter-zone dollars within 0.5 % of what the simulator wrote."""
    got = {j["job"]: j for j in report["jobs"]}
    truth = fleet["truth"]["jobs"]
    assert {t["job"] for t in truth} == set(got) - {None}
    for t in truth:
        j = got[t["job"]]
        assert _close(j["cost_usd"], t["cost_usd"]), (t["job"], j["cost_usd"], t["cost_usd"])
        assert _close(j["net_cost_usd"], t["net_cost_usd"]), (t["job"], j["net_cost_usd"], t["net_cost_usd"])
        assert _close(j["idle_cost_usd"], t["idle_cost_usd"]), (
            t["job"],
            j["idle_cost_usd"],
            t["idle_cost_usd"],
        )
        inter_zone = j["by_subcategory"].get("network.inter_zone", 0.0)
        assert _close(inter_zone, t["inter_zone_usd"]), (t["job"], inter_zone, t["inter_zone_usd"])
        assert _close(j["single_zone_savings_usd"], t["inter_zone_usd"]), t["job"]
        assert _close(j["gpu_hours"], t["gpu_hours"]), (t["job"], j["gpu_hours"], t["gpu_hours"])
    # the injected ones are really there: a job that idled, one split over zones
    assert got["llm-pretrain"]["idle_cost_usd"] > 100 and got["llm-pretrain"]["single_zone_savings_usd"] > 100
    assert got["debug"]["idle_cost_usd"] > 0.9 * got["debug"]["by_subcategory"]["compute.gpu"]


def test_a_spot_vm_recreated_in_another_zone_stays_in_its_job(report: dict) -> None:
    jobs = [j for j in report["jobs"] if j["job"] == "embed-backfill"]
    assert len(jobs) == 1
    job = jobs[0]
    assert job["zones"] == ["us-central1-b", "us-central1-f"]
    assert job["instances"] == ["embed-backfill-k9m4", "embed-backfill-x7q2"]
    assert job["gpus"] == 1 and job["gpu_model"] == "L4"
    # its boot disks carry no label: they are the job's by their VMs' names
    assert job["by_subcategory"]["storage.persistent_disk"] > 0


def test_the_jobset_its_bucket_and_its_cluster_fee_are_one_job(report: dict) -> None:
    job = next(j for j in report["jobs"] if j["job"] == "llm-pretrain")
    assert set(job["labels"]) == {"job", "k8s-label/jobset.sigs.k8s.io/jobset-name"}
    assert job["gpus"] == 32 and job["zones"] == ["us-central1-a", "us-central1-c"]
    assert job["by_subcategory"]["orchestration.gke"] > 0 and job["by_subcategory"]["storage.gcs"] > 0
    assert job["running"] and not job["estimated"]
    assert job["spot_savings_usd"] > 0 and "snapshot" in job["spot_price_source"]
    assert job["busy_gpu_hours"] < job["gpu_hours"]
    assert job["cost_per_busy_gpu_hour_usd"] == pytest.approx(
        job["net_cost_usd"] / job["busy_gpu_hours"], rel=1e-3
    )


def test_one_job_with_its_hours(
    fleet: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With utilization, and the joined GPU hours read as columns all the way (`Analysis.gpu_hours`,
    `build_jobs`): no `GpuHour` is built from their table."""

    def no_rows(table: GpuHourTable, picked: object = None) -> list:
        raise AssertionError("a GpuHour was built from the joined table")

    monkeypatch.setattr(GpuHourTable, "rows", no_rows)
    code, out, _ = _run(
        capsys, "jobs", "--billing", fleet["billing"], "--utilization", fleet["utilization"],
        "--format", "json", "--job", "finetune-llama",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    (job,) = doc["jobs"]
    assert job["job"] == "finetune-llama" and len(job["hours"]) == DAYS * 24
    assert abs(sum(_d(h["cost_usd"]) for h in job["hours"]) - _d(job["cost_usd"])) <= CENT * 60
    idle_hours = [h for h in job["hours"] if h["idle_cost_usd"] > 0]
    assert 20 <= len(idle_hours) <= 26  # the VM went idle for about a day


def test_markdown_and_mistakes(fleet: dict, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "jobs", "--billing", fleet["billing"], *LAST_DAY, "--format", "markdown")
    assert code == 0 and "| llm-pretrain (running) |" in out and "| (no job label) (running) |" in out
    assert out.startswith("**Jobs, 2026-11-02T00:00:00Z → 2026-11-03T00:00:00Z**")
    code, out, _ = _run(capsys, "jobs", "--billing", fleet["billing"], *LAST_DAY, "--job", "etl")
    assert code == 0 and "etl (running) by hour" in out and "2026-11-02T23:00:00Z" in out
    code, _, err = _run(capsys, "jobs", "--billing", fleet["billing"], *LAST_DAY, "--job", "no-such-job")
    assert code == 2 and "--job 'no-such-job': no such job in this window (jobs: llm-pretrain" in err
    code, _, err = _run(capsys, "jobs")
    assert code == 2 and "give the billing data" in err


# ------------------------------------------------------------------------------ real export rows


@pytest.fixture(scope="module")
def real_files(shared_data: Path) -> list[Path]:
    folder = shared_data / "koku-gcp-billing-export"
    found = sorted(folder.glob("*.csv")) + sorted(folder.glob("agpl/*.csv"))
    if not found:
        pytest.skip(f"no CSV files in {folder}")
    return found


def test_real_rows_add_up_to_the_cent(real_files: list[Path]) -> None:
    """Koku's real rows carry user labels (`vm_key_proj2` on a VM, `test_storage_key` on a bucket):
    named as jobs, they and the unlabelled rest add up to the attributed total exactly."""
    cfg = JobsConfig(labels=("vm_key_proj2", "test_storage_key"))
    report = jobs_once(
        Config(), cfg, now=datetime(2026, 1, 1, tzinfo=UTC), billing_paths=real_files,
        start=datetime(2020, 10, 1, tzinfo=UTC), end=datetime(2024, 3, 2, tzinfo=UTC),
    )  # fmt: skip
    doc = report.to_dict()
    names = {j["job"] for j in doc["jobs"]}
    assert {"vm_label_proj2", "test_storage_label", None} <= names
    assert sum(j.gross_micros for j in report.jobs) / Decimal(1_000_000) == report.totals["cost"]
    assert sum(j.net_micros for j in report.jobs) / Decimal(1_000_000) == report.totals["net_cost"]
    assert sum(_d(j["cost_usd"]) for j in doc["jobs"]) == report.totals["cost"].quantize(CENT)
    assert sum(_d(j["net_cost_usd"]) for j in doc["jobs"]) == report.totals["net_cost"].quantize(CENT)


def test_idle_dollars_are_unknown_without_utilization_in_the_table() -> None:
    """Seed 23's embeddings (one L4 without an agent) read "$0.00" idle, as its message did."""
    from monitor.cli.jobs import _cell

    job = {"idle_cost_usd": 0.0, "unmonitored_cost_usd": 188.17, "mean_utilization_pct": None}
    assert _cell(job, "idle_cost_usd") == "unknown"
    assert _cell(job | {"mean_utilization_pct": 40.0, "idle_cost_usd": 12.5}, "idle_cost_usd") == "≥ $12.50"
    assert _cell(job | {"unmonitored_cost_usd": 0.0}, "idle_cost_usd") == "$0.00"
    assert _cell(job, "cost_usd") == "-"  # absent: as before
