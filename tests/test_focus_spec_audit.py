"""FOCUS 1.0 column rules the FOCUS export broke (an audit against the spec's own text, tag v1.0 of
FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, specification/columns/*.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from monitor.focus import focus_rows
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from tests.test_queries import GCS, T0, export_row, load_rows

INVOICE = {"id": "T", "description": "Invoice"}
PRICING = ("PricingCategory", "PricingQuantity", "PricingUnit", "ListUnitPrice", "ContractedUnitPrice")


def _focus(
    rows: list[dict], start=T0 - timedelta(days=7), end=T0 + timedelta(days=1)
) -> list[dict[str, str]]:
    conn = open_billing_db(None)
    try:
        load_rows(conn, rows)
        return list(focus_rows(DuckDBBillingSource(conn), start=start, end=end, now=end))
    finally:
        conn.close()


@pytest.fixture(scope="module")
def out() -> dict[str, dict[str, str]]:
    """One row of each kind, keyed by SKU description."""
    rows = [
        export_row("Nvidia H100 80GB GPU running in Americas", 9.8, instance="vm", instance_id="7"),
        export_row("Tax", 3.21, service=INVOICE, cost_type="tax"),  # usage 3600 s / 1 h, as export_row has it
        export_row("Commitment v1: A3 Cpu in Americas for 1 Year", 7.5, zone=None),
        export_row("N2 Instance Core running in Americas", -0.25, cost_type="adjustment"),
        export_row("Standard Storage US Multi-region", 1.5, service=GCS),
    ]
    commitment = "//compute.googleapis.com/projects/1/regions/us-central1/commitments/55"
    rows[2]["resource"] = {"name": "c1", "global_name": commitment}
    rows[4]["resource"] = {"name": "lake", "global_name": "//storage.googleapis.com/projects/_/buckets/lake"}
    # an adjustment of October usage, arriving on the November invoice: a previous billing period
    late = export_row(
        "N2 Instance Core running in Americas", -0.5, hour=T0 - timedelta(days=3), cost_type="adjustment"
    )
    late["invoice"] = {"month": "202611"}
    late["sku"]["description"] = "N2 late"
    rows.append(late)
    return {r["ChargeDescription"]: r for r in _focus(rows)}


def test_tax_rows_have_no_pricing_columns(out) -> None:
    """ "PricingCategory ... MUST be null when ChargeCategory is "Tax"" (pricingcategory.md; the same
    words in pricingquantity, pricingunit, listunitprice, contractedunitprice): tax said Standard."""
    tax = out["Tax"]
    assert (tax["ChargeCategory"], tax["BilledCost"], tax["ListCost"]) == ("Tax", "3.210000", "3.210000")
    assert {c: tax[c] for c in PRICING} == dict.fromkeys(PRICING, "")


def test_only_usage_rows_have_consumed_quantity(out) -> None:
    """ "ConsumedQuantity ... MUST be null for other ChargeCategory values" than Usage (and ConsumedUnit):
    commitment fees (Purchase), adjustments and tax carried 3600 seconds."""
    got = {d: (r["ChargeCategory"], r["ConsumedQuantity"], r["ConsumedUnit"]) for d, r in out.items()}
    assert got["Nvidia H100 80GB GPU running in Americas"] == ("Usage", "3600", "seconds")
    assert got["Commitment v1: A3 Cpu in Americas for 1 Year"] == ("Purchase", "", "")
    assert got["N2 Instance Core running in Americas"] == ("Adjustment", "", "")
    assert got["Tax"] == ("Tax", "", "")
    fee = out["Commitment v1: A3 Cpu in Americas for 1 Year"]
    assert (fee["PricingQuantity"], fee["PricingUnit"], fee["ListUnitPrice"]) == ("1", "hour", "7.500000000")


def test_resource_type_is_set_whenever_resource_id_is(out) -> None:
    """ "ResourceType ... MUST NOT be null when a corresponding ResourceId is not null": buckets and
    commitments had an id and no type."""
    got = {r["ResourceId"]: r["ResourceType"] for r in out.values() if r["ResourceId"]}
    assert got == {
        "//compute.googleapis.com/projects/1/zones/us-central1-a/instances/7": "Virtual Machine",
        "//compute.googleapis.com/projects/1/regions/us-central1/commitments/55": "commitments",
        "//storage.googleapis.com/projects/_/buckets/lake": "buckets",
    }
    assert {r["ResourceType"] for r in out.values() if not r["ResourceId"]} == {""}


def test_correction_only_for_an_earlier_billing_period(out) -> None:
    """ChargeClass "MUST be null when the row does not represent a correction or when it represents a
    correction within the current billing period": every adjustment said Correction."""
    same, late = out["N2 Instance Core running in Americas"], out["N2 late"]
    assert (same["ChargeClass"], same["BillingPeriodStart"], same["ChargePeriodStart"]) == (
        "",
        "2026-11-01T00:00:00Z",
        "2026-11-02T00:00:00Z",
    )
    assert (late["ChargeClass"], late["BillingPeriodStart"], late["ChargePeriodStart"]) == (
        "Correction",
        "2026-11-01T00:00:00Z",
        "2026-10-30T00:00:00Z",
    )
    assert (same["BilledCost"], late["BilledCost"]) == ("-0.250000", "-0.500000")
