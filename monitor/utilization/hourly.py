"""One GPU's utilization per hour: all the GPU join and the live estimates read of the samples.

The store keeps samples at the alignment grain (one to five minutes): hundreds of thousands a
fleet-day. The join (`monitor.gpus`) and the estimates (`monitor.assemble`) only use hourly figures
per GPU: the mean, the most trusted signal, whether memory was held while idle, whether the host
reported container duty cycles. So the samples are reduced to `UtilHour`s before they reach them,
and in the state store's own engine where that is exact (`monitor.utilization.state.load_util_hours`):
a GPU seen through one series (nearly all of them) comes back as one row per hour of a GROUP BY.

`util_hours` is the reduction of any sample list, the reference the store's path is tested against:
one sample per GPU and window by signal precedence (`resolve_duty_cycles`), then per GPU identity
and hour the count and sum of utilization (so hours merge exactly: mean = sum / count), the highest
memory, whether any sample was idle but allocated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from monitor.columns import Columns
from monitor.sources.presets import Signal
from monitor.utilization.records import GpuSample
from monitor.utilization.select import HostHour, Ident, host_keys, resolve_duty_cycles

__all__ = [
    "UtilHour",
    "UtilHours",
    "container_hours",
    "ident_of",
    "order_key",
    "reduce_samples",
    "util_hours",
]


@dataclass(frozen=True, slots=True)
class UtilHour:
    """One GPU (its identity labels, as `GpuSample`'s first eight fields) over one usage hour.

    `samples` windows with utilization summing to `pct_sum` (so `mean_pct` of merged parts stays
    exact); `memory_max` the most GPU memory held (None: never reported); `idle_allocated` some
    window held memory at (almost) 0% busy (`GpuSample.idle_but_allocated`); `signal` the most
    trusted signal of the hour; `container` the host reported GKE container duty cycles that hour
    (a node judged on its node duty cycle without them is a time-shared / MPS GPU). `first` /
    `last`: the epoch seconds of its first and last window's start in the hour: a GKE node
    recreated under its name within the hour is two VMs, one after the other, and the join tells
    their GPUs apart by them (`monitor.gpus`).

    >>> from datetime import UTC
    >>> h = UtilHour("p", None, "42", "vm", None, None, "0", None, datetime(2026, 11, 1, 10, tzinfo=UTC),
    ...              "gpu_utilization", 12, 60.0, None, False, False, 1793527200, 1793530500)
    >>> (h.host, h.mean_pct)
    ('42', 5.0)
    """

    project: str
    zone: str | None
    instance_id: str | None
    instance_name: str | None
    cluster: str | None
    node_name: str | None
    gpu: str
    model: str | None
    hour: datetime
    signal: str
    samples: int
    pct_sum: float
    memory_max: float | None
    idle_allocated: bool
    container: bool
    first: int
    last: int

    @property
    def mean_pct(self) -> float:
        return self.pct_sum / self.samples

    @property
    def host(self) -> str:
        return self.instance_id or self.node_name or self.instance_name or ""

    @property
    def ident(self) -> Ident:
        return ident_of(self)


class UtilHours(Columns[UtilHour], row_type=UtilHour):
    """`UtilHour`s as one list per field: what the store's GROUP BY returns, handed to the GPU join
    (`monitor.gpus`) as columns, so the common path builds no Python object per GPU-hour (39k of
    them in the 3 days of utilization of the bench's scale-5 fleet). Only the hours a caller picks
    become `UtilHour`s (`row`, `rows`): the live estimates read just the provisional ones."""

    __slots__ = ()

    @classmethod
    def of(cls, hours: UtilHours | Sequence[UtilHour]) -> UtilHours:
        """`hours` as columns (a list of `UtilHour`s, from `util_hours` or a test, is transposed)."""
        return hours if isinstance(hours, UtilHours) else cls.from_rows(hours)


def ident_of(x: GpuSample | UtilHour) -> Ident:
    return (x.project, x.zone, x.instance_id, x.instance_name, x.cluster, x.node_name, x.gpu, x.model)


def _hour(dt: datetime) -> datetime:
    return dt.replace(minute=0, second=0, microsecond=0)


def container_hours(
    signals: Iterable[tuple[Ident, str, datetime]], key: Callable[[Ident], tuple]
) -> set[HostHour]:
    """(project, host, hour) of every host with a container duty cycle in that hour."""
    return {(*key(i)[:2], _hour(t)) for i, signal, t in signals if signal == Signal.CONTAINER_DUTY_CYCLE}  # type: ignore[misc]


def order_key(key: Callable[[Ident], tuple]) -> Callable[[tuple[UtilHour, float]], tuple]:
    """The order samples have had since `load_samples`: by GPU (project, host, gpu), then time."""
    keys: dict[Ident, tuple] = {}  # a GPU has one identity over many hours: key it once

    def order(item: tuple[UtilHour, float]) -> tuple:
        ident = item[0].ident
        k = keys.get(ident)
        if k is None:
            k = keys[ident] = key(ident)
        return (k, item[0].hour, item[1])

    return order


def reduce_samples(
    resolved: Sequence[GpuSample], container: set[HostHour], key: Callable[[Ident], tuple]
) -> list[tuple[UtilHour, float]]:
    """Samples already resolved (one per GPU and window) as `UtilHour`s, each with the epoch of its
    first sample (for `order_key`), in order of first appearance."""
    acc: dict[tuple, list] = {}
    for s in resolved:
        ident, hour = ident_of(s), _hour(s.start)
        a = acc.get((ident, hour))
        at = s.start.timestamp()
        if a is None:
            acc[(ident, hour)] = [s.signal, 1, s.utilization_pct, s.memory_used_bytes, s.idle_but_allocated,
                                  at, at]  # fmt: skip
            continue
        if Signal.rank(s.signal) < Signal.rank(a[0]):
            a[0] = s.signal
        a[1] += 1
        a[2] += s.utilization_pct
        if s.memory_used_bytes is not None and (a[3] is None or s.memory_used_bytes > a[3]):
            a[3] = s.memory_used_bytes
        a[4] = a[4] or s.idle_but_allocated
        a[5], a[6] = min(a[5], at), max(a[6], at)
    out = []
    for (ident, hour), (sig, n, total, mem, idle, first, last) in acc.items():
        held = (*key(ident)[:2], hour) in container
        util = UtilHour(*ident, hour, sig, n, total, mem, idle, held, math.floor(first), math.floor(last))
        out.append((util, first))
    return out


def util_hours(samples: Iterable[GpuSample]) -> list[UtilHour]:
    """Samples (from a source or `load_samples`) per GPU and hour; see the module docstring."""
    items = samples if isinstance(samples, list) else list(samples)
    resolved, container = resolve_duty_cycles(items)
    key = host_keys(ident_of(s) for s in resolved)
    out = reduce_samples(resolved, container, key)
    out.sort(key=order_key(key))
    return [h for h, _ in out]
