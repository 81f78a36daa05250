"""What detectors see: typed, already-aggregated hourly rows in USD, and nothing else.

The billing and utilization layers adapt their output to these frozen records; detectors never touch
a source, a client or the clock. Amounts are `Decimal` USD (the export's `cost` divided by
`currency_conversion_rate`, see `to_usd`), summed from integer micros upstream so nothing drifts.
The cost rows themselves stay in an engine (`DetectorInputs.hourly` is a `monitor.detectors.costs.Costs`):
detectors ask it for sums, and for `CostHour`s only where they need rows.

Example::

    >>> from datetime import UTC, datetime
    >>> h = CostHour(hour=datetime(2026, 11, 2, 10, tzinfo=UTC), project="ml", subcategory="compute.gpu",
    ...              cost=Decimal("29.39"), credits=Decimal("-2.00"))
    >>> h.net
    Decimal('27.39')
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from monitor.columns import Columns, objects
from monitor.frozen import draft_class, freeze
from monitor.model import category_of

if TYPE_CHECKING:
    from monitor.detectors.costs import Costs

__all__ = [
    "PRICE_TERMS",
    "BudgetSpec",
    "CostHour",
    "DeferredGpuHours",
    "DetectorInputs",
    "GpuHour",
    "GpuHourTable",
    "HeldSpend",
    "JudgedGpuHours",
    "LabelSpend",
    "MachinePriceLookup",
    "PriceLookup",
    "TableGpuHours",
    "UnmonitoredGpuHours",
    "on_demand_share",
    "to_usd",
    "with_on_demand_part",
]

#: The pricing terms a `PriceLookup` answers for.
PRICE_TERMS: tuple[str, ...] = ("on_demand", "spot", "commit_1y", "commit_3y")

_ZERO = Decimal(0)
_ONE = Decimal(1)


def to_usd(amount: Decimal | int | str, currency_conversion_rate: Decimal | float | str | None) -> Decimal:
    """Convert an export amount to USD: the export states `cost / currency_conversion_rate = USD`.

    A missing rate means the amount is already USD. The rate goes through `str` so a float from the
    export (e.g. 0.92) is taken at its printed value, not its binary approximation.

    >>> to_usd(Decimal("92.00"), 0.92)
    Decimal('100.000000')
    >>> to_usd(Decimal("-5"), None)
    Decimal('-5')
    """
    value = Decimal(str(amount)) if not isinstance(amount, Decimal) else amount
    if currency_conversion_rate is None:
        return value
    rate = Decimal(str(currency_conversion_rate))
    if not rate.is_finite() or rate <= 0:
        raise ValueError(
            f"currency_conversion_rate must be a positive number, got {currency_conversion_rate}"
        )
    if rate == 1:
        return value
    return (value / rate).quantize(Decimal("0.000001"))


@dataclass(frozen=True, slots=True)
class CostHour:
    """One aggregated billing row: an hour x project x location x SKU x resource, in USD.

    `cost` is gross (after negotiated prices, before credits); `credits` is their sum (<= 0);
    `usage_pricing_units` is the usage in `pricing_unit` (GiB for traffic, hours for GPUs).
    `provisional` marks hours whose billing is probably still incomplete (recent, late rows pending).
    """

    hour: datetime
    project: str | None
    subcategory: str
    cost: Decimal
    credits: Decimal = _ZERO
    region: str | None = None
    zone: str | None = None
    service: str | None = None
    sku_id: str | None = None
    sku: str | None = None
    pricing_model: str | None = None
    instance: str | None = None
    instance_id: str | None = None
    cluster: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    usage_pricing_units: Decimal = _ZERO
    pricing_unit: str | None = None
    provisional: bool = False
    invoice_month: str | None = None  # the export's `invoice.month` (YYYYMM); see monitor.month

    @property
    def net(self) -> Decimal:
        """What was actually paid: cost plus the (negative) credits; may be negative."""
        return self.cost + self.credits

    @property
    def category(self) -> str:
        return category_of(self.subcategory)


def on_demand_share(pricing_model: str | None, gpu_cost: Decimal, gpu_cud: Decimal) -> Decimal:
    """The part of a GPU hour bought on demand, which a commitment or Spot could have bought for
    less: 1 - |CUD credits| / gross, in [0, 1], for an on-demand or committed hour; 0 for Spot,
    reserved or unknown. The export bills every GPU-hour at the on-demand SKU and a commitment's
    credit offsets what it covers, spread over the usage rows (a commitment of 8 GPUs under a
    fleet of 12 leaves rows partly covered), while a row with any CUD credit is `committed`:
    read whole as committed, the uncovered GPU-hours of those rows were missing from the
    opportunities. A committed hour without a CUD credit (a rule's pricing: nothing tells what
    it covered) counts as covered. (`GpuHour.on_demand_share`; a function too, for the hours
    held as columns: `GpuHourTable`.)"""
    if not gpu_cud:
        return _ONE if pricing_model == "on_demand" else _ZERO
    if pricing_model not in ("on_demand", "committed") or gpu_cost <= 0:
        return _ZERO
    return min(_ONE, max(_ZERO, _ONE - abs(gpu_cud) / gpu_cost))


@dataclass(frozen=True, slots=True)
class GpuHour:
    """One instance-hour of GPU spend joined with its utilization.

    `mean_utilization_pct` None means no utilization data (agent missing): never idle, never busy.
    `idle_gpu_hours` are the GPU-hours below the utilization layer's idle threshold (memory held at 0%
    busy counts as idle) and `idle_cost` their GPU cost. `estimated` hours carry a cost computed from
    prices because the billing rows have not arrived yet.

    `gpu_cost` is gross (the export's `cost`); `gpu_credits` (<= 0) are the commitment and
    sustained-use credits on it, so `idle_cost` is at the effective price (gross + those credits)
    and `idle_cost_gross` is its on-demand (gross) equivalent; `gpu_cud` (<= 0) is the commitment
    (CUD) part alone, which says how much of the hour a commitment covered (`on_demand_share`).
    GKE nodes carry `cluster` and `node_pool`; with GKE cost allocation, `namespaces` is the gross
    GPU cost per `k8s-namespace` label value. `signal` is the utilization signal the hour was judged on; `container_metrics`
    False means a GKE node reported no container metrics (time-shared / MPS GPUs), None unknown.
    `node_key` is the hour's node as the GPU detectors group hours (`monitor.detectors.idle_gpu.instance_key`),
    set once per node where hours are built from the engine (four detectors asked it of every hour,
    1.4 M times a run at 5 M export rows a month); None (hours built by hand) has it computed.
    """

    hour: datetime
    project: str | None
    instance: str | None
    gpu_model: str | None
    gpus: int
    gpu_hours: Decimal
    gpu_cost: Decimal
    mean_utilization_pct: float | None
    idle_gpu_hours: Decimal = _ZERO
    idle_cost: Decimal = _ZERO
    zone: str | None = None
    region: str | None = None
    instance_id: str | None = None
    cluster: str | None = None
    machine_type: str | None = None
    memory_held: bool | None = None
    pricing_model: str | None = None
    estimated: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    node_pool: str | None = None
    namespaces: Mapping[str, Decimal] = field(default_factory=dict)
    gpu_credits: Decimal = _ZERO
    signal: str | None = None
    container_metrics: bool | None = None
    gpu_cud: Decimal = _ZERO
    node_key: tuple[str | None, str] | None = field(default=None, compare=False, repr=False)

    @property
    def on_demand_share(self) -> Decimal:
        """The part of the hour bought on demand, which a commitment or Spot could have bought for
        less (`on_demand_share`)."""
        return on_demand_share(self.pricing_model, self.gpu_cost, self.gpu_cud)

    @property
    def on_demand_gpu_hours(self) -> Decimal:
        """The GPU-hours of `on_demand_share` (all of them in an hour without CUD credits)."""
        share = self.on_demand_share
        return self.gpu_hours if share == _ONE else self.gpu_hours * share

    @property
    def idle_cost_gross(self) -> Decimal:
        """The idle GPU-hours at the gross (on-demand equivalent) price, before credits."""
        if not self.monitored or self.gpu_hours <= 0:
            return _ZERO
        return (self.gpu_cost * self.idle_gpu_hours / self.gpu_hours).quantize(Decimal("0.000001"))

    @property
    def monitored(self) -> bool:
        return self.mean_utilization_pct is not None

    @property
    def busy(self) -> bool:
        """A monitored hour in which not every GPU-hour was idle."""
        return self.monitored and self.idle_gpu_hours < self.gpu_hours


#: `GpuHour`s are built as drafts (`monitor.frozen`): a frozen constructor was a quarter of `_billed`.
_HourDraft = draft_class(
    GpuHour,
    ("hour", "project", "instance", "gpu_model", "gpus", "gpu_hours", "gpu_cost", "mean_utilization_pct",
     "idle_gpu_hours", "idle_cost", "zone", "region", "instance_id", "cluster", "machine_type", "memory_held",
     "pricing_model", "estimated", "labels", "node_pool", "namespaces", "gpu_credits", "signal",
     "container_metrics", "gpu_cud", "node_key"),
)  # fmt: skip


class GpuHourTable(Columns[GpuHour], row_type=GpuHour):
    """GPU hours as one list per `GpuHour` field, in order: what the join builds
    (`monitor.assemble.gpu_hour_table`), most of its columns the node-hours' own lists. Readers
    that select, group and sum read the columns (the opportunity detectors' `OnDemandHours`);
    `rows()` builds `GpuHour`s for the readers of rows, all of them or those picked."""

    __slots__ = ("_keys", "_numbers")

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        super().__init__(columns)
        self._keys: list[tuple[str | None, str]] | None = None
        self._numbers: tuple[Any, list[tuple[str | None, str]]] | None = None

    @classmethod
    def of(cls, hours: Iterable[GpuHour] | GpuHourTable) -> GpuHourTable:
        """`hours` as a table: a table as it is, `GpuHour`s (tests, tools) in columns."""
        return hours if isinstance(hours, GpuHourTable) else cls.from_rows(list(hours))

    def rows(self, picked: Iterable[int] | None = None) -> list[GpuHour]:
        """The `GpuHour`s of every row, or of the rows `picked` (row numbers, in the order given)."""
        columns = [self.columns[name] for name in self.names]
        if picked is None:
            return freeze([_HourDraft(*values) for values in zip(*columns, strict=True)], GpuHour)
        return freeze([_HourDraft(*[c[i] for c in columns]) for i in picked], GpuHour)

    def node_keys(self) -> list[tuple[str | None, str]]:
        """Each hour's node as the GPU detectors group hours (`monitor.detectors.idle_gpu.instance_key`):
        its `node_key`, made where it is not set (estimated hours), once."""
        if self._keys is None:
            from monitor.detectors.idle_gpu import node_instance_key  # idle_gpu imports this module

            c = self.columns
            keys = c["node_key"]
            if missing := [i for i, key in enumerate(keys) if key is None]:
                keys = list(keys)
                for i in missing:
                    keys[i] = node_instance_key(
                        c["project"][i], c["zone"][i], c["instance"][i], c["instance_id"][i], c["cluster"][i]
                    )
            self._keys = keys
        return self._keys

    def node_numbers(self) -> tuple[Any, list[tuple[str | None, str]]]:
        """Each hour's node (`node_keys`) as a number (a numpy array), and the nodes in number
        order: what grouping by node in numpy needs."""
        if self._numbers is None:
            import numpy as np

            numbers: dict[tuple[str | None, str], int] = {}
            ids = [numbers.setdefault(key, len(numbers)) for key in self.node_keys()]
            self._numbers = (np.fromiter(ids, np.int64, len(ids)), list(numbers))
        return self._numbers

    def take(self, picked: Iterable[int]) -> GpuHourTable:
        """The rows `picked` (row numbers, in the order given) as a table of their own."""
        picked = list(picked)
        return GpuHourTable({name: [column[i] for i in picked] for name, column in self.columns.items()})

    def between(self, start: datetime, end: datetime) -> GpuHourTable:
        """The rows whose hour is in [start, end), in order, as a table of their own."""
        return self.take(i for i, hour in enumerate(self.columns["hour"]) if start <= hour < end)

    def billed_count(self) -> int:
        """The hours billed, not estimated: the rows read from the engine."""
        return self.columns["estimated"].count(False)

    def extended(self, rows: Sequence[GpuHour] | GpuHourTable) -> GpuHourTable:
        """This table with `rows` (`GpuHour`s or a table) after its own (a new table; this one is left
        as it is)."""
        if not len(rows):
            return self
        more = GpuHourTable.of(rows)
        return GpuHourTable({name: self.columns[name] + more.columns[name] for name in self.names})


def with_on_demand_part(rows: Iterable[GpuHour]) -> list[GpuHour]:
    """The hours with an on-demand part (`GpuHour.on_demand_share` > 0), in order. Without CUD
    credits that is an on-demand hour: asked of every GPU hour (381,001 a detection run at 5 M
    export rows a month), the share's property took 0.16 s of it, the test alone half of that."""
    return [r for r in rows if (r.on_demand_share > 0 if r.gpu_cud else r.pricing_model == "on_demand")]


class DeferredGpuHours(Sequence[GpuHour]):
    """GPU hours read as far as the detectors read them: `on_demand_table()` for the opportunity
    detectors, `idle_node_table()` for `idle_gpu`, `unmonitored_table()` for `unmonitored_gpu`,
    `whole_table()` for a reader of a few columns of every hour (a job budget, a finished job's
    message), and every one as a `GpuHour`, built by `_rows()`, only for a reader that iterates
    them all. `fetched` counts the rows read from the engine."""

    fetched: int

    def _rows(self) -> Sequence[GpuHour]:
        raise NotImplementedError

    def idle_node_table(self) -> GpuHourTable:
        """A table holding every hour of each node with an idle GPU-hour, maybe with others, in
        order: `idle_gpu` judges those nodes alone, each over all its hours."""
        raise NotImplementedError

    def unmonitored_table(self) -> GpuHourTable:
        """A table holding every unmonitored hour, maybe with others, in order: what
        `unmonitored_gpu` judges."""
        raise NotImplementedError

    def on_demand_table(self) -> GpuHourTable:
        """A table holding every hour with an on-demand part, maybe with others (the opportunity
        detectors pick theirs: `monitor.detectors.opportunities.OnDemandHours.of`)."""
        raise NotImplementedError

    def whole_table(self) -> GpuHourTable:
        """Every hour as a table, in order: for a reader of every hour that reads a few columns (a
        job budget's latest GPU hour per job), without a `GpuHour` built for each."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._rows())

    def __getitem__(self, index: int | slice) -> Any:
        return self._rows()[index]

    def __iter__(self) -> Iterator[GpuHour]:
        return iter(self._rows())


class UnmonitoredGpuHours(DeferredGpuHours):
    """GPU hours no utilization overlaps, built on first use (`build(None)`), so a run whose
    detectors never read them never fetches them.

    Without utilization every hour is billed and unmonitored, none estimated, and each is built from
    its own node-hour alone: `on_demand_table()` asks the engine for those with an on-demand part only
    (`build("on_demand")`: on demand, or committed with CUD credits short of their gross, see
    `GpuHour.on_demand_share`), the same rows in the same order as filtering them all. That is what
    a billing-only `gpucost analyze` reads: the opportunity detectors price on-demand hours, and the
    idle detector has nothing to judge (`DetectorInputs.gpu_monitored`). `fetched` counts the
    node-hours read from the engine.
    """

    def __init__(self, build: Callable[[str | None], GpuHourTable]) -> None:
        self._build = build
        self._table: GpuHourTable | None = None
        self._all: Sequence[GpuHour] | None = None
        self._on_demand: GpuHourTable | None = None
        self.fetched = 0

    def unmonitored_table(self) -> GpuHourTable:
        """Every hour (each is unmonitored), read once."""
        if self._table is None:
            self._table = self._build(None)
            self.fetched += len(self._table)
        return self._table

    def _rows(self) -> Sequence[GpuHour]:
        if self._all is None:
            self._all = self.unmonitored_table().rows()
        return self._all

    def on_demand_table(self) -> GpuHourTable:
        """The node-hours with an on-demand part as the engine selects them (`build("on_demand")`),
        as a table: a billing-only `analyze` at 5 M export rows built a `GpuHour` for each of them,
        to make a table of them again (1.0 s of its 24 s)."""
        if self._all is not None:
            return GpuHourTable.from_rows(with_on_demand_part(self._all))
        if self._on_demand is None:
            self._on_demand = self._build("on_demand")
            self.fetched += len(self._on_demand)
        return self._on_demand

    def idle_node_table(self) -> GpuHourTable:
        return GpuHourTable.from_rows([])  # no utilization: no GPU-hour is idle

    def whole_table(self) -> GpuHourTable:
        return self.unmonitored_table()


class _HeldGpuHours(DeferredGpuHours):
    """GPU hours held as a table (`GpuHourTable`) that holds at least every hour the GPU detectors
    read: the GPU detectors read its columns (`on_demand_table`, `unmonitored_table`, and
    `idle_node_table`, the hours of the nodes `idle_gpu` judges); `GpuHour`s are built only for
    the estimated hours alone (`estimated`: a finished job's message) and by `idle_gpu` for the
    nodes it judges. At
    bench scale 48, where utilization covers 3 of the window's 14 days, 299,128 unmonitored hours
    were built as `GpuHour`s for `unmonitored_gpu` (1.1 s) and iterated by `idle_gpu`, which never
    judged them (1.65 s under cProfile)."""

    def __init__(self, table: GpuHourTable) -> None:
        self.table = table
        self._all: Sequence[GpuHour] | None = None
        self._idle_nodes: GpuHourTable | None = None

    def on_demand_table(self) -> GpuHourTable:
        return self.table

    def unmonitored_table(self) -> GpuHourTable:
        return self.table

    def estimated(self) -> list[GpuHour]:
        """The estimated hours, in order (every one is in the table)."""
        return self.table.rows(i for i, estimated in enumerate(self.table["estimated"]) if estimated)

    def idle_node_table(self) -> GpuHourTable:
        if self._idle_nodes is None:
            import numpy as np

            ids, keys = self.table.node_numbers()
            idle = np.zeros(len(keys), bool)
            idle[ids[objects(self.table["idle_gpu_hours"]) > 0]] = True
            self._idle_nodes = self.table.take(np.flatnonzero(idle[ids]).tolist())
        return self._idle_nodes


class JudgedGpuHours(_HeldGpuHours):
    """GPU hours joined with utilization as far as the GPU detectors read them, every one joined
    only if a reader needs them all (`build()`, as a table: a job budget).

    `table` holds, in the order of the whole, every hour with an on-demand part (the opportunity
    detectors, `GpuHour.on_demand_share`), every unmonitored one (`unmonitored_gpu`), every hour
    of an instance with an idle GPU-hour (`idle_gpu`, which reads an instance's hours around its
    idle runs) and every estimated hour: a detector that reads only those finds what it finds in
    them all (`monitor.assemble.judged_gpu_hours`). `fetched` counts the rows read from the engine.
    """

    def __init__(self, table: GpuHourTable, build: Callable[[], GpuHourTable], fetched: int) -> None:
        super().__init__(table)
        self._build = build
        self._whole: GpuHourTable | None = None
        self.fetched = fetched

    def whole_table(self) -> GpuHourTable:
        if self._whole is None:
            self._whole = self._build()
            self.fetched += self._whole.billed_count()
        return self._whole

    def _rows(self) -> Sequence[GpuHour]:
        if self._all is None:
            self._all = self.whole_table().rows()
        return self._all


class TableGpuHours(_HeldGpuHours):
    """Every GPU hour as a table (`GpuHourTable`), as the daemon's detection joins them; a reader
    of every hour reads the table itself (`whole_table`), and a `GpuHour` is built for each only
    for one that iterates them. At 5 M export rows a month, 381,001 `GpuHour`s were built for every
    detection run, where `idle_gpu` and `unmonitored_gpu` read 335 hours and 1 node's."""

    def __init__(self, table: GpuHourTable) -> None:
        super().__init__(table)
        self.fetched = table.billed_count()

    def whole_table(self) -> GpuHourTable:
        return self.table

    def _rows(self) -> Sequence[GpuHour]:
        if self._all is None:
            self._all = self.table.rows()
        return self._all


class PriceLookup(Protocol):
    """Unit GPU prices in USD per GPU-hour, from the Catalog API or the bundled snapshot."""

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        """`pricing_model` is one of `PRICE_TERMS`; None when the price is not known."""
        ...

    def gpu_price_source(self, gpu_model: str, region: str | None, pricing_model: str) -> str | None:
        """Where that price came from, for findings: "Cloud Billing Catalog API (fetched <ts>)" or
        "bundled snapshot (<date>, sources: ...)"; None when the price is not known."""
        ...


class MachinePriceLookup(Protocol):
    """Whole-VM prices, which a price book MAY offer beside `PriceLookup` (the snapshot does, the
    Catalog API book does not): detectors look for them with `getattr(prices, name, None)`."""

    def machine_hourly(self, machine_type: str, region: str | None, pricing_model: str) -> Decimal | None:
        """USD per hour of a whole VM of `machine_type` ("a3-highgpu-8g", GPUs included) in
        `pricing_model`; None when not known (the Catalog API book never knows)."""
        ...

    def machine_price_source(self, machine_type: str, region: str | None, pricing_model: str) -> str | None:
        """Where `machine_hourly(...)` came from, like `gpu_price_source`; None when it is None."""
        ...


@dataclass(frozen=True)
class BudgetSpec:
    """A monthly budget in USD over the whole account (no project, no label), a project or a label;
    of spend net of credits, or before them (`gross`: a Budget API budget excluding all credits)."""

    name: str
    amount: Decimal
    project: str | None = None
    label: tuple[str, str] | None = None
    gross: bool = False

    def matches(self, row: CostHour) -> bool:
        if self.project is not None and row.project != self.project:
            return False
        return self.label is None or row.labels.get(self.label[0]) == self.label[1]


@dataclass(frozen=True, slots=True)
class LabelSpend:
    """Net spend of one label set in one project, compute rows or the rest (`compute`), with its
    first and last hour: billing held before a detection run's read start, summed in the engine."""

    labels: Mapping[str, str]
    project: str | None
    compute: bool
    net: Decimal
    first: datetime
    last: datetime


@dataclass(frozen=True)
class HeldSpend:
    """How far back the billing gpucost holds goes (`held_from`, the aggregate store's
    `covered_from`; None for a store from before it was kept), and the labelled spend held before
    the inputs' read start (`spend`). A job's life outlasts what a detection run reads: its read
    start follows the invoice month, so a job budget summing only the rows read lost weeks of a
    job's spend when the Pacific month turned, while those rows were still in the store."""

    held_from: datetime | None
    spend: tuple[LabelSpend, ...] = ()


_T = TypeVar("_T")


@dataclass(frozen=True)
class DetectorInputs:
    """Everything one detection run sees, for the window [window_start, window_end).

    Hours at or after `provisional_from` may still grow as late billing rows land. `history_start`
    (before `window_start`, None when there is none) is how far back `hourly` is complete: detectors
    that need a baseline (`spend_anomaly`) read it, findings still cover only the window.
    `utilization_coverage` (project -> ranges read, key "*" for any other project; see
    `monitor.utilization.coverage`) says which hours' utilization was actually read: an hour outside
    it was not yet read, so its GPU spend is neither monitored nor unmonitored. None: all was read.

    `gpu_hours` start at `gpu_from` (None: at `window_start`): the GPU detectors judge only the
    window, so the daemon joins the GPU hours of its 14-day detection window, not of the 45 days of
    history and invoice month it reads for costs (at 5 M export rows a month, those hours as Python
    objects were most of a detection run's time and memory). The few readers of a job's whole life
    ask for them all as a table (`all_gpu_hour_table()`, read by a finished job's message and a job
    budget), which joins the earlier hours (`earlier_gpu_hours`, cached) on first use, in the order
    a single join gives.

    `held_spend` (cached, None: nothing is held beyond what `hourly` holds) sums the labelled
    billing held before `window_start` on first use: what a job budget, which covers the job's
    life, adds to the rows read.
    """

    window_start: datetime
    window_end: datetime
    provisional_from: datetime
    history_start: datetime | None = None
    hourly: Costs | Sequence[CostHour] = ()
    gpu_hours: Sequence[GpuHour] = ()
    prices: PriceLookup | None = None
    budgets: Sequence[BudgetSpec] = ()
    currency: str = "USD"
    utilization_coverage: Mapping[str, Sequence[tuple[datetime, datetime]]] | None = None
    gpu_from: datetime | None = None
    earlier_gpu_hours: Callable[[], GpuHourTable] | None = field(default=None, repr=False, compare=False)
    held_spend: Callable[[], HeldSpend] | None = field(default=None, repr=False, compare=False)

    @property
    def gpu_monitored(self) -> bool:
        """False when no GPU hour can be monitored (no utilization overlaps them:
        `UnmonitoredGpuHours`), known without building them; True otherwise, even for a list without
        a monitored hour."""
        return not isinstance(self.gpu_hours, UnmonitoredGpuHours)

    def on_demand_gpu_table(self) -> GpuHourTable:
        """A table holding every GPU hour with an on-demand part, maybe with others (the
        opportunity detectors pick theirs: `monitor.detectors.opportunities.OnDemandHours.of`):
        where the hours are read as far as the detectors read them, without building a `GpuHour`
        where they can (`DeferredGpuHours.on_demand_table`)."""
        if isinstance(self.gpu_hours, DeferredGpuHours):
            return self.gpu_hours.on_demand_table()
        return GpuHourTable.from_rows(with_on_demand_part(self.gpu_hours))

    def estimated_gpu_hours(self) -> Sequence[GpuHour]:
        """The estimated GPU hours of the window, in order, without building the others where they
        are held as a table (a finished job's message asks them of every detection run)."""
        if isinstance(self.gpu_hours, _HeldGpuHours):
            return self.gpu_hours.estimated()
        if isinstance(self.gpu_hours, UnmonitoredGpuHours):
            return []  # no utilization, nothing estimated
        return [h for h in self.gpu_hours if h.estimated]

    def idle_node_gpu_table(self) -> GpuHourTable:
        """A table holding the GPU hours `idle_gpu` judges, in order: every hour of each node with
        an idle GPU-hour, maybe with others (all of them, where the hours are a list)."""
        if isinstance(self.gpu_hours, DeferredGpuHours):
            return self.gpu_hours.idle_node_table()
        return GpuHourTable.from_rows(self.gpu_hours)

    def unmonitored_gpu_table(self) -> GpuHourTable:
        """A table holding every unmonitored GPU hour, maybe with others, in order: what
        `unmonitored_gpu` judges, read as columns."""
        if isinstance(self.gpu_hours, DeferredGpuHours):
            return self.gpu_hours.unmonitored_table()
        return GpuHourTable.from_rows([h for h in self.gpu_hours if not h.monitored])

    def derived(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """What `build` derives from these inputs, built on the first ask for `key` and kept: a view
        two detectors read alike (`monitor.detectors.opportunities.on_demand_hours`, 0.2 s each at
        5 M export rows a month). Kept on this object, not in a field, so the narrower inputs
        `dataclasses.replace` makes (`run_in_window`) derive their own."""
        memo: dict[Hashable, Any] = self.__dict__.setdefault("_derived", {})
        if key not in memo:
            memo[key] = build()
        return memo[key]  # type: ignore[no-any-return]

    def gpu_hour_table(self) -> GpuHourTable:
        """The window's GPU hours (`gpu_hours`) as a table, without a `GpuHour` built for each
        where they are held as one (`DeferredGpuHours.whole_table`)."""
        if isinstance(self.gpu_hours, DeferredGpuHours):
            return self.gpu_hours.whole_table()
        return GpuHourTable.from_rows(self.gpu_hours)

    def all_gpu_hour_table(self) -> GpuHourTable:
        """The GPU hours of the whole inputs as a table, those before `gpu_from` first (the callable
        joins them on first use and keeps them): a job budget reads two of its columns, a finished
        job's message builds `GpuHour`s of its job's nodes alone. Joined once per inputs (`derived`):
        both may ask in one run, and the two parts are the window's 45 days of columns."""
        if self.earlier_gpu_hours is None:
            return self.gpu_hour_table()
        earlier = self.earlier_gpu_hours
        return self.derived("all_gpu_hour_table", lambda: earlier().extended(self.gpu_hour_table()))

    def __post_init__(self) -> None:
        # `hourly` is kept in the engine (`monitor.detectors.costs`): detectors ask it for sums and
        # for the few rows they need; a list of `CostHour`s (tests, tools) goes into it here.
        from monitor.detectors.costs import as_costs  # costs imports this module

        object.__setattr__(self, "hourly", as_costs(self.hourly))
