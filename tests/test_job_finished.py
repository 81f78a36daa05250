"""A job that finishes gets ONE message: its total, hidden costs and the two counterfactuals, through
the persistent outbox, never repeated (not by the pipeline's repeat interval, a restart, a second
detection run, nor late billing rows), and "finished" only once billing and utilization are quiet.

Pure tests drive the real jobs engine on hand-made hours and a real SQLite state store; the
end-to-end test runs the daemon's cycle (billing poll, utilization poll, detection, delivery) on the
simulated fleet with the console notifier.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from alerts.digest_jobs import job_records, top_jobs
from alerts.job_message import (
    JOB_GROUP,
    Announced,
    announce_finished,
    finished_jobs,
    job_message,
    job_message_key,
)
from alerts.outbox import ensure_schema
from monitor.cli.jobs import _cell
from monitor.detectors.inputs import CostHour, GpuHour
from monitor.jobs.config import JobsConfig
from monitor.state.store import open_store

D = Decimal
T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
JOBS = JobsConfig()  # running_within_hours = 6


def _cost(hour: int, usd: str, job: str | None, sub: str = "compute.gpu", **kw: object) -> CostHour:
    labels = {"job": job} if job else {}
    kw = {"instance": f"{job}-vm", "zone": "us-central1-a"} | kw
    return CostHour(hour=T0 + hour * H, project="ml", subcategory=sub, cost=D(usd), labels=labels, **kw)  # type: ignore[arg-type]


def _train(first: int, last: int, job: str = "llm") -> list[CostHour]:
    """$100/h of GPU and $5/h of inter-zone traffic per hour of [first, last]."""
    out = []
    for h in range(first, last + 1):
        out += [_cost(h, "100", job), _cost(h, "5", job, "network.inter_zone")]
    return out


def _rest(last: int) -> list[CostHour]:
    """The rest of the export billing on to hour `last` (disks, buckets: no job), as it does."""
    return [_cost(h, "1", None, "storage.persistent_disk", instance=None) for h in range(0, last + 1)]


def _gpu(hour: int, job: str = "llm", idle: bool = False, estimated: bool = False) -> GpuHour:
    return GpuHour(
        T0 + hour * H, "ml", f"{job}-vm", "H100", 8, D(8), D(100), 0.0 if idle else 80.0,
        idle_gpu_hours=D(8) if idle else D(0), idle_cost=D(100) if idle else D(0), zone="us-central1-a",
        estimated=estimated, labels={"job": job},
    )  # fmt: skip


def _records(hours: list, gpu: list, end_hour: int) -> list:
    return job_records(hours, gpu, JOBS, T0 + end_hour * H)


def test_finished_means_billing_and_utilization_quiet_for_running_within_hours() -> None:
    hours = _train(0, 9)  # last billed hour 9: [9, 10)
    assert [r.job for r in finished_jobs(_records(hours, [], 17), [])] == ["llm"]  # 10 + 6 <= 17
    assert finished_jobs(_records(hours, [], 16), []) == []  # 10 >= 16 - 6: billing may lag
    # billing stopped at 9 but utilization still reports the GPUs at hour 12 (billing lags): running
    assert finished_jobs(_records(hours, [_gpu(12, estimated=True)], 17), []) == []
    assert [r.job for r in finished_jobs(_records(hours, [_gpu(12, estimated=True)], 20), [])] == ["llm"]
    assert finished_jobs(_records(_train(0, 9, job=None), [], 30), []) == []  # unlabelled spend is no job


def test_a_bucket_billing_on_after_the_job_does_not_keep_it_running(tmp_path: Path) -> None:
    """The job's checkpoints bucket (its label) bills every hour; the job ended with its VM."""
    hours = _train(0, 9) + [_cost(h, "0.5", "llm", "storage.gcs", instance=None) for h in range(0, 30)]
    (r,) = finished_jobs(_records(hours, [], 30), [])
    assert r.last_hour == T0 + 9 * H and "Cloud Storage: $15.00" in json.dumps(job_message(r, "#ml").blocks)
    s = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    assert len(_announce(s, hours, 30)) == 1
    s.close()


def test_told_runs_history_and_new_runs() -> None:
    recs = _records(_train(0, 9), [], 30)
    told = [Announced("llm", T0, T0 + 9 * H)]
    assert finished_jobs(recs, told) == []
    late = _records([*_train(0, 9), _cost(10, "1", "llm")], [], 30)  # a late row stretches the told run
    assert finished_jobs(late, told) == []
    rerun = _records(_train(20, 25), [], 40)  # the old run out of the window; the name used again
    assert [r.job for r in finished_jobs(rerun, told)] == ["llm"]
    assert finished_jobs(recs, [], history_cut=T0 + 11 * H) == []  # ended before the first start
    assert len(finished_jobs(recs, [], history_cut=T0 + 10 * H)) == 1


def test_the_message_has_the_total_hidden_costs_and_counterfactuals() -> None:
    gpu = [_gpu(h, idle=h >= 8) for h in range(10)]
    (r,) = finished_jobs(_records(_train(0, 9), gpu, 30), [])
    msg = job_message(r, "#ml")
    text = json.dumps(msg.blocks, ensure_ascii=False)
    assert msg.text == "Job finished: llm: $1,050.00 over 10 h; idle GPUs $200.00, one zone would save $50.00"
    assert (
        "*Total:* $1,050.00 net ($1,050.00 before credits) over 2026-11-01 00:00–2026-11-01 10:00 UTC (10 h)"
        in text
    )
    assert "idle GPUs: $200.00 (19.0%)" in text and "inter-zone traffic: $50.00 (4.8%)" in text
    assert "one zone: save $50.00" in text and "Spot: nothing to save" in text  # no price book given
    assert "8× H100, 80.0 GPU-hours at 64.0% mean utilization" in text
    assert (
        msg.idempotency_key
        == job_message_key("llm", "#ml", T0 + 9 * H)
        != job_message_key("llm", "#x", T0 + 9 * H)
    )


def test_idle_gpus_are_unknown_without_utilization_and_unsaid_without_gpus() -> None:
    # seed 23's embeddings job: one L4 that never reported utilization read "idle GPUs: $0.00 (0.0%)"
    dark = [replace(_gpu(h), mean_utilization_pct=None) for h in range(10)]
    (r,) = finished_jobs(_records(_train(0, 9), dark, 30), [])
    msg = job_message(r, "#ml")
    text = json.dumps(msg.blocks, ensure_ascii=False)
    assert "idle GPUs:" not in text
    assert "no utilization data: $1,000.00 (its idle GPUs cannot be told)" in text
    assert "; idle GPUs unknown, one zone" in msg.text
    (cpu,) = finished_jobs(_records([_cost(h, "1", "etl", "compute.cpu") for h in range(10)], [], 30), [])
    msg = job_message(cpu, "#ml")
    assert "idle GPUs" not in json.dumps(msg.blocks) + msg.text and "no GPUs" in json.dumps(msg.blocks)


def test_idle_gpus_of_reserved_gpus_without_utilization_are_unknown() -> None:
    # billed at $0 (reserved) with no agent: no unmonitored spend, and still nothing known of idle
    # GPUs ("idle GPUs: $0.00" after 73c0e73, a helper's review)
    dark = [replace(_gpu(h), mean_utilization_pct=None, gpu_cost=D(0)) for h in range(10)]
    (r,) = finished_jobs(_records(_train(0, 9), dark, 30), [])
    msg = job_message(r, "#ml")
    assert "; idle GPUs unknown, one zone" in msg.text
    # and so do its twins, `gpucost jobs`' table and the digest's Top jobs (they said "$0.00")
    assert _cell(r.to_dict(), "idle_cost_usd") == "unknown"
    (line,) = top_jobs([r], [r], "UTC").lines
    assert line.idle_text() == ("unknown", "-")
    # a job without GPUs has no idle GPUs: $0.00, as before
    (cpu,) = finished_jobs(_records([_cost(h, "3", "etl", "compute.cpu") for h in range(10)], [], 30), [])
    assert _cell(cpu.to_dict(), "idle_cost_usd") == "$0.00"
    assert top_jobs([cpu], [cpu], "UTC").lines[0].idle_text()[0] == "$0.00"


def test_idle_gpus_of_a_partly_monitored_job_are_a_lower_bound() -> None:
    # the message said the exact "$200.00" beside $500.00 of GPU spend no utilization judged, where
    # `gpucost jobs` and the digest say "≥ $200.00" (`monitor.model.idle_usd`)
    gpu = [_gpu(h, idle=h >= 8) if h >= 5 else replace(_gpu(h), mean_utilization_pct=None) for h in range(10)]
    (r,) = finished_jobs(_records(_train(0, 9), gpu, 30), [])
    msg = job_message(r, "#ml")
    text = json.dumps(msg.blocks, ensure_ascii=False)
    assert "idle GPUs: ≥ $200.00 (19.0%)" in text
    assert "GPU spend with no utilization data: $500.00" in text and "cannot be told" not in text
    assert "; idle GPUs ≥ $200.00, one zone" in msg.text


def test_names_from_labels_are_escaped() -> None:
    (r,) = finished_jobs(_records(_train(0, 2, job="<!channel>"), [], 30), [])
    msg = job_message(r, "#ml")
    assert "<!channel>" not in json.dumps(msg.blocks) + msg.text and "&lt;!channel&gt;" in msg.text


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    ensure_schema(s)
    yield s
    s.close()


def _outbox(store) -> list[tuple]:
    with store.transaction() as conn:
        return conn.execute(
            "SELECT idempotency_key, reason, receiver FROM alerts_outbox WHERE group_key = ?", (JOB_GROUP,)
        ).fetchall()


def _announce(store, hours: list, end_hour: int, gpu: tuple = (), **kw: object) -> list[str]:
    return announce_finished(
        store, hours, list(gpu), JOBS, now=T0 + end_hour * H, window_start=T0 - 24 * H,
        window_end=T0 + end_hour * H, receiver="#ml", **kw,
    )  # fmt: skip


def test_announced_once_across_runs_late_rows_and_restarts(store, tmp_path: Path) -> None:
    hours = _train(0, 9) + _train(0, 30, job="other")
    assert _announce(store, hours, 12) == []  # llm stopped 2 h ago: billing may still come
    (key,) = _announce(store, hours, 17)
    assert [tuple(r) for r in _outbox(store)] == [(key, "job_finished", "#ml")]
    assert _announce(store, hours, 18) == []  # no repeat
    late = [*hours, _cost(10, "3", "llm")]  # a late row of the run already told
    assert _announce(store, late, 20) == []
    store.close()
    again = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")  # a restart
    assert _announce(again, late, 21) == [] and len(_outbox(again)) == 1
    # the other job finishes later: its own message (and still none for llm, two days on)
    (other,) = _announce(again, hours, 17 + 48)
    assert other != key and _announce(again, hours, 17 + 72) == [] and len(_outbox(again)) == 2
    # a job that ended before gpucost first started (the history cut): none
    assert _announce(again, _train(0, 3, job="old"), 41, history_cut=T0 + 30 * H) == []
    again.close()


def test_a_job_whose_utilization_runs_on_is_not_built(store) -> None:
    """Billing lags usage by hours, so at each detection run a running job's last billed hour looks
    old. Its estimated hours (utilization, no billing yet) show it running: nothing is built and the
    GPU hours before the detection window are not joined. Once those too are old, it is told."""
    hours, est = _train(0, 9) + _rest(30), [_gpu(h, estimated=True) for h in (10, 11, 12)]

    def never() -> list:
        raise AssertionError("the earlier GPU hours were joined for a job still running")

    kw = {"window_start": T0, "receiver": "#ml", "estimates": est}
    assert announce_finished(store, hours, never, JOBS, now=T0 + 17 * H, window_end=T0 + 17 * H, **kw) == []
    (key,) = announce_finished(store, hours, lambda: est, JOBS, now=T0 + 20 * H, window_end=T0 + 20 * H, **kw)
    assert key == job_message_key("llm", "#ml", T0 + 12 * H)  # its last hour is its last estimated one


def test_quiet_is_measured_to_the_billing_not_the_clock(store) -> None:
    """Billing lags usage, by more for some resources than for others: the demo's daemon told "Job
    finished: embeddings" at 12:00 for a VM billed to 04:00 while the rest was billed to 07:00, and
    the job ran on. Quiet is measured to the latest hour billed; an export silent for more than
    twice `running_within_hours` (the whole fleet stopped) is measured to the clock less that."""
    lagging = _train(0, 9) + _rest(13)  # the rest billed to 13: llm's 10 to 14 may be on their way
    assert _announce(store, lagging, 17) == []  # the clock alone: 10 < 17 - 6
    assert len(_announce(store, _train(0, 9) + _rest(17), 18)) == 1  # billing went on without it
    silent = _train(0, 5, job="solo")  # nothing else bills: the whole export silent after hour 6
    assert _announce(store, silent, 24) == []
    assert len(_announce(store, silent, 25)) == 1  # 6 + 6 < 25 - 12


def test_the_pipelines_repeat_interval_never_resends_it(store, tmp_path: Path) -> None:
    """Not a finding: `pipeline.process` with nothing firing, before and after `repeat_interval`,
    queues nothing, and the job message stays the one outbox row."""
    from alerts.console import ConsoleNotifier
    from alerts.pipeline import Deps, process

    (key,) = _announce(store, _train(0, 9) + _rest(30), 17)
    deps = Deps(store, ConsoleNotifier(tmp_path))
    for later in (17, 17 + 25, 17 + 49):
        assert process([], T0 + later * H, deps).notified == ()
    assert [r[0] for r in _outbox(store)] == [key]


# -- end to end: the daemon's cycle on the simulated fleet, after every job stopped ----------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.shared_fleets import shared_fleet

    return shared_fleet(tmp_path_factory, 7, 2)[0]


@pytest.mark.slow
def test_the_daemon_tells_each_finished_job_once(tmp_path: Path, fleet: Path) -> None:
    from monitor.config import parse_config
    from monitor.cycle import run_billing_poll, run_delivery, run_detection, run_utilization_poll
    from monitor.jobs.run import jobs_once
    from tests.test_digest_jobs import JOBS as DEFAULT_JOBS
    from tests.test_digest_jobs import daemon_on_fleet

    route = {"match": {"label.job": "finetune-mistral"}, "channel": "#finetune"}  # routed like findings
    deps = daemon_on_fleet(tmp_path, fleet, slack={"routes": [route]})
    truth = json.loads((fleet / "ground_truth.json").read_text())
    fleet_end = datetime(2026, 11, 3, tzinfo=UTC)  # every simulated job bills until then
    early = fleet_end + 2 * H  # the last billed hour ended 2 h ago: billing may still come
    for step in (run_billing_poll, run_utilization_poll, run_detection):
        step(deps, early)
    assert _outbox(deps.store) == []
    # the whole fleet stopped, its disks too: nothing bills after its end. Eight hours on, the whole
    # export may only be late; the jobs are quiet once it has been silent for twice
    # `running_within_hours` (12 h) and they quiet 6 h more, and told once their hours are settled
    # (`billing.provisional_days` = 3: today and the two days before are provisional)
    for step in (run_billing_poll, run_utilization_poll, run_detection):
        step(deps, fleet_end + 8 * H)
    assert _outbox(deps.store) == []
    now = fleet_end + 49 * H
    run_billing_poll(deps, now)
    run_utilization_poll(deps, now)
    run_detection(deps, now)
    run_delivery(deps, now)
    told = [json.loads(line) for line in (tmp_path / "console" / "alerts.jsonl").read_text().splitlines()]
    finished = [m for m in told if m["text"].startswith("Job finished: ")]
    named = {j["job"] for j in truth["jobs"]}
    assert {m["text"].split(":")[1].strip() for m in finished} == named  # every job, once
    assert len(finished) == len(named)

    # its figures are the jobs engine's (`gpucost jobs` on the export: jobs.sql, not the store)
    report = jobs_once(
        parse_config({}), DEFAULT_JOBS, now=now, billing_paths=[fleet / "billing" / "export.parquet"],
        start=datetime(2026, 11, 1, tzinfo=UTC), end=fleet_end,
    )  # fmt: skip
    mistral = next(j for j in report.jobs if j.job == "finetune-mistral")
    (msg,) = [m for m in finished if "finetune-mistral" in m["text"]]
    assert msg["channel"] == "#finetune" and {m["channel"] for m in finished if m is not msg} == {
        "#gpucost-alerts"
    }
    total = f"{mistral.net_cost.quantize(D('0.01')):,}"
    assert msg["text"].startswith(f"Job finished: finetune-mistral: ${total} over 48 h")

    for later in (now + 25 * H, now + 49 * H):  # past the repeat interval, twice
        for step in (run_detection, run_delivery):
            step(deps, later)
    again = [json.loads(line) for line in (tmp_path / "console" / "alerts.jsonl").read_text().splitlines()]
    assert len([m for m in again if m["text"].startswith("Job finished: ")]) == len(named)
    deps.store.close()


def test_a_job_on_gpus_of_several_models_names_them_all() -> None:
    # seed 11's notebook job (two A100 VMs and an L4) was "3× A100 40GB"
    l4 = [
        GpuHour(
            T0 + h * H, "ml", "llm-l4", "L4", 1, D(1), D(1), 80.0, zone="us-central1-a", labels={"job": "llm"}
        )
        for h in range(10)
    ]
    billed = [*_train(0, 9), *(_cost(h, "1", "llm", instance="llm-l4") for h in range(10))]
    (r,) = finished_jobs(_records(billed, [*(_gpu(h) for h in range(10)), *l4], 30), [])
    assert (r.gpu_model, r.gpus) == ("H100 + L4", 9)
    assert "9 GPUs (H100 + L4), 90.0 GPU-hours" in json.dumps(
        job_message(r, "#ml").blocks, ensure_ascii=False
    )
