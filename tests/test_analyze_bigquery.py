"""`analyze` on a live source: the real BigQuery client against the emulator (through the wire proxy)
gives the same attribution, to the micro, as the embedded DuckDB table holding the same rows; the
window ends at "now" and the bytes BigQuery billed are reported."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.cloud.bigquery.retry import DEFAULT_RETRY

from monitor.analysis import Sources, run_analysis
from monitor.config import Config
from monitor.sources.billing_bigquery import BigQueryBillingSource
from monitor.sources.billing_duckdb import DuckDBBillingSource
from tests.emulators.fleet import ANONYMOUS, FLEET_END, FLEET_START, LoadedExport, billing_config
from tests.emulators.wire import WireProxy

pytest_plugins = ("tests.conftest_bq",)
pytestmark = [pytest.mark.slow, pytest.mark.integration]

FAST_RETRY = DEFAULT_RETRY.with_timeout(0.5).with_delay(initial=0.01, maximum=0.05)


def test_live_bigquery_matches_the_embedded_engine(
    bq_wire: WireProxy, bq_export: LoadedExport, duck_conn: Any
) -> None:
    now = FLEET_END + timedelta(days=3, minutes=17)  # every row (late ones too) has landed
    cfg = Config()
    bq = BigQueryBillingSource(billing_config(bq_wire.url, bq_export.table), ANONYMOUS, retry=FAST_RETRY)
    live = run_analysis(
        Sources(billing=bq, utilization=None, prices=None, live=True), cfg, now=now, detectors=[]
    )
    local = Sources(billing=DuckDBBillingSource(duck_conn), utilization=None, prices=None, live=False)
    files = run_analysis(local, cfg, now=now, detectors=[])

    assert (live.window.end, live.window.start) == (now, now - timedelta(days=14))
    assert files.window.end == FLEET_END  # the embedded copy ends where its data does
    assert live.attribution == files.attribution and live.totals == files.totals
    assert live.totals["cost"] != 0
    assert live.stats.engine == "bigquery" and live.stats.bytes_processed is not None
    assert live.stats.rows_scanned == files.stats.rows_scanned == len(bq_export.rows)
    assert files.stats.bytes_processed is None


def test_focus_rows_are_the_same_on_bigquery_and_on_the_embedded_engine(
    bq_wire: WireProxy, bq_export: LoadedExport, duck_conn: Any
) -> None:
    """One export, one FOCUS file: rows, order and quantities (summed as NUMERIC) alike on both
    engines. Seed 11's FOCUS rows differed in quantities' last digits and in the order of ties
    between the two sources (a helper's cross-check)."""
    from monitor.focus import focus_rows

    now = FLEET_END + timedelta(days=3)
    bq = BigQueryBillingSource(billing_config(bq_wire.url, bq_export.table), ANONYMOUS, retry=FAST_RETRY)
    live = list(focus_rows(bq, start=FLEET_START, end=FLEET_END, now=now))
    files = list(focus_rows(DuckDBBillingSource(duck_conn), start=FLEET_START, end=FLEET_END, now=now))
    assert len(live) > 10 and live == files
