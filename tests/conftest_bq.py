"""Session fixtures for BigQuery-source tests: the emulator, a wire proxy, one export loaded twice.

Use them from a test module with `pytest_plugins = ("tests.conftest_bq",)`. The emulator starts once
per pytest process (once per xdist worker) and is stopped at the end of the session.

Without `.venv-bqemu` the emulator tests skip with the command that installs it; under CI
(`CI` set) they fail instead, so a missing install step cannot hide behind a green run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest
from google.cloud import bigquery

from monitor.sources.billing_bigquery import make_client
from monitor.sources.duckdb_conn import ARROW_SCHEMA, insert_arrow, open_billing_db
from tests.emulators.bqemu import Emulator, emulator_missing_reason
from tests.emulators.fleet import (
    ANONYMOUS,
    BQ_PROJECT,
    DATASET,
    LoadedExport,
    billing_config,
    export_table,
    fleet_rows,
    to_json_row,
)
from tests.emulators.wire import WireProxy

__all__ = ["bq_client", "bq_emulator", "bq_export", "bq_wire", "duck_conn"]


@pytest.fixture(scope="session")
def bq_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    reason = emulator_missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the emulator tests; make test runs the setup)")
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("bqemu") / "bqemulator.log"
    emu = Emulator(BQ_PROJECT, log).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def bq_wire(bq_emulator: Emulator) -> Iterator[WireProxy]:
    proxy = WireProxy(bq_emulator.port or 0).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def bq_client(bq_wire: WireProxy) -> bigquery.Client:
    return make_client(billing_config(bq_wire.url, f"{BQ_PROJECT}.{DATASET}.export"), ANONYMOUS)


@pytest.fixture(scope="session")
def bq_export(bq_client: bigquery.Client) -> LoadedExport:
    """The fleet in `gpucost-test.billing.export`: the export schema, DAY ingestion-time partitions,
    plus the emulator's `_PARTITIONTIME` stand-in column (see tests/emulators/wire.py)."""
    began = time.perf_counter()
    table = export_table(bq_client, "export")
    rows = fleet_rows()
    errors = bq_client.insert_rows_json(table, [to_json_row(r) for r in rows])
    assert errors == [], errors[:3]
    return LoadedExport(
        table=f"{BQ_PROJECT}.{DATASET}.export", rows=rows, load_seconds=time.perf_counter() - began
    )


@pytest.fixture(scope="session")
def duck_conn() -> Iterator[duckdb.DuckDBPyConnection]:
    """The same fleet in the embedded DuckDB table (`_PARTITIONTIME` = export day, by the loader)."""
    conn = open_billing_db(None)
    insert_arrow(conn, pa.Table.from_pylist(fleet_rows(), schema=ARROW_SCHEMA))
    yield conn
    conn.close()
