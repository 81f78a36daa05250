"""One measured stage of `bench/bench.py`, run in a fresh process so its peak memory is its own.

    .venv/bin/python bench/child.py STAGE '{"parquet": "...", "now": "...", ...}'

Prints one line `BENCH-RESULT {json}` with the stage's wall `seconds` (perf_counter around the
work alone: interpreter start and imports are not timed), `peak_rss_mb` (this process's peak RSS
at the end, `VmHWM` (see `_rss_mb`): interpreter + imports + the work, what a user's process
would hold) and `import_rss_mb` (the same figure read just before the work), plus the
stage's own counts. Each stage imports only what it needs, so the floor's process holds DuckDB
alone and the naive baseline's pandas alone.

Stages: `analyze`, `floor`, `naive` (over the Parquet export), `setup` (prepare the stores the
daemon's jobs read; not a measured figure), `detection`, `digest`, `util_poll`, `monitoring_poll`
(with `serve_monitoring`, the Cloud Monitoring stand-in it reads from; not a figure), `poll`.
"""

from __future__ import annotations

import functools
import io
import json
import resource
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

__all__ = ["MARKER", "bench_config", "main"]

MARKER = "BENCH-RESULT "
_LANDED = timedelta(minutes=5)  # the poll runs this long after the new delivery landed


def _rss_mb() -> float:
    """This process's peak resident set so far, in MiB: `VmHWM` of /proc/self/status (the
    high-water mark of this process image alone). Not `ru_maxrss`: Linux carries the parent's
    high-water mark across fork + exec, so a child of a large bench process would report at least
    the parent's size. `ru_maxrss` only where /proc is missing (not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux, bytes on macOS


def _timed(work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    before = _rss_mb()
    began = time.perf_counter()
    out = work()
    return out, {"seconds": time.perf_counter() - began, "import_rss_mb": before}


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def bench_config(
    state_dir: Path, util_dir: Path, db: Path, lookback_days: int, utilization: dict[str, Any] | None = None
) -> Any:
    """The daemon's config for the benchmark: DuckDB export at `db`, utilization files (or the
    `[utilization]` table given), a SQLite state store in `state_dir` (whatever the store keeps
    beside it lands there too)."""
    from monitor.config import parse_config

    raw = {
        "billing": {"source": "duckdb", "db": str(db), "lookback_days": lookback_days},
        "utilization": utilization or {"source": "files", "files": [str(util_dir)]},
        "state": {"url": f"sqlite:///{state_dir / 'state.sqlite'}"},
        "alerts": {"console_dir": str(state_dir / "alerts")},
        "digest": {"out_dir": str(state_dir / "digest")},
    }
    return parse_config(raw, "bench")


def _deps(
    a: dict[str, Any],
    state_dir: Path,
    db: Path,
    lookback_days: int,
    utilization: dict[str, Any] | None = None,
) -> Any:
    from monitor.attribution.compile import compile_rules
    from monitor.clock import FixedClock
    from monitor.cycle import build_deps
    from monitor.sources.base import MeteredSource
    from monitor.sources.billing_duckdb import DuckDBBillingSource
    from monitor.sources.duckdb_conn import open_billing_db

    cfg = bench_config(state_dir, Path(a["util_dir"]), db, lookback_days, utilization)
    conn = open_billing_db(db)
    source = MeteredSource(DuckDBBillingSource(conn, rules=compile_rules(cfg.attribution.rules)))
    return build_deps(cfg, FixedClock(_ts(a["now"])), source, stream=io.StringIO(), environ={})


# ------------------------------------------------------------------------------------------ stages


def analyze(a: dict[str, Any]) -> dict[str, Any]:
    """What `gpucost analyze --billing export.parquet` runs (no config: defaults, no budgets)."""
    from monitor.analysis import analyze_once
    from monitor.config import Config

    cfg, now, paths = Config(), _ts(a["now"]), [Path(a["parquet"])]
    result, out = _timed(
        lambda: analyze_once(cfg, now=now, billing_paths=paths, with_budgets=False, keep_gpu_hours=False)
    )
    stats = result.stats
    return out | {
        "rows_scanned": stats.rows_scanned,
        "rows_fetched": stats.rows_fetched,
        "queries": stats.queries,
        "findings": len(result.findings),
    }


_FLOOR_SQL = "SELECT sku.description, SUM(cost) FROM read_parquet(?) GROUP BY 1"


def floor(a: dict[str, Any]) -> dict[str, Any]:
    """DuckDB alone: the cheapest correct answer to "cost per SKU" over the same file."""
    import duckdb

    def work() -> list[tuple]:
        conn = duckdb.connect()
        conn.execute("SET enable_progress_bar = false")
        return conn.execute(_FLOOR_SQL, [a["parquet"]]).fetchall()

    rows, out = _timed(work)
    return out | {"groups": len(rows)}


def naive(a: dict[str, Any]) -> dict[str, Any]:
    """The script a user would write: pandas reads the whole export, a regex per row, group by."""
    import re

    import pandas as pd

    classes = [
        ("gpu", re.compile(r"GPU|Nvidia", re.IGNORECASE)),
        ("core", re.compile(r"Core|vCPU", re.IGNORECASE)),
        ("ram", re.compile(r"Ram\b|Memory", re.IGNORECASE)),
        ("egress", re.compile(r"egress", re.IGNORECASE)),
    ]

    def classify(sku: dict[str, Any]) -> str:
        text = sku.get("description") or ""
        return next((name for name, rx in classes if rx.search(text)), "other")

    def work() -> Any:
        df = pd.read_parquet(a["parquet"])
        df["class"] = df["sku"].apply(classify)
        return df.groupby("class")["cost"].sum()

    sums, out = _timed(work)
    return out | {"groups": len(sums)}


def setup(a: dict[str, Any]) -> dict[str, Any]:
    """Prepare (untimed) what `poll` and `detection` start from, under `a["dir"]`:

    - `load.parquet`: the export's last delivery (rows of one `export_time`) by `a["now"]`, and
      `base.parquet`: every row delivered before it;
    - `poll.duckdb` holding the base rows, and `poll-state/` after a first poll of them;
    - `full.duckdb` holding every row, and `detect-state/` after the daemon's billing poll
      (lookback over the whole window) and utilization poll, as detection finds them.
    """
    import duckdb

    from monitor.cycle import run_billing_poll, run_utilization_poll
    from monitor.sources.duckdb_conn import open_billing_db
    from monitor.sources.loader import load_billing

    root, parquet = Path(a["dir"]), a["parquet"]
    # from nothing: a kept directory (`--keep`, measured again) would otherwise load the export
    # into its tables a second time and poll it as corrections of every hour
    for name in ("poll.duckdb", "full.duckdb", "poll-state", "detect-state"):
        for path in (root / name, root / f"{name}.tmp", root / f"{name}.wal"):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    conn = duckdb.connect()
    # the export lands in deliveries (one export_time each, hours apart): the last one by the data's
    # end is the new load; the table before it holds every earlier delivery
    last = "SELECT MAX(export_time) FROM read_parquet(?) WHERE export_time <= ?"
    split = conn.execute(last, [parquet, _ts(a["now"])]).fetchone()[0]
    copy = "COPY (SELECT * FROM read_parquet(?) WHERE {}) TO '{}' (FORMAT parquet)"
    conn.execute(copy.format("export_time < ?", root / "base.parquet"), [parquet, split])
    conn.execute(copy.format("export_time = ?", root / "load.parquet"), [parquet, split])
    conn.close()
    split_now = split + _LANDED
    for db, files in (("poll.duckdb", ["base.parquet"]), ("full.duckdb", [parquet])):
        bconn = open_billing_db(root / db)
        load_billing([root / f for f in files], bconn)
        bconn.close()
    poll = _deps(
        a | {"now": split_now.isoformat()}, root / "poll-state", root / "poll.duckdb", a["poll_lookback"]
    )
    first = run_billing_poll(poll, split_now)
    poll.store.close()
    deps = _deps(a, root / "detect-state", root / "full.duckdb", a["lookback_days"])
    billing = run_billing_poll(deps, _ts(a["now"]))
    # the aggregates' own size, before the utilization poll copies its hours into the same file
    # (`monitor.utilization.mirror`): 41 B a row with the copy at scale 5, as if the aggregates took it
    size = aggregate_size(root / "detect-state" / "aggregates.duckdb")
    util = run_utilization_poll(deps, _ts(a["now"]))
    deps.store.close()
    return {
        "seconds": 0.0,
        "first_poll_rows": first["hourly_rows_written"],
        "hourly_rows": billing["hourly_rows_written"],
        "samples": util["samples"],
        "load_rows": _count(root / "load.parquet"),
        "load_export_time": split.isoformat(),
        "poll_now": split_now.isoformat(),
    } | size


def _count(parquet: Path) -> int:
    import duckdb

    return duckdb.connect().execute("SELECT COUNT(*) FROM read_parquet(?)", [str(parquet)]).fetchone()[0]


def aggregate_size(db: Path) -> dict[str, Any]:
    """Bytes per stored aggregate row: the aggregate store's blocks in use (DuckDB's
    `pragma_database_size`, after a checkpoint) over `billing_hourly`'s rows, read before the
    utilization copy joins them in the file. The other tables (watermarks, the last poll) hold a
    few rows; DuckDB keeps no index on `billing_hourly`."""
    import duckdb

    conn = duckdb.connect(str(db))
    try:
        conn.execute("CHECKPOINT")
        rows = conn.execute("SELECT COUNT(*) FROM billing_hourly").fetchone()[0]
        used = conn.execute("SELECT used_blocks * block_size FROM pragma_database_size()").fetchone()[0]
    except duckdb.Error as e:  # no aggregates there: say so, do not guess
        return {"agg_rows": None, "agg_bytes": None, "agg_note": str(e)}
    finally:
        conn.close()
    return {"agg_rows": rows, "agg_bytes": used, "agg_index_bytes": 0}


def _daemon_job(
    a: dict[str, Any], job: Callable[[Any, datetime], dict[str, Any]]
) -> tuple[dict[str, Any], dict]:
    """One of the daemon's jobs, timed, on the state directory `a["state"]` (a fresh copy)."""
    deps = _deps(a, Path(a["state"]), Path(a["db"]), a["lookback_days"])
    result, out = _timed(lambda: job(deps, _ts(a["now"])))
    deps.store.close()
    return result, out


def detection(a: dict[str, Any]) -> dict[str, Any]:
    """The daemon's detection job (`run_detection`: inputs from the store, detectors, findings
    recorded, alerts enqueued) on a fresh copy of the filled state directory."""
    from monitor.cycle import run_detection

    report, out = _daemon_job(a, run_detection)
    return out | {"findings": report["findings"]}


def digest(a: dict[str, Any]) -> dict[str, Any]:
    """The daemon's daily digest (`run_digest`: the day before `now`, its chart's two weeks of
    stored aggregates, GPU hours and jobs, Markdown and charts written, nothing sent) on a fresh copy
    of the filled state directory."""
    from monitor.cycle import run_digest

    result, out = _daemon_job(a, run_digest)
    return out | {"day": result["day"]}


def util_poll(a: dict[str, Any]) -> dict[str, Any]:
    """The daemon's first utilization poll (`run_utilization_poll`: the window's day files read six
    hours at a time into the state store) on a fresh copy of a state directory with no samples yet."""
    from monitor.cycle import run_utilization_poll

    report, out = _daemon_job(a, run_utilization_poll)
    return out | {"samples": report["samples"]}


def monitoring_poll(a: dict[str, Any]) -> dict[str, Any]:
    """The daemon's first utilization read from Cloud Monitoring, through the real client and the
    gRPC stand-in `serve_monitoring` runs: the live windows and then the backfill, run after run
    until the whole window is read (what the daemon's backfill job does over its runs), on a fresh
    copy of a state directory with no samples yet. Peak memory is set by the largest chunk (one
    project and preset, `backfill_chunk_hours`), not by the window."""
    from monitor.cycle import history_read, run_utilization_backfill, run_utilization_poll

    util = {
        "source": "cloud_monitoring",
        "projects": a["projects"],
        "presets": a["presets"],
        "api_endpoint": a["address"],
        "insecure": True,
    }
    deps = _deps(a, Path(a["state"]), Path(a["db"]), a["lookback_days"], utilization=util)
    now = _ts(a["now"])

    def work() -> dict[str, int]:
        samples = run_utilization_poll(deps, now, backfill=False)["samples"]
        runs = 0
        while not history_read(deps, now):
            runs += 1
            if not run_utilization_backfill(deps, now):
                raise RuntimeError("the backfill read nothing while hours are still unread")
        return {"samples": samples, "backfill_runs": runs}

    result, out = _timed(work)
    with deps.store.transaction() as conn:
        stored = conn.execute("SELECT COUNT(*) FROM utilization_points").fetchone()[0]
    deps.store.close()
    return out | result | {"stored": stored}


def serve_monitoring(a: dict[str, Any]) -> dict[str, Any]:
    """Not a figure: the Cloud Monitoring stand-in (`tests/fakes/monitoring_server.py`, the real
    `MetricService` over gRPC on 127.0.0.1) serving the fleet's utilization day files, each GPU's
    points of every day in one series as the API returns them. Prints `BENCH-SERVING {address,
    projects, presets}` and serves until its stdin closes."""
    import gzip

    import ijson
    from google.cloud import monitoring_v3

    from monitor.sources.presets import PRESETS
    from tests.fakes.monitoring_server import ScopedMonitoringServer, from_rest_json

    server = ScopedMonitoringServer(page_size=a.get("page_size", 100))
    merged: dict[str, Any] = {}
    for path in sorted(Path(a["util_dir"]).glob("*.json.gz")):
        with gzip.open(path, "rb") as f:
            for ts in ijson.items(f, "timeSeries.item", use_float=True):
                key = json.dumps([ts["metric"], ts["resource"]], sort_keys=True)
                pb = monitoring_v3.TimeSeries.pb(from_rest_json(ts))
                if key in merged:
                    merged[key].points.extend(pb.points)
                else:
                    merged[key] = pb
    server.add(*(monitoring_v3.TimeSeries.wrap(pb) for pb in merged.values()))
    types = {pb.metric.type for pb in merged.values()}
    presets = [name for name, p in PRESETS.items() if any(m.metric_type in types for m in p.metrics)]
    projects = sorted({pb.resource.labels["project_id"] for pb in merged.values()})
    points = sum(len(pb.points) for pb in merged.values())
    merged.clear()
    server.start()
    info = {"address": server.address, "projects": projects, "presets": presets, "points": points}
    print("BENCH-SERVING " + json.dumps(info), flush=True)
    sys.stdin.read()  # until the bench closes it
    server.stop()
    return {"seconds": 0.0}


def poll(a: dict[str, Any]) -> dict[str, Any]:
    """The daemon's billing poll on copies of `poll.duckdb` + `poll-state/`, after appending the
    new load `a["load"]` (one export delivery) when given (the append is the export's work, not timed).

    Timed as in a running daemon: after one untimed poll with nothing new (`cold_seconds`: a fresh
    process's first poll, which also opens the table and transpiles its SQL) and with every query
    of `queries/` transpiled (`render_query` caches them)."""
    from monitor.cycle import run_billing_poll
    from monitor.sources.loader import load_billing

    deps = _deps(a, Path(a["state"]), Path(a["db"]), a["poll_lookback"])
    conn, now = deps.billing.inner.conn, _ts(a["now"])
    _, cold = _timed(lambda: run_billing_poll(deps, now))  # a daemon has polled before: warm up
    for sql in sorted((REPO / "queries").glob("*.sql")):  # and has every query transpiled (cached)
        deps.billing.inner.sql(sql.stem)
    if a.get("load"):
        load_billing([Path(a["load"])], conn)
    deps.billing.runs.clear()
    report, out = _timed(lambda: run_billing_poll(deps, now))
    deps.store.close()
    scanned = [rows_scanned(conn, result.name, params, result) for params, result in deps.billing.runs]
    return out | {
        "cold_seconds": cold["seconds"],
        "queries": [result.name for _, result in deps.billing.runs],
        "rows_scanned": sum(n for n, _ in scanned),
        "scanned_how": sorted({how for _, how in scanned}),
        "rows_fetched": sum(len(result.rows) for _, result in deps.billing.runs),
        "hourly_rows_written": report["hourly_rows_written"],
        "table_rows": conn.execute("SELECT COUNT(*) FROM billing_export").fetchone()[0],
    }


@functools.cache
def _partition_range() -> str:
    """The load days a query's `GPUCOST_LOAD_DAYS()` filter selects, counted: the queries' own SQL."""
    from monitor.attribution.compile import render_sql

    return render_sql("SELECT COUNT(*) FROM billing_export WHERE GPUCOST_LOAD_DAYS()", "duckdb")


def rows_scanned(conn: Any, name: str, params: dict[str, Any], result: Any) -> tuple[int, str]:
    """Export rows one query reads, and how that was found: the engine's own figure when it
    reports one; else every row of the ingestion-time partitions its `_PARTITIONTIME` filter
    selects (what BigQuery prunes to: one `@partition_time`, or the load days from the usage
    start less a day to `GREATEST(@partition_end, usage end + 3 days)` that `queries/*.sql` use);
    else the whole table."""
    if getattr(result, "rows_scanned", None) is not None:
        return result.rows_scanned, "engine"
    if "partition_time" in params:
        sql = "SELECT COUNT(*) FROM billing_export WHERE _PARTITIONTIME = $partition_time"
        return conn.execute(sql, {"partition_time": params["partition_time"]}).fetchone()[0], "partitions"
    if {"usage_start", "usage_end"} <= params.keys():
        bound = {k: params.get(k) for k in ("usage_start", "usage_end", "partition_end")}
        bound["partition_end"] = bound["partition_end"] or bound["usage_end"]
        return conn.execute(_partition_range(), bound).fetchone()[0], "partitions"
    return conn.execute("SELECT COUNT(*) FROM billing_export").fetchone()[0], "table"


STAGES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "analyze": analyze,
    "floor": floor,
    "naive": naive,
    "setup": setup,
    "detection": detection,
    "digest": digest,
    "util_poll": util_poll,
    "monitoring_poll": monitoring_poll,
    "serve_monitoring": serve_monitoring,
    "poll": poll,
}


def main(argv: list[str]) -> int:
    stage, args = argv[0], json.loads(argv[1])
    out = STAGES[stage](args)
    out["peak_rss_mb"] = _rss_mb()
    print(MARKER + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
