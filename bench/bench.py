"""Throughput of gpucost's data paths on a simulated fleet: figures and ratios, never pass/fail.

    .venv/bin/python bench/bench.py [--scale K] [--days N] [--util-days D] [--seed S] [--keep DIR]
        [--analysis] [--repeat N] [--growth] [--stages analyze,floor,...] [--figures-only]

Throughput stages, each on the previous one's output (a temporary directory, removed unless --keep):

1. simulate: the fleet's billing rows (generation alone, then NDJSON.gz + Parquet writing) and the
   GPU utilization day files of the last `--util-days` days (Cloud Monitoring JSON, as the demo writes).
2. load: the same rows into fresh DuckDB files from NDJSON and from Parquet (rows/s each).
3. billing poll: a first incremental poll of the loaded table, then a second one with nothing new
   loaded; their ratio shows that a poll's cost follows what changed, not the table's age.
4. utilization: the day files through `FileUtilizationSource` (parse + align; then again from its
   cache), into the state store (`replace_window`) and back (`load_samples`; `load_util_hours`, the
   per GPU and hour reduction the join reads), in samples/s.
5. analysis: `gpucost analyze`'s pipeline once over the files (`monitor.analysis.analyze_once`);
   skipped above scale 10 unless --analysis is given (at scale 50 it held over 12 GB of memory).

The default scale finishes in about a minute on a 2-core machine; `--scale 50` reaches millions of
billing rows (utilization then defaults to the last 3 days, the daemon's re-read window, to bound
memory; pass --util-days to change it).

Then issue 12's figures (`bench/figures.py`), each the median of `--repeat` runs (default 3), each
run a fresh child process (`bench/child.py`) whose own peak RSS is reported: `analyze` end to end,
the DuckDB floor, the naive pandas baseline, a daemon detection run over the stored window, the
daemon's daily digest on the same store, its first utilization poll of the day files and its first
read of them from Cloud Monitoring (the real client, a gRPC stand-in serving them), and the
billing poll with nothing new / one new export delivery (rows scanned, rows fetched). `--growth`
measures them at scales K, 2K and 4K; `--figures-only` skips the throughput stages. The run ends
with Markdown tables (machine, figures, ratios, growth) to paste into README.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from figures import STAGES, BenchError, Fleet, ScaleFigures, measure_fleet  # noqa: E402
from tables import markdown  # noqa: E402

from monitor.attribution.compile import compile_rules  # noqa: E402
from monitor.billing_poll import poll_billing  # noqa: E402
from monitor.config import Config, parse_config  # noqa: E402
from monitor.simulate.export import ExportWriter, open_gzip  # noqa: E402
from monitor.simulate.simulator import DEFAULT_START, FleetSimulator  # noqa: E402
from monitor.simulate.utilization import write_page  # noqa: E402
from monitor.sources.billing_duckdb import DuckDBBillingSource  # noqa: E402
from monitor.sources.duckdb_conn import open_billing_db  # noqa: E402
from monitor.sources.loader import load_billing  # noqa: E402
from monitor.sources.utilization_files import FileUtilizationSource  # noqa: E402
from monitor.state.analytics import AggregateStore  # noqa: E402
from monitor.state.store import SQLiteStore  # noqa: E402
from monitor.utilization import load_samples, load_util_hours, migrate, replace_window  # noqa: E402

__all__ = ["main"]

_DAY = timedelta(days=1)
_ANALYSIS_MAX_SCALE = 10


# --------------------------------------------------------------------------------------- printing


def _rate(n: float, seconds: float) -> str:
    return f"{n / seconds:>12,.0f}/s" if seconds > 0 else "           -"


def _line(label: str, seconds: float, n: float | None = None, unit: str = "", extra: str = "") -> None:
    count = f"{n:>12,.0f} {unit:<8}" if n is not None else " " * 22
    rate = _rate(n, seconds) if n is not None else ""
    print(f"  {label:<34} {seconds:>8.2f} s  {count} {rate}  {extra}".rstrip())


@contextmanager
def _timer() -> Iterator[list[float]]:
    out = [0.0]
    began = time.perf_counter()
    yield out
    out[0] = time.perf_counter() - began


# --------------------------------------------------------------------------------------- stages


def simulate(sim: FleetSimulator, out: Path, util_days: int) -> dict[str, Any]:
    """Billing rows to NDJSON.gz + Parquet (generation timed apart) and the last days' utilization."""
    (out / "billing").mkdir(parents=True)
    ndjson, parquet = out / "billing" / "export.ndjson.gz", out / "billing" / "export.parquet"
    rows, generate = 0, 0.0
    with _timer() as total, ExportWriter(ndjson, parquet) as writer:
        gen = sim.billing_rows()
        while True:
            t = time.perf_counter()
            row = next(gen, None)
            generate += time.perf_counter() - t
            if row is None:
                break
            writer.write(row)
            rows += 1
    _line("billing rows: simulate", generate, rows, "rows")
    _line("billing rows: write NDJSON+Parquet", total[0] - generate, rows, "rows")
    util_dir = out / "utilization"
    util_dir.mkdir()
    first = sim.end - util_days * _DAY
    with _timer() as t:
        for d in range(util_days):
            day = first + d * _DAY
            with open_gzip(util_dir / f"{day.date().isoformat()}.json.gz") as gz:
                write_page(gz, sim.ctx, sim.fleet.vms, sim.hours, day, day + _DAY)
    mb = sum(f.stat().st_size for f in util_dir.iterdir()) / 1e6
    _line(f"utilization files ({util_days} d)", t[0], None, extra=f"{mb:,.1f} MB gzip")
    return {"rows": rows, "ndjson": ndjson, "parquet": parquet, "util_dir": util_dir, "util_from": first}


def load(paths: dict[str, Path], out: Path, rows: int) -> dict[str, float]:
    rates = {}
    for fmt in ("ndjson", "parquet"):
        conn = open_billing_db(out / f"{fmt}.duckdb")
        with _timer() as t:
            report = load_billing([paths[fmt]], conn)
        conn.close()
        assert report.rows == rows, (fmt, report.rows, rows)
        _line(f"load {fmt}", t[0], report.rows, "rows")
        rates[fmt] = t[0]
    print(f"  {'NDJSON / Parquet time':<34} {rates['ndjson'] / rates['parquet']:>8.2f} x")
    return rates


def billing_poll(db: Path, cfg: Config, now: datetime, out: Path) -> None:
    conn = open_billing_db(db)
    source = DuckDBBillingSource(conn, rules=compile_rules(cfg.attribution.rules))
    store = AggregateStore(out / "poll-aggregates.duckdb")
    seconds = []
    for label in ("first poll", "second poll (nothing new)"):
        with _timer() as t:
            report = poll_billing(source, store, cfg.billing, now)
        seconds.append(t[0])
        extra = f"queries {'+'.join(report.queries)}, {len(report.partitions_changed)} partitions changed"
        _line(f"billing {label}", t[0], report.hourly_rows_written, "rows", extra)
    print(f"  {'second / first poll time':<34} {seconds[1] / seconds[0]:>8.3f} x")
    store.close()
    conn.close()


def utilization(util_dir: Path, start: datetime, end: datetime, out: Path) -> None:
    source = FileUtilizationSource([util_dir])
    for label in ("file source: parse + align", "file source: again (cached)"):
        with _timer() as t:
            result = source.fetch(start, end)
        extra = (
            f"{result.requests} files, {source.parsed_files} parsed, {sum(result.skipped.values())} skipped"
        )
        _line(label, t[0], len(result.samples), "samples", extra)
    samples = result.samples
    store = SQLiteStore(out / "util-state.sqlite")
    migrate(store)
    with _timer() as t:
        replace_window(store, "bench", "files", start, end, samples, now=end)
    _line("store: replace_window (empty)", t[0], len(samples), "samples")
    with _timer() as t:
        replace_window(store, "bench", "files", start, end, samples, now=end)
    _line("store: replace_window (re-read)", t[0], len(samples), "samples")
    with _timer() as t:
        loaded = load_samples(store, start, end)
    assert len(loaded) == len(samples)
    _line("store: load_samples", t[0], len(loaded), "samples")
    with _timer() as t:
        hours = load_util_hours(store, start, end)
    _line("store: load_util_hours", t[0], len(loaded), "samples", f"{len(hours):,} GPU-hours reach Python")
    store.close()


def analysis(cfg: Config, fleet: dict[str, Any], now: datetime) -> None:
    try:
        from monitor.analysis import analyze_once
    except ImportError as e:  # the analysis module is optional for this benchmark
        print(f"  analysis: not available ({e})")
        return
    with _timer() as t:
        result = analyze_once(
            cfg, now=now, billing_paths=[fleet["parquet"]], utilization_paths=[fleet["util_dir"]]
        )
    _line(
        "analyze (parquet + utilization)",
        t[0],
        len(result.gpu_hours),
        "GPU-hours",
        f"{len(result.findings)} findings",
    )


# --------------------------------------------------------------------------------------- main


def _stage(title: str, fn: Callable[[], Any]) -> Any:
    print(title)
    return fn()


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=1, help="fleet multiplier (50: millions of rows)")
    ap.add_argument("--days", type=int, default=14, help="days simulated")
    ap.add_argument(
        "--util-days", type=int, default=None, help="days of utilization (default: all, or 3 at scale > 2)"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", type=Path, default=None, help="write here and keep the files (a new or empty directory)")
    ap.add_argument("--analysis", action="store_true", help="run the analysis stage at any scale")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is printed)")
    ap.add_argument("--growth", action="store_true", help="the figures at scales K, 2K and 4K")
    ap.add_argument(
        "--stages", default=",".join(STAGES), help=f"figures to measure, comma-separated ({','.join(STAGES)})"
    )
    ap.add_argument("--figures-only", action="store_true", help="skip the throughput stages")
    args = ap.parse_args(argv)
    args.stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if unknown := sorted(set(args.stages) - set(STAGES)):
        ap.error(f"--stages: unknown {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    if args.repeat < 1 or args.scale < 1 or args.days < 1:
        ap.error("--repeat, --scale and --days must be at least 1")
    if args.keep is not None and args.keep.is_dir() and any(args.keep.iterdir()):
        ap.error(
            f"--keep: {args.keep} is not empty; the bench simulates a new fleet there: give a new or empty directory"
        )
    return args


def _throughput(args: argparse.Namespace, cfg: Config, out: Path, util_days: int) -> dict[str, Any]:
    sim = FleetSimulator(args.seed, DEFAULT_START, args.days, args.scale)
    fleet = _stage("simulate", lambda: simulate(sim, out / "fleet", util_days))
    paths = {"ndjson": fleet["ndjson"], "parquet": fleet["parquet"]}
    _stage("load", lambda: load(paths, out, fleet["rows"]))
    now = sim.end + _DAY
    _stage("billing poll", lambda: billing_poll(out / "parquet.duckdb", cfg, now, out))
    _stage("utilization", lambda: utilization(fleet["util_dir"], fleet["util_from"], sim.end, out))
    if args.analysis or args.scale <= _ANALYSIS_MAX_SCALE:
        _stage("analysis", lambda: analysis(cfg, fleet, now))
    else:
        print(f"analysis: skipped above scale {_ANALYSIS_MAX_SCALE} (memory); pass --analysis to run it")
    return fleet | {"end": sim.end}


def _figures(args: argparse.Namespace, out: Path, util_days: int, first: dict[str, Any] | None) -> str:
    scales = [args.scale, 2 * args.scale, 4 * args.scale] if args.growth else [args.scale]
    results: list[ScaleFigures] = []
    for scale in scales:
        files = first if scale == args.scale else None
        if files is None:
            sim = FleetSimulator(args.seed, DEFAULT_START, args.days, scale)
            files = _stage(
                f"simulate (scale {scale})", lambda s=sim, k=scale: simulate(s, out / f"fleet-{k}", util_days)
            )
            files = files | {"end": sim.end}
        fleet = Fleet(
            scale,
            args.days,
            files["rows"],
            files["parquet"],
            files["util_dir"],
            files["end"],
            out / f"figures-{scale}",
        )
        print(
            f"figures: scale {scale}, {args.days} days, {fleet.rows:,} export rows, median of {args.repeat}"
        )
        results.append(measure_fleet(fleet, args.stages, args.repeat))
    return markdown(results, args.repeat, args.seed)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    util_days = min(args.days, args.util_days or (args.days if args.scale <= 2 else 3))
    out = args.keep or Path(tempfile.mkdtemp(prefix="gpucost-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    cfg = parse_config({}, "bench")
    began = time.perf_counter()
    try:
        print(f"gpucost bench: scale {args.scale}, {args.days} days, seed {args.seed}, in {out}")
        fleet = None if args.figures_only else _throughput(args, cfg, out, util_days)
        table = _figures(args, out, util_days, fleet) if args.stages else ""
    except BenchError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    print(f"total {time.perf_counter() - began:.1f} s")
    if table:
        print()
        print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
