"""Attributed cost rows in FinOps FOCUS 1.x columns, so other FinOps tools can read them.

`queries/focus.sql` aggregates the export per usage day, account, project, service, SKU, location,
resource, cost type and label set; each of its rows becomes one FOCUS charge row. Mapping choices
(the export has no amortisation, so these are the honest ones):

- ListCost = `cost_at_list` (else `cost`); ContractedCost = `cost` (negotiated prices, before
  credits); BilledCost = EffectiveCost = `cost` + all credits (what the invoice charges).
- ChargeCategory: Tax (`cost_type` tax), Adjustment (adjustment, rounding_error), Purchase
  (commitment fees, also ChargeFrequency Recurring), else Usage. ChargeClass Correction: an
  adjustment of usage before its invoice month only. Consumed columns on Usage rows only.
- PricingCategory: Standard (on-demand and non-compute), Dynamic (Spot), Committed (commitment
  fees, CUD-covered and reserved usage); null on Tax rows, as are their pricing quantity, unit and
  unit prices.
- CommitmentDiscountId / Type / Name: the CUD credit's `id`, `type` and `full_name` (as Google's
  FOCUS view template takes them; of the lowest id when two commitments cover a row); Category
  Spend for spend-based credit types, else Usage; Status Used; PricingCategory Committed. All
  null without a credit id (older exports), as FOCUS requires of them without an Id.
- Quantities are summed as NUMERIC, so both engines give the same figures: to 9 decimals, as
  Google's FOCUS view template casts them (a usage under 5e-10 of its unit reads 0, and its unit
  price is then left empty).
- gpucost's own attribution travels in `x_` columns (FOCUS's prefix for custom columns).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TextIO

from monitor.billing_poll import provisional_since
from monitor.model import category_of, micros_to_decimal
from monitor.report import read_until
from monitor.sources.base import BillingSource
from monitor.timeutil import to_iso

__all__ = ["FOCUS_COLUMNS", "focus_rows", "to_focus", "write_focus_csv"]

FOCUS_COLUMNS: tuple[str, ...] = (
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
    "x_Category",
    "x_Subcategory",
    "x_PricingModel",
    "x_CommitmentCredits",
    "x_Provisional",
    "x_ExportRows",
)

_SERVICE_CATEGORY = {
    "compute": "Compute",
    "network": "Networking",
    "storage": "Storage",
    "storage.bigquery": "Analytics",
    "orchestration.gke": "Compute",
    "orchestration.vertex_ai": "AI and Machine Learning",
    "orchestration.other": "Management and Governance",
}
_PRICING_CATEGORY = {
    "on_demand": "Standard",
    "spot": "Dynamic",
    "committed": "Committed",
    "reserved": "Committed",
}
_PROVIDER = "Google Cloud"


def _commitment_category(credit_type: str | None) -> str:
    """FOCUS CommitmentDiscountCategory of a CUD credit: spend-based commitments (the export's
    `COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE`, and `FEE_UTILIZATION_OFFSET` of the new spend-based
    model; ../shared/reference/gcp.md) are "Spend", resource-based ones "Usage"."""
    if credit_type in ("COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE", "FEE_UTILIZATION_OFFSET"):
        return "Spend"
    return "Usage"


def focus_rows(
    source: BillingSource,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    provisional_days: int = 3,
) -> Iterator[dict[str, str]]:
    """FOCUS rows for usage in [start, end), provisional days flagged in `x_Provisional`."""
    params = {"usage_start": start, "usage_end": end, "partition_end": read_until(now, end)}
    since = provisional_since(now, provisional_days)
    for row in source.run("focus", params).rows:
        yield to_focus(row, provisional=row["usage_day"] >= since, within=(start, end))


def _amount(micros: int | None) -> str:
    return f"{micros_to_decimal(micros):.6f}"


def _quantity(v: Decimal | None) -> str:
    """A quantity as `focus.sql` sums it: NUMERIC, a Decimal from either engine."""
    return "" if v is None else format(v.normalize(), "f")


def _unit_price(micros: int, quantity: Decimal | None) -> str:
    if not quantity:
        return ""
    return f"{micros_to_decimal(micros) / quantity:.9f}"


def _billing_period(month: str | None) -> tuple[datetime | None, datetime | None]:
    if not month or len(month) != 6 or not month.isdigit():
        return None, None
    first = datetime(int(month[:4]), int(month[4:]), 1, tzinfo=UTC)
    return first, (first + timedelta(days=32)).replace(day=1)


def _charge(subcategory: str, cost_type: str, earlier_period: bool) -> tuple[str, str, str]:
    """(ChargeCategory, ChargeClass, ChargeFrequency). FOCUS 1.0 ChargeClass: "MUST be null when
    the row does not represent a correction or when it represents a correction within the current
    billing period", so an adjustment is a Correction only for usage before its invoice month
    (every adjustment was one, those of this month's own usage too)."""
    if cost_type == "tax":
        return "Tax", "", "One-Time"
    if cost_type in ("adjustment", "rounding_error"):
        correction = cost_type == "adjustment" and earlier_period
        return "Adjustment", "Correction" if correction else "", "One-Time"
    if subcategory == "compute.commitment_fee":
        return "Purchase", "", "Recurring"
    return "Usage", "", "Usage-Based"


def _resource_type(global_name: str | None) -> str:
    """FOCUS 1.0 ResourceType "MUST NOT be null when a corresponding ResourceId is not null": other
    resources (buckets, clusters, commitments, snapshots...) had none. They take the collection in
    their path (`.../buckets/NAME` -> "buckets"), as Google's FOCUS view template derives it from
    `resource.global_name` (FairwindsOps/insights-plugins plugins/cloud-costs/gcp-FOCUS-query.sql)."""
    g = global_name or ""
    if "/instances/" in g:
        return "Virtual Machine"
    if "/disk" in g:
        return "Disk"
    parts = [p for p in g.split("/") if p]
    return parts[-2] if len(parts) >= 3 else ""  # host, collection, id at least


def _tags(label_set: str | None) -> str:
    if not label_set:
        return ""
    pairs = dict(p.split("=", 1) for p in label_set.split(",") if "=" in p)
    return json.dumps(pairs, sort_keys=True)


def to_focus(
    row: dict[str, Any], *, provisional: bool, within: tuple[datetime, datetime] | None = None
) -> dict[str, str]:
    """One `focus.sql` row as FOCUS columns (all strings, empty for unknown). `within`: the
    report's window, which bounds the charge period: the row of a day the window cuts holds the
    cost of that day's hours in the window only, so its ChargePeriodStart/End say those hours, not
    the whole day."""
    sub, pm = row["subcategory"], row["pricing_model"]
    category = category_of(sub)
    period_start, period_end = _billing_period(row["invoice_month"])
    earlier = period_start is not None and row["usage_day"] < period_start
    charge_category, charge_class, frequency = _charge(sub, row["cost_type"], earlier)
    # FOCUS 1.0: ConsumedQuantity/Unit "MUST be null for other ChargeCategory values" than Usage;
    # PricingCategory, PricingQuantity/Unit and both unit prices "MUST be null when ChargeCategory
    # is "Tax"" (tax rows said PricingCategory Standard; fees and adjustments had quantities)
    usage, tax = charge_category == "Usage", charge_category == "Tax"
    # FOCUS: the commitment columns are null unless CommitmentDiscountId is known (older exports'
    # credits have no id: their CUD-covered rows said "Usage"/"Used" beside no id); any row a CUD
    # credit with an id covers has them, a spend-based one on Cloud SQL or Cloud Run too
    credit = (row["cud_credit"] or "||") if row["cud_micros"] else "||"
    commitment, cud_type, cud_name = credit.split("|", 2)  # one credit whole (focus.sql)
    pricing = "Committed" if commitment else _PRICING_CATEGORY.get(pm or "", "Standard")
    day, day_end = row["usage_day"], row["usage_day"] + timedelta(days=1)
    if within is not None:
        day, day_end = max(day, within[0]), min(day_end, within[1])
    return {
        "AvailabilityZone": row["zone"] or "",
        "BilledCost": _amount(row["net_micros"]),
        "BillingAccountId": row["billing_account_id"] or "",
        "BillingAccountName": "",
        "BillingCurrency": row["currency"] or "",
        "BillingPeriodEnd": to_iso(period_end) or "",
        "BillingPeriodStart": to_iso(period_start) or "",
        "ChargeCategory": charge_category,
        "ChargeClass": charge_class,
        "ChargeDescription": row["sku_description"] or "",
        "ChargeFrequency": frequency,
        "ChargePeriodEnd": to_iso(day_end) or "",
        "ChargePeriodStart": to_iso(day) or "",
        "CommitmentDiscountCategory": _commitment_category(cud_type) if commitment else "",
        "CommitmentDiscountId": commitment,
        "CommitmentDiscountName": cud_name if commitment else "",
        "CommitmentDiscountStatus": "Used" if commitment else "",
        "CommitmentDiscountType": cud_type if commitment else "",
        "ConsumedQuantity": _quantity(row["usage_amount"]) if usage else "",
        "ConsumedUnit": (row["usage_unit"] or "") if usage else "",
        "ContractedCost": _amount(row["gross_micros"]),
        "ContractedUnitPrice": "" if tax else _unit_price(row["gross_micros"], row["pricing_amount"]),
        "EffectiveCost": _amount(row["net_micros"]),
        "InvoiceIssuerName": _PROVIDER,
        "ListCost": _amount(row["list_micros"]),
        "ListUnitPrice": "" if tax else _unit_price(row["list_micros"], row["pricing_amount"]),
        "PricingCategory": "" if tax else pricing,
        "PricingQuantity": "" if tax else _quantity(row["pricing_amount"]),
        "PricingUnit": "" if tax else (row["pricing_unit"] or ""),
        "ProviderName": _PROVIDER,
        "PublisherName": _PROVIDER,
        "RegionId": row["region"] or "",
        "RegionName": row["region"] or "",
        "ResourceId": row["resource_global_name"] or row["resource_name"] or "",
        "ResourceName": row["resource_name"] or "",
        "ResourceType": _resource_type(row["resource_global_name"]),
        "ServiceCategory": _SERVICE_CATEGORY.get(sub, _SERVICE_CATEGORY.get(category, "Other")),
        "ServiceName": row["service_description"] or "",
        "SkuId": row["sku_id"] or "",
        "SkuPriceId": "",
        "SubAccountId": row["project_id"] or "",
        "SubAccountName": row["project_name"] or "",
        "Tags": _tags(row["label_set"]),
        "x_Category": category,
        "x_Subcategory": sub,
        "x_PricingModel": pm or "",
        "x_CommitmentCredits": _amount(row["cud_micros"]),
        "x_Provisional": "true" if provisional else "false",
        "x_ExportRows": str(row["row_count"]),
    }


def write_focus_csv(rows: Iterable[dict[str, str]], out: TextIO) -> int:
    """Write FOCUS rows as CSV with a header; returns the number of data rows."""
    w = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    w.writeheader()
    n = 0
    for row in rows:
        w.writerow(row)
        n += 1
    return n
