"""Issue 12's benchmark figures on one simulated fleet: each the median of `repeat` runs, each run a
fresh child process (`bench/child.py`) so the peak RSS is that work's alone.

- `analyze`: what `gpucost analyze --billing export.parquet` runs, end to end (`analyze_once`);
- `floor`: DuckDB alone, `SELECT sku.description, SUM(cost) FROM read_parquet(...) GROUP BY 1`;
- `naive`: pandas reads the export, a regex classifies each row (`.apply`), group by class;
- `detection`: the daemon's `run_detection` over a state store filled by its billing poll (lookback
  over the whole simulated window) and utilization poll; a fresh copy of the store per run;
- `digest`: the daemon's daily digest (`run_digest`) of the data's last day on the same store (its
  chart reads two weeks of aggregates, GPU hours and jobs); a fresh copy of the store per run;
- `util_poll`: the daemon's first utilization poll of the utilization day files (`run_utilization_poll`)
  into a state store with none yet; a fresh copy per run;
- `monitoring_poll`: the same first read from Cloud Monitoring instead (its live windows, then its
  backfill job until the whole window is read), through the real client against the gRPC stand-in
  serving the same day files (`bench/child.py serve_monitoring`, a process of its own, not measured);
- `poll`: the daemon's billing poll with nothing new loaded, and after one new load is appended (the
  export's last delivery by the data's end: the rows of one `export_time`; the simulated export,
  like Google's, delivers every few hours), each on a fresh copy of the DuckDB table and store.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["STAGES", "Fleet", "Measure", "ScaleFigures", "measure_fleet", "run_child"]

CHILD = Path(__file__).resolve().with_name("child.py")
MARKER = "BENCH-RESULT "  # as bench/child.py prints it
STAGES = ("analyze", "floor", "naive", "detection", "digest", "util_poll", "monitoring_poll", "poll")
_DAY = timedelta(days=1)
_DAEMON_LOOKBACK = 10  # billing.lookback_days' default: what the daemon's poll covers
_MAX_LOOKBACK = 62  # billing.lookback_days' ceiling


class BenchError(RuntimeError):
    """A child stage failed: its exit status and the tail of its stderr."""


@dataclass(frozen=True)
class Fleet:
    """One simulated fleet on disk (`simulate` stage output) and where its figures work."""

    scale: int
    days: int
    rows: int
    parquet: Path
    util_dir: Path
    end: datetime
    work: Path


@dataclass
class Measure:
    """The runs of one stage; figures are medians over them, counts come from the first run."""

    runs: list[dict[str, Any]]

    @property
    def seconds(self) -> float:
        return statistics.median(r["seconds"] for r in self.runs)

    @property
    def peak_mb(self) -> float:
        return statistics.median(r["peak_rss_mb"] for r in self.runs)

    @property
    def import_mb(self) -> float:
        return statistics.median(r["import_rss_mb"] for r in self.runs)

    def __getitem__(self, key: str) -> Any:
        return self.runs[0].get(key)


@dataclass
class ScaleFigures:
    fleet: Fleet
    measures: dict[str, Measure] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)


def run_child(stage: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one stage in a fresh interpreter; its `BENCH-RESULT` line, parsed."""
    cmd = [sys.executable, str(CHILD), stage, json.dumps(args, default=str)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    # the marker may follow other output on its line (a progress line without a newline)
    lines = [ln[ln.index(MARKER) :] for ln in proc.stdout.splitlines() if MARKER in ln]
    if proc.returncode or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise BenchError(f"bench stage {stage!r} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1].removeprefix(MARKER))


def _repeat(
    stage: str, args: dict[str, Any], n: int, fresh: Callable[[Path], dict[str, Any]] | None, work: Path
) -> Measure:
    runs = []
    for i in range(n):
        scratch = work / f"run-{stage}-{i}"
        extra = fresh(scratch) if fresh is not None else {}
        try:
            runs.append(run_child(stage, args | extra))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return Measure(runs)


def _copy_state(src: Path, name: str, db: Path | None = None) -> Callable[[Path], dict[str, Any]]:
    """A fresh copy of a filled state directory (and of the DuckDB export table) for one run."""

    def fresh(scratch: Path) -> dict[str, Any]:
        shutil.copytree(src, scratch / name)
        out: dict[str, Any] = {"state": str(scratch / name)}
        if db is not None:
            shutil.copy2(db, scratch / db.name)
            out["db"] = str(scratch / db.name)
        return out

    return fresh


def _line(label: str, m: Measure, extra: str = "") -> None:
    runs = "/".join(f"{r['seconds']:.2f}" for r in m.runs)
    print(
        f"  {label:<30} {m.seconds:>8.3f} s  peak {m.peak_mb:>7,.0f} MB"
        f" (before work {m.import_mb:,.0f} MB)  runs {runs} s  {extra}".rstrip()
    )


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def measure_fleet(fleet: Fleet, stages: Sequence[str], repeat: int) -> ScaleFigures:
    """Every selected figure on `fleet`, printing one line per stage as it is measured."""
    out = ScaleFigures(fleet)
    fleet.work.mkdir(parents=True, exist_ok=True)
    base = {"parquet": str(fleet.parquet), "util_dir": str(fleet.util_dir)}
    m = out.measures
    if "analyze" in stages:
        m["analyze"] = _repeat("analyze", base | {"now": fleet.end + _DAY}, repeat, None, fleet.work)
        a = m["analyze"]
        fetched = f"fetched/scanned {a['rows_fetched']:,}/{a['rows_scanned']:,} ({_pct(a['rows_fetched'], a['rows_scanned'])})"
        _line("analyze --billing (parquet)", a, f"{fleet.rows / a.seconds:,.0f} rows/s, {fetched}")
    for stage, label in (("floor", "floor: DuckDB GROUP BY"), ("naive", "naive: pandas + regex/row")):
        if stage in stages:
            m[stage] = _repeat(stage, base, repeat, None, fleet.work)
            _line(
                label, m[stage], f"{fleet.rows / m[stage].seconds:,.0f} rows/s, {m[stage]['groups']} groups"
            )
    if {*_DAEMON_JOBS, "monitoring_poll", "poll"} & set(stages):
        out.setup = _setup(fleet, base)
    for stage in _DAEMON_JOBS:
        if stage in stages:
            _daemon_job(out, base, repeat, stage)
    if "monitoring_poll" in stages:
        _monitoring_poll(out, base, repeat)
    if "poll" in stages:
        _polls(out, base, repeat)
    return out


def _queries(names: list[str]) -> str:
    """`partitions, hourly x5`: the queries a poll ran, in order of first use."""
    counts = Counter(names)
    return ", ".join(n if counts[n] == 1 else f"{n} x{counts[n]}" for n in counts) or "-"


def _lookback(fleet: Fleet) -> int:
    return min(fleet.days + 1, _MAX_LOOKBACK)


def _on_filled_store(fleet: Fleet, base: dict[str, Any]) -> dict[str, Any]:
    """A daemon job's arguments over the export `_setup` filled the stores from, as of its end."""
    return base | {"db": str(fleet.work / "full.duckdb"), "now": fleet.end, "lookback_days": _lookback(fleet)}


def _setup(fleet: Fleet, base: dict[str, Any]) -> dict[str, Any]:
    args = base | {
        "dir": str(fleet.work),
        "now": fleet.end,
        "lookback_days": _lookback(fleet),
        "poll_lookback": _DAEMON_LOOKBACK,
    }
    setup = run_child("setup", args)
    size = ""
    if setup.get("agg_rows"):
        per_row = setup["agg_bytes"] / setup["agg_rows"]
        size = f", {per_row:,.0f} B/row (+{setup['agg_index_bytes'] / setup['agg_rows']:,.0f} B/row indexes)"
    print(
        f"  {'store filled (untimed)':<30} {setup['hourly_rows']:,} hourly aggregates over {fleet.days} d"
        f" (lookback {_lookback(fleet)} d){size}, {setup['samples']:,} utilization samples"
    )
    return setup


#: The daemon's jobs measured on a fresh copy of a state directory `_setup` filled: stage -> (the
#: directory, the figure's label, what its line adds).
_DAEMON_JOBS: dict[str, tuple[str, Callable[[Fleet], str], Callable[[Measure], str]]] = {
    "detection": (
        "detect-state",
        lambda f: f"detection ({f.days} d stored)",
        lambda m: f"{m['findings']} findings",
    ),
    "digest": ("detect-state", lambda f: "digest (14 d chart)", lambda m: f"day {m['day']}"),
    # the state of the billing poll alone: no utilization yet
    "util_poll": ("poll-state", lambda f: "first utilization poll", lambda m: f"{m['samples']:,} samples"),
}


def _daemon_job(out: ScaleFigures, base: dict[str, Any], repeat: int, stage: str) -> None:
    fleet = out.fleet
    state, label, extra = _DAEMON_JOBS[stage]
    args = _on_filled_store(fleet, base)
    fresh = _copy_state(fleet.work / state, "state")
    out.measures[stage] = m = _repeat(stage, args, repeat, fresh, fleet.work)
    _line(label(fleet), m, extra(m))


_SERVING = "BENCH-SERVING "


def _monitoring_poll(out: ScaleFigures, base: dict[str, Any], repeat: int) -> None:
    """The first read from Cloud Monitoring, with the stand-in serving in a process of its own (its
    memory is not the daemon's) until its stdin is closed."""
    fleet = out.fleet
    cmd = [sys.executable, str(CHILD), "serve_monitoring", json.dumps(base)]
    server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = next((ln for ln in server.stdout if ln.startswith(_SERVING)), None)
        if line is None:
            raise BenchError(f"the Cloud Monitoring stand-in did not start (exit {server.wait()})")
        served = json.loads(line.removeprefix(_SERVING))
        args = _on_filled_store(fleet, base) | {k: served[k] for k in ("address", "projects", "presets")}
        fresh = _copy_state(fleet.work / "poll-state", "state")
        out.measures["monitoring_poll"] = m = _repeat("monitoring_poll", args, repeat, fresh, fleet.work)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=60)
    _line(
        "first util poll (Monitoring)",
        m,
        f"{m['stored']:,} samples stored of {served['points']:,} served; {m['backfill_runs']} backfill runs"
        f" ({len(served['projects'])} projects x {len(served['presets'])} presets)",
    )


def _polls(out: ScaleFigures, base: dict[str, Any], repeat: int) -> None:
    fleet = out.fleet
    args = base | {"now": out.setup["poll_now"], "poll_lookback": _DAEMON_LOOKBACK}
    fresh = _copy_state(fleet.work / "poll-state", "state", fleet.work / "poll.duckdb")
    for key, label, load in (
        ("poll_idle", "poll: nothing new", None),
        ("poll_load", "poll: +1 new load (delivery)", str(fleet.work / "load.parquet")),
    ):
        out.measures[key] = p = _repeat("poll", args | {"load": load}, repeat, fresh, fleet.work)
        how = "+".join(p["scanned_how"]) or "-"
        _line(
            label,
            p,
            f"queries {_queries(p['queries'])}; scanned {p['rows_scanned']:,} ({how}; table"
            f" {p['table_rows']:,}); fetched {p['rows_fetched']:,} ({_pct(p['rows_fetched'], p['rows_scanned'])});"
            f" written {p['hourly_rows_written']:,}; cold {p['cold_seconds']:.3f} s",
        )
    print(
        f"  {'(the new load)':<30} {out.setup['load_rows']:,} rows exported at {out.setup['load_export_time']}"
    )
