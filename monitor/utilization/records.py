"""The value objects of the utilization layer: samples, parsed series, fetch results, skip reasons."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from monitor import frozen
from monitor.sources.presets import MetricSpec

__all__ = [
    "BUSY_EPSILON_PCT",
    "IDENT_FIELDS",
    "FetchResult",
    "GpuSample",
    "ParsedSeries",
    "Points",
    "SampleDraft",
    "SkipReason",
    "UtilizationSource",
    "freeze",
    "make_sample",
]

#: Below this mean (percent) a GPU counts as "0% busy" for the idle-but-allocated flag.
BUSY_EPSILON_PCT = 1.0

#: The identifying fields of a sample, in `GpuSample` order (its first eight fields).
IDENT_FIELDS = ("project", "zone", "instance_id", "instance_name", "cluster", "node_name", "gpu", "model")


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Mean utilization of one GPU over one alignment window ``[start, end)``.

    The host is identified by `instance_id` (GCE), else `node_name` (GKE / Prometheus), else
    `instance_name`; `gpu` is the GPU's number (or GKE accelerator id) on that host.

    >>> from datetime import UTC, datetime, timedelta
    >>> t = datetime(2026, 11, 1, 10, tzinfo=UTC)
    >>> s = GpuSample("p", "us-central1-a", "42", "vm-1", None, None, "0", "NVIDIA L4",
    ...               t, t + timedelta(minutes=5), 0.2, "gpu_utilization", 1e9)
    >>> (s.host, s.idle_but_allocated)
    ('42', True)
    """

    project: str
    zone: str | None
    instance_id: str | None
    instance_name: str | None
    cluster: str | None
    node_name: str | None
    gpu: str
    model: str | None
    start: datetime
    end: datetime
    utilization_pct: float
    signal: str
    memory_used_bytes: float | None

    @property
    def host(self) -> str:
        return self.instance_id or self.node_name or self.instance_name or ""

    @property
    def idle_but_allocated(self) -> bool:
        """Memory held while (almost) nothing runs: a stuck job or a notebook keeping a GPU."""
        return bool(self.memory_used_bytes) and self.utilization_pct < BUSY_EPSILON_PCT


#: A mutable twin of `GpuSample` (same slots, same order): build many, then `freeze` them.
SampleDraft = frozen.draft_class(GpuSample)


def freeze(drafts: list[Any]) -> list[GpuSample]:
    """Turn `SampleDraft`s into `GpuSample`s in place (`monitor.frozen`): the layer builds hundreds
    of thousands per poll."""
    return frozen.freeze(drafts, GpuSample)


def make_sample(*values: Any) -> GpuSample:
    """`GpuSample(*values)` through a draft (see `freeze`)."""
    return freeze([SampleDraft(*values)])[0]


class SkipReason(StrEnum):
    MALFORMED_SERIES = "malformed_series"
    UNKNOWN_METRIC = "unknown_metric"
    UNEXPECTED_KIND = "unexpected_metric_kind"
    MISSING_LABELS = "missing_labels"
    BAD_TIMESTAMP = "bad_timestamp"
    NON_NUMERIC = "non_numeric"
    OUT_OF_ORDER = "out_of_order"
    OUT_OF_RANGE = "out_of_range"
    MEMORY_ONLY = "memory_without_utilization"


@dataclass
class FetchResult:
    """Samples of a window, points dropped per `SkipReason` value, and API requests (or files) read.
    `inputs`: a digest of what the samples were read from, where the source can tell (a file
    source's piece: its files' names and contents), so a caller can skip a piece read from the same."""

    samples: list[GpuSample]
    skipped: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    inputs: bytes | None = None


class UtilizationSource(Protocol):
    def fetch(self, start: datetime, end: datetime) -> FetchResult: ...


class Points:
    """(start, end, value) points, epoch seconds and scaled values, as three arrays of doubles.

    A file source keeps its parsed files between polls (the daemon re-reads its last days every
    poll), so this is the daemon's resident size: as a list of 3-tuples a point took 104 bytes (one
    day file of bench scale 48, 1.38 M points, held 144 MB parsed); as arrays it takes 24. It reads
    like that list: iteration and indexing give tuples, and it equals a list of the same tuples.
    """

    __slots__ = ("ends", "starts", "values")

    def __init__(self, points: Iterable[tuple[float, float, float]] = ()):
        # a column at a time from a list (a parse's points arrive as one), not three appends a
        # point (`monitor.utilization.parse._points` has the figures)
        rows = points if isinstance(points, list | tuple) else list(points)
        self.starts = array("d", [p[0] for p in rows])
        self.ends = array("d", [p[1] for p in rows])
        self.values = array("d", [p[2] for p in rows])

    def __len__(self) -> int:
        return len(self.ends)

    def __iter__(self) -> Iterator[tuple[float, float, float]]:
        return zip(self.starts, self.ends, self.values, strict=True)

    def __getitem__(self, i: int) -> tuple[float, float, float]:
        return self.starts[i], self.ends[i], self.values[i]

    def between(self, i: int, j: int) -> Iterator[tuple[float, float, float]]:
        """The points at indexes [i, j), as tuples."""
        return zip(self.starts[i:j], self.ends[i:j], self.values[i:j], strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Points | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def __repr__(self) -> str:
        return f"Points({list(self)!r})"


@dataclass
class ParsedSeries:
    """One TimeSeries reduced to what we use: its spec, identity and (start, end, scaled value) points."""

    spec: MetricSpec
    ident: dict[str, str | None]
    points: Points  # in end order: `assemble` bisects them on `Points.ends`
    #: The longest interval (end - start) among the points, which run in end order: what bounds the
    #: points a window can use (`monitor.utilization.assemble`). 0 for points in time (GAUGE).
    span: float = 0.0
