"""The scheduler keeps every job alive when one keeps failing."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from apscheduler.triggers.interval import IntervalTrigger

from monitor.config import load_config
from monitor.daemon import GuardedJob, JobSpec, Scheduler
from monitor.metrics import Metrics
from monitor.service import Service
from monitor.sources.duckdb_conn import open_billing_db
from monitor.state.analytics import AggregateStore
from tests.test_queries import fleet_rows, load_rows


def test_one_job_raising_repeatedly_does_not_stop_the_others() -> None:
    """Event-driven: the test waits for counts, not for a time window; backoff is off here (it has
    its own test on an injected clock below), so no assertion depends on how fast the machine is."""
    ok_runs, bad_calls = [0], [0]
    enough_ok, enough_bad = threading.Event(), threading.Event()

    def good() -> None:
        ok_runs[0] += 1
        if ok_runs[0] >= 8:
            enough_ok.set()

    def bad() -> None:
        bad_calls[0] += 1
        if bad_calls[0] >= 3:
            enough_bad.set()
        raise RuntimeError("BigQuery 503")

    metrics = Metrics.create()
    specs = [
        JobSpec("good", good, IntervalTrigger(seconds=0.1)),
        JobSpec("bad", bad, IntervalTrigger(seconds=0.1)),
    ]
    sched = Scheduler(specs, metrics, misfire_grace=5, jitter=0)
    sched.jobs["bad"].base = 0.0  # no backoff: retried at every trigger
    sched.start()
    try:
        # generous bounds: only a scheduler that stopped running a job fails them
        assert enough_bad.wait(120), f"the failing job ran {bad_calls[0]} times"
        assert enough_ok.wait(120), f"the healthy job ran {ok_runs[0]} times"
    finally:
        assert sched.stop(timeout=60)
    assert metrics.registry.get_sample_value("gpucost_job_failures_total", {"job": "bad"}) >= 3
    assert sched.jobs["good"].last_success is not None
    assert sched.jobs["bad"].last_error == "RuntimeError: BigQuery 503"


def test_backoff_grows_and_success_resets() -> None:
    """On an injected clock: nothing here depends on how fast the machine runs the test."""
    calls = {"n": 0}
    now = [100.0]

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise ValueError("boom")

    job = GuardedJob(
        JobSpec("flaky", flaky, IntervalTrigger(seconds=1)),
        Metrics.create(),
        base=10,
        cap=25,
        clock=lambda: now[0],
    )
    assert job() is False and job.failures == 1
    now[0] += 9.9
    assert job() is False and calls["n"] == 1  # still backing off (10 s): not even called
    now[0] += 0.1
    assert job() is False and job.failures == 2  # called again, failed: now 20 s
    now[0] += 19.9
    assert job() is False and calls["n"] == 2
    now[0] += 0.1
    assert job() is False and job.failures == 3  # 40 s, capped at 25
    now[0] += 25
    assert job() is True and job.failures == 0 and job.last_error is None
    assert job() is True  # a success leaves no backoff behind


def test_a_stuck_job_is_abandoned_within_the_timeout() -> None:
    release = threading.Event()
    started = threading.Event()

    def stuck() -> None:
        started.set()
        release.wait(120)

    sched = Scheduler(
        [JobSpec("stuck", stuck, IntervalTrigger(seconds=60))], Metrics.create(), misfire_grace=5, jitter=0
    )
    sched.start()
    try:
        assert started.wait(60)
        assert sched.running() == ["stuck"]
        assert sched.run_soon("stuck") is False  # already running: not queued twice
        t0 = time.monotonic()
        assert sched.stop(timeout=0.3) is False
        # The job is still stuck (it holds until released): stop() gave up on it rather than
        # waiting. The bound is generous: it fails only if stop() waited for the job (120 s).
        assert sched.running() == ["stuck"]
        assert time.monotonic() - t0 < 30
    finally:
        release.set()


def test_the_outbox_job_flushes_a_group_whose_wait_ended(tmp_path) -> None:
    """`run_delivery` (the outbox job) sends a group once its group_wait ends, with no detection
    run in between; `next_due` tells the daemon when that is, so it runs the job then."""
    import io
    from datetime import UTC, datetime, timedelta

    from alerts.console import ConsoleNotifier
    from alerts.pipeline import next_due, process
    from monitor.config import Config
    from monitor.cycle import Deps, run_delivery
    from monitor.state.store import SQLiteStore
    from tests.test_group_timer import finding

    cfg = Config.model_validate({})
    notifier = ConsoleNotifier(tmp_path / "alerts", io.StringIO())
    store = SQLiteStore(tmp_path / "state.sqlite")
    deps = Deps(cfg, None, store, None, None, None, None, None, [], notifier, Metrics.create())  # type: ignore[arg-type]
    t0 = datetime(2026, 11, 18, 14, 0, 8, tzinfo=UTC)
    process([finding()], t0, deps.alert_deps)
    wait = timedelta(seconds=cfg.alerts.group_wait_seconds)
    assert next_due(deps.alert_deps) == t0 + wait  # what the daemon wakes the outbox job for
    assert run_delivery(deps, t0 + wait - timedelta(seconds=1))["flushed"] == 0
    result = run_delivery(deps, t0 + wait)
    assert result["flushed"] == 1 and result["pending"] == 0
    assert next_due(deps.alert_deps) is None
    assert len((tmp_path / "alerts" / "alerts.jsonl").read_text().splitlines()) == 1


def test_run_at_brings_a_job_forward_and_never_puts_it_off() -> None:
    """The outbox job is woken when a group's wait ends (`Service._wake_delivery`): `run_at` moves
    a job's next run earlier, and a later time leaves it where its trigger put it."""
    from datetime import UTC, datetime, timedelta

    ran = threading.Event()
    sched = Scheduler(
        [JobSpec("outbox", ran.set, IntervalTrigger(hours=1))], Metrics.create(), misfire_grace=5, jitter=0
    )
    sched.start()
    try:
        job = sched._sched.get_job("outbox")
        planned = job.next_run_time
        assert sched.run_at("outbox", datetime.now(UTC) + timedelta(hours=2))
        assert sched._sched.get_job("outbox").next_run_time == planned  # not put off
        assert not ran.is_set()
        assert sched.run_at("outbox", datetime.now(UTC) + timedelta(milliseconds=100))
        assert ran.wait(60), "the job was not run at the time asked"
        assert sched.run_at("missing", datetime.now(UTC)) is False
    finally:
        assert sched.stop(timeout=60)
    assert sched.run_at("outbox", datetime.now(UTC)) is False  # stopped


def test_a_users_mistake_is_logged_without_a_traceback(caplog) -> None:
    # an empty utilization directory logged its whole traceback on every retry; a bug still does
    from monitor.errors import InputError

    def empty() -> None:
        raise InputError("/data/util", "no .json.gz or .json file in this directory")

    def bug() -> None:
        raise KeyError("x")

    caplog.set_level("ERROR", "gpucost.daemon")
    for func in (empty, bug):
        GuardedJob(JobSpec(func.__name__, func, IntervalTrigger(seconds=1)), Metrics.create(), base=0)()
    mistake, crash = caplog.records[-2:]
    assert not mistake.exc_info and "no .json.gz" in mistake.error  # type: ignore[attr-defined]
    assert crash.exc_info is not None


class _FailsOnce:
    """A 30-minute job whose first run fails (a lock, a transient error); `done` once one succeeded."""

    def __init__(self, name: str, base: float) -> None:
        self.calls, self.done = 0, threading.Event()
        spec = JobSpec(name, self, IntervalTrigger(minutes=30))
        self.sched = Scheduler([spec], Metrics.create(), misfire_grace=300, jitter=0)
        self.job = self.sched.jobs[name]
        self.job.base = base

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("Could not set lock on file")
        self.done.set()


def test_a_job_that_failed_once_runs_again_after_its_backoff_not_at_its_next_trigger() -> None:
    """A 30-minute billing poll whose first run failed was not retried for 30 minutes: the backoff
    only refused runs, nothing ran the job when it ended, so /readyz stayed 503 that long. It runs
    again once the backoff has passed."""
    f = _FailsOnce("billing_poll", base=0.2)
    f.sched.start()
    try:
        assert f.done.wait(10), f"not retried after its backoff ({f.calls} call)"
        assert f.job.last_success is not None and f.calls == 2
    finally:
        f.sched.stop()


def test_a_kick_during_the_backoff_does_not_cancel_the_retry() -> None:
    """A poll kicks detection (`run_soon`) while its backoff runs: the refused run replaced the
    pending retry with the next trigger, so the job waited its whole interval (30 min here)."""
    f = _FailsOnce("detection", base=1.0)
    f.sched.start()
    try:
        deadline = time.monotonic() + 60
        while (f.job.failures == 0 or f.job.running) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert f.job.failures == 1
        assert f.sched.run_soon("detection")  # refused: its backoff has not ended
        assert f.done.wait(30), f"not retried after its backoff ({f.calls} call)"
    finally:
        f.sched.stop()


_HOLD_DUCKDB = (
    "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(600)"
)


def test_a_failed_detection_detects_again_when_retried(tmp_path: Path) -> None:
    """The polls' "new data" flag was cleared before detection ran: when it failed (another process
    held the aggregate store), its retry found no flag, did nothing and counted as a success, so
    /readyz stopped listing it as failing and the new data waited for the next poll."""
    db = tmp_path / "billing.duckdb"
    conn = open_billing_db(db)
    load_rows(conn, fleet_rows(3, 200))
    conn.close()
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "none.json").write_text("[]")  # no samples; a poll that reads, not fails
    config = tmp_path / "gpucost.toml"
    config.write_text(
        f'[billing]\ndb = "{db}"\n[utilization]\nfiles = ["{tmp_path / "util"}"]\n'
        f'[state]\nurl = "sqlite:///{tmp_path / "state.sqlite"}"\n[alerts]\nconsole_dir = "{tmp_path / "alerts"}"\n'
        f'[digest]\nout_dir = "{tmp_path / "out"}"\n[http]\nenabled = false\n',
        encoding="utf-8",
    )
    svc = Service(load_config(config), environ={})
    try:
        svc.billing_job()  # both sources polled: detection is due (no scheduler: run by hand)
        svc.utilization_job()
        job = GuardedJob(
            JobSpec("detection", svc.detection_job, IntervalTrigger(hours=1)), Metrics.create(), base=0
        )
        path = svc.deps.aggregates.path
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_DUCKDB, str(path)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            svc.deps.aggregates = AggregateStore(path, lock_timeout_s=0.2)
            assert job() is False and "lock" in str(job.last_error)
        finally:
            holder.kill()
            holder.wait(10)
        svc.deps.aggregates = AggregateStore(path)
        assert "detection" not in svc.deps.last_success
        assert job() is True  # the retry, the store free again
        assert "detection" in svc.deps.last_success, "the retry did not detect"
    finally:
        svc.close()


def test_a_daily_job_seen_late_still_runs_once() -> None:
    """The digest's time seen more than `misfire_grace` late (a clock stepped forward over it, a
    paused VM, a stalled scheduler) was dropped as a misfire: no digest that day. (A daily time
    is a minute's wait away at best: the job's first time here is 0.3 s off, then a day.)"""
    from datetime import UTC, datetime, timedelta

    ran: list[float] = []
    at = datetime.now(UTC) + timedelta(seconds=0.3)
    spec = JobSpec(
        "daily_digest",
        lambda: ran.append(time.monotonic()),
        IntervalTrigger(days=1, start_date=at, timezone=UTC),
        run_at_start=False,
        catch_up=True,
    )
    sched = Scheduler([spec], Metrics.create(), misfire_grace=1, jitter=0)
    sched.start()
    sched._sched.pause()  # the scheduler sees nothing until 1.5 s past the job's time
    try:
        time.sleep(max((at - datetime.now(UTC)).total_seconds(), 0) + 1.5)
        sched._sched.resume()
        deadline = time.monotonic() + 30
        while not ran and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert len(ran) == 1, f"ran {len(ran)} times"
    finally:
        sched.stop()


def test_a_wall_clock_stepped_back_moves_interval_jobs_back_and_leaves_daily_times() -> None:
    """APScheduler waits on the wall clock: stepped back an hour, an hourly poll's next time was an
    hour further off than planned, and every interval job stalled that hour. The digest's daily
    time is a time of the wall clock, so it stays; so do steps under `CLOCK_STEP_S` and forward ones."""
    from datetime import UTC, timedelta

    from apscheduler.triggers.cron import CronTrigger

    specs = [
        JobSpec("billing_poll", lambda: None, IntervalTrigger(hours=1), run_at_start=False),
        JobSpec("daily_digest", lambda: None, CronTrigger(hour=9, timezone=UTC), run_at_start=False),
    ]
    steps: list[float] = []  # told to the jobs' store (the service moves the outbox's waits)
    sched = Scheduler(specs, Metrics.create(), misfire_grace=5, jitter=0, watch_s=3600, on_step=steps.append)
    sched.start()
    try:
        planned = {j.id: j.next_run_time for j in sched._sched.get_jobs()}
        for step in (-29.0, 29.0, 3600.0):  # slewed, not stepped; forward: nothing is held
            sched.clock_moved(step)
            assert {j.id: j.next_run_time for j in sched._sched.get_jobs()} == planned, step
        sched.clock_moved(-3600.0)
        now = {j.id: j.next_run_time for j in sched._sched.get_jobs()}
        assert now == {
            "billing_poll": planned["billing_poll"] - timedelta(hours=1),
            "daily_digest": planned["daily_digest"],
        }
        assert steps == [-3600.0]
    finally:
        assert sched.stop(timeout=60)


def test_the_clock_watch_runs_a_job_the_step_back_held() -> None:
    """The watch thread compares the wall clock's advance with the monotonic clock's. Here the
    wall clock it reads is stepped back an hour (the scheduler's own cannot be, on a shared
    machine): the hourly job planned for an hour from now, which the stepped clock would have held
    two hours, runs at once."""
    from datetime import UTC, datetime, timedelta

    ran = threading.Event()
    offset = [timedelta(0)]
    sched = Scheduler(
        [JobSpec("billing_poll", ran.set, IntervalTrigger(hours=1), run_at_start=False)],
        Metrics.create(),
        misfire_grace=5,
        jitter=0,
        clock=lambda: datetime.now(UTC) + offset[0],
        watch_s=0.05,
    )
    sched.start()
    try:
        time.sleep(0.2)
        assert not ran.is_set()
        offset[0] = timedelta(hours=-1)
        assert ran.wait(30), "the job held by the step was not moved back"
    finally:
        assert sched.stop(timeout=60)


def _digest_service(tmp: Path, slack: str = "") -> Service:
    """A daemon whose digest is due at 09:00 in New York, on the billing export of `tmp`; its
    notifier the console, or Slack at `slack` (an API base URL)."""
    db = tmp / "billing.duckdb"
    if not db.exists():
        conn = open_billing_db(db)
        load_rows(conn, fleet_rows(3, 20))
        conn.close()
        (tmp / "util").mkdir()
        (tmp / "util" / "none.json").write_text("[]")
    config = tmp / "gpucost.toml"
    config.write_text(
        f'[billing]\ndb = "{db}"\n[utilization]\nfiles = ["{tmp / "util"}"]\n'
        f'[state]\nurl = "sqlite:///{tmp / "state.sqlite"}"\n[alerts]\nconsole_dir = "{tmp / "alerts"}"\n'
        f'[digest]\nout_dir = "{tmp / "out"}"\ntime = "09:00"\ntimezone = "America/New_York"\n'
        "[http]\nenabled = false\n"
        + (f'[slack]\nchannel = "#gpucost"\napi_base_url = "{slack}"\n' if slack else ""),
        encoding="utf-8",
    )
    return Service(load_config(config), environ={"SLACK_BOT_TOKEN": "xoxb-test"} if slack else {})


def test_the_digest_is_for_the_day_due_and_never_a_new_installs(tmp_path: Path) -> None:
    """A run of the digest job (its time, a retry, the catch-up after a restart) digests the day
    that is due: yesterday once today's 09:00 has passed, else the day before, so a retry after
    midnight does not skip a day. A new install waits for its first 09:00, as before: its store
    has no utilization or detection to tell of yet."""
    from datetime import UTC, datetime

    from monitor.clock import FixedClock
    from monitor.state.store import first_start

    svc = _digest_service(tmp_path)
    try:
        spec = next(s for s in svc.job_specs() if s.name == "daily_digest")
        assert not spec.run_at_start and spec.catch_up  # not at start: `_catch_up_digest`
        first_start(svc.deps.store, datetime(2026, 10, 20, tzinfo=UTC))  # running for weeks
        out = tmp_path / "out"

        def digests() -> list[str]:
            return sorted(p.name for p in out.glob("digest-*.md")) if out.exists() else []

        for at, days in (
            (
                datetime(2026, 11, 1, 13, 59, tzinfo=UTC),
                ["2026-10-30"],
            ),  # 08:59 EST, the day clocks went back
            (datetime(2026, 11, 1, 14, 0, tzinfo=UTC), ["2026-10-30", "2026-10-31"]),  # 09:00 EST
            (datetime(2026, 11, 2, 5, 0, tzinfo=UTC), ["2026-10-30", "2026-10-31"]),  # 00:00: the day due
        ):
            svc.deps.clock = FixedClock(at)
            svc.digest_job()
            assert digests() == [f"digest-{d}.md" for d in days], at
    finally:
        svc.close()

    new = tmp_path / "new"
    new.mkdir()
    svc = _digest_service(new)
    try:
        svc.deps.clock = FixedClock(datetime(2026, 11, 1, 15, tzinfo=UTC))  # 10:00 EST
        first_start(svc.deps.store, svc._now())  # as `start` records it
        svc.digest_job()
        assert not (new / "out").exists() or not list((new / "out").glob("digest-*.md"))
    finally:
        svc.close()


def test_a_restart_does_not_build_a_digest_already_queued(tmp_path: Path) -> None:
    """Run at start, the digest job built the day's whole digest (its figures, its charts) on every
    restart only to find it queued already: it looks first."""
    from datetime import UTC, datetime

    from monitor.clock import FixedClock
    from monitor.state.store import first_start
    from tests.fakes.slack_server import FakeSlack

    with FakeSlack(token="xoxb-test") as slack:
        for run in (1, 2):  # a process, then its restart on the same store
            svc = _digest_service(tmp_path, slack=slack.base_url)
            try:
                svc.deps.clock = FixedClock(datetime(2026, 11, 2, 15, tzinfo=UTC))  # 10:00 EST
                first_start(svc.deps.store, datetime(2026, 10, 20, tzinfo=UTC))
                svc.digest_job()
                written = sorted((tmp_path / "out").glob("digest-2026-11-01*"))
                assert written if run == 1 else not written, (run, written)
                for path in written:  # the restart must not write them again
                    path.unlink()
            finally:
                svc.close()


def test_a_restarted_daemon_sends_the_digest_it_missed_once_utilization_is_read(tmp_path: Path) -> None:
    """Down at `digest.time` (a restart or rollout across it), the daemon sent no digest that day:
    the cron fired next the following day. Once it has read utilization (the hours it was down),
    it digests the day that is due."""
    from datetime import UTC, datetime

    from monitor.state.store import first_start

    svc = _digest_service(tmp_path)
    try:
        first_start(svc.deps.store, datetime(2026, 10, 20, tzinfo=UTC))  # running for weeks before
        svc.start()
        deadline = time.monotonic() + 60  # event-driven: a generous bound only a hang reaches
        while not list((tmp_path / "out").glob("digest-*.md")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "utilization" in svc.deps.last_success and "digest" in svc.deps.last_success
        (written,) = (tmp_path / "out").glob("digest-*.md")
        assert written.name == f"digest-{svc._digest_day()}.md"
    finally:
        svc.shutdown()
        svc.close()
