"""Name the billing file a user gave when it is not a Cloud Billing export, so the error says what
to pass instead of only "missing column usage_start_time".

Marker columns, one or two per format, each from its format's own reference:
- FOCUS: `BilledCost`, `ChargePeriodStart` (FOCUS 1.0 specification, https://focus.finops.org/focus-specification/;
  the official sample `FOCUS-1.0/focus_sample.csv` of FinOps-Open-Cost-and-Usage-Spec/FOCUS-Sample-Data);
- AWS Cost and Usage Report: legacy `lineItem/UsageStartDate`, CUR 2.0 `line_item_usage_start_date`
  (https://docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2-line-item.html);
- Azure cost details: `CostInBillingCurrency`, `MeterCategory`
  (https://learn.microsoft.com/azure/cost-management-billing/automate/understand-usage-details-fields).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["foreign_hint"]

_MARKERS = (
    ("a FOCUS file", ("BilledCost", "ChargePeriodStart")),
    ("an AWS Cost and Usage Report", ("lineItem/UsageStartDate", "line_item_usage_start_date")),
    ("an Azure cost details file", ("CostInBillingCurrency", "MeterCategory")),
)


def foreign_hint(columns: Iterable[str]) -> str:
    """`": this looks like <format>; ..."` when the columns are another billing format's, else ""."""
    present = set(columns)
    for name, markers in _MARKERS:
        if present & set(markers):
            return (
                f"; this looks like {name}, not a Google Cloud Billing export: pass the detailed usage"
                " cost export table from BigQuery (exported as NDJSON, Parquet or CSV)"
            )
    return ""
