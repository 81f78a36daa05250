"""The cheap paths to the jobs engine give the engine's own figures, to the micro.

The finished-job check builds only the jobs that may have finished (`build_jobs(only=...)`, over
the rows `alerts.job_message._rows_for` keeps), the digest's chart reads each job's spend by hour
only (`job_spend`, from the sums the store's engine makes: `stored_job_sums`) and converts the
day's stored aggregates once, straight from `HourlyCost` (`stored_rows`). Each is pinned here
against the full engine (`build_jobs` over every row), on a hand-made fleet built to hit every
split the engine does (a cluster fee shared by node-hours, a GPU node-hour shared three ways,
estimated hours after billing, a nameless GPU node, credits), and on the simulated fleet through
the daemon's own stored aggregates.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import pytest

from alerts.digest_jobs import (
    JobsSection,
    _build,
    chart_spend,
    digest_jobs,
    engine_rows,
    job_records,
    stored_rows,
    top_jobs,
)
from alerts.job_message import (
    Announced,
    _Candidate,
    _candidate_rows,
    _estimated_until,
    _jobs_of,
    _rows_for,
    _spans,
    announce_finished,
    finished_jobs,
)
from monitor.billing_poll import HOURLY_COLUMNS, stored_job_sums, write_rows
from monitor.detectors.costs import Costs, billed_until
from monitor.detectors.inputs import CostHour, GpuHour, GpuHourTable
from monitor.jobs.build import CLUSTER_FEE, build_jobs
from monitor.jobs.config import JobsConfig
from monitor.state.analytics import AggregateStore
from monitor.state.store import open_store

D = Decimal
T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
JOBS = JobsConfig()
KEYS = JOBS.label_keys()
END = T0 + 10 * H


class _Prices:
    """Per-GPU list prices only (no whole-machine table)."""

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        return {"on_demand": D(10), "spot": D(4)}.get(pricing_model)

    def gpu_price_source(self, gpu_model: str, region: str | None, pricing_model: str) -> str | None:
        return "test book"


def _cost(hour: int, usd: str, job: str | None, sub: str = "compute.gpu", **kw: Any) -> CostHour:
    labels = {"job": job, "team": "ml"} if job else {"team": "ml"}
    return CostHour(hour=T0 + hour * H, project="ml", subcategory=sub, cost=D(usd), labels=labels, **kw)


def _gpu(hour: int, instance: str | None, cost: str, idle: str = "0", **kw: Any) -> GpuHour:
    base: dict[str, Any] = dict(
        hour=T0 + hour * H, project="ml", instance=instance, gpu_model="H100", gpus=8, gpu_hours=D(8),
        gpu_cost=D(cost), mean_utilization_pct=50.0, idle_gpu_hours=D(idle), idle_cost=D(idle) * D(cost) / 8,
        zone="z1", region="r1", pricing_model="on_demand",
    )  # fmt: skip
    return GpuHour(**(base | kw))


def _fleet() -> tuple[list[CostHour], list[GpuHour]]:
    """Jobs a, b, c share GKE node n1 (5:2:1 GPU usage, odd cents) in hours 0-1; c and an
    unlabelled pod run on n2; the unlabelled cluster fee is shared by those node-hours; a also runs
    alone on vm-a (credits, idle hours) and is estimated after billing; d and the unlabelled rest
    share a nameless GPU node (its latest billed job takes the estimated hour); b's bucket bills
    after its compute ended; e pays inter-zone traffic; f runs later, on CPUs."""
    n1 = {"instance": "n1", "instance_id": "101", "cluster": "c1", "zone": "z1"}
    n2 = {"instance": "n2", "instance_id": "102", "cluster": "c1", "zone": "z1"}
    va = {"instance": "vm-a", "instance_id": "201", "zone": "z1"}
    hours = []
    for h in (0, 1):
        hours += [
            _cost(h, "50.000001", "a", usage_pricing_units=D(5), **n1),
            _cost(h, "20.000001", "b", usage_pricing_units=D(2), **n1),
            _cost(h, "10.000001", "c", usage_pricing_units=D(1), **n1),
            _cost(h, "3.333333", "c", "compute.cpu", **n2),
            _cost(h, "1.111111", None, "compute.cpu", **n2),
            _cost(h, "0.100001", None, "orchestration.gke", cluster="c1", zone="z1"),
        ]
    hours.append(_cost(2, "0.1", None, "orchestration.gke", cluster="c1", zone="z1"))  # no node that hour
    for h in range(4):
        hours.append(_cost(h, "80", "a", credits=D("-8.5"), usage_pricing_units=D(8), **va))
    hours += [
        _cost(2, "7", "d", usage_pricing_units=D(1), zone="z1"),
        _cost(3, "9", None, usage_pricing_units=D(3), zone="z1"),  # the nameless node's latest job
        *(_cost(h, "0.25", "b", "storage.gcs") for h in range(9)),
        _cost(3, "4.5", "e", "network.inter_zone", zone="z1"),
        _cost(3, "12", "e", "compute.cpu", instance="vm-e", zone="z1"),
        *(_cost(h, "2", "f", "compute.cpu", instance="vm-f", zone="z1") for h in (5, 6)),
    ]
    gpu = [
        *(_gpu(h, "n1", "80.000003", idle="3", cluster="c1", instance_id="101") for h in (0, 1)),
        *(_gpu(h, "vm-a", "80", idle="2", instance_id="201") for h in range(4)),
        _gpu(4, "vm-a", "80", instance_id="201"),  # billed by utilization only: no usage row that hour
        *(_gpu(h, "vm-a", "80", instance_id="201", estimated=True) for h in (5, 6)),
        _gpu(2, None, "7"),
        _gpu(3, None, "9", mean_utilization_pct=None, idle="0"),
        _gpu(4, None, "9", estimated=True),
    ]
    return hours, gpu


def _full(hours: list[CostHour], gpu: list[GpuHour]) -> list:
    return job_records(hours, gpu, JOBS, END, _Prices())


def test_the_fleet_exercises_every_split() -> None:
    """What makes the comparisons below meaningful: fees shared, a 3-way GPU split, estimates."""
    full = {r.job: r for r in _full(*_fleet())}
    assert all(full[j].by_subcategory.get("orchestration.gke", 0) > 0 for j in ("a", "b", "c", None))
    assert [full[j].gpu.gpu_hours for j in "abc"] == [D(42), D(4), D(2)]  # vm-a 4 h, n1 5:2:1 of 2 h
    assert full["a"].estimated and full["a"].running and full[None].estimated and full["a"].spot_savings
    assert full["b"].last_hour == T0 + H and not full["b"].running  # its bucket does not keep it running


@pytest.mark.parametrize("size", [1, 2, 6])
def test_only_gives_each_jobs_own_full_record(size: int) -> None:
    hours, gpu = _fleet()
    full = _full(hours, gpu)
    jobs_of = _jobs_of(hours, KEYS)
    for names in map(set, combinations(["a", "b", "c", "d", "e", "x"], size)):
        want = [r for r in full if r.job in names]
        assert job_records(hours, gpu, JOBS, END, _Prices(), only=names) == want, names
        kept = _rows_for(hours, jobs_of, names)  # what the finished-job check converts
        assert job_records(kept, gpu, JOBS, END, _Prices(), only=names) == want, names


@pytest.mark.parametrize(("names", "read"), [({"e"}, 0), ({"d"}, 3), ({"a"}, 2 + 7), ({"c"}, 2), (None, 12)])
def test_a_table_of_gpu_hours_gives_the_same_records_reading_only_their_nodes_hours(
    names: set[str] | None, read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished job's message reads 45 days of every node's GPU hours as a table: the records
    are the list's, only the hours of the jobs' nodes are read (e: none, d: the nameless node's 3,
    a: n1's 2 and vm-a's 7, c: n1's 2; every job: all 12), and no `GpuHour` is built for them."""
    from monitor.jobs import build

    hours, gpu = _fleet()
    want = job_records(hours, gpu, JOBS, END, _Prices(), only=names)
    add_gpu, seen = build._add_gpu, []

    def counting(acc: Any, c: Any, jobs: Any, nodes: Any, table: GpuHourTable) -> None:
        seen.append(len(table))
        add_gpu(acc, c, jobs, nodes, table)

    def no_rows(table: GpuHourTable, picked: Any = None) -> list[GpuHour]:
        raise AssertionError("a GpuHour was built")

    monkeypatch.setattr(build, "_add_gpu", counting)
    monkeypatch.setattr(GpuHourTable, "rows", no_rows)
    assert job_records(hours, GpuHourTable.from_rows(gpu), JOBS, END, _Prices(), only=names) == want
    assert seen == [read]


def test_estimated_last_hours_never_pass_the_records() -> None:
    """The check's estimated last hour per job (`_estimated_until`: per GPU node and label set, from
    the engine) is the full record's: a, estimated on vm-a up to hour 6; the nameless node's
    estimate is the unlabelled rest's, no job's. An estimate on n1, whose last billed hour a, b and
    c share, is a's in the record (the largest usage) and no job's in the check: a lower bound."""
    hours, gpu = _fleet()
    full = {r.job: r for r in _full(hours, gpu)}
    costs = Costs.from_rows(hours)
    assert _estimated_until(costs, gpu, KEYS) == {"a": T0 + 6 * H} and full["a"].last_hour == T0 + 6 * H
    shared = _gpu(8, "n1", "80", cluster="c1", instance_id="101", estimated=True)
    assert {r.job: r for r in _full(hours, [*gpu, shared])}["a"].last_hour == T0 + 8 * H
    assert _estimated_until(costs, [*gpu, shared], KEYS) == {"a": T0 + 6 * H}
    assert _estimated_until(costs, [g for g in gpu if not g.estimated], KEYS) == {}


@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_check_fetches_only_the_rows_it_can_pick(size: int) -> None:
    """`_candidate_rows` (the jobs' rows, their clusters' rows, their nodes' GPU rows) holds every row
    `_rows_for` picks from the whole window, and fewer rows than the window."""
    hours, _ = _fleet()
    costs = Costs.from_rows(hours)
    for names in map(set, combinations(["a", "b", "c", "d", "e", "x"], size)):
        fetched = _candidate_rows(costs, KEYS, names)
        picked = _rows_for(fetched, _jobs_of(fetched, KEYS), names)
        assert picked == _rows_for(hours, _jobs_of(hours, KEYS), names), names
        assert len(fetched) < len(hours), names


def _stored(hours: list[CostHour]) -> AggregateStore:
    """`hours` as stored aggregates (labels as `hourly.sql` keeps them: `k=v,k=v`, sorted)."""

    def row(h: CostHour) -> dict[str, Any]:
        labels = ",".join(f"{k}={v}" for k, v in sorted(h.labels.items())) or None
        money = {"gross_micros": h.cost, "credit_micros": h.credits, "net_micros": h.net}
        return (
            dict.fromkeys(HOURLY_COLUMNS)
            | {"cud_micros": 0, "sud_micros": 0, "other_credit_micros": 0, "row_count": 1}
            | {k: int(v * 10**6) for k, v in money.items()}
            | {"usage_hour": h.hour, "project_id": h.project, "zone": h.zone, "resource_name": h.instance}
            | {"instance_id": h.instance_id, "cluster": h.cluster, "subcategory": h.subcategory}
            | {"user_labels": labels, "usage_amount": float(h.usage_pricing_units), "sku_id": h.sku_id}
        )

    store = AggregateStore(None)
    write_rows(store, [row(h) for h in hours], END)
    return store


def _per_hour(spend: list[Any]) -> list[tuple]:
    """Jobs (`JobSpend`s or `JobRecord`s) as what a chart of spend per job reads, in order."""
    return [(s.job, s.gross_micros, [(h.hour, h.cost, h.net_cost) for h in s.hours]) for s in spend]


def test_job_spend_from_the_engines_sums_is_build_jobs_money_by_hour() -> None:
    """The chart's spend per job and hour, from the sums the store's engine makes (`stored_job_sums`:
    per hour and label set, the fee rows, the cluster node-hours), is the full engine's to the
    micro: the fee shared by node-hours (n1 three ways, n2 two ways), credits, and a tie (g and h
    alike on n3: each fee row's odd micro goes to the job whose row comes first in the readers'
    order; the two rows' sum would split evenly).
    The hours it lacks are the GPU hours with no row of the job: a's estimates, vm-a's hour billed
    by utilization only and the nameless node's estimate (the unlabelled rest's); no money."""
    hours, gpu = _fleet()
    n3 = {"instance": "n3", "instance_id": "103", "cluster": "c2", "zone": "z1"}
    hours += [
        *(_cost(9, "1", job, "compute.cpu", **n3) for job in ("g", "h")),
        _cost(9, "0.000003", None, "orchestration.gke", cluster="c2", zone="z1", sku_id="fee-1"),
        _cost(9, "0.000001", None, "orchestration.gke", cluster="c2", zone="z1", sku_id="fee-2"),
    ]
    full = build_jobs(engine_rows(hours, KEYS), gpu, keys=KEYS, window_end=END)
    spend = chart_spend(stored_job_sums(_stored(hours), T0, END, CLUSTER_FEE), KEYS)
    assert [(s.job, s.gross_micros) for s in spend] == [(r.job, r.gross_micros) for r in full]
    assert {s.job: s.gross_micros for s in spend if s.job in ("g", "h")} == {"g": 1_000_003, "h": 1_000_001}
    only_gpu = {}
    for s, r in zip(spend, full, strict=True):
        got = {h.hour: (h.cost, h.net_cost) for h in s.hours}
        assert got == {h.hour: (h.cost, h.net_cost) for h in r.hours if h.hour in got}, s.job
        only_gpu[s.job] = [(h.hour, h.cost, h.net_cost) for h in r.hours if h.hour not in got]
    assert only_gpu == {
        "a": [(T0 + 5 * H, 0, 0), (T0 + 6 * H, 0, 0)], None: [(T0 + 4 * H, 0, 0)], "b": [], "c": [], "d": [],
        "e": [], "f": [], "g": [], "h": [],
    }  # fmt: skip


@pytest.mark.parametrize("cut", [None, 2, 5])
def test_the_finished_job_check_tells_what_the_full_engine_would(tmp_path: Path, cut: int | None) -> None:
    """`announce_finished` builds only the jobs that can have finished; what it tells is what the
    full engine's records give (`finished_jobs` over every record), whenever the cheap check lets
    the engine run: at every window end, with and without a history cut, told runs kept. With the
    cut at hour 5, a's billing ends before it and its estimated hours after: a is told once f's
    end lets the engine run (the cut is the record's, estimated hours included)."""
    hours, gpu = _fleet()
    history = T0 + cut * H if cut is not None else None
    store = open_store(f"sqlite:///{tmp_path / 'state.sqlite'}")
    told: list[Announced] = []
    seen: set[str] = set()
    try:
        for end in (T0 + e * H for e in range(6, 34)):  # to past the silent export's 12 h
            inside = [h for h in hours if h.hour < end]
            quiet_to = billed_until(Costs.from_rows(inside), T0, end, 6 * H)  # the latest hour billed
            full = job_records(inside, [g for g in gpu if g.hour < end], JOBS, quiet_to, _Prices())
            spans = _spans(Costs.from_rows(inside), KEYS, {})  # no told run cut
            stale = {j: s for j, s in spans.items() if s[1] + H < quiet_to - 6 * H}
            runs = finished_jobs(_Candidate.latest(stale), told, history)  # does the engine run at all
            want = [r.job for r in finished_jobs(full, told, history)] if runs else []
            keys = announce_finished(
                store, inside, [g for g in gpu if g.hour < end], JOBS, now=end, window_start=T0,
                window_end=end, receiver="#c", prices=_Prices(), history_cut=history,
            )  # fmt: skip
            told += [Announced(r.job, r.first_hour, r.last_hour) for r in full if r.job in want]
            assert len(keys) == len(want), (end, want)
            seen.update(want)
    finally:
        store.close()
    assert seen == ({"a", "f"} if cut == 5 else {"a", "b", "c", "d", "e", "f"})


# -- the simulated fleet, through the daemon's stored aggregates --------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The daemon's billing and utilization polls on the simulated fleet; its stored rows of the
    two days and its detection inputs."""
    from monitor.assemble import cost_hours
    from monitor.billing_poll import hourly_costs, provisional_since, stored_job_columns
    from monitor.cycle import detection_inputs, run_billing_poll, run_utilization_poll
    from tests.shared_fleets import shared_fleet
    from tests.test_digest_jobs import daemon_on_fleet

    tmp = tmp_path_factory.mktemp("jobs-subsets")
    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    deps = daemon_on_fleet(tmp, shared_fleet(tmp_path_factory, 7, 2)[0])
    run_billing_poll(deps, now)
    run_utilization_poll(deps, now)
    try:
        inputs = detection_inputs(deps, now)
        rows = hourly_costs(deps.aggregates, T0, T0 + 48 * H, now=now, provisional_days=3)
        columns = stored_job_columns(deps.aggregates, T0, T0 + 48 * H)
        hours = cost_hours(deps.aggregates, T0, T0 + 48 * H, provisional_since(now, 3))
    finally:
        deps.store.close()

    def sums(lo: datetime, hi: datetime) -> Any:  # the aggregate file outlives the state store
        return stored_job_sums(deps.aggregates, lo, hi, CLUSTER_FEE)

    return {"rows": rows, "columns": columns, "hours": hours, "inputs": inputs, "sums": sums}


def _billed(stored: dict[str, Any]) -> list[GpuHour]:
    """The fleet's billed GPU hours of the two days: what the digest joins (no prices, no estimates)."""
    gpu = [g for g in stored["inputs"].gpu_hours if T0 <= g.hour < T0 + 48 * H and not g.estimated]
    assert len(gpu) < len([g for g in stored["inputs"].gpu_hours if T0 <= g.hour < T0 + 48 * H])
    return gpu


@pytest.mark.slow
def test_stored_rows_are_the_cost_hours_rows(stored: dict[str, Any]) -> None:
    rows, columns = stored["rows"], stored["columns"]
    assert len(rows) > 1000 and any(r.labels for r in rows)
    assert [c[0] for c in columns] == [r.usage_hour for r in rows]  # the same rows, in the same order
    assert stored_rows(columns, KEYS) == engine_rows(stored["hours"], KEYS)


@pytest.mark.slow
def test_the_charts_spend_is_the_full_engines_by_hour(stored: dict[str, Any]) -> None:
    """On the simulated fleet's stored aggregates, the engine's sums give every job's money by hour
    as the full engine does over the rows and billed GPU hours, and the same hours."""
    full = job_records(stored["hours"], _billed(stored), JOBS, T0 + 48 * H)
    spend = chart_spend(stored["sums"](T0, T0 + 48 * H), KEYS)
    assert _per_hour(spend) == _per_hour(full) and len(spend) > 5
    assert any(r.by_subcategory.get(CLUSTER_FEE) for r in full if r.job is not None)  # fees shared


@pytest.mark.slow
def test_the_digest_sections_figures_are_the_full_engines(stored: dict[str, Any]) -> None:
    """`digest_jobs` (the engine's sums for the chart, one conversion of the day's rows) against the
    full engine over the chart's days and over the day, through `cost_hours`."""
    gpu = _billed(stored)
    day, hi = date(2026, 11, 2), T0 + 48 * H
    hours = stored["hours"]
    chart = job_records(hours, gpu, JOBS, hi)
    yesterday = job_records(
        [h for h in hours if h.hour >= T0 + 24 * H], [g for g in gpu if g.hour >= T0 + 24 * H], JOBS, hi
    )
    got = digest_jobs(stored["sums"](T0, hi), stored["columns"], gpu, day, "UTC", JOBS)
    assert got == top_jobs(yesterday, chart, "UTC") and len(got.lines) > 3


@pytest.mark.slow
@pytest.mark.parametrize("cuts", [(24,), (13, 30, 31), (1, 24, 47)], ids=["days", "mid_day", "hours"])
def test_the_section_fed_in_pieces_is_the_whole_windows(
    stored: dict[str, Any], cuts: tuple[int, ...]
) -> None:
    """`JobsSection` (the digest feeds it a piece of hours at a time) against `digest_jobs` over both days at
    once: every figure is per hour, so pieces cut anywhere between hours give the same lines and
    daily series to the micro, even when the digest's day is itself cut in pieces."""
    gpu = _billed(stored)
    columns, day = stored["columns"], date(2026, 11, 2)
    whole = digest_jobs(stored["sums"](T0, T0 + 48 * H), columns, gpu, day, "UTC", JOBS)
    edges = [T0, *(T0 + c * H for c in cuts), T0 + 48 * H]
    pieces = JobsSection(day, "UTC", JOBS)
    for lo, hi in pairwise(edges):
        pieces.chart(stored["sums"](lo, hi))
        pieces.add([c for c in columns if lo <= c[0] < hi], [g for g in gpu if lo <= g.hour < hi])
    got = pieces.result()
    assert got == whole and len(got.lines) > 3 and len(got.daily) == 2
    assert any(j.idle_cost for j in got.lines) and any(j.cross_zone_cost for j in got.lines)


@pytest.mark.slow
def test_only_on_the_detection_inputs_gives_every_jobs_full_record(stored: dict[str, Any]) -> None:
    inputs = stored["inputs"]
    hourly, gpu, end = inputs.hourly.rows(), inputs.gpu_hours, inputs.window_end
    full = {r.job: r for r in job_records(hourly, gpu, JOBS, end, inputs.prices)}
    assert len(full) > 5
    jobs_of = _jobs_of(hourly, KEYS)
    for job in (j for j in full if j is not None):
        kept = _rows_for(hourly, jobs_of, {job})
        assert len(kept) < len(hourly)
        assert _build(engine_rows(kept, KEYS), gpu, JOBS, end, inputs.prices, {job}) == [full[job]], job
