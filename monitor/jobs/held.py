"""The labelled spend the aggregate store holds before a detection run's read start.

A job budget covers the job's life, but a detection run reads from where the invoice month must be
read (`monitor.month.read_start`) or its baselines' history, whichever is earlier: when the Pacific
month turns, that start jumps a month forward while the store still holds the month before it
(`state.retention_days`). What a budget needs of those rows is a sum per job, so the engine sums
them per label set, project and compute-or-not (`held_spend`), and only those sums cross into
Python, once per run and only when a job budget asks (`DetectorInputs.held_spend`).
"""

from __future__ import annotations

from datetime import datetime

from monitor.detectors.inputs import HeldSpend, LabelSpend
from monitor.jobs.identity import parse_labels
from monitor.model import micros_to_decimal
from monitor.state.analytics import AggregateStore
from monitor.timeutil import from_naive_utc, naive_utc, parse_timestamp

__all__ = ["held_spend"]

# How far back the aggregates go (`monitor.billing_poll`: the earliest scope start of the polls that
# filled them, moved on by retention), read on the run's own connection: `aggregate_summary` reads it
# through a second `read()`, which a pinned view's lock does not allow inside the first.
_COVERED = "SELECT covered_from FROM billing_poll WHERE id = 1"
# Rows without labels carry no job. Net as the detectors' engine sums it (gross + credits, micros).
_HELD = """
SELECT user_labels, project_id, starts_with(subcategory, 'compute.'),
  CAST(SUM(gross_micros + credit_micros) AS BIGINT), MIN(usage_hour), MAX(usage_hour)
FROM billing_hourly
WHERE usage_hour >= ? AND usage_hour < ? AND user_labels IS NOT NULL AND user_labels <> ''
GROUP BY ALL
ORDER BY ALL
"""


def held_spend(store: AggregateStore, before: datetime) -> HeldSpend:
    """How far back `store` holds billing, and its labelled spend before `before` (the inputs' read
    start) summed in the engine. `store` is the detection run's pinned view
    (`AggregateStore.pinned`), so the sums are of the snapshot its costs read."""
    with store.read() as conn:
        marks = conn.execute(_COVERED).fetchall()  # fetched whole: an unfinished result holds `conn`
        covered = parse_timestamp(marks[0][0]) if marks and marks[0][0] is not None else None
        if covered is None or covered >= before:
            return HeldSpend(covered)
        rows = conn.execute(_HELD, [naive_utc(covered), naive_utc(before)]).fetchall()
    return HeldSpend(
        covered,
        tuple(
            LabelSpend(
                labels=parse_labels(raw),
                project=project,
                compute=bool(compute),
                net=micros_to_decimal(net),
                first=from_naive_utc(first),
                last=from_naive_utc(last),
            )
            for raw, project, compute, net, first, last in rows
        ),
    )
