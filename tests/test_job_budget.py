"""`job_budget`: a job projected, at its burn rate, to cross its `[jobs.budgets]` amount.

Pure tests over hand-made cost hours (every figure is worked out in the test), then the detector
end to end through the analysis pipeline on the simulated fleet (`gpucost analyze`'s code path).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from monitor.detectors import build_detectors, registered
from monitor.detectors.base import iso
from monitor.detectors.budget_forecast import run_rate
from monitor.detectors.inputs import (
    CostHour,
    DetectorInputs,
    GpuHour,
    GpuHourTable,
    HeldSpend,
    LabelSpend,
    TableGpuHours,
)
from monitor.detectors.job_budget import (
    JobBudget,
    JobBudgetConfig,
    budgets_without_spend,
    without_spend_message,
)
from monitor.errors import ConfigError
from monitor.jobs.config import JobsConfig

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)


def _rows(first: int, hours: int, usd: str, labels: dict[str, str], project: str = "ml") -> list[CostHour]:
    return [
        CostHour(
            hour=T0 + (first + i) * H,
            project=project,
            subcategory="compute.gpu",
            cost=Decimal(usd),
            labels=labels,
        )
        for i in range(hours)
    ]


def _inputs(
    rows: list[CostHour], end_hour: int, prov_hour: int | None = None, gpu: tuple = ()
) -> DetectorInputs:
    end = T0 + end_hour * H
    return DetectorInputs(
        window_start=T0,
        window_end=end,
        provisional_from=T0 + (prov_hour if prov_hour is not None else end_hour) * H,
        hourly=tuple(rows),
        gpu_hours=gpu,
    )


def _detector(budgets: dict[str, float], **cfg: object) -> JobBudget:
    return JobBudget(JobBudgetConfig(**cfg), jobs=JobsConfig(budgets=budgets))


def test_a_job_burning_toward_its_budget_fires_with_the_projection_as_evidence() -> None:
    # 100 settled hours at $10 = $1,000; 7 days ahead at $10/h = $1,680; projected $2,680 > $1,500
    inputs = _inputs(_rows(0, 100, "10", {"job": "llm"}), end_hour=100)
    (f,) = _detector({"llm": 1500}).evaluate(inputs, T0 + 100 * H)
    assert f.kind == "job_budget" and f.impact_usd == Decimal("1180")
    e = f.evidence
    assert (e["spent_usd"], e["hourly_burn_usd"], e["projected_usd"], e["overrun_usd"]) == (
        1000.0,
        10.0,
        2680.0,
        1180.0,
    )
    assert e["run_rate_hours"] == 72.0 and e["run_rate_spend_usd"] == 720.0  # the last 3 settled days
    assert e["crosses_at"] == "2026-11-07T06:00:00Z"  # $500 left at $10/h: 50 hours after the 100th
    assert f.severity.value == "critical" and "llm" in f.title and f.scope.labels == {"job": "llm"}


def test_one_alert_per_job_and_threshold_whatever_the_projection() -> None:
    det = _detector({"llm": 1500})
    early = det.evaluate(_inputs(_rows(0, 100, "10", {"job": "llm"}), 100), T0 + 100 * H)
    later = det.evaluate(_inputs(_rows(0, 130, "12", {"job": "llm"}), 130), T0 + 130 * H)
    assert early[0].impact_usd != later[0].impact_usd
    assert early[0].fingerprint == later[0].fingerprint  # the projection grew: the same alert
    raised = _detector({"llm": 2000}).evaluate(
        _inputs(_rows(0, 100, "10", {"job": "llm"}), 100), T0 + 100 * H
    )
    assert raised[0].fingerprint != early[0].fingerprint  # a new budget is a new threshold


def test_thresholds_fire_for_the_highest_one_crossed_each_once() -> None:
    det = _detector({"llm": 5000}, thresholds_pct=(50, 100))
    rows = _rows(0, 100, "10", {"job": "llm"})  # projected $2,680: over 50 % ($2,500), under 100 %
    (half,) = det.evaluate(_inputs(rows, 100), T0 + 100 * H)
    assert half.evidence["threshold_pct"] == 50 and half.impact_usd == Decimal("180")
    (full,) = det.evaluate(_inputs(_rows(0, 100, "20", {"job": "llm"}), 100), T0 + 100 * H)
    assert full.evidence["threshold_pct"] == 100 and full.fingerprint != half.fingerprint


def test_under_budget_is_silent_and_other_jobs_do_not_count() -> None:
    rows = _rows(0, 100, "10", {"job": "llm"}) + _rows(0, 100, "90", {"job": "other"})
    assert _detector({"llm": 3000}).evaluate(_inputs(rows, 100), T0 + 100 * H) == []
    assert _detector({}).evaluate(_inputs(rows, 100), T0 + 100 * H) == []


def test_a_budget_by_label_value_counts_every_row_carrying_it() -> None:
    # job named by `job`; the budget is on its `run` value, and on a bucket labelled only run=r7
    rows = _rows(0, 100, "10", {"job": "llm", "run": "r7"}) + _rows(
        0, 100, "1", {"run": "r7"}, project="data"
    )
    (f,) = _detector({"r7": 1500}).evaluate(_inputs(rows, 100), T0 + 100 * H)
    assert f.evidence["spent_usd"] == 1100.0 and f.evidence["projects"] == ["data", "ml"]
    assert f.scope.project is None and f.scope.labels == {"run": "r7"}


def test_a_stopped_job_burns_nothing_more_and_fires_only_when_already_over() -> None:
    rows = _rows(0, 100, "10", {"job": "llm"})  # last billed hour 99, now 130: stopped (> 6 h)
    assert _detector({"llm": 1500}).evaluate(_inputs(rows, 130), T0 + 130 * H) == []
    (f,) = _detector({"llm": 900}).evaluate(_inputs(rows, 130), T0 + 130 * H)
    assert f.impact_usd == Decimal("100") and f.evidence["running"] is False
    assert "stopped" in f.summary and f.evidence["crosses_at"] == "2026-11-06T10:00:00Z"


def test_a_job_whose_billing_lags_the_clock_like_the_rest_of_the_export_still_burns() -> None:
    # now is hour 108; the whole export is billed to hour 99 (billing lags usage by hours): the job's
    # 8 quiet hours are the export's lag, not a stop, so the burn goes on (the clock would say
    # stopped after 6 h and project $1,000, under the budget)
    rows = _rows(0, 100, "10", {"job": "llm"}) + _rows(0, 100, "3", {"job": "other"})
    (f,) = _detector({"llm": 1500}).evaluate(_inputs(rows, 108, prov_hour=100), T0 + 108 * H)
    e = f.evidence
    assert e["running"] is True and e["hourly_burn_usd"] == 10.0
    assert e["projected_usd"] == 1000 + 80 + 1680  # the 8 unbilled hours at the rate, then 7 days
    # the export billed on to hour 107 for another job: this one's quiet is its own
    rows += _rows(100, 8, "3", {"job": "other"})
    assert _detector({"llm": 1500}).evaluate(_inputs(rows, 108, prov_hour=100), T0 + 108 * H) == []


def test_a_bucket_billing_on_does_not_keep_a_stopped_job_burning() -> None:
    rows = _rows(0, 100, "10", {"job": "llm"})
    rows += [
        CostHour(
            hour=T0 + h * H,
            project="ml",
            subcategory="storage.gcs",
            cost=Decimal("0.1"),
            labels={"job": "llm"},
        )
        for h in range(130)
    ]
    assert _detector({"llm": 1500}).evaluate(_inputs(rows, 130), T0 + 130 * H) == []


def test_utilization_keeps_a_job_running_while_its_billing_lags() -> None:
    rows = _rows(0, 100, "10", {"job": "llm"})
    gpu = (
        GpuHour(
            T0 + 128 * H,
            "ml",
            "vm",
            "H100",
            8,
            Decimal(8),
            Decimal(0),
            90.0,
            estimated=True,
            labels={"job": "llm"},
        ),
    )
    (f,) = _detector({"llm": 1500}).evaluate(_inputs(rows, 130, gpu=gpu), T0 + 130 * H)
    assert f.evidence["running"] is True and f.evidence["last_utilization_hour"] == "2026-11-06T08:00:00Z"


def test_a_job_s_rows_are_summed_in_the_engine_and_its_gpu_hours_read_as_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ten SKU rows an hour of one job cross into Python as one sum per hour (what a projection
    reads), to the same figures; its latest GPU hour is read from a held table's columns, no
    `GpuHour` built (at 5 M export rows a month the rows alone were 12.6 s of a detection run)."""
    skus = [
        CostHour(hour=T0 + h * H, project="ml", subcategory=sub, cost=Decimal("1.000001"),
                 credits=Decimal("-0.25"), sku=f"sku-{i}", labels={"job": "llm"})
        for h in range(48) for i, sub in enumerate(["compute.gpu"] * 6 + ["storage.gcs"] * 4)
    ]  # fmt: skip
    late = GpuHour(T0 + 50 * H, "ml", "vm", "H100", 8, Decimal(8), Decimal(0), 90.0, estimated=True,
                   labels={"job": "llm"})  # fmt: skip
    held = TableGpuHours(GpuHourTable.from_rows([late]))
    monkeypatch.setattr(GpuHourTable, "rows", lambda *_: pytest.fail("built GpuHours to read two columns"))
    inputs = _inputs(skus, 52, gpu=held)  # type: ignore[arg-type]
    (f,) = _detector({"llm": 500}).evaluate(inputs, T0 + 52 * H)
    assert inputs.hourly.fetched <= 2 * 48 + 4  # a sum per hour and kind; a few queries' own rows
    assert f.evidence["spent_usd"] == float(48 * 10 * Decimal("0.750001"))
    assert f.evidence["last_billed_hour"] == "2026-11-02T23:00:00Z"
    assert f.evidence["last_utilization_hour"] == "2026-11-03T02:00:00Z" and f.evidence["running"] is True


def test_a_job_named_by_two_keys_is_named_by_the_first_in_jobs_order() -> None:
    """A JobSet's nodes carry its name as a pod label, its bucket as `job`: the evidence and scope
    name `job`, the first of the two in `[jobs]` order, whichever row the engine reads first."""
    pods = _rows(0, 48, "10", {"k8s-label/jobset.sigs.k8s.io/jobset-name": "llm"})
    bucket = [replace(r, subcategory="storage.gcs", cost=Decimal(1), labels={"job": "llm"}) for r in pods]
    (f,) = _detector({"llm": 100}).evaluate(_inputs(pods + bucket, 48), T0 + 48 * H)
    assert f.evidence["label_key"] == "job" and f.scope.labels == {"job": "llm"}
    assert f.evidence["spent_usd"] == 48 * 11


def test_provisional_hours_count_at_the_burn_rate_while_billing_arrives() -> None:
    # settled: hours 0-71 at $10; provisional from hour 72: billed only $2/h so far
    rows = _rows(0, 72, "10", {"job": "llm"}) + _rows(72, 28, "2", {"job": "llm"})
    (f,) = _detector({"llm": 1500}).evaluate(_inputs(rows, 100, prov_hour=72), T0 + 100 * H)
    e = f.evidence
    assert (e["provisional_billed_usd"], e["provisional_counted_usd"]) == (56.0, 280.0)
    assert e["projected_usd"] == 720 + 280 + 1680 and "still arriving" in f.summary


def test_the_run_rate_is_the_one_project_budgets_use() -> None:
    rows = _rows(0, 100, "10", {}) + _rows(100, 20, "1", {})
    rr = run_rate(rows, T0, T0, T0 + 100 * H, T0 + 120 * H, 1)
    assert (rr.start, rr.end, rr.hourly, rr.from_provisional) == (
        T0 + 76 * H,
        T0 + 100 * H,
        Decimal(10),
        False,
    )
    rr = run_rate(rows, T0 + 100 * H, T0 + 100 * H, T0 + 100 * H, T0 + 120 * H, 1)  # nothing settled yet
    assert (rr.from_provisional, rr.hourly) == (True, Decimal(1))


def test_job_budgets_config_errors_name_the_key() -> None:
    with pytest.raises(
        ValidationError, match='"llm-pretrain" = -5: a job budget is a positive amount in USD'
    ):
        JobsConfig(budgets={"llm-pretrain": -5})
    with pytest.raises(ValidationError, match="positive amount"):
        JobsConfig(budgets={"llm-pretrain": float("nan")})
    assert JobsConfig(budgets={"llm-pretrain": 50000}).budgets == {"llm-pretrain": 50000.0}


def test_registered_and_built_with_the_jobs_config() -> None:
    assert "job_budget" in registered()
    (det,) = [d for d in build_detectors({}, jobs=JobsConfig(budgets={"x": 1})) if d.name == "job_budget"]
    assert det.jobs.budgets == {"x": 1.0}
    with pytest.raises(ConfigError, match=r"detectors\.job_budget\.thresholds_pct: thresholds are percents"):
        build_detectors({"job_budget": {"thresholds_pct": [0]}})


def test_a_budget_no_row_carries_is_named_with_the_labels_read() -> None:
    # a typo, a value of no job key, and two keys rows do carry: under `job`, and under `run`
    rows = _rows(0, 3, "1", {"job": "llm", "run": "r7"}) + _rows(0, 3, "1", {"team": "llm-pretrian"})
    inputs = _inputs(rows, end_hour=3)
    det = _detector({"llm": 10, "r7": 10, "llm-pretrian": 10, "finetune": 10})
    assert budgets_without_spend([det], inputs) == ["finetune", "llm-pretrian"]
    assert without_spend_message([det], inputs, ["finetune", "llm-pretrian"]) == (
        '[jobs.budgets] "finetune", "llm-pretrian": no billing row since 2026-11-01T00:00:00Z carries them'
        " under a job label (job, run, k8s-label/jobset.sigs.k8s.io/jobset-name,"
        " k8s-label/batch.kubernetes.io/job-name, k8s-label/job-name, vertex-ai-pipelines-run-billing-id),"
        " so their budgets cannot fire: a job not started yet or ended before then, a key that is no"
        " label's value, or, in the daemon, a [jobs] label key added after those days were polled"
        " (`gpucost jobs` reads the export and lists the jobs)"
    )
    # no budgets, or no job_budget detector running: nothing to tell
    assert budgets_without_spend([_detector({})], inputs) == []
    assert budgets_without_spend([d for d in build_detectors({}) if d.name != "job_budget"], inputs) == []


def test_a_job_s_spend_held_before_the_rows_read_counts_and_says_since_when() -> None:
    # the store holds 200 hours before the rows read: "llm" billed $10 an hour in 100 of them, then
    # 50 hours read; "old" stopped before the rows read, $3,000 over its $2,000 budget
    held_from = T0 - 200 * H
    held = HeldSpend(
        held_from,
        (
            LabelSpend({"job": "llm"}, "ml", True, Decimal(1000), T0 - 100 * H, T0 - H),
            LabelSpend({"job": "old", "team": "x"}, "ml", True, Decimal(3000), held_from, T0 - 150 * H),
        ),
    )
    inputs = replace(_inputs(_rows(0, 50, "10", {"job": "llm"}), end_hour=50), held_spend=lambda: held)
    found = {
        f.evidence["job"]: f for f in _detector({"llm": 2000, "old": 2000}).evaluate(inputs, T0 + 50 * H)
    }
    llm, old = found["llm"].evidence, found["old"].evidence
    # $1,500 spent since its first hour, 7 days at $10/h ahead: $3,180
    assert (llm["spent_usd"], llm["held_before_usd"], llm["projected_usd"]) == (1500.0, 1000.0, 3180.0)
    assert (llm["spend_from"], llm["started_before_data"]) == ("2026-10-27T20:00:00Z", False)
    # stopped: burns nothing; its first hour is the first held, so it is spend since then, not its life
    assert (old["spent_usd"], old["running"], old["started_before_data"]) == (3000.0, False, True)
    assert "since 2026-10-23 16:00 UTC, the start of the billing gpucost holds" in found["old"].summary
    # a budget whose job's rows are all held earlier has spend: not told as one without
    assert budgets_without_spend([_detector({"old": 1, "new": 1})], inputs) == ["new"]
    assert "no billing row since 2026-10-23T16:00:00Z carries it" in without_spend_message(
        [_detector({"new": 1})], inputs, ["new"]
    )


# -- end to end: the analysis pipeline (`gpucost analyze`'s code path) on the simulated fleet ------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import json

    from tests.shared_fleets import shared_fleet

    out, _ = shared_fleet(tmp_path_factory, 7, 2)
    return {
        "billing": out / "billing" / "export.parquet",
        "truth": json.loads((out / "ground_truth.json").read_text()),
    }


@pytest.mark.slow
def test_simulated_jobs_over_budget_fire_with_their_true_spend(
    fleet: dict, caplog: pytest.LogCaptureFixture
) -> None:
    from monitor.analysis import analyze_once
    from monitor.config import parse_config

    truth = {j["job"]: j for j in fleet["truth"]["jobs"]}
    # `[jobs.budgets]` as a config file gives it; the GKE JobSet's node rows name their job by the pod
    # label GKE cost allocation exports, which the aggregates keep because `[jobs]` lists it
    budgets = {"finetune-mistral": 5000.0, "finetune-llama": 1e6, "llm-pretrain": 12000.0}
    cfg = parse_config({"jobs": {"budgets": {**budgets, "finetune-mistrall": 5000.0}}})  # one misspelt
    with caplog.at_level("WARNING", logger="gpucost"):
        result = analyze_once(cfg, now=datetime(2026, 11, 3, tzinfo=UTC), billing_paths=[fleet["billing"]])
    found = {f.evidence["job"]: f for f in result.findings if f.kind == "job_budget"}
    assert set(found) == {"finetune-mistral", "llm-pretrain"}  # finetune-llama is far from its budget
    told = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[jobs.budgets]")]
    assert len(told) == 1 and told[0].startswith('[jobs.budgets] "finetune-mistrall": no billing row since')
    mistral = found["finetune-mistral"]
    exact = Decimal(truth["finetune-mistral"]["net_cost_micros"]) / 10**6
    assert Decimal(str(mistral.evidence["spent_usd"])) == exact  # every row of the job, to the micro
    assert mistral.evidence["projects"] == ["ml-training-prod"] and mistral.evidence["running"] is True
    # llm-pretrain: its GKE nodes (k8s label) and its checkpoints bucket (job label), not the shared
    # cluster fee (the jobs engine shares that by node-hours; the budget counts the job's own rows)
    pretrain = found["llm-pretrain"]
    assert pretrain.evidence["label_key"] in ("job", "k8s-label/jobset.sigs.k8s.io/jobset-name")
    assert (
        0.97 * truth["llm-pretrain"]["net_cost_usd"]
        <= pretrain.evidence["spent_usd"]
        <= truth["llm-pretrain"]["net_cost_usd"]
    )
    assert pretrain.impact_usd > 0 and pretrain.to_dict()["kind"] == "job_budget"


@pytest.mark.slow
def test_the_daemon_tells_a_budget_without_spend_once_and_shows_it_while_it_lasts(
    fleet: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import generate_latest

    from monitor.cycle import run_billing_poll, run_detection
    from tests.test_digest_jobs import daemon_on_fleet

    deps = daemon_on_fleet(
        tmp_path, fleet["billing"].parents[1], jobs={"budgets": {"finetune-mistral": 1e6, "pretrain-v2": 1e6}}
    )
    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    run_billing_poll(deps, now)

    def gauge() -> list[str]:
        text = generate_latest(deps.metrics.registry).decode()
        return [line for line in text.splitlines() if line.startswith("gpucost_job_budget_without_spend{")]

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("[jobs.budgets]")]

    with caplog.at_level("WARNING", logger="gpucost"):
        run_detection(deps, now)
        run_detection(deps, now + timedelta(hours=1))  # the same budgets: not told again
        assert len(told()) == 1 and told()[0].startswith('[jobs.budgets] "pretrain-v2": no billing row')
        assert gauge() == ['gpucost_job_budget_without_spend{budget="pretrain-v2"} 1.0']
        # the budget fixed: the gauge goes; broken again later: told again
        deps.detectors = build_detectors({}, jobs=JobsConfig(budgets={"finetune-mistral": 1e6}))
        run_detection(deps, now + timedelta(hours=2))
        assert gauge() == [] and len(told()) == 1
        deps.detectors = build_detectors({}, jobs=JobsConfig(budgets={"pretrain-v2": 1e6}))
        run_detection(deps, now + timedelta(hours=3))
        assert len(told()) == 2
    deps.store.close()


# -- a job's life across the Pacific month change (the same export read one hour apart) -------------

_LIFE = datetime(2026, 11, 1, tzinfo=UTC)  # the export's first hour: the job's
_LIFE_HOURS = 61 * 24 + 9  # to 2027-01-01 09:00Z, 01:00 in California: January's first hour


def _job_export(path: Path, first: datetime, hours: int) -> Path:
    """One job ("llm") billing $10 an hour for `hours` from `first`, each hour's row loaded 4 hours
    after it, on the invoice of its Pacific month: an export file at `path`."""
    from monitor.month import month_at
    from tests.export_rows import export_row, write_ndjson

    def bq(t: datetime) -> str:
        return t.strftime("%Y-%m-%d %H:%M:%S UTC")

    rows = [
        export_row(
            {
                "usage_start_time": bq(first + i * H),
                "usage_end_time": bq(first + (i + 1) * H),
                "export_time": bq(first + (i + 4) * H),
                "invoice.month": month_at(first + i * H),
                "labels": [{"key": "job", "value": "llm"}],
            },
            cost=10.0,
            credits=[],
        )
        for i in range(hours)
    ]
    return write_ndjson(path, rows)


@pytest.fixture(scope="module")
def life_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job from the export's first hour to 2027-01-01 09:00Z."""
    return _job_export(tmp_path_factory.mktemp("life") / "export.ndjson", _LIFE, _LIFE_HOURS)


@pytest.mark.slow
def test_analyze_counts_the_job_s_whole_life_whichever_invoice_month_the_end_is_in(life_export: Path) -> None:
    """At 00:00 in California on 1 January the detectors read from 1 November 07:00Z (December's
    invoice); an hour later from 19 November (the baselines' history; January's read start is
    1 December). The budget summed only the rows read: $14,650, then $10,320, and the alert
    present at midnight went."""
    from monitor.analysis import analyze_once
    from monitor.config import parse_config

    cfg = parse_config({"billing": {"labels": ["job"]}, "jobs": {"budgets": {"llm": 15000}}})
    found = []
    for end_hour in (_LIFE_HOURS - 1, _LIFE_HOURS):  # 00:00 and 01:00 PST
        end = _LIFE + end_hour * H
        result = analyze_once(cfg, now=end, billing_paths=[life_export], end=end)
        found.append([f for f in result.findings if f.kind == "job_budget"])
    # every hour of the export to the end, at $10 (the export's own net), and 7 days at $10/h ahead
    assert [[f.evidence["spent_usd"] for f in fs] for fs in found] == [[14720.0], [14730.0]]
    for end_hour, (f,) in zip((_LIFE_HOURS - 1, _LIFE_HOURS), found, strict=True):
        e = f.evidence
        assert e["projected_usd"] == 10.0 * end_hour + 1680 and e["started_before_data"] is False
        assert (e["spend_from"], e["first_hour"], e["as_of"]) == (
            "2026-11-01T00:00:00Z",
            "2026-11-01T00:00:00Z",
            iso(_LIFE + end_hour * H),
        )
        assert f"it has spent ${e['spent_usd']:,.2f} since 2026-11-01 00:00 UTC and burns" in f.summary


@pytest.mark.slow
def test_the_daemon_counts_a_job_s_spend_as_far_back_as_its_store_holds_it(
    life_export: Path, tmp_path: Path
) -> None:
    """The daemon first polled at 23:00 PST on 31 December: its store holds December's invoice from
    its read start, 1 November 07:00Z. Detection two hours later, January's, read from 20 November
    (the baselines' history; January's read start is 1 December) and counted only that. The job's
    first hour is the first hour held: its message says since when, not the job's whole life."""
    from monitor.clock import FixedClock
    from monitor.config import parse_config
    from monitor.cycle import build_deps, detect, run_billing_poll
    from monitor.sources.factory import billing_source_from_files

    cfg = parse_config(
        {
            "billing": {"labels": ["job"]},
            "state": {"url": f"sqlite:///{tmp_path / 'state.sqlite'}"},
            "alerts": {"console_dir": str(tmp_path / "console")},
            "jobs": {"budgets": {"llm": 15000}},
        }
    )
    first = datetime(2027, 1, 1, 7, tzinfo=UTC)  # 23:00 PST on 31 December
    deps = build_deps(cfg, FixedClock(first), billing_source_from_files([life_export]), environ={})
    found = []
    try:
        for now in (first, first + 2 * H):
            run_billing_poll(deps, now)
            found.append([f for f in detect(deps, now) if f.kind == "job_budget"])
    finally:
        deps.store.close()
        deps.aggregates.close()
    # $10 an hour from 1 November 07:00Z, where the store begins, to each run's hour
    assert [[(f.evidence["spent_usd"], f.evidence["spend_from"]) for f in fs] for fs in found] == [
        [(14640.0, "2026-11-01T07:00:00Z")],
        [(14660.0, "2026-11-01T07:00:00Z")],
    ]
    for now, (f,) in zip((first, first + 2 * H), found, strict=True):
        e = f.evidence
        assert (e["data_from"], e["first_hour"], e["as_of"]) == ("2026-11-01T07:00:00Z",) * 2 + (iso(now),)
        assert e["started_before_data"] is True
        assert "since 2026-11-01 07:00 UTC, the start of the billing gpucost holds (any spend" in f.summary


def test_analyze_counts_a_jobs_spend_from_the_daemons_retention_horizon(tmp_path: Path) -> None:
    """`analyze` with a job budget reads the export back to the horizon the daemon's retention keeps
    (`state.retention_days` before `--end`), but its poll reads whole days before that, and the held
    spend started there: $330.00 (33 hours) more than the daemon would count (helper 57's review)."""
    from monitor.analysis import analyze_once
    from monitor.config import parse_config
    from monitor.detectors import history_needed
    from monitor.state.retention import horizon

    hour, start, end = (
        timedelta(hours=1),
        datetime(2026, 9, 25, tzinfo=UTC),
        datetime(2027, 1, 1, 9, tzinfo=UTC),
    )
    export = _job_export(tmp_path / "export.ndjson", start, int((end - start) / hour))
    cfg = parse_config({"billing": {"labels": ["job"]}, "jobs": {"budgets": {"llm": 1000}}})
    res = analyze_once(cfg, now=end, billing_paths=[export], end=end)
    (f,) = [f for f in res.findings if f.kind == "job_budget"]
    cut = horizon(
        end, cfg.state.retention_days, history_needed(build_detectors(cfg.detectors, jobs=cfg.jobs)).days
    )
    assert f.evidence["data_from"] == iso(cut)
    assert f.evidence["spent_usd"] == 10 * int((end - cut) / hour)
