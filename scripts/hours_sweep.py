"""Run the production daemon test's fleet through detection at every hour of a day, offline.

`tests/test_daemon_production.py` anchors its fleet to the current hour, so a detector whose result
depends on the hour of day fails it only at some hours (spend_anomaly did twice: a jump dated
differently by its daily and hourly checks, then a category day not carrying its project's jump on).
This builds that fleet (same seed, 14 days, the hung node) as if it were each hour in turn: the
billing rows exported by then into DuckDB, the GPU utilization up to then as Cloud Monitoring JSON
day files; polls both as the daemon does and runs every default detector. As the production test
asks: each injected cost is ONE finding (`tests.test_ground_truth.matches`), one still running
reaches the first-start cut (24 h before now: else a first start would summarise it as over), and
no `idle_gpu` / `unmonitored_gpu` finding is one the injected costs do not explain.

    .venv/bin/python scripts/hours_sweep.py [--at 2026-12-04T00:26:00Z] [--hours 0-23]

About 30 s an hour on a 2-core machine; prints a line per hour and exits 1 if any hour is wrong.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from child import bench_config  # noqa: E402

from monitor.attribution.compile import compile_rules  # noqa: E402
from monitor.clock import FixedClock  # noqa: E402
from monitor.cycle import build_deps, detect, run_billing_poll, run_utilization_poll  # noqa: E402
from monitor.model import Finding  # noqa: E402
from monitor.simulate.simulator import FleetSimulator  # noqa: E402
from monitor.simulate.truth import Tally  # noqa: E402
from monitor.simulate.utilization import iter_series  # noqa: E402
from monitor.sources.billing_duckdb import DuckDBBillingSource  # noqa: E402
from monitor.sources.duckdb_conn import open_billing_db  # noqa: E402
from monitor.sources.loader import load_billing  # noqa: E402
from monitor.timeutil import floor_hour, parse_timestamp  # noqa: E402
from tests.emulators.fleet import _jsonable  # noqa: E402
from tests.test_daemon_production import DAYS, HUNG_HOURS, SEED, _hang_now  # noqa: E402
from tests.test_ground_truth import matches  # noqa: E402

GRACE = timedelta(hours=24)  # the shipped first_start_grace_hours
_DAY = timedelta(days=1)


def _write_inputs(sim: FleetSimulator, start: datetime, now: datetime, work: Path) -> tuple[Path, Path]:
    """What the daemon could read at `now`: billing exported by then (the export lags 1-30 h), and
    utilization up to then as Cloud Monitoring JSON day files (`[utilization] source = "files"`)."""
    util = work / "util"
    util.mkdir(parents=True)
    day = start.replace(hour=0)
    while day < now:
        with gzip.open(util / f"{day.date().isoformat()}.json.gz", "wt") as gz:
            gz.write('{"timeSeries":[')
            series = iter_series(sim.ctx, sim.fleet.vms, sim.hours, max(day, start), min(day + _DAY, now))
            for i, ts in enumerate(series):
                gz.write(("," if i else "") + json.dumps(ts, separators=(",", ":")))
            gz.write("]}")
        day += _DAY
    export = work / "export.ndjson.gz"
    with gzip.open(export, "wt") as fh:
        for row in sim.billing_rows():
            if row["export_time"] <= now:
                fh.write(json.dumps(_jsonable(row)) + "\n")
    db = work / "billing.duckdb"
    conn = open_billing_db(db)
    load_billing([export], conn)
    conn.close()
    return util, db


def _findings(now: datetime, util: Path, db: Path, work: Path) -> list[Finding]:
    cfg = bench_config(work, util, db, 31)
    conn = open_billing_db(db)
    try:
        source = DuckDBBillingSource(conn, rules=compile_rules(cfg.attribution.rules))
        deps = build_deps(cfg, FixedClock(now), source, stream=io.StringIO(), environ={})
        run_billing_poll(deps, now)
        run_utilization_poll(deps, now)
        return detect(deps, now)
    finally:
        conn.close()


def check(now: datetime, work: Path) -> tuple[bool, list[str]]:
    end = floor_hour(now) + timedelta(hours=1)
    start = end - timedelta(days=DAYS)
    sim = FleetSimulator(SEED, start, DAYS)
    _hang_now(sim, HUNG_HOURS)
    found = _findings(now, *_write_inputs(sim, start, now, work), work)
    payloads = [(f, json.loads(json.dumps(f.to_dict(), default=str))) for f in found]
    hidden = sim.ground_truth(Tally())["hidden_costs"]
    ok, shown = True, []
    for cost in hidden:
        mine = [f for f, payload in payloads if matches(cost, payload)]
        ongoing = parse_timestamp(cost["window_end"]) >= now - GRACE  # else a summary's business
        good = len(mine) == 1 and (not ongoing or mine[0].window_end >= now - GRACE)
        ok = ok and good
        if not good:
            seen = [f"{f.title} (to {f.window_end:%Y-%m-%d %H:00})" for f in mine] or ["none"]
            shown.append(f"{cost['kind']}/{cost['variant']}: {'; '.join(seen)}")
    gpu_kinds = ("idle_gpu", "unmonitored_gpu")
    for f, payload in payloads:
        if f.kind in gpu_kinds and not any(matches(c, payload) for c in hidden):
            ok = False
            shown.append(f"unexplained: {f.title}")
    return ok, shown or [f"{len(hidden)} injected costs, each one finding"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at", default=None, help="the first hour's now (default: now, minus its hours)")
    ap.add_argument("--hours", default="0-23", help="offsets from --at, e.g. 0-23 or 1,5,17")
    a = ap.parse_args()
    at = parse_timestamp(a.at) if a.at else datetime.now(UTC).replace(hour=0, minute=26, second=0, microsecond=0)
    lo, _, hi = a.hours.partition("-")
    offsets = range(int(lo), int(hi) + 1) if hi else [int(x) for x in a.hours.split(",")]
    bad = 0
    for k in offsets:
        now = at + timedelta(hours=k)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="gpucost-sweep-") as tmp:
            ok, shown = check(now, Path(tmp) / "w")
        bad += not ok
        print(f"{now:%Y-%m-%d %H:%M} {'ok ' if ok else 'BAD'} {time.monotonic() - began:4.0f} s  {'; '.join(shown)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
