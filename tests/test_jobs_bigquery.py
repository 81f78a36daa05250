"""`gpucost jobs --config` on a live source: the real BigQuery client against the emulator (through
the wire proxy) gives the same JSON, job for job and to the cent, as the embedded DuckDB engine
holding the same export rows (`duck_conn`: the emulator fleet has a bare negative row the file
loader rightly refuses, so the rows go in as a table, as in tests/test_analyze_bigquery.py). Both
engines run the one `queries/jobs.sql`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.analysis import Sources
from monitor.attribution import compile_rules
from monitor.cli import main
from monitor.config import Config
from monitor.jobs import JobsConfig
from monitor.jobs.run import run_jobs
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.pricing import price_source_from_config
from monitor.timeutil import to_iso
from tests.emulators.fleet import BQ_PROJECT, FLEET_END, FLEET_START, LoadedExport
from tests.emulators.wire import WireProxy

pytest_plugins = ("tests.conftest_bq",)
pytestmark = [pytest.mark.slow, pytest.mark.integration]

WINDOW = ["--start", to_iso(FLEET_START), "--end", to_iso(FLEET_END)]


def _doc(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["jobs", *args, *WINDOW, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_config_on_the_emulator_gives_what_the_embedded_engine_gives(
    bq_wire: WireProxy,
    bq_export: LoadedExport,
    duck_conn: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gpucost.toml"
    config.write_text(
        '[google]\ncredentials = "anonymous"\n\n'
        f'[billing]\nsource = "bigquery"\ntable = "{bq_export.table}"\nproject = "{BQ_PROJECT}"\n'
        f'api_endpoint = "{bq_wire.url}"\n',
        encoding="utf-8",
    )
    live = _doc(capsys, "--config", str(config))
    cfg = Config()
    local = Sources(
        billing=DuckDBBillingSource(duck_conn, rules=compile_rules()),
        utilization=None,
        prices=price_source_from_config(cfg.pricing, cfg.google, None),
    )
    files = run_jobs(local, cfg, JobsConfig(), now=FLEET_END, start=FLEET_START, end=FLEET_END).to_dict()

    assert live["jobs"] == files["jobs"] and live["totals"] == files["totals"]
    assert {k: live["window"][k] for k in ("start", "end")} == {
        k: files["window"][k] for k in ("start", "end")
    }
    names = [j["job"] for j in live["jobs"]]
    assert "llm-7b" in names and names[-1] is None  # the fleet's `job` label, and the unlabelled rest
    assert live["totals"]["cost_usd"] > 0
