"""GPU hours joined from the detection window on (`assemble_inputs(gpu_from=...)`): the hours
before it are joined only when a reader of a job's whole life asks, and then they are exactly what
one join of the whole range gives, in its order; job budgets see the same last GPU hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from monitor.billing_poll import provisional_since
from monitor.detectors.inputs import CostHour, DetectorInputs, GpuHour, GpuHourTable
from monitor.detectors.job_budget import JobBudget
from monitor.jobs.config import JobsConfig

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
NOW = datetime(2026, 11, 3, 9, tzinfo=UTC)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_digest_jobs import polled_daemon

    deps = polled_daemon(tmp_path_factory, "gpu-window", seed=7, days=2, now=NOW)
    yield deps
    deps.store.close()


def _inputs(deps: Any, gpu_from: datetime | None, provisional_days: int = 2) -> DetectorInputs:
    from tests.test_digest_jobs import assembled

    return assembled(deps, NOW, end=T0 + 48 * H, provisional_days=provisional_days, gpu_from=gpu_from)


def test_hours_before_the_window_are_joined_on_demand_as_one_join_gives_them(daemon: Any) -> None:
    whole, split = _inputs(daemon, None), _inputs(daemon, T0 + 20 * H)
    assert whole.gpu_from is None and split.gpu_from == T0 + 20 * H
    assert list(split.gpu_hours) == [g for g in whole.gpu_hours if g.hour >= T0 + 20 * H]
    assert 0 < len(split.gpu_hours) < len(whole.gpu_hours)
    assert split.all_gpu_hour_table().rows() == list(whole.gpu_hours)
    assert split.all_gpu_hour_table() is split.all_gpu_hour_table()  # joined once: two readers may ask
    assert whole.all_gpu_hour_table().rows() == list(whole.gpu_hours)


def test_the_split_is_never_after_the_first_provisional_hour(daemon: Any) -> None:
    since = provisional_since(NOW, 2)
    assert T0 < since < T0 + 40 * H
    assert _inputs(daemon, T0 + 40 * H).gpu_from == since
    assert _inputs(daemon, T0 - 5 * H).gpu_from is None  # before the data: one join


def _job_hours(job: str, hours: range) -> tuple[list[CostHour], list[GpuHour]]:
    labels = {"job": job}
    costs = [CostHour(hour=T0 + h * H, project="p", subcategory="compute.gpu", cost=Decimal(100), labels=labels)
             for h in hours]  # fmt: skip
    gpu = [GpuHour(T0 + h * H, "p", f"vm-{job}", "H100", 8, Decimal(8), Decimal(100), 50.0, labels=labels) for h in hours]
    return costs, gpu


def test_job_budgets_see_a_jobs_last_gpu_hour_before_the_window() -> None:
    """A job whose GPU hours all precede `gpu_from` keeps its last GPU hour in the evidence (the
    earlier hours are joined for it); a job with GPU hours since does not make them be joined."""
    old_costs, old_gpu = _job_hours("old", range(0, 6))
    new_costs, new_gpu = _job_hours("new", range(4, 30))
    detector = JobBudget(jobs=JobsConfig(budgets={"old": 10.0, "new": 10.0}))
    common = {"window_start": T0, "window_end": T0 + 30 * H, "provisional_from": T0 + 30 * H}
    costs = sorted(old_costs + new_costs, key=lambda r: r.hour)
    whole = DetectorInputs(**common, hourly=costs, gpu_hours=sorted(old_gpu + new_gpu, key=lambda g: g.hour))
    split = DetectorInputs(**common, hourly=costs, gpu_hours=[g for g in new_gpu if g.hour >= T0 + 10 * H],
                           gpu_from=T0 + 10 * H, earlier_gpu_hours=lambda: GpuHourTable.from_rows([g for g in whole.gpu_hours if g.hour < T0 + 10 * H]))  # fmt: skip
    found = {f.fingerprint: f.evidence for f in detector.evaluate(whole, T0 + 30 * H)}
    last = {e["job"]: e["last_utilization_hour"] for e in found.values()}
    assert last == {"old": "2026-11-01T05:00:00Z", "new": "2026-11-02T05:00:00Z"}
    assert {f.fingerprint: f.evidence for f in detector.evaluate(split, T0 + 30 * H)} == found

    def never() -> GpuHourTable:
        raise AssertionError("joined the earlier hours for a job that has GPU hours since")

    only_new = JobBudget(jobs=JobsConfig(budgets={"new": 10.0}))
    lazy = DetectorInputs(**common, hourly=new_costs, gpu_hours=[g for g in new_gpu if g.hour >= T0 + 10 * H],
                          gpu_from=T0 + 10 * H, earlier_gpu_hours=never)  # fmt: skip
    assert len(only_new.evaluate(lazy, T0 + 30 * H)) == 1
