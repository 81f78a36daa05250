"""What `commitment_opportunity` and `spot_opportunity` share: on-demand GPU hours that could have
cost less, priced from the price book (the detectors live in `commitment_opportunity.py` and
`spot_opportunity.py`).

Both only speak when the prices are known (`inputs.prices` answers for the GPU model and region):
a savings figure from a guessed price would not be worth trusting. Every finding says where its
prices came from (Cloud Billing Catalog API and when it was fetched, or the bundled snapshot and its
date), in the summary and in `evidence["price_source"]`, because a snapshot's Spot price can be
months old.

- commitment: the GPU count that ran on demand in (almost) every hour of the window, per project,
  region and GPU model (the `steady_percentile` of the hourly counts, so a short restart does not
  hide a steady fleet): the GPU-hours it would have covered (up to that count each hour) priced at
  on-demand minus the commitment price, less the commitment paid in the hours the fleet ran below
  it, for the window and per year (the window's rate kept up for a year).
- spot: on-demand GPU hours of restartable work (a `restartable_labels` label, a name matching
  `name_regex`, or, if `max_job_hours` is set, instances whose runs are all that short), priced at
  on-demand minus Spot.

Neither advises on a GPU node that did no work (idle in every hour read, at least
`FORGOTTEN_MIN_READ_HOURS` of them: `unused_nodes`): the advice there is to delete it, which
`idle_gpu` gives; buying its idle hours cheaper would be advice to keep paying for them.

"On demand" is the part of each GPU hour no commitment covered (`GpuHour.on_demand_share`, from the
hour's CUD credits against its gross): the export bills committed GPU-hours at the on-demand SKU
with a CUD credit, spread over the usage rows, so a commitment of 8 GPUs under a fleet of 12 leaves
rows partly covered, and any row with a CUD credit is `committed` in the attribution. Counting only
`on_demand` rows left out the uncovered rest of those (4 uncovered T4s an hour, 1 of them in two
half-covered rows, read as 3: a commitment saving of $65.52 for $87.36 over 7 days), and a partly
covered restartable VM was never advised onto Spot. A VM moved to Spot moves whole, though, and
the part of it a commitment covered then goes to other on-demand usage, or to none: Spot prices
each VM's hours against what its pool has on demand (`spot_opportunity._Pools`), not its own share.

Priced per whole machine when it can be: an accelerator-optimized VM (a3-highgpu-8g, a2-highgpu-1g,
g2-standard-8...) is bought, committed and preempted as a whole, its vCPUs, RAM and Local SSD with
its GPUs, so when the row's `machine_type` is known and the lookup has that type's prices
(`machine_hourly`, optional: the bundled snapshot has them, the Catalog API book and other lookups
do not), the saving is machine-hours x (on-demand - committed or Spot) machine price, and the
commitment counts steady VMs per project, region and machine type instead of GPUs. The evidence
then lists each VM (its committed or Spot machine-hours and its saving) and, for a commitment, the
committed machine-hours no VM used (paid at the committed price in the hours the fleet dipped below
the steady count), so the lines sum exactly to the impact. Otherwise the per-GPU path above applies,
which likewise pays for the committed GPU-hours no VM used (`unused_commitment`): both price the
window and the year with `commitment_saving` and `yearly_saving`.

Opportunities are advice, not losses (`Detector.advice`): nothing leaked, a cheaper way to buy the same
GPU hours exists. So they never alert by default: severity is capped at `max_severity` ("info" unless
configured), below the alert threshold; a team that wants savings alerts sets `max_severity = "warning"`
(then `warning_usd` / `critical_usd` apply).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from operator import itemgetter
from typing import Any, Literal

from pydantic import Field

from monitor.columns import Columns, objects
from monitor.detectors.base import Detector, DetectorConfig, q6
from monitor.detectors.idle_gpu import FORGOTTEN_MIN_READ_HOURS
from monitor.detectors.inputs import DetectorInputs, GpuHour, GpuHourTable, PriceLookup, on_demand_share
from monitor.model import Severity

__all__ = [
    "STEADY_SLACK",
    "YEAR_HOURS",
    "OnDemandHour",
    "OnDemandHours",
    "OpportunityConfig",
    "capped_severity",
    "commitment_saving",
    "committed_hours",
    "machine_hours",
    "machine_price_source",
    "machine_prices",
    "on_demand_hours",
    "percentile",
    "price_source",
    "short_of",
    "split_by_machine_price",
    "steady_count",
    "unused_in",
    "unused_nodes",
    "yearly_saving",
]

YEAR_HOURS = 8760
#: How far below a whole count an hour's on-demand GPUs or VMs may sum and still make it (`steady_count`).
STEADY_SLACK = Decimal("0.001")


class OpportunityConfig(DetectorConfig):
    min_impact_usd: Decimal = Field(default=Decimal(50), ge=0)
    warning_usd: Decimal = Field(default=Decimal(1000), ge=0)
    critical_usd: Decimal = Field(default=Decimal(100000), ge=0)
    max_severity: Literal["info", "warning", "critical"] = "info"


@dataclass(frozen=True, slots=True)
class OnDemandHour:
    """One GPU hour with an on-demand part, as the opportunity detectors read it (a row of
    `OnDemandHours`). `node` is its `instance_key`; `on_demand_gpu_hours` its
    `GpuHour.on_demand_gpu_hours`; `on_demand_machine_hours` the part of the hour the VM ran on
    demand, those over its GPUs (1 for a full hour no commitment covered any of), None without
    GPUs counted."""

    hour: datetime
    node: tuple[str | None, str]
    project: str | None
    region: str | None
    zone: str | None
    gpu_model: str
    machine_type: str | None
    instance: str | None
    instance_id: str | None
    labels: Mapping[str, str]
    gpus: int
    gpu_hours: Decimal
    on_demand_gpu_hours: Decimal
    on_demand_machine_hours: Decimal | None


class OnDemandHours(Columns[OnDemandHour], row_type=OnDemandHour):
    """The window's GPU hours with an on-demand part, one list per `OnDemandHour` field, in the
    order of the GPU hours: the table both opportunity detectors read. Each hour's on-demand parts
    are computed here once: both detectors computed them from every `GpuHour` they read
    (225,475 hours a run, 0.2 s each, at 5 M export rows a month), and grouped `GpuHour`s by
    node, pool and hour where they now group row numbers."""

    __slots__ = ()

    @classmethod
    def of(cls, table: GpuHourTable, start: datetime, end: datetime) -> OnDemandHours:
        """The hours of `table` in [start, end) with an on-demand part (`on_demand_share` > 0) and a
        GPU model, less those of GPU nodes that did no work (`unused_nodes`). Without CUD credits
        such an hour is on demand whole (a share of 1): the others are picked by numpy over the
        columns (0.34 s a loop over the 381,001 hours of a detection run at 5 M export rows a
        month), the share computed for the hours with CUD credits alone."""
        import numpy as np

        c = table.columns
        wanted = objects(c["gpu_model"]).astype(bool)
        if len(table) and not (start <= min(c["hour"]) and max(c["hour"]) < end):
            hours = objects(c["hour"])
            wanted &= (hours >= start) & (hours < end)
        credited = objects(c["gpu_cud"]).astype(bool)
        whole = wanted & ~credited & (objects(c["pricing_model"]) == "on_demand")
        share: dict[int, Decimal] = {}  # of the hours with CUD credits
        for i in np.flatnonzero(wanted & credited).tolist():
            if (part := on_demand_share(c["pricing_model"][i], c["gpu_cost"][i], c["gpu_cud"][i])) > 0:
                share[i] = part
                whole[i] = True
        rows = np.flatnonzero(whole)
        ids, keys = table.node_numbers()
        rows = rows[~unused_in(table, rows)[ids[rows]]]
        picked = rows.tolist()
        gpu_hours, gpus = _take(c["gpu_hours"], picked), _take(c["gpus"], picked)
        od = list(gpu_hours)
        for i, part in share.items():  # the partly covered hours' on-demand part
            if part != 1 and (at := int(np.searchsorted(rows, i))) < len(picked) and picked[at] == i:
                od[at] = od[at] * part
        names = ("hour", "project", "region", "zone", "gpu_model", "machine_type", "instance", "instance_id",
                 "labels")  # fmt: skip
        return cls(
            {
                **{name: _take(c[name], picked) for name in names},
                "node": [keys[k] for k in ids[rows].tolist()],
                "gpus": gpus,
                "gpu_hours": gpu_hours,
                "on_demand_gpu_hours": od,
                "on_demand_machine_hours": [
                    machine_hours(h, n) if n > 0 else None for h, n in zip(od, gpus, strict=True)
                ],
            }
        )


def _take(column: Sequence[Any], picked: Sequence[int]) -> list[Any]:
    """The values of `column` at `picked`, in that order (`itemgetter` picks them in C)."""
    if len(picked) < 2:
        return [column[i] for i in picked]
    return list(itemgetter(*picked)(column))


def on_demand_hours(inputs: DetectorInputs, now: datetime) -> OnDemandHours:
    """The window's GPU hours with an on-demand part, of a known GPU model, less those of GPU nodes
    that did no work, as a table (`OnDemandHours.of`), from a table of the hours with an on-demand
    part (`DetectorInputs.on_demand_gpu_table`: in `analyze`, without reading the others). The detectors
    price each hour's on-demand part alone. Both detectors ask it of the same inputs: built once
    (`DetectorInputs.derived`)."""

    def build() -> OnDemandHours:
        table = inputs.on_demand_gpu_table()
        return OnDemandHours.of(table, inputs.window_start, min(inputs.window_end, now))

    return inputs.derived(("on_demand_hours", now), build)


def unused_nodes(rows: Sequence[GpuHour]) -> set[tuple[str | None, str]]:
    """The nodes (`instance_key`) whose GPUs were idle in every hour of theirs read, at least
    `FORGOTTEN_MIN_READ_HOURS` of them: no demand to commit to or to move to Spot, but a VM to
    delete, which `idle_gpu` reports. `analyze` advised committing to seed 7's forgotten
    bob-a100-debug (8x A100 unused for 336 h) for $3,727.65 beside the idle finding."""
    import numpy as np

    table = GpuHourTable.from_rows(rows)
    keys = table.node_numbers()[1]
    return {keys[k] for k in np.flatnonzero(unused_in(table, np.arange(len(table)))).tolist()}


def unused_in(table: GpuHourTable, rows: Any) -> Any:
    """Per node of `table` (`GpuHourTable.node_numbers`), whether it did no work in its hours among
    `rows` (row numbers, a numpy array): `unused_nodes` over the columns, in numpy. An hour is read
    when it has a mean utilization (`GpuHour.monitored`), busy when read with fewer idle GPU-hours
    than GPU-hours (`GpuHour.busy`)."""
    import numpy as np

    c = table.columns
    ids, keys = table.node_numbers()
    at = rows.tolist()
    node = ids[rows]
    read = np.fromiter((m is not None for m in _take(c["mean_utilization_pct"], at)), bool, len(at))
    busy = read & (objects(_take(c["idle_gpu_hours"], at)) < objects(_take(c["gpu_hours"], at)))
    worked = np.zeros(len(keys), bool)
    worked[node[busy]] = True
    return (np.bincount(node[read], minlength=len(keys)) >= FORGOTTEN_MIN_READ_HOURS) & ~worked


def price_source(prices: PriceLookup, model: str, region: str | None, kinds: Sequence[str]) -> str:
    """Where the prices of `kinds` came from, one line ("; "-joined when they differ). A lookup that
    does not report provenance (no `gpu_price_source`) says so rather than guessing."""
    report = getattr(prices, "gpu_price_source", None)
    found = [report(model, region, k) if report is not None else None for k in kinds]
    names = list(dict.fromkeys(f or "price source not reported" for f in found))
    return "; ".join(names)


def machine_prices(
    prices: PriceLookup, machine_type: str | None, region: str | None, kinds: Sequence[str]
) -> dict[str, Decimal] | None:
    """Whole-machine prices of `kinds` per hour, or None unless the lookup has every one of them
    (`machine_hourly` is optional: a lookup without it prices per GPU)."""
    lookup = getattr(prices, "machine_hourly", None)
    if lookup is None or not machine_type:
        return None
    found = {k: lookup(machine_type, region, k) for k in kinds}
    return None if any(v is None for v in found.values()) else found


def machine_price_source(
    prices: PriceLookup, machine_type: str, region: str | None, kinds: Sequence[str]
) -> str:
    """Like `price_source`, for the whole-machine prices of `machine_type` (`machine_price_source`)."""
    report = getattr(prices, "machine_price_source", None)
    found = [report(machine_type, region, k) if report is not None else None for k in kinds]
    return "; ".join(dict.fromkeys(f or "price source not reported" for f in found))


def split_by_machine_price(
    hours: OnDemandHours, prices: PriceLookup, kinds: Sequence[str]
) -> tuple[list[int], list[int]]:
    """(the rows of VMs whose machine type has prices of `kinds` in their region, the other rows),
    as row numbers of `hours`."""
    known: dict[tuple[str | None, str | None], bool] = {}
    machine: list[int] = []
    per_gpu: list[int] = []
    for i, (machine_type, region, gpus) in enumerate(
        zip(hours["machine_type"], hours["region"], hours["gpus"], strict=True)
    ):
        at = (machine_type, region)
        if at not in known:
            known[at] = machine_prices(prices, machine_type, region, kinds) is not None
        (machine if known[at] and gpus > 0 else per_gpu).append(i)
    return machine, per_gpu


def machine_hours(gpu_hours: Decimal, gpus: int) -> Decimal:
    """The part of the hour a VM ran: its GPU-hours over its GPUs (1 for a full hour); of its
    on-demand GPU-hours, the part it ran on demand (`OnDemandHour.on_demand_machine_hours`)."""
    return gpu_hours / gpus


def committed_hours(
    per_hour: dict[datetime, dict[tuple[str | None, str], Decimal]], grid: Sequence[datetime], steady: int
) -> dict[tuple[str | None, str], Decimal]:
    """Machine-hours each VM would have run on the `steady` committed machines: every hour, the
    commitment covers up to `steady` machine-hours, given to the VMs of that hour in a fixed order
    (by instance key), so the split is reproducible and never exceeds what ran or what was bought."""
    covered: dict[tuple[str | None, str], Decimal] = defaultdict(Decimal)
    # the order once, not a `str` per VM and hour (225k of them at 5 M export rows a month)
    rank = {ik: i for i, ik in enumerate(sorted({ik for at in per_hour.values() for ik in at}, key=str))}
    for h in grid:
        at = per_hour.get(h)
        if not at:
            continue
        left = Decimal(steady)
        for ik in sorted(at, key=rank.__getitem__):
            take = min(at[ik], left)
            covered[ik] += take
            left -= take
    return covered


def commitment_saving(
    covered: Iterable[Decimal], counts: Sequence[Decimal], steady: int, on_demand: Decimal, price: Decimal
) -> tuple[Decimal, Decimal]:
    """(committed hours nothing ran on, saving) of a commitment of `steady` GPUs or VMs over the
    hours of `counts` (each hour's on-demand count) of which each line ran `covered`
    (`committed_hours`: per VM, or the GPU-hours of a per-GPU fleet): every covered hour saves
    on-demand - `price`, every unused one (`short_of`) is paid at `price` and saves nothing.
    Rounded to the micro per line, so the evidence's lines and unused commitment sum exactly to the
    saving. Both paths of `commitment_opportunity` price a commitment here: the per-GPU one counted
    every committed GPU-hour as used (two n1-standard-16 VMs with 4 T4 each, one missing 30 of 336
    hours, read $349.44 for $307.44)."""
    lines = list(covered)
    unused = sum((short_of(c, steady) for c in counts), Decimal(0))
    return unused, sum((q6(c * (on_demand - price)) for c in lines), Decimal(0)) - q6(unused * price)


def short_of(count: Decimal, steady: int) -> Decimal:
    """How far an hour's on-demand GPUs or VMs fell short of `steady`: nothing within
    `STEADY_SLACK` of it, as `steady_count` counts them. Shares of micro-rounded CUD credits sum
    to 0.99999998 of a VM an hour: the steady VM it makes was read as reached in 0 of 168 hours,
    with "$0.00 of committed a3-highgpu-8g hours no VM used" (0.0000019 machine-hours)."""
    gap = steady - count
    return gap if gap > STEADY_SLACK else Decimal(0)


def yearly_saving(covered: Decimal, unused: Decimal, hours: int, on_demand: Decimal, price: Decimal) -> Decimal:
    """The window's saving at `price` (`commitment_saving` unrounded: `covered` hours used, `unused`
    paid for idle) kept up for a year (`YEAR_HOURS`): a fleet that dipped below its steady count in
    the window pays for committed hours nothing ran on all year too."""
    return (covered * (on_demand - price) - unused * price) * YEAR_HOURS / hours


def capped_severity(det: Detector, impact: Decimal) -> Severity:
    cap = Severity(det.config.max_severity)
    return min(det.severity(impact), cap, key=lambda s: s.rank)


def percentile(values: Sequence[Decimal], pct: float) -> Decimal:
    """Nearest-rank percentile (a value that was actually observed)."""
    s = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(s)))
    return s[rank - 1]


def steady_count(counts: Sequence[Decimal], pct: float) -> int:
    """The whole number of GPUs or VMs on demand in all but `pct`% of the hours (`percentile`),
    within `STEADY_SLACK` of the next: the on-demand parts of partly covered hours are shares of
    credits rounded to the micro, so 4 uncovered GPUs an hour can sum to 3.99999."""
    return int(percentile(counts, pct) + STEADY_SLACK)
