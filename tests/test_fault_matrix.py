"""Issue 13 item 2, sources and state store: every fault through the real clients, three invariants.

Each row runs the daemon's own jobs (`Service.job_specs()` wrapped in `monitor.daemon.GuardedJob`,
exactly what APScheduler calls) in-process, with injected clocks: the data clock (what `now` the
steps see), the wall clock (readiness ages, `last_success`) and the monotonic clock (backoff). The
sources are the real clients against local servers: BigQuery through `tests.emulators.wire.WireProxy`
in front of the bqemulator (faults are Google's REST error bodies, `tests/fakes/bigquery_faults.py`),
Cloud Monitoring and the Catalog API over gRPC (`tests/fakes/`), the state store a SQLite file and
the aggregate store a DuckDB file beside it.

The timeline of a row: at T0 every job runs cleanly; new billing rows and new utilization points
arrive; at T1 the fault is armed and every job runs once more (the faulted ones fail); the fault is
cleared and at T2 every job runs again, and at T3 once more (every alert group's `group_wait` has
passed). A fault-free run of the same timeline is the reference.

Invariants, per row:
1. the daemon keeps running: the faulted job fails (counted, backed off) without stopping the other
   jobs, and runs successfully on its next run;
2. nothing passes unread data: the faulted source's watermarks after T1 are those of T0, and after
   T3 every watermark and the outbox (every alert group's messages, their reasons, all sent) equal
   the reference's;
3. the failure is visible: a JSON log line naming the job, the source and the error; the job's
   `gpucost_job_failures_total` on `/metrics`; on `/readyz` the failing job, its source and error
   at once, and 503 naming it once the failure outlasts `http.ready_max_age_minutes`.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud import bigquery
from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

from monitor.attribution.compile import compile_rules
from monitor.clock import FixedClock
from monitor.config import Config
from monitor.daemon import Scheduler
from monitor.http import HealthServer
from monitor.logs import configure_logging
from monitor.service import Service
from monitor.sources.billing_bigquery import BigQueryBillingSource
from monitor.sources.monitoring import CloudMonitoringSource
from monitor.sources.pricing import CatalogPriceSource
from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from monitor.timeutil import floor_day, floor_hour
from tests.daemon_process import DaemonProcess, http_get
from tests.emulators.fleet import BQ_PROJECT, DATASET, FLEET_START, export_table, fleet_rows, to_json_row
from tests.emulators.wire import WireProxy
from tests.fakes.bigquery_faults import HoldingProxy, fault_body, running_job
from tests.fakes.catalog_server import REAL_SKUS, FakeCatalog
from tests.fakes.monitoring_server import FakeMonitoringServer, gauge_series

pytest_plugins = ("tests.conftest_bq",)
pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 4, 12, tzinfo=UTC)  # first clean run: billing exported by then
T1 = T0 + timedelta(days=1)  # the faulted run: a day of new rows and points to read
T2 = T1 + timedelta(minutes=10)  # recovery
T3 = T2 + timedelta(minutes=10)  # settled: every alert group's `group_wait` has passed
READY_MAX_AGE = timedelta(minutes=30)
NVML = "agent.googleapis.com/gpu/utilization"
#: The jobs of one tick, in the order the daemon kicks them (billing / utilization, then detection).
TICK = (
    "price_refresh",
    "billing_poll",
    "utilization_poll",
    "utilization_backfill",
    "detection",
    "outbox_delivery",
)


# -- the world: one export table per run, a monitoring and a catalog stand-in ----------------------


def _batches() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fleet's rows exported by T0, and those of the next 11 hours (one new load partition: the
    emulator takes seconds per query, and one partition costs the fewest queries)."""
    rows = fleet_rows()
    late = T0 + timedelta(hours=11)  # the rest of the T0 day: one load partition
    return [r for r in rows if r["export_time"] <= T0], [r for r in rows if T0 < r["export_time"] <= late]


def _series(
    project: str,
    instance_id: str,
    name: str,
    pct: float,
    start: datetime = T0 - timedelta(days=3),
    end: datetime = T3 + timedelta(hours=1),
) -> Any:
    points = [
        (start + timedelta(minutes=5 * i), pct) for i in range(int((end - start) / timedelta(minutes=5)))
    ]
    return gauge_series(
        NVML,
        "gce_instance",
        {"project_id": project, "instance_id": instance_id, "zone": "us-central1-a"},
        {"gpu_number": "0", "model": "NVIDIA H100 80GB HBM3"},
        points,
        system_labels={"name": name},
    )


@functools.cache
def _world_series() -> tuple[Any, ...]:
    """trainer-0 idle (an idle_gpu alert), trainer-1 and two more hosts busy: more than one page.
    Built once (0.2 s each time, a run's every world): a stand-in only reads the series it serves."""
    return (
        _series("ml-prod", "111", "trainer-0", 0.0),
        _series("ml-prod", "222", "trainer-1", 85.0),
        _series("ml-prod", "333", "trainer-2", 70.0),
    )


@dataclass
class World:
    """The remote systems of one run (each run reads its own table and stand-ins)."""

    table: str
    bq_client: bigquery.Client
    wire: WireProxy
    monitoring: FakeMonitoringServer
    catalog: FakeCatalog

    def deliver_batch_b(self) -> None:
        """The export's next loads: rows exported after T0 (before the faulted run)."""
        errors = self.bq_client.insert_rows_json(self.table, [to_json_row(r) for r in _batches()[1]])
        assert errors == [], errors[:3]


@contextmanager
def make_world(label: str, bq_client: bigquery.Client, bq_wire: WireProxy) -> Iterator[World]:
    """An export table holding the rows exported by T0 (new for each `label`), fresh stand-ins."""
    table_id = f"{BQ_PROJECT}.{DATASET}.faults_" + "".join(c if c.isalnum() else "_" for c in label)[:60]
    if table_id not in _TABLES:
        export_table(bq_client, table_id.rsplit(".", 1)[1], replace=True)
        errors = bq_client.insert_rows_json(table_id, [to_json_row(r) for r in _batches()[0]])
        assert errors == [], errors[:3]
        _TABLES.add(table_id)
    mon = FakeMonitoringServer(page_size=2).start()
    mon.add(*_world_series())
    catalog = FakeCatalog(REAL_SKUS, page_size=50).start()
    try:
        yield World(table_id, bq_client, bq_wire, mon, catalog)
    finally:
        mon.stop()
        catalog.stop()


_TABLES: set[str] = set()  # created in this session (the emulator's tables live as long as it)


# -- the daemon, in-process ------------------------------------------------------------------------


@dataclass
class Daemon:
    """A `Service` whose jobs the test runs one by one, with its /readyz and /metrics served."""

    svc: Service
    clock: FixedClock  # what the steps see as now
    wall: FixedClock  # readiness ages
    sched: Scheduler
    http: HealthServer
    log: io.StringIO
    mono: list[float] = field(default_factory=lambda: [0.0])

    def run(self, name: str) -> bool:
        return self.sched.jobs[name]()

    def tick(self, now: datetime, wall: datetime) -> dict[str, bool]:
        _set(self.clock, now)
        _set(self.wall, wall)
        self.mono[0] += 3600.0  # past any backoff: the scheduler's next run of every job
        return {name: self.run(name) for name in TICK}

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def failures(self, job: str) -> float:
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(f'gpucost_job_failures_total{{job="{job}"}}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines() if line.startswith("{")]


def _set(clock: FixedClock, at: datetime) -> None:
    clock.advance(at - clock.now())


@contextmanager
def daemon(tmp: Path, world: World, *, state: Path | None = None) -> Iterator[Daemon]:
    """The daemon on `tmp/state.sqlite`, a copy of `state` when given (a restart on that state)."""
    if state is not None:
        shutil.copyfile(state, tmp / "state.sqlite")
        if (state.parent / "aggregates.duckdb").exists():  # the billing aggregates beside it
            shutil.copyfile(state.parent / "aggregates.duckdb", tmp / "aggregates.duckdb")
    cfg = Config.model_validate(
        {
            "google": {"credentials": "anonymous"},
            "billing": {
                "source": "bigquery",
                "table": world.table,
                "project": BQ_PROJECT,
                "api_endpoint": world.wire.url,
            },
            "utilization": {
                "source": "cloud_monitoring",
                "projects": ["ml-prod"],
                "api_endpoint": world.monitoring.address,
                "insecure": True,
                "backfill_chunk_hours": 24,
                "backfill_chunks_per_run": 100,
            },
            "pricing": {"source": "catalog", "api_endpoint": world.catalog.address, "insecure": True},
            "state": {"url": f"sqlite:///{tmp}/state.sqlite"},
            "alerts": {"console_dir": str(tmp / "alerts")},
            "digest": {"out_dir": str(tmp / "digest")},
            "http": {"port": 0, "ready_max_age_minutes": READY_MAX_AGE.total_seconds() / 60},
            "daemon": {"jitter_seconds": 0},
        }
    )
    log = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("json", "INFO", log)
    wall, clock = FixedClock(T0), FixedClock(T0)
    svc = Service(cfg, environ={}, stream=io.StringIO(), wall=wall)
    deps = svc.deps
    deps.clock = clock
    # The same sources the config builds, with bounded retries (the library's own would wait
    # minutes) and a short lock wait: injected, not patched.
    deps.store.close()
    deps.store = SQLiteStore(tmp / "state.sqlite", busy_timeout_s=0.2)
    deps.billing = BigQueryBillingSource(
        cfg.billing,
        cfg.google,
        rules=compile_rules(cfg.attribution.rules),
        retry=DEFAULT_RETRY.with_timeout(0.3).with_delay(initial=0.01, maximum=0.05),
        job_retry=DEFAULT_JOB_RETRY.with_timeout(0.5).with_delay(initial=0.01, maximum=0.05),
        job_timeout=1.0,
    )
    deps.utilization.close()
    deps.utilization = CloudMonitoringSource(
        cfg.utilization, cfg.google, sleep=lambda _s: None, max_attempts=3
    )
    deps.prices = CatalogPriceSource(cfg.pricing, cfg.google, store=deps.store, retry_deadline_s=0.3)
    mono = [0.0]
    sched = Scheduler(svc.job_specs(), deps.metrics, misfire_grace=60, jitter=0, wall=wall.now)
    for job in sched.jobs.values():
        job.clock = lambda: mono[0]
    svc.sched = sched
    http = HealthServer("127.0.0.1", 0, deps.metrics.registry, svc.ready)
    http.start()
    d = Daemon(svc, clock, wall, sched, http, log, mono)
    try:
        yield d
    finally:
        http.stop()
        deps.utilization.close()
        svc.close()
        root.handlers[:] = handlers
        root.setLevel(level)


# -- what must not move, and what must end equal ---------------------------------------------------


def _rows(path: Path, sql: str) -> list[tuple]:
    """Read-only, outside the store's own transactions (which take the write lock a row holds)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def billing_marks(path: Path) -> list[tuple]:
    """The billing watermarks and a digest of the aggregates, from the aggregate store beside the
    state file (`monitor.state.analytics`); nothing yet when the daemon never wrote one."""
    import duckdb

    db = path.parent / "aggregates.duckdb"
    if not db.exists():
        return [(0, None)]
    conn = duckdb.connect(str(db), read_only=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if "billing_partitions" not in tables:
            return [(0, None)]
        return [
            tuple(r)
            for r in conn.execute(
                "SELECT partition_time, max_export_time, row_count, min_usage_hour, max_usage_hour"
                " FROM billing_partitions ORDER BY partition_time"
            ).fetchall()
        ] + [tuple(conn.execute("SELECT COUNT(*), SUM(net_micros) FROM billing_hourly").fetchone())]
    finally:
        conn.close()


def utilization_marks(path: Path) -> list[tuple]:
    return _rows(path, "SELECT scope, preset, polled_until FROM utilization_windows ORDER BY 1, 2") + _rows(
        path, "SELECT * FROM utilization_coverage ORDER BY 1, 2, 3"
    )


def outbox(path: Path) -> list[tuple]:
    return _rows(
        path,
        "SELECT group_key, receiver, sequence, reason, status FROM alerts_outbox"
        " ORDER BY group_key, receiver, sequence",
    )


def state_of(store: SQLiteStore) -> dict[str, list[tuple]]:
    return state_of_file(Path(store.path))


def state_of_file(path: Path) -> dict[str, list[tuple]]:
    return {"billing": billing_marks(path), "utilization": utilization_marks(path), "outbox": outbox(path)}


# -- the faults ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """`arm(daemon, world)` is a context manager: the fault holds inside it."""

    name: str
    arm: Callable[[Daemon, World], AbstractContextManager[Any]]
    jobs: tuple[str, ...]  # the jobs that must fail
    source: str  # as named in the log line and on /readyz
    error: str  # a word of the error they must show
    frozen: tuple[str, ...]  # watermarks that must not move in the faulted run
    new_rows: bool = False  # billing rows arrive between T0 and T1 (a table of the row's own)


def _bq(name: str) -> Callable[[Daemon, World], AbstractContextManager[Any]]:
    def arm(_d: Daemon, w: World) -> AbstractContextManager[Any]:
        status, body = fault_body(name)
        return w.wire.answering(100_000, status, body)

    return arm


def _bq_stuck(_d: Daemon, w: World) -> AbstractContextManager[Any]:
    return w.wire.answering(100_000, 200, running_job(BQ_PROJECT))


def _monitoring(
    code: grpc.StatusCode, *, first_page_ok: bool = False
) -> Callable[[Daemon, World], AbstractContextManager[Any]]:
    """Every ListTimeSeries call fails with `code` while armed (after one good page if `first_page_ok`)."""

    @contextmanager
    def arm(_d: Daemon, w: World) -> Iterator[None]:
        w.monitoring.faults[:] = [None] * first_page_ok + [code] * 10_000
        try:
            yield
        finally:
            w.monitoring.faults.clear()

    return arm


@contextmanager
def _catalog_down(_d: Daemon, w: World) -> Iterator[None]:
    w.catalog.fail_always = grpc.StatusCode.UNAVAILABLE
    try:
        yield
    finally:
        w.catalog.fail_always = None


@contextmanager
def _locked(d: Daemon, _w: World) -> Iterator[None]:
    """Another process holds the write lock on the state file for the whole run."""
    other = sqlite3.connect(d.svc.deps.store.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@contextmanager
def _aggregates_locked(d: Daemon, _w: World) -> Iterator[None]:
    """Another process holds the aggregate store's DuckDB file (one process at a time) for the whole
    run: the billing poll (and detection, which reads it) wait, fail, and run again later."""
    deps = d.svc.deps
    path = deps.aggregates.path
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_DUCKDB, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        deps.aggregates = AggregateStore(path, lock_timeout_s=0.2)
        yield
    finally:
        holder.kill()
        holder.wait(10)
        deps.aggregates = AggregateStore(path)


_HOLD_DUCKDB = (
    "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(600)"
)


@contextmanager
def _disk_full(d: Daemon, _w: World) -> Iterator[None]:
    """The state file cannot grow by one page: SQLITE_FULL ("database or disk is full") on the next
    write that needs one, as on a full volume (https://www.sqlite.org/pragma.html#pragma_max_page_count,
    https://www.sqlite.org/rescode.html#full)."""
    deps, cfg = d.svc.deps, d.svc.cfg
    path = deps.store.path
    pages = _rows(Path(path), "PRAGMA page_count")[0][0]

    def reopen(**pragmas: int) -> None:  # every user of the store sees the same file limits
        deps.store.close()
        deps.store = SQLiteStore(path, busy_timeout_s=0.2, pragmas=pragmas)
        deps.prices = CatalogPriceSource(cfg.pricing, cfg.google, store=deps.store, retry_deadline_s=0.3)

    reopen(max_page_count=pages)
    try:
        yield
    finally:
        reopen()


UNAVAILABLE, DEADLINE, EXHAUSTED = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
B, U = ("billing",), ("utilization",)
FAULTS = [  # name, fault, the jobs that fail, the source they name, a word of the error, frozen marks
    Fault("bq_503_backendError", _bq("backendError"), ("billing_poll",), "bigquery", "backendError", B, True),
    Fault("bq_403_rateLimitExceeded", _bq("rateLimitExceeded"), ("billing_poll",), "bigquery", "rateLimitExceeded", B, True),
    Fault("bq_403_quotaExceeded", _bq("quotaExceeded"), ("billing_poll",), "bigquery", "quotaExceeded", B, True),
    Fault("bq_job_timeout", _bq_stuck, ("billing_poll",), "bigquery", "TimeoutError", B, True),
    Fault("bq_400_bytesBilledLimitExceeded", _bq("bytesBilledLimitExceeded"), ("billing_poll",), "bigquery",
          "maximum_bytes_billed", B, True),
    Fault("monitoring_UNAVAILABLE", _monitoring(UNAVAILABLE), ("utilization_poll",), "cloud_monitoring", "UNAVAILABLE", U),
    Fault("monitoring_DEADLINE_EXCEEDED", _monitoring(DEADLINE), ("utilization_poll",), "cloud_monitoring",
          "DEADLINE_EXCEEDED", U),
    Fault("monitoring_RESOURCE_EXHAUSTED", _monitoring(EXHAUSTED), ("utilization_poll",), "cloud_monitoring",
          "RESOURCE_EXHAUSTED", U),
    Fault("monitoring_second_page_fails", _monitoring(UNAVAILABLE, first_page_ok=True), ("utilization_poll",),
          "cloud_monitoring", "UNAVAILABLE", U),
    Fault("catalog_down", _catalog_down, ("price_refresh",), "catalog", "UNAVAILABLE", ()),
    Fault("state_locked", _locked, ("utilization_poll",), "state_store", "locked", U),
    Fault("state_disk_full", _disk_full, ("utilization_poll",), "state_store", "full", U, True),
    Fault("aggregates_locked", _aggregates_locked, ("billing_poll",), "state_store", "lock", B, True),
]  # fmt: skip


# -- the reference runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    template: Path  # the state store after a clean first run at T0 (every row restarts on a copy)
    t0: dict[str, list[tuple]]  # its watermarks and outbox
    settled: dict[bool, dict[str, list[tuple]]]  # by "new billing rows arrived": the state at T3


def _timeline(d: Daemon, world: World, new_rows: bool) -> dict[str, list[tuple]]:
    """The fault-free timeline after T0: T1 (after new rows, if any), T2, T3."""
    if new_rows:
        world.deliver_batch_b()
    for now, wall in ((T1, 5), (T2, 10), (T3, 15)):
        ran = d.tick(now, T0 + timedelta(minutes=wall))
        assert all(ran.values()), (ran, d.log.getvalue()[-3000:])
    return state_of(d.svc.deps.store)


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, bq_client: bigquery.Client, bq_wire: WireProxy
) -> Reference:
    """The fault-free runs: a first start at T0 (its state is every row's starting point), then the
    timeline on the T0 rows alone, and with the rows exported after T0 (the BigQuery rows' world)."""
    first = tmp_path_factory.mktemp("reference")
    with make_world("shared", bq_client, bq_wire) as w:
        with daemon(first, w) as d:
            ran = d.tick(T0, T0)
            assert all(ran.values()), (ran, d.log.getvalue()[-3000:])
        template = first / "template.sqlite"
        shutil.copyfile(first / "state.sqlite", template)  # closed: the WAL is checkpointed
        t0 = state_of_file(template)
        settled = {}
        with daemon(tmp_path_factory.mktemp("reference_t0_rows"), w, state=template) as d:
            assert all(d.tick(T0, T0).values())
            settled[False] = _timeline(d, w, new_rows=False)
    new_rows = tmp_path_factory.mktemp("reference_new_rows")
    with make_world("reference_new_rows", bq_client, bq_wire) as w, daemon(new_rows, w, state=template) as d:
        assert all(d.tick(T0, T0).values())
        settled[True] = _timeline(d, w, new_rows=True)
    return Reference(template, t0, settled)


# -- the matrix ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(
    fault: Fault, reference: Reference, bq_client: bigquery.Client, bq_wire: WireProxy, tmp_path: Path
) -> None:
    label = fault.name if fault.new_rows else "shared"  # new rows mean a table of the row's own
    with (
        make_world(label, bq_client, bq_wire) as world,
        daemon(tmp_path, world, state=reference.template) as d,
    ):
        assert all(d.tick(T0, T0).values())  # restarted on the state of a clean first run
        before = state_of(d.svc.deps.store)
        assert before == reference.t0
        assert d.get("/readyz")[0] == 200
        if fault.new_rows:
            world.deliver_batch_b()

        with fault.arm(d, world):
            ran = d.tick(T1, T0 + timedelta(minutes=5))
            # 1. the faulted jobs fail, the others carry on
            assert {j for j, ok in ran.items() if not ok} >= set(fault.jobs), ran
            assert ran["outbox_delivery"] or fault.source == "state_store", ran
            # 3. visible: a log line, /metrics, /readyz (failing at once; 503 past the max age)
            _assert_visible(d, fault)
        # 2. no watermark passes what the failed run did not read (read as the fault is cleared, before
        # any job runs again: a DuckDB file held by another process cannot be read while it is held)
        during = state_of(d.svc.deps.store)
        for what in fault.frozen:
            assert during[what] == before[what], what

        # recovery: every job succeeds on its next run, and the state ends as the fault-free run's
        ran = d.tick(T2, T0 + READY_MAX_AGE + timedelta(minutes=5))
        assert all(ran.values()), (ran, d.log.getvalue()[-3000:])
        status, body = d.get("/readyz")
        assert status == 200 and json.loads(body)["failing"] == {}, body
        assert all(d.tick(T3, T0 + READY_MAX_AGE + timedelta(minutes=10)).values())
        after, expected = state_of(d.svc.deps.store), reference.settled[fault.new_rows]
        assert after["billing"] == expected["billing"]
        assert after["utilization"] == expected["utilization"]
        assert after["outbox"] == expected["outbox"]  # nothing lost, nothing doubled


def _assert_visible(d: Daemon, fault: Fault) -> None:
    for job in fault.jobs:
        lines = [
            e for e in d.log_lines() if e.get("message") == "job failed; backing off" and e.get("job") == job
        ]
        assert lines, d.log.getvalue()[-3000:]
        assert lines[-1]["severity"] == "ERROR" and lines[-1]["source"] == fault.source, lines[-1]
        assert fault.error in lines[-1]["error"], lines[-1]["error"]
        assert d.failures(job) == 1.0
    status, body = d.get("/readyz")
    failing = json.loads(body)["failing"]
    for job in fault.jobs:
        assert failing[job]["source"] == fault.source and fault.error in failing[job]["error"], failing
    if fault.source == "catalog":  # prices from the cache: degraded, still ready (README "Failure modes")
        assert status == 200, body
        assert any("price catalog refresh failed; keeping" in e["message"] for e in d.log_lines())
        return
    assert status == 200, body  # younger than the readiness age: listed, not yet paged on
    _set(d.wall, T0 + READY_MAX_AGE + timedelta(minutes=1))
    status, body = d.get("/readyz")
    assert status == 503, body
    poll = json.loads(body)[fault.jobs[0]]
    assert poll["fresh"] is False and poll["source"] == fault.source, poll


def test_reference_is_not_vacuous(reference: Reference) -> None:
    """The fault-free runs moved the watermarks after T0 and alerted something."""
    t0, settled = reference.t0, reference.settled
    assert t0["billing"] != settled[True]["billing"]
    assert t0["utilization"] != settled[False]["utilization"]
    assert any(r[3] == "new_group" and r[4] == "sent" for r in settled[True]["outbox"]), settled[True]


# -- SIGKILL: the real daemon process, killed with a request in flight, then restarted -------------
#
# The daemon runs on the real clock, so the fleet is moved to the last days before now (whole days:
# hours and weekdays keep their shape) and only rows exported by now are loaded.


@dataclass
class Live:
    table: str
    monitoring: FakeMonitoringServer
    catalog: FakeCatalog
    hold: HoldingProxy  # in front of the emulator; holds the `hourly` query when closed


def _shift(value: Any, delta: timedelta) -> Any:
    if isinstance(value, datetime):
        return value + delta
    if isinstance(value, dict):
        return {k: _shift(v, delta) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift(v, delta) for v in value]
    return value


@pytest.fixture(scope="module")
def live(bq_client: bigquery.Client, bq_wire: WireProxy) -> Iterator[Live]:
    now = datetime.now(UTC)
    delta = floor_day(now) - timedelta(days=2) - FLEET_START
    rows = []
    for r in fleet_rows():
        moved = _shift(r, delta)
        moved["invoice"] = {"month": moved["usage_start_time"].strftime("%Y%m")}
        if moved["export_time"] <= now:
            rows.append(moved)
    table_id = f"{BQ_PROJECT}.{DATASET}.faults_live"
    export_table(bq_client, "faults_live", replace=True)
    assert bq_client.insert_rows_json(table_id, [to_json_row(r) for r in rows]) == []
    mon = FakeMonitoringServer(page_size=2).start()
    start = floor_hour(now) - timedelta(days=3)
    mon.add(
        *(
            _series("ml-prod", iid, name, pct, start=start, end=now + timedelta(hours=2))
            for iid, name, pct in (
                ("111", "trainer-0", 0.0),
                ("222", "trainer-1", 85.0),
                ("333", "trainer-2", 70.0),
            )
        )
    )
    catalog = FakeCatalog(REAL_SKUS, page_size=50).start()
    hold = HoldingProxy(bq_wire.url, hold="hourly").start()
    try:
        yield Live(table_id, mon, catalog, hold)
    finally:
        hold.stop()
        mon.stop()
        catalog.stop()


def _process_config(tmp: Path, live: Live) -> Path:
    path = tmp / "gpucost.toml"
    path.write_text(
        f"""
[google]
credentials = "anonymous"
[billing]
source = "bigquery"
table = "{live.table}"
project = "{BQ_PROJECT}"
api_endpoint = "{live.hold.url}"
[utilization]
source = "cloud_monitoring"
projects = ["ml-prod"]
api_endpoint = "{live.monitoring.address}"
insecure = true
backfill_chunk_hours = 24
backfill_chunks_per_run = 100
[pricing]
source = "catalog"
api_endpoint = "{live.catalog.address}"
insecure = true
[state]
url = "sqlite:///{tmp}/state.sqlite"
[alerts]
console_dir = "{tmp}/alerts"
group_wait_seconds = 0
[digest]
out_dir = "{tmp}/digest"
[http]
port = 0
[daemon]
billing_poll_minutes = 60
utilization_poll_minutes = 60
outbox_seconds = 1
jitter_seconds = 0
[logging]
format = "json"
""",
        encoding="utf-8",
    )
    return path


def _settle(proc: DaemonProcess, state: Path, timeout: float = 60) -> list[tuple]:
    """Wait until detection ran, the first-start summary (due once the whole window was read) and
    every alert were sent, and nothing changed for a second; the outbox then."""
    proc.wait_log("detection", timeout)
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        assert proc.proc.poll() is None, proc.tail()
        rows = outbox(state)
        if rows != last:
            last, since = rows, time.monotonic()
        elif (
            all(r[4] == "sent" for r in rows)
            and any(r[3] == "summary" for r in rows)
            and time.monotonic() - since > 1.0
        ):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"not settled within {timeout} s:\n{proc.tail()}")


def _wait(event: Any, proc: DaemonProcess, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not event.is_set():
        assert proc.proc.poll() is None and time.monotonic() < deadline, proc.tail()
        time.sleep(0.05)


def _restart_and_check(tmp: Path, config: Path, live: Live, n: int) -> list[tuple]:
    """The restarted daemon catches up: ready, the failed-before jobs succeed, every alert sent once."""
    proc = DaemonProcess(tmp, config, n, token="xoxb-not-used")
    try:
        port = proc.wait_log("serving /healthz /readyz /metrics", 30)["port"]
        rows = _settle(proc, tmp / "state.sqlite")
        status, body = http_get(port, "/readyz")
        assert status == 200, body
        _, metrics = http_get(port, "/metrics")
        for job in ("billing_poll", "utilization_poll", "detection"):
            assert f'gpucost_job_last_success_timestamp_seconds{{job="{job}"}}' in metrics
        assert proc.stop() == 0
        return rows
    finally:
        proc.kill()


def _no_alert_doubled(rows: list[tuple]) -> None:
    keys = [(r[0], r[1], r[2]) for r in rows]
    assert len(keys) == len(set(keys)), rows
    firsts = [(r[0], r[1]) for r in rows if r[3] == "new_group"]
    assert len(firsts) == len(set(firsts)), rows


@pytest.fixture(scope="module")
def killed_runs() -> dict[str, list[tuple]]:
    return {}


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["billing_poll", "detection"])
def test_sigkill(moment: str, live: Live, tmp_path: Path, killed_runs: dict[str, list[tuple]]) -> None:
    """kill -9 with the billing query (or the price lookup of detection) in flight, then restart."""
    config = _process_config(tmp_path, live)
    state = tmp_path / "state.sqlite"
    if moment == "billing_poll":
        live.hold.gate.clear()
        live.hold.held.clear()
        held = live.hold.held
    else:
        live.hold.release()
        live.catalog.held.clear()
        live.catalog.hold = threading.Event()
        held = live.catalog.held
    proc = DaemonProcess(tmp_path, config, 1, token="xoxb-not-used")
    try:
        _wait(held, proc)
        if moment == "detection":  # both polls done: detection runs, waiting on the prices
            proc.wait_log("billing poll", 30)
            proc.wait_log("utilization poll", 30)
            time.sleep(0.5)
            assert not [e for e in proc.logs() if e.get("message") == "detection"], "detection finished"
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
    finally:
        proc.kill()
    # nothing half-written: the killed step committed nothing
    if moment == "billing_poll":
        assert billing_marks(state)[:-1] == [], billing_marks(state)
    assert (
        not _rows(state, "SELECT name FROM sqlite_master WHERE name = 'alerts_outbox'") or outbox(state) == []
    )
    live.hold.release()
    if live.catalog.hold is not None:
        live.catalog.hold.set()
        live.catalog.hold = None
    rows = _restart_and_check(tmp_path, config, live, 2)
    _no_alert_doubled(rows)
    assert any(r[3] == "new_group" for r in rows), rows
    killed_runs[moment] = rows
    if len(killed_runs) == 2:  # both recoveries end with what a clean first run sends
        assert killed_runs["billing_poll"] == killed_runs["detection"]
