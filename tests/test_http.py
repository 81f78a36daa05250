"""The daemon through `Service`, in process: a source that fails on every poll spares the other jobs,
readiness says which source is stale and why, and metrics and health answer over real HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from monitor.config import load_config
from monitor.service import Service
from monitor.sources.duckdb_conn import open_billing_db
from tests.test_queries import fleet_rows, load_rows


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


@pytest.fixture
def service(tmp_path: Path):
    db = tmp_path / "billing.duckdb"
    conn = open_billing_db(db)
    load_rows(conn, fleet_rows(3, 200))
    conn.close()
    config = tmp_path / "gpucost.toml"
    config.write_text(
        f"""
[billing]
db = "{db}"
[utilization]
files = ["{tmp_path / "no-such-dir"}"]
[state]
url = "sqlite:///{tmp_path / "state.sqlite"}"
[alerts]
console_dir = "{tmp_path / "alerts"}"
[digest]
out_dir = "{tmp_path / "out"}"
[daemon]
billing_poll_minutes = 0.01
utilization_poll_minutes = 0.01
outbox_seconds = 0.2
jitter_seconds = 0
[http]
port = 0
""",
        encoding="utf-8",
    )
    svc = Service(load_config(config), environ={})
    yield svc
    svc.close()


def _metric(svc: Service, name: str, labels: dict[str, str]) -> float:
    return svc.deps.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_failing_source_spares_the_other_jobs_and_shows_on_readyz(service: Service) -> None:
    service.start()
    try:
        service.sched.jobs["utilization_poll"].base = 0.05  # fast backoff for the test
        deadline = time.monotonic() + 120  # event-driven: a generous bound only a hang reaches
        while time.monotonic() < deadline and (
            _metric(service, "gpucost_job_failures_total", {"job": "utilization_poll"}) < 3
            or _metric(service, "gpucost_billing_queries_total", {"query": "partitions"}) < 3
        ):
            time.sleep(0.1)
        assert _metric(service, "gpucost_job_failures_total", {"job": "utilization_poll"}) >= 3
        assert _metric(service, "gpucost_billing_queries_total", {"query": "partitions"}) >= 3
        assert _metric(service, "gpucost_job_duration_seconds_count", {"job": "outbox_delivery"}) >= 1
        assert "detection" not in service.deps.last_success, "no detection on one source only"

        port = service.http.port
        assert _get(port, "/healthz") == (200, "application/json", '{"status": "ok"}')
        code, ctype, body = _get(port, "/readyz")
        ready = json.loads(body)
        assert (code, ready["ready"]) == (503, False)
        assert ready["billing_poll"]["fresh"] is True and ready["billing_poll"]["last_error"] is None
        assert ready["utilization_poll"]["last_success"] is None
        assert "InputError" in ready["utilization_poll"]["last_error"]
        assert "no-such-dir: no such file or directory" in ready["utilization_poll"]["last_error"]
        code, ctype, metrics = _get(port, "/metrics")
        assert code == 200 and ctype.startswith("text/plain")
        assert 'gpucost_job_last_success_timestamp_seconds{job="billing_poll"}' in metrics
        assert 'gpucost_outbox_messages{state="pending"} 0.0' in metrics
        assert _get(port, "/nope")[0] == 404
    finally:
        t0 = time.monotonic()
        clean = service.shutdown()
        took = time.monotonic() - t0
    # `clean` says no job was abandoned and the final flush finished within the budget (the
    # service's own accounting); the wall-clock bound only catches a hang, not a slow machine.
    assert clean and not service.abandoned and took < 60
