"""`make bench` still runs end to end and prints the tables README pastes (no timing asserted).

The cheapest run that exercises the benchmark's whole machinery: a one-day fleet, the two cheap
figures (DuckDB floor, naive pandas) measured once each in their own child process, then the
closing Markdown.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FIGURES = (
    "| scale | days | export rows | analyze s | analyze rows/s | analyze MB | floor s | floor MB | naive s"
    " | naive MB | detection s | detection MB | digest s | digest MB | first util poll s | first util poll MB"
    " | Monitoring first poll s | Monitoring first poll MB | poll idle ms | poll +1 load ms |"
)
RATIOS = (
    "| scale | analyze / floor (time) | naive / analyze (time) | analyze fetched / scanned"
    " | poll +1 load fetched / scanned | poll idle scanned | bytes / aggregate row |"
)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "bench" / "bench.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)


def test_bench_prints_machine_and_tables_with_the_measured_figures() -> None:
    proc = _bench("--days", "1", "--repeat", "1", "--figures-only", "--stages", "floor,naive")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("Machine: ") and " CPUs " in ln and "DuckDB " in ln for ln in lines)
    assert FIGURES in lines and RATIOS in lines
    row = lines[lines.index(FIGURES) + 2].split(" | ")
    cells = dict(zip(FIGURES.strip("| ").split(" | "), [c.strip("| ") for c in row], strict=True))
    assert cells["scale"] == "1" and cells["days"] == "1"
    assert float(cells["floor s"]) > 0 and float(cells["naive MB"]) > 0  # measured
    assert cells["analyze s"] == "-" and cells["detection s"] == "-"  # not asked for


def test_bench_reads_the_first_utilization_from_cloud_monitoring_whole() -> None:
    """The Monitoring stage's daemon (real client, gRPC stand-in in its own process) stores every
    point the stand-in serves, the backfill run after run, and its figure reaches the table."""
    proc = _bench("--days", "1", "--repeat", "1", "--figures-only", "--stages", "monitoring_poll")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    line = next(ln for ln in lines if "first util poll (Monitoring)" in ln)
    stored, served = re.search(r"([\d,]+) samples stored of ([\d,]+) served", line).groups()  # type: ignore[union-attr]
    assert stored == served and int(served.replace(",", "")) > 0
    row = lines[lines.index(FIGURES) + 2].split(" | ")
    cells = dict(zip(FIGURES.strip("| ").split(" | "), [c.strip("| ") for c in row], strict=True))
    assert float(cells["Monitoring first poll s"]) > 0 and float(cells["Monitoring first poll MB"]) > 0


def test_bench_rejects_an_unknown_stage_in_one_line() -> None:
    proc = _bench("--stages", "floor,bogus")
    assert proc.returncode == 2
    assert (
        "--stages: unknown bogus; choose from analyze, floor, naive, detection, digest, util_poll, monitoring_poll, poll"
        in proc.stderr
    )


def test_bench_refuses_to_write_a_fleet_into_a_directory_in_use(tmp_path: Path) -> None:
    """`--keep` writes a new fleet: a directory already holding one got a traceback (FileExistsError)."""
    (tmp_path / "fleet-1").mkdir()
    proc = _bench("--keep", str(tmp_path), "--figures-only")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--keep: {tmp_path} is not empty" in proc.stderr
