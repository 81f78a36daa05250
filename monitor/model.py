"""Typed records shared by every step: the attribution vocabulary and findings.

Money crosses module boundaries as `Decimal` (exact, from integer micros summed in the engine) or as
integer micros; never as a float that drifts when added up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from typing import Any, TypeVar

from monitor.timeutil import to_iso

K = TypeVar("K")

__all__ = [
    "CATEGORY_SQL",
    "JOB_FINISHED",
    "SUBCATEGORIES",
    "Finding",
    "PricingModel",
    "Scope",
    "Severity",
    "category_of",
    "cents_adding_up",
    "counted",
    "fingerprint",
    "idle_usd",
    "micros_to_decimal",
    "move_cents",
    "plain_cents",
    "to_cents",
    "usd",
]

#: The kind a finished job's message has for `[[slack.routes]]` and silences (`alerts.job_message`),
#: besides the detectors' names.
JOB_FINISHED = "job_finished"

#: The fixed `category.subcategory` vocabulary. Attribution rules may only name these.
SUBCATEGORIES: tuple[str, ...] = (
    "compute.gpu",
    "compute.cpu",
    "compute.ram",
    "compute.commitment_fee",
    "compute.other",
    "network.intra_zone",
    "network.inter_zone",
    "network.inter_region",
    "network.internet",
    "network.google",
    "network.ingress",
    "network.other",
    "storage.gcs",
    "storage.persistent_disk",
    "storage.snapshot",
    "storage.filestore",
    "storage.bigquery",
    "storage.other",
    "orchestration.gke",
    "orchestration.vertex_ai",
    "orchestration.other",
    "licensing.os",
    "licensing.marketplace",
    "support",
    "tax",
    "other",
)


def category_of(subcategory: str) -> str:
    """`compute` of `compute.gpu`; a subcategory without a dot (`support`, `tax`, `other`) is its own
    category."""
    return subcategory.split(".", 1)[0]


#: `category_of` in DuckDB SQL, over a `subcategory` column (the engines group by it).
CATEGORY_SQL = "split_part(subcategory, '.', 1)"


class PricingModel(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    COMMITTED = "committed"
    RESERVED = "reserved"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


def micros_to_decimal(micros: int | None) -> Decimal:
    return Decimal(int(micros or 0)) / Decimal(1_000_000)


_CENT = Decimal("0.01")


def to_cents(amount: Decimal | float | int | None) -> Decimal:
    """An amount rounded to the cent (half-even), the sign taken after rounding: credits of a few
    micro-dollars (real exports carry -1e-06 free-trial credits) print as zero, never as -0.00.
    A float is read as the decimal it prints as (`money()`'s JSON numbers), not its binary value."""
    if amount is None:
        return Decimal(0).quantize(_CENT)
    value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    cents = value.quantize(_CENT, rounding=ROUND_HALF_EVEN)
    return cents if cents else abs(cents)


def cents_adding_up(exact: Mapping[K, Decimal], total: Decimal | None = None) -> dict[K, Decimal]:
    """Figures shown beside their sum, each to the cent, adding up to the sum as shown (`total`, by
    default the exact sum to the cent): each rounded, then the cents still missing moved, one at a
    time, to the figures furthest from their cents that way (largest remainder, `move_cents`). No
    figure moves by a cent or more, and the same figures get the same cents in every table, in
    whatever order it lists them (rounded each, the digest's categories read $0.01 off its total).

    >>> cents_adding_up({"c": Decimal("0.004"), "a": Decimal("0.004"), "b": Decimal("0.0041")})
    {'c': Decimal('0.00'), 'a': Decimal('0.00'), 'b': Decimal('0.01')}
    >>> cents_adding_up({"gpu": Decimal("10.005"), "disk": Decimal("0.005")})  # $10.01; a tie: by key
    {'gpu': Decimal('10.00'), 'disk': Decimal('0.01')}
    """
    cents = {k: to_cents(v) for k, v in exact.items()}
    shown = to_cents(sum(exact.values(), Decimal(0))) if total is None else total
    move_cents(cents, exact, shown - sum(cents.values(), Decimal(0)), list(cents))
    return cents


def move_cents(
    cents: dict[K, Decimal], exact: Mapping[K, Decimal], drift: Decimal, among: Sequence[K]
) -> None:
    """Move `drift` (whole cents) onto the figures `among`, a cent at a time, to those whose exact
    figures are furthest from their cents that way (ties: the first key): the one largest-remainder
    step of every table whose cents add up (`cents_adding_up`, `monitor.jobs.build.paired_cents`)."""
    if not drift or not among:
        return
    step = _CENT if drift > 0 else -_CENT
    order = sorted(among, key=lambda k: (-(exact[k] - cents[k]) * step, k))  # type: ignore[operator]
    for i in range(int(abs(drift) / _CENT)):
        cents[order[i % len(order)]] += step


def plain_cents(amount: Decimal | float | int | None) -> str:
    """`1,234.57`, `-3.00`, `0.00`: a figure to the cent without a currency sign (tables whose
    column names the currency).

    >>> plain_cents(Decimal("1234.565")), plain_cents(Decimal("-0.000032")), plain_cents(-2.5)
    ('1,234.56', '0.00', '-2.50')
    """
    return f"{to_cents(amount):,.2f}"


def usd(amount: Decimal | float | int | None) -> str:
    """`$1,234.57`, `-$3.00`, `$0.00`: every dollar figure gpucost prints (titles, tables, Slack,
    the digest), rounded half-even to the cent as Decimal rounds.

    >>> usd(Decimal("1234.565")), usd(Decimal("-3")), usd(-0.0), usd(Decimal("-0.000001")), usd(None)
    ('$1,234.56', '-$3.00', '$0.00', '$0.00', '$0.00')
    """
    cents = to_cents(amount)
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents:,.2f}"


def counted(n: int, noun: str) -> str:
    """`1 hour`, `3 hours`, `0 findings`: a count with its noun, for every sentence gpucost writes
    ("1 GPU instance(s)" read as a form, not a sentence). Every noun it counts takes an "s".

    >>> counted(1, "GPU instance"), counted(3, "GPU-hour"), counted(0, "finding")
    ('1 GPU instance', '3 GPU-hours', '0 findings')
    """
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def idle_usd(
    idle: Decimal | float, unmonitored: Decimal | float, monitored: bool, gpu_hours: Decimal | float
) -> str:
    """Idle GPU dollars as far as utilization tells them: "unknown" when the line has GPU-hours
    and none of them had utilization (`monitored` False: never read, or no agent), even at $0 of
    GPU spend (reserved GPUs); "≥ $X" when only some had; else `usd` (a line without GPUs: $0.00).
    One wording for the jobs table, the digest's Top jobs and the finished-job message (seed 23's
    embeddings, one L4 without an agent, read "$0.00" idle; so did GPUs billed at $0 with no
    agent, in the table and the digest, while the message said "unknown").

    >>> idle_usd(Decimal(0), Decimal("188.17"), False, 24), idle_usd(0, 0, False, 24)
    ('unknown', 'unknown')
    >>> idle_usd(12.5, 3, True, 24), idle_usd(12.5, 0, True, 24), idle_usd(0, 0, False, 0)
    ('≥ $12.50', '$12.50', '$0.00')
    """
    if not monitored and (gpu_hours or unmonitored):
        return "unknown"
    return f"≥ {usd(idle)}" if unmonitored else usd(idle)


@dataclass(frozen=True)
class Scope:
    """What a finding is about. Fields not relevant to a finding stay None."""

    project: str | None = None
    zone: str | None = None
    region: str | None = None
    instance: str | None = None
    instance_id: str | None = None
    cluster: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "zone": self.zone,
            "region": self.region,
            "instance": self.instance,
            "instance_id": self.instance_id,
            "cluster": self.cluster,
            "labels": dict(sorted(self.labels.items())),
        }


def fingerprint(kind: str, scope: Scope, *extra: str) -> str:
    """A stable identity for "the same problem": kind + scope, never the window or the amount,
    so a finding that grows over hours is one alert, not one per poll."""
    payload = json.dumps([kind, scope.to_dict(), list(extra)], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Finding:
    """A hidden cost with its dollar impact and the evidence behind that figure."""

    kind: str
    severity: Severity
    title: str
    summary: str
    impact_usd: Decimal
    window_start: datetime
    window_end: datetime
    scope: Scope
    evidence: dict[str, Any]
    recommendation: str
    fingerprint: str
    provisional: bool = False
    estimated: bool = False

    @property
    def over(self) -> bool:
        """The waste it describes has ended: an idle run that stopped inside the window (`idle_gpu`
        says so in its evidence, `still_idle` false, judged against the export's latest billed
        hour, not the clock). Such a finding stays while the window holds it; the alert pipeline
        tells it once and does not remind it (`alerts.remind_ended`)."""
        return self.evidence.get("still_idle") is False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "title": self.title,
            "summary": self.summary,
            "impact_usd": float(round(self.impact_usd, 2)),
            "window_start": to_iso(self.window_start),
            "window_end": to_iso(self.window_end),
            "scope": self.scope.to_dict(),
            "evidence": self.evidence,
            "recommendation": self.recommendation,
            "fingerprint": self.fingerprint,
            "provisional": self.provisional,
            "estimated": self.estimated,
        }
