"""Hand-built hourly aggregates through the aggregate store, read back as the detectors' inputs.

Tests describe billing as `HourlyCost` records (what `hourly_costs` reads); the GPU join and the
detectors take what the store's own queries return (`monitor.assemble.gpu_cost_hours` /
`cost_hours`), so these helpers store the records in an in-memory `AggregateStore` and read them
back through those queries: the tests exercise the SQL the daemon runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from monitor.assemble import cost_hours, gpu_cost_hours
from monitor.billing_poll import HOURLY_COLUMNS, HourlyCost, write_rows
from monitor.detectors.inputs import CostHour
from monitor.gpus import GpuCostHour
from monitor.state.analytics import AggregateStore

__all__ = ["cost_rows", "node_hours", "stored"]

_HOUR = timedelta(hours=1)
_POLLED = datetime(2026, 1, 1, tzinfo=UTC)


def stored(rows: Sequence[HourlyCost], into: AggregateStore | None = None) -> AggregateStore:
    """An aggregate store holding `rows`: `into` (rows added), else a new one in memory."""
    store = into if into is not None else AggregateStore(None)
    money = ("gross_micros", "cud_micros", "sud_micros", "other_credit_micros", "credit_micros", "net_micros")
    dicts = [
        {c: None for c in HOURLY_COLUMNS}
        | dict(r.keys)
        | {m: getattr(r, m) for m in money}
        | {
            "usage_hour": r.usage_hour,
            "subcategory": r.subcategory,
            "row_count": r.row_count,
            "usage_amount": r.usage_amount,
        }
        for r in rows
    ]
    write_rows(store, dicts, _POLLED)
    return store


def _span(rows: Sequence[HourlyCost]) -> tuple[datetime, datetime, datetime]:
    """[first hour, last hour + 1h) and where the rows' provisional hours start (the end if none)."""
    lo, hi = min(r.usage_hour for r in rows), max(r.usage_hour for r in rows) + _HOUR
    return lo, hi, min((r.usage_hour for r in rows if r.provisional), default=hi)


def node_hours(rows: Sequence[HourlyCost]) -> list[GpuCostHour]:
    """The GPU node-hours the store's query sums from `rows` (what `gpu_hours` joins)."""
    if not rows:
        return []
    return gpu_cost_hours(stored(rows), *_span(rows))


def cost_rows(rows: Sequence[HourlyCost]) -> list[CostHour]:
    """`rows` as the detectors' `CostHour`s, read back from the store."""
    if not rows:
        return []
    return cost_hours(stored(rows), *_span(rows))
