"""The digest's "Top jobs": yesterday's cost per job, idle and cross-zone shares, the rest summed so
the section adds up to yesterday's total, and the daily spend per job as a stacked chart.

Pure tests run the real jobs engine (`monitor.jobs.build_jobs`, through `alerts.digest_jobs.job_records`)
on hand-made cost hours; the end-to-end test runs the daemon's cycle (billing poll, utilization
poll, digest) on the simulated fleet and checks the section against `gpucost jobs` for that day.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import pytest

from alerts.blocks import money
from alerts.digest_jobs import NO_JOB, job_records, jobs_blocks, jobs_markdown, render_jobs_chart, top_jobs
from monitor.detectors.inputs import CostHour, GpuHour
from monitor.jobs.config import JobsConfig

D = Decimal
DAY = date(2026, 11, 2)
T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
JOBS = JobsConfig()


def _cost(hour: int, usd: str, job: str | None, sub: str = "compute.gpu", **kw: object) -> CostHour:
    labels = {"job": job} if job else {}
    return CostHour(hour=T0 + hour * H, project="ml", subcategory=sub, cost=D(usd), labels=labels, **kw)  # type: ignore[arg-type]


def _day_fleet() -> tuple[list[CostHour], list[GpuHour]]:
    """Yesterday: a $300, b $200 (of it $20 inter-zone), c $100, d $50, $25 unlabelled, and a $12
    cluster fee of no job shared by the nodes of a and b in that cluster, hour 1."""
    hours = [
        _cost(0, "200", "a", instance="a-vm", zone="z1"),
        _cost(1, "100", "a", instance="a-node", zone="z1", cluster="c1"),
        _cost(0, "80", "b", instance="b-vm", zone="z1"),
        _cost(1, "100", "b", instance="b-node", zone="z1", cluster="c1"),
        _cost(1, "20", "b", "network.inter_zone", instance="b-vm", zone="z1"),
        _cost(2, "100", "c", instance="c-vm", zone="z1"),
        _cost(3, "50", "d", instance="d-vm", zone="z1"),
        _cost(4, "25", None, "storage.gcs"),
        _cost(1, "12", None, "orchestration.gke", cluster="c1", zone="z1"),
    ]
    gpu = [  # a-vm's hour 0: 8 GPU-hours, 4 idle: $100 of its $200 idle
        GpuHour(
            T0, "ml", "a-vm", "H100", 8, D(8), D(200), 40.0, idle_gpu_hours=D(4), idle_cost=D(100), zone="z1"
        )
    ]
    return hours, gpu


def _records(hours: list[CostHour], gpu: list[GpuHour]) -> list:
    return job_records(hours, gpu, JOBS, T0 + 24 * H)


def test_top_jobs_add_up_to_the_day_with_the_rest_summed() -> None:
    hours, gpu = _day_fleet()
    recs = _records(hours, gpu)
    top = top_jobs(recs, recs, "UTC", n=2)
    assert [(j.name, j.cost) for j in top.lines] == [
        ("a", D(306)),  # $300 + half the $12 fee (its node and b's billed the same in hour 1)
        ("b", D(206)),
        ("2 other jobs", D(150)),
        (NO_JOB, D(25)),
    ]
    assert top.total == sum((h.net for h in hours), D(0)) == D(687)
    a, b, rest, _ = top.lines
    assert a.idle_cost == D(100) and a.idle_share == D(100) / D(306)
    assert b.cross_zone_cost == D(20) and a.cross_zone_share == 0 and rest.count == 2 and rest.other


def test_fewer_jobs_than_n_and_no_unlabelled_spend() -> None:
    hours = [_cost(0, "10", "a"), _cost(1, "5", "b")]
    top = top_jobs(_records(hours, []), [], "UTC", n=5)
    assert [j.name for j in top.lines] == ["a", "b"] and top.total == D(15)


def test_no_job_labels_no_section() -> None:
    recs = _records([_cost(0, "10", None), _cost(1, "5", None)], [])
    top = top_jobs(recs, recs, "UTC")
    assert top.lines == () and top.daily == {}


def test_daily_series_per_job_by_day_in_the_digest_zone() -> None:
    hours = [_cost(h, "10", "a") for h in range(-24, 24)] + [_cost(h, "1", "b") for h in range(-24, 24)]
    hours += [_cost(h, "2", "c") for h in range(0, 24)]
    recs = _records(hours, [])
    today = _records([h for h in hours if h.hour >= T0], [])
    top = top_jobs(today, recs, "UTC", n=1)
    assert [j.name for j in top.lines] == ["a", "2 other jobs"]
    assert top.daily == {
        date(2026, 11, 1): {"a": D(240), "2 other jobs": D(24)},
        date(2026, 11, 2): {"a": D(240), "2 other jobs": D(72)},
    }
    # New York: Nov 1 UTC 00:00-04:00 is still Oct 31 (EDT), and Nov 1 is 25 hours long (DST ends)
    ny = top_jobs(today, recs, "America/New_York", n=1).daily
    assert ny[date(2026, 10, 31)]["a"] == D(40) and ny[date(2026, 11, 1)]["a"] == D(250)


def test_markdown_and_blocks_show_shares_and_escape_names() -> None:
    hours, gpu = _day_fleet()
    hours.append(_cost(5, "1", "<!channel>"))
    recs = _records(hours, gpu)
    top = top_jobs(recs, recs, "UTC", n=2)
    md = "\n".join(jobs_markdown(top, DAY, money))
    assert "## Top jobs (2026-11-02)" in md
    assert "| a | $306.00 | $100.00 | 32.7% | $0.00 | 0.0% |" in md
    assert "| b | $206.00 | $0.00 | 0.0% | $20.00 | 9.7% |" in md
    assert "| *3 other jobs* | $151.00 |" in md and "| **Total** | **$688.00** |" in md
    text = str(jobs_blocks(top, money))
    assert "*a* $306.00: idle 32.7%, cross-zone 0.0%" in text and "<!channel>" not in text


def test_the_jobs_chart_is_a_png_of_the_digest_chart_size(tmp_path: Path) -> None:
    hours = [_cost(h, "10", "a") for h in range(-48, 24)] + [_cost(h, "3", None) for h in range(-48, 24)]
    recs = _records(hours, [])
    png = render_jobs_chart(top_jobs(recs, recs, "UTC"), DAY, tmp_path / "j.png", provisional={DAY})
    img = mpimg.imread(png)
    assert img.shape[:2] == (600, 1200) and img.std() > 0.05


def test_the_digest_renders_top_jobs_and_writes_the_jobs_chart(tmp_path: Path) -> None:
    from alerts.digest import DigestData, render_blocks, write_digest

    hours, gpu = _day_fleet()
    recs = _records(hours, gpu)
    d = DigestData.from_dicts(
        day=DAY,
        timezone="UTC",
        yesterday_by_category={"compute": D(650)},
        previous_by_category={},
        yesterday_by_project={"ml": D(650)},
        previous_by_project={},
        mtd_by_category={"compute": D(650)},
        daily_by_category={DAY: {"compute": D(650)}},
        jobs=top_jobs(recs, recs, "UTC"),
    )
    md, _ = write_digest(d, tmp_path)
    text = md.read_text()
    assert "## Top jobs (2026-11-02)" in text and "![Daily spend by job](digest-2026-11-02-jobs.png)" in text
    assert (tmp_path / "digest-2026-11-02-jobs.png").exists()
    assert "*Top jobs*" in str(render_blocks(d))


# -- end to end: the daemon's cycle on the simulated fleet -------------------------------------------------

#: the simulated GKE JobSet names its job by the pod label GKE cost allocation exports
LABELS = ["team", "job", "k8s-label/jobset.sigs.k8s.io/jobset-name"]


def daemon_on_fleet(tmp: Path, fleet: Path, **extra: dict) -> object:
    """`build_deps` on the simulated export (DuckDB) and its utilization files, state in `tmp`."""
    from monitor.clock import FixedClock
    from monitor.config import parse_config
    from monitor.cycle import build_deps
    from monitor.sources.factory import billing_source_from_files

    cfg = parse_config(
        {
            "billing": {"labels": LABELS},
            "utilization": {"source": "files", "files": [str(fleet / "utilization")]},
            "state": {"url": f"sqlite:///{tmp / 'state.sqlite'}"},
            "digest": {"out_dir": str(tmp / "out")},
            "alerts": {"console_dir": str(tmp / "console")},
            **extra,
        }
    )
    billing = billing_source_from_files([fleet / "billing" / "export.parquet"])
    return build_deps(cfg, FixedClock(datetime(2026, 11, 3, 9, tzinfo=UTC)), billing, environ={})


def polled_daemon(
    factory: pytest.TempPathFactory,
    name: str,
    *,
    seed: int,
    days: int,
    now: datetime,
    utilization: bool = True,
) -> Any:
    """`daemon_on_fleet` on a simulated fleet (`tests.shared_fleets`), its state in a new directory
    `name`, its billing polled at `now` (and its utilization, unless not wanted: a first start
    before the utilization poll)."""
    from monitor.cycle import run_billing_poll, run_utilization_poll
    from tests.shared_fleets import shared_fleet

    deps: Any = daemon_on_fleet(factory.mktemp(name), shared_fleet(factory, seed, days)[0])
    run_billing_poll(deps, now)
    if utilization:
        run_utilization_poll(deps, now)
    return deps


def assembled(
    deps: Any,
    now: datetime,
    *,
    provisional_days: int,
    defer: bool = False,
    gpu_from: datetime | None = None,
    end: datetime | None = None,
) -> Any:
    """`assemble_inputs` over a `polled_daemon`'s stores, from the fleet's first hour to `end`
    (default: `now`)."""
    from monitor.assemble import assemble_inputs
    from monitor.utilization.state import migrate as migrate_utilization

    migrate_utilization(deps.store)
    return assemble_inputs(
        deps.store,
        datetime(2026, 11, 1, tzinfo=UTC),
        end or now,
        now,
        aggregates=deps.aggregates,
        provisional_days=provisional_days,
        idle_threshold_pct=deps.cfg.utilization.idle_threshold_pct,
        prices=deps.prices.price_book(now),
        gpu_from=gpu_from,
        defer=defer,
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.shared_fleets import shared_fleet

    return shared_fleet(tmp_path_factory, 7, 2)[0]


@pytest.mark.slow
def test_the_daemons_digest_has_top_jobs_matching_gpucost_jobs(tmp_path: Path, fleet: Path) -> None:
    from monitor.config import parse_config
    from monitor.cycle import run_billing_poll, run_digest, run_utilization_poll
    from monitor.digest_data import digest_data
    from monitor.jobs.run import jobs_once

    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    deps = daemon_on_fleet(tmp_path, fleet)
    run_billing_poll(deps, now)
    run_utilization_poll(deps, now)
    result = run_digest(deps, now)
    text = Path(result["markdown"]).read_text()
    assert "## Top jobs (2026-11-02)" in text and (tmp_path / "out" / "digest-2026-11-02-jobs.png").exists()

    data = digest_data(deps.store, DAY, "UTC", now, 3, jobs=JOBS, aggregates=deps.aggregates)
    assert data.jobs is not None and data.jobs.total == data.yesterday_total  # adds up, to the micro
    lines = {j.name: j for j in data.jobs.lines}
    assert len(data.jobs.lines) == 7 and lines[data.jobs.lines[5].name].other  # top 5, the rest, no label
    assert sum(data.jobs.daily[DAY].values(), D(0)) == data.yesterday_total

    # the same day through `gpucost jobs` (jobs.sql on the export, not the stored aggregates)
    report = jobs_once(
        parse_config({}),
        JOBS,
        now=now,
        billing_paths=[fleet / "billing" / "export.parquet"],
        utilization_paths=[fleet / "utilization"],
        start=T0,
        end=T0 + 24 * H,
    )
    engine = {j.job: j for j in report.jobs}
    pretrain = lines["llm-pretrain"]
    # the same but for its nodes' unlabelled boot disks, which jobs.sql gives to their VM's job and the
    # stored aggregates (by label only) leave unlabelled: $0.03 of $5,148.84 on this day
    assert (
        abs(pretrain.cost - engine["llm-pretrain"].net_cost) < D("0.0001") * engine["llm-pretrain"].net_cost
    )
    assert abs(pretrain.idle_cost - engine["llm-pretrain"].gpu.idle_cost) < D("0.01")
    assert pretrain.cross_zone_cost == engine["llm-pretrain"].single_zone_savings > 0
    deps.store.close()


@pytest.mark.slow
@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
def test_the_digest_reads_its_chart_in_pieces_and_shows_the_whole_windows_figures(
    tmp_path: Path, fleet: Path, tz: str
) -> None:
    """The digest reads its chart a piece of hours at a time (`rows_at_once` stored rows with their
    GPU node-hours and utilization in memory: two weeks of them held 1.7 GB at bench scale 48). Its
    idle dollars per day and its jobs section are those of the whole window read at once, in a
    half-hour zone too (days cut at 18:30 UTC), with pieces of a few hours: the day's rows are read
    for the pieces that overlap it only."""
    from collections import defaultdict
    from zoneinfo import ZoneInfo

    from alerts.digest_jobs import digest_jobs
    from monitor.assemble import gpu_hours, gpu_node_hours
    from monitor.billing_poll import provisional_since, rows_by_hour, stored_job_columns, stored_job_sums
    from monitor.cycle import run_billing_poll, run_utilization_poll
    from monitor.digest_data import digest_data
    from monitor.jobs.build import CLUSTER_FEE
    from monitor.utilization.state import load_util_hours

    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    deps = daemon_on_fleet(tmp_path, fleet)
    run_billing_poll(deps, now)
    run_utilization_poll(deps, now)
    zone = ZoneInfo(tz)
    day = now.astimezone(zone).date() - timedelta(days=1)
    lo = datetime.combine(day - timedelta(days=13), datetime.min.time(), zone)
    hi = datetime.combine(day + timedelta(days=1), datetime.min.time(), zone)
    stored = sum(n for _, n in rows_by_hour(deps.aggregates, lo, hi))
    pieces = digest_data(deps.store, day, tz, now, 3, jobs=JOBS, aggregates=deps.aggregates, rows_at_once=300)

    since = provisional_since(now, 3)
    joined = gpu_hours(
        gpu_node_hours(deps.aggregates, lo, hi, since), load_util_hours(deps.store, lo, hi), 10.0, None, hi
    )
    idle: dict[date, Decimal] = defaultdict(Decimal)
    for g in joined:
        idle[g.hour.astimezone(zone).date()] += g.idle_cost
    sums = stored_job_sums(deps.aggregates, lo, hi, CLUSTER_FEE)
    whole = digest_jobs(sums, stored_job_columns(deps.aggregates, lo, hi), joined, day, tz, JOBS)
    one = digest_data(deps.store, day, tz, now, 3, jobs=JOBS, aggregates=deps.aggregates)  # one piece here
    deps.store.close()
    assert stored > 10 * 300  # so over ten pieces
    assert pieces.idle_gpu_by_day == dict(idle) and sum(idle.values()) > 0
    assert pieces.jobs == whole and len(whole.daily) >= 2 and len(whole.lines) > 3
    assert pieces == one


@pytest.mark.slow
def test_a_day_whose_utilization_was_not_read_says_so_not_zero(tmp_path: Path, fleet: Path) -> None:
    """Seed 23's daemon showed $0.00 of idle GPUs for the days before its first utilization read
    reached back (and `gpucost digest` run on its own, which polls billing only, for every day), and
    a lower figure for the day it read from 06:00. Its idle dollars are unknown there, not zero."""
    from monitor.cycle import run_billing_poll, run_detection, run_digest
    from monitor.digest_data import digest_data
    from monitor.utilization.coverage import ALL

    now = datetime(2026, 11, 3, 9, tzinfo=UTC)
    deps = daemon_on_fleet(tmp_path, fleet)
    run_billing_poll(deps, now)  # no utilization read at all
    text = Path(run_digest(deps, now)["markdown"]).read_text()
    data = digest_data(deps.store, DAY, "UTC", now, 3, jobs=JOBS, aggregates=deps.aggregates, coverage={})
    assert data.idle_unread == {DAY - timedelta(days=1): "all", DAY: "all"}
    assert "| not read |" in text and '"not read" where gpucost had not read' in text
    assert "Not looked for: no detection has run" in text  # the daemon's first digest came first
    pretrain = next(line for line in text.splitlines() if line.startswith("| llm-pretrain |"))
    assert pretrain.split("|")[3:5] == [" unknown ", " - "]  # as a finished job's message says it
    # read from noon of the day: the rest of it, and the next day, are read, and had no samples: no
    # GPU-hour of either day has utilization, their idle dollars are unknown, as a job's are where
    # its GPUs reported nothing (they read "≥ $0.00" and "$0.00")
    read = {ALL: ((T0 - 12 * H, now),)}
    data = digest_data(deps.store, DAY, "UTC", now, 3, jobs=JOBS, aggregates=deps.aggregates, coverage=read)
    assert data.idle_unread == {DAY - timedelta(days=1): "none", DAY: "none"}
    run_detection(deps, now)
    assert "Not looked for" not in Path(run_digest(deps, now)["markdown"]).read_text()
    deps.store.close()


def test_the_top_jobs_costs_add_up_to_their_total_as_shown() -> None:
    """Three jobs of $1.005 each: rounded alone they read $1.00 (x3) under a total of $3.02 (the
    demo's lines summed to $15,188.00 under $15,187.99, helper 72); shown, they add up to it."""
    from alerts.digest_jobs import DigestJob, DigestJobs

    jobs = DigestJobs(tuple(DigestJob(name=f"j{i}", cost=Decimal("1.005")) for i in range(3)))
    md = "\n".join(jobs_markdown(jobs, DAY, money))
    cells = [line.split("|")[2].strip() for line in md.splitlines() if line.startswith("| j")]
    assert sorted(cells) == ["$1.00", "$1.01", "$1.01"] and "**$3.02**" in md, md
    text = str(jobs_blocks(jobs, money))
    assert text.count("$1.01") == 2 and text.count("$1.00") == 1, text
