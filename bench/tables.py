"""The benchmark's closing Markdown: the machine, the figures per scale, the ratios, the growth.

Compact on purpose: pasted as is into README's Performance section (and docs/performance.md).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from figures import ScaleFigures

__all__ = ["FIGURE_HEADERS", "RATIO_HEADERS", "machine", "markdown"]

FIGURE_HEADERS = (
    "scale",
    "days",
    "export rows",
    "analyze s",
    "analyze rows/s",
    "analyze MB",
    "floor s",
    "floor MB",
    "naive s",
    "naive MB",
    "detection s",
    "detection MB",
    "digest s",
    "digest MB",
    "first util poll s",
    "first util poll MB",
    "Monitoring first poll s",
    "Monitoring first poll MB",
    "poll idle ms",
    "poll +1 load ms",
)
RATIO_HEADERS = (
    "scale",
    "analyze / floor (time)",
    "naive / analyze (time)",
    "analyze fetched / scanned",
    "poll +1 load fetched / scanned",
    "poll idle scanned",
    "bytes / aggregate row",
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _meminfo_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    except OSError:
        pass
    return "? GiB"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """nproc, RAM (/proc/meminfo), CPU model, Python, DuckDB and pandas versions."""
    return (
        f"{len(os.sched_getaffinity(0))} CPUs ({_cpu_model()}), {_meminfo_gib()} RAM, "
        f"Python {platform.python_version()}, DuckDB {_version('duckdb')}, pandas {_version('pandas')}, "
        f"{platform.system()} {platform.machine()}"
    )


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(headers: Sequence[str], rows: list[list[str]]) -> list[str]:
    return [_row(headers), _row(["---"] * len(headers)), *(_row(r) for r in rows)]


def _get(s: ScaleFigures, key: str, fig: Callable) -> str:
    m = s.measures.get(key)
    return fig(m) if m is not None else "-"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 10 else f"{r:,.0f}x"


def _secs(s: ScaleFigures, key: str) -> float | None:
    m = s.measures.get(key)
    return m.seconds if m is not None else None


def _figures_row(s: ScaleFigures) -> list[str]:
    f = s.fleet
    return [
        str(f.scale),
        str(f.days),
        f"{f.rows:,}",
        _get(s, "analyze", lambda m: f"{m.seconds:.2f}"),
        _get(s, "analyze", lambda m: f"{f.rows / m.seconds:,.0f}"),
        _get(s, "analyze", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "floor", lambda m: f"{m.seconds:.3f}"),
        _get(s, "floor", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "naive", lambda m: f"{m.seconds:.2f}"),
        _get(s, "naive", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "detection", lambda m: f"{m.seconds:.2f}"),
        _get(s, "detection", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "digest", lambda m: f"{m.seconds:.2f}"),
        _get(s, "digest", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "util_poll", lambda m: f"{m.seconds:.2f}"),
        _get(s, "util_poll", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "monitoring_poll", lambda m: f"{m.seconds:.2f}"),
        _get(s, "monitoring_poll", lambda m: f"{m.peak_mb:,.0f}"),
        _get(s, "poll_idle", lambda m: f"{1000 * m.seconds:,.0f}"),
        _get(s, "poll_load", lambda m: f"{1000 * m.seconds:,.0f}"),
    ]


def _fetched(m) -> str:
    scanned = m["rows_scanned"]
    pct = f" ({100 * m['rows_fetched'] / scanned:.2f}%)" if scanned else ""
    return f"{m['rows_fetched']:,} / {scanned:,}{pct}"


def _ratios_row(s: ScaleFigures) -> list[str]:
    setup = s.setup
    per_row = "-"
    if setup.get("agg_rows"):
        n = setup["agg_rows"]
        per_row = f"{setup['agg_bytes'] / n:,.0f} (+{setup['agg_index_bytes'] / n:,.0f} indexes)"
    return [
        str(s.fleet.scale),
        _ratio(_secs(s, "analyze"), _secs(s, "floor")),
        _ratio(_secs(s, "naive"), _secs(s, "analyze")),
        _get(s, "analyze", _fetched),
        _get(s, "poll_load", _fetched),
        _get(s, "poll_idle", lambda m: f"{m['rows_scanned']:,}"),
        per_row,
    ]


def _figure(key: str, attr: str) -> Callable[[ScaleFigures], float | None]:
    def get(s: ScaleFigures) -> float | None:
        m = s.measures.get(key)
        return None if m is None else (getattr(m, attr) if attr in ("seconds", "peak_mb") else m[attr])

    return get


_GROWTH: tuple[tuple[str, Callable[[ScaleFigures], float | None]], ...] = (
    ("export rows", lambda s: s.fleet.rows),
    ("analyze s", _figure("analyze", "seconds")),
    ("analyze peak MB", _figure("analyze", "peak_mb")),
    ("analyze rows fetched", _figure("analyze", "rows_fetched")),
    ("floor s", _figure("floor", "seconds")),
    ("floor peak MB", _figure("floor", "peak_mb")),
    ("naive s", _figure("naive", "seconds")),
    ("naive peak MB", _figure("naive", "peak_mb")),
    ("stored aggregate rows", lambda s: s.setup.get("hourly_rows")),
    ("detection s", _figure("detection", "seconds")),
    ("detection peak MB", _figure("detection", "peak_mb")),
    ("digest s", _figure("digest", "seconds")),
    ("digest peak MB", _figure("digest", "peak_mb")),
    ("first utilization poll s", _figure("util_poll", "seconds")),
    ("first utilization poll peak MB", _figure("util_poll", "peak_mb")),
    ("Monitoring first poll s", _figure("monitoring_poll", "seconds")),
    ("Monitoring first poll peak MB", _figure("monitoring_poll", "peak_mb")),
    ("poll idle s", _figure("poll_idle", "seconds")),
    ("poll +1 load s", _figure("poll_load", "seconds")),
    ("poll +1 load rows scanned", _figure("poll_load", "rows_scanned")),
    ("poll +1 load rows fetched", _figure("poll_load", "rows_fetched")),
)


def _num(v: float) -> str:
    """Counts and megabytes whole, seconds to three significant figures."""
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"


def _growth(scales: list[ScaleFigures]) -> list[str]:
    """Each figure at every scale with its ratio to the first (linear growth: 2.00, 4.00)."""
    first = scales[0]
    headers = ["figure", *(f"{s.fleet.scale / first.fleet.scale:g}x (scale {s.fleet.scale})" for s in scales)]
    rows = []
    for label, get in _GROWTH:
        base = get(first)
        if base is None:
            continue
        cells = []
        for s in scales:
            value = get(s)
            ratio = f" ({value / base:.2f})" if value is not None and base else ""
            cells.append("-" if value is None else f"{_num(value)}{ratio}")
        rows.append([label, *cells])
    return _table(headers, rows)


def markdown(scales: list[ScaleFigures], repeat: int, seed: int) -> str:
    """The closing tables; growth only when more than one scale was measured."""
    out = [
        f"Machine: {machine()}.",
        f"Fleet: `gpucost simulate --scale K --days D --seed {seed}` (Parquet export). Each figure is the"
        f" median of {repeat} run(s), each run a fresh process; MB = that process's peak RSS"
        " (`VmHWM` of /proc/self/status, interpreter and imports included).",
        "Rows scanned: `analyze`'s own `stats` (export rows in the range it read); for a poll, summed over"
        " its queries, the engine's count where it reports one, else the rows of the ingestion-time"
        " partitions each query's `_PARTITIONTIME` filter selects (what BigQuery reads). Rows fetched:"
        " rows the queries return to Python. Polls are timed warm (after one poll in the same process)."
        " Bytes / aggregate row: the aggregate store's DuckDB blocks in use (`pragma_database_size`) over"
        " `billing_hourly`'s rows, before the utilization hours are copied beside them.",
        "",
        *_table(FIGURE_HEADERS, [_figures_row(s) for s in scales]),
        "",
        *_table(RATIO_HEADERS, [_ratios_row(s) for s in scales]),
    ]
    if len(scales) > 1:
        out += ["", "Growth (ratio to the first scale in brackets):", "", *_growth(scales)]
    return "\n".join(out)
