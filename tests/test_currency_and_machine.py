"""Hourly aggregates speak USD (cost / currency_conversion_rate) and carry the VM's machine type."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import duckdb

from monitor.sources.billing_duckdb import DuckDBBillingSource
from tests.test_queries import T0, conn, export_row, load_rows, params  # noqa: F401  (conn is a fixture)


def test_non_usd_amounts_are_converted_to_usd_micros(conn: duckdb.DuckDBPyConnection) -> None:  # noqa: F811
    eur = export_row(
        "Nvidia H100 80GB GPU running in Frankfurt", 92.0, credits=[("SUSTAINED_USAGE_DISCOUNT", -9.2)]
    )
    eur["currency"], eur["currency_conversion_rate"] = "EUR", 0.92
    usd = export_row("Nvidia H100 80GB GPU running in Frankfurt", 10.0)
    usd["currency_conversion_rate"] = 1.0
    load_rows(conn, [eur, usd])
    rows = (
        DuckDBBillingSource(conn).run("hourly", params(T0 - timedelta(days=1), T0 + timedelta(days=1))).rows
    )
    by_cur = {r["currency"]: r for r in rows}
    assert by_cur["EUR"]["gross_micros"] == 100_000_000  # 92 EUR / 0.92 = 100 USD
    assert by_cur["EUR"]["sud_micros"] == -10_000_000
    assert by_cur["EUR"]["net_micros"] == 90_000_000
    assert by_cur["USD"]["gross_micros"] == 10_000_000
    assert sum(Decimal(r["net_micros"]) for r in rows) == Decimal(100_000_000)


def test_machine_type_comes_from_the_machine_spec_system_label(conn: duckdb.DuckDBPyConnection) -> None:  # noqa: F811
    row = export_row("Nvidia H100 80GB GPU running in Americas", 78.4, instance="trainer-0", instance_id="42")
    row["system_labels"] = [
        {"key": "compute.googleapis.com/machine_spec", "value": "a3-highgpu-8g"},
        {"key": "compute.googleapis.com/cores", "value": "208"},
    ]
    load_rows(conn, [row])
    (got,) = (
        DuckDBBillingSource(conn).run("hourly", params(T0 - timedelta(days=1), T0 + timedelta(days=1))).rows
    )
    assert (got["machine_type"], got["instance_id"], got["resource_name"]) == (
        "a3-highgpu-8g",
        "42",
        "trainer-0",
    )


def test_the_machine_type_is_stored_with_the_aggregates(conn: duckdb.DuckDBPyConnection, tmp_path) -> None:  # noqa: F811
    from monitor.billing_poll import hourly_costs, poll_billing
    from monitor.config import BillingConfig
    from monitor.state.analytics import AggregateStore

    store = AggregateStore(tmp_path / "aggregates.duckdb")
    row = export_row("Nvidia H100 80GB GPU running in Americas", 78.4, instance="t", instance_id="42")
    row["system_labels"] = [{"key": "compute.googleapis.com/machine_spec", "value": "a3-highgpu-8g"}]
    load_rows(conn, [row])
    poll_billing(DuckDBBillingSource(conn), store, BillingConfig(), T0 + timedelta(days=1))
    (h,) = hourly_costs(store, T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert h.keys["machine_type"] == "a3-highgpu-8g" and h.gross == Decimal("78.4")
