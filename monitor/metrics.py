"""Prometheus metrics, on a registry owned by the daemon (no module-level global registry)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


@dataclass
class Metrics:
    registry: CollectorRegistry
    job_last_success: Gauge
    job_failures: Counter
    job_duration: Histogram
    billing_queries: Counter
    billing_bytes: Counter
    billing_rows: Counter
    utilization_samples: Counter
    metric_unit_unknown: Gauge
    findings: Gauge
    outbox_depth: Gauge
    delivery_failures: Counter
    spend_usd: Gauge
    billing_export_age: Gauge
    job_budget_without_spend: Gauge

    @classmethod
    def create(cls) -> Metrics:
        r = CollectorRegistry()
        return cls(
            registry=r,
            job_last_success=Gauge(
                "gpucost_job_last_success_timestamp_seconds",
                "Last successful run of a job.",
                ["job"],
                registry=r,
            ),
            job_failures=Counter("gpucost_job_failures", "Failed runs of a job.", ["job"], registry=r),
            job_duration=Histogram(
                "gpucost_job_duration_seconds",
                "Duration of job runs.",
                ["job"],
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
                registry=r,
            ),
            billing_queries=Counter("gpucost_billing_queries", "Billing queries run.", ["query"], registry=r),
            billing_bytes=Counter(
                "gpucost_billing_bytes_processed",
                "Bytes processed by billing queries (BigQuery).",
                registry=r,
            ),
            billing_rows=Counter(
                "gpucost_billing_rows_fetched", "Aggregated rows fetched by billing queries.", registry=r
            ),
            utilization_samples=Counter(
                "gpucost_utilization_samples", "GPU utilization samples read.", ["source"], registry=r
            ),
            metric_unit_unknown=Gauge(
                "gpucost_metric_unit_unknown",
                "1 for each utilization metric skipped because its unit is unknown (never guessed).",
                ["metric_type", "unit"],
                registry=r,
            ),
            findings=Gauge("gpucost_findings", "Open findings.", ["kind", "severity"], registry=r),
            outbox_depth=Gauge(
                "gpucost_outbox_messages",
                "Outbox messages (alerts and digests) by state; failed > 0 needs the operator (gpucost outbox).",
                ["state"],
                registry=r,
            ),
            delivery_failures=Counter(
                "gpucost_delivery_failures",
                "Failed deliveries (alerts and digests): retryable attempts, permanent failures.",
                ["kind"],
                registry=r,
            ),
            spend_usd=Gauge(
                "gpucost_spend_usd",
                "Attributed net spend on the current invoice month (invoice.month; months turn at midnight US Pacific), by category.",
                ["category"],
                registry=r,
            ),
            billing_export_age=_unknown(
                Gauge(
                    "gpucost_billing_export_age_seconds",
                    "Seconds since the billing export's latest load (its MAX(export_time)) that the polls"
                    " have seen; NaN before one has seen any.",
                    registry=r,
                )
            ),
            job_budget_without_spend=Gauge(
                "gpucost_job_budget_without_spend",
                "1 for each [jobs.budgets] key no billing row read carries under a job label: it cannot"
                " fire (the daemon's warning says why it may be so).",
                ["budget"],
                registry=r,
            ),
        )

    def watch_export(self, latest: datetime | None, clock: Any) -> None:
        """The export's age, computed at each scrape from its latest load the polls saw: it keeps
        growing while polls fail (a revoked reader), and reads NaN, not "just loaded", while none
        was seen."""
        if latest is None:
            return
        self.billing_export_age.set_function(lambda: max(0.0, (clock.now() - latest).total_seconds()))

    def set_unknown_units(self, unknown: Mapping[str, str]) -> None:
        """Replace the unknown-unit series with the metrics a source skipped in its last read
        (metric type -> unit): a unit fixed upstream disappears from /metrics."""
        self.metric_unit_unknown.clear()
        for metric_type, unit in sorted(unknown.items()):
            self.metric_unit_unknown.labels(metric_type, unit).set(1)

    def set_budgets_without_spend(self, budgets: Sequence[str]) -> None:
        """Replace the series with the budgets the last detection run found no spend for."""
        self.job_budget_without_spend.clear()
        for budget in budgets:
            self.job_budget_without_spend.labels(budget).set(1)


def _unknown(g: Gauge) -> Gauge:
    g.set(math.nan)
    return g
