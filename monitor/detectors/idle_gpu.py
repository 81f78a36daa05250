"""`idle_gpu`: GPUs billed while idle for `min_idle_hours` or more, per GPU node and idle stretch.

The utilization layer already decided which GPU-hours were idle (mean below its threshold, or memory
held at 0% busy) and what they cost; this detector finds runs of consecutive idle hours long enough to
be waste rather than a pause, and words each one by what the history READ can support (a node's
history is its hours in the window; "read" are those with utilization data):

- `never_used`, the forgotten VM: no GPU of the node was busy in any hour read, AND what was read
  covers the node's first billed hour in the window (within `max_gap_hours`) or spans at least
  `FORGOTTEN_MIN_READ_HOURS` (3 days: longer than a weekend pause). "Since <date>" is the first hour
  read; when fewer hours were read than billed, the text says "in the N hours of utilization read".
- `went_idle`: a busy hour was read before the run: a job stopped working. *Possibly hung* when every
  hour of the run had all GPUs idle at ~0% (at most `HUNG_MAX_UTIL_PCT`): the advice is to check
  the job (its logs, an NCCL hang), not to delete the VM.
- `idle`: neither (too little was read to call it forgotten, e.g. a daemon's first hours; or the
  node was idle first and busy later): idle hours are stated, nothing is claimed about before.

Findings and fingerprints (kind + the node identity of `monitor.gpu_identity`: project + instance
id for a GCE VM, project + cluster + node name for a GKE node; never the amount or whether the cost
is estimated): the run still going at the end of the data (the export's latest billed hour, not
the clock: billing lags usage by hours) is THE node's finding, fingerprinted by
the node alone as in earlier releases, so a finding first raised from estimated prices is
reconciled when the billing rows land, and backfilled older hours do not re-key it. A run that
ended inside the window (a job hung for a day last week, then resumed or deleted) is a finding of
its own, fingerprinted by node + the END of the run: the end is fixed once the run is over, while
its start moves when the window slides over it or when older utilization is backfilled (newest
first), so each past run is reported once. A run that ends stops being the ongoing finding (which
resolves) and is reported once more as a past run with its final length and cost.

GKE findings name the cluster and node pool, and say which utilization signal the node was judged on
(a time-shared / MPS GPU has no container metrics, only the node duty cycle). Idle dollars are at the
effective price (gross GPU cost plus its commitment and sustained-use credits); the evidence carries
the on-demand (gross) equivalent, and a reserved GPU billed at $0 shows its idle GPU-hours with $0
idle dollars.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor.detectors.base import (
    ONE_HOUR,
    Detector,
    DetectorConfig,
    iso,
    money,
    q6,
    register,
)
from monitor.detectors.costs import billed_until
from monitor.detectors.idle_gpu_words import MPS_FALLBACK, wording
from monitor.detectors.inputs import DetectorInputs, GpuHour
from monitor.gpu_identity import NodeKind, billed_identity, row_identity
from monitor.gpu_rollups import keep_billed
from monitor.model import Finding, Scope, fingerprint
from monitor.sources.presets import Signal
from monitor.utilization.coverage import read_until

__all__ = [
    "FORGOTTEN_MIN_READ_HOURS",
    "HUNG_MAX_UTIL_PCT",
    "MPS_FALLBACK",
    "NODE_POOL_LABEL",
    "IdleGpu",
    "IdleGpuConfig",
    "instance_key",
    "instance_scope",
    "node_pool",
    "signal_evidence",
]

#: `billed_until`'s half-bound: an export silent for twice this is measured to the clock less that
_EXPORT_LAG = timedelta(hours=12)
_ZERO = Decimal(0)


class IdleGpuConfig(DetectorConfig):
    """`min_idle_hours`: consecutive idle hours before the GPUs count as wasted (a short pause between
    jobs is not waste). `max_gap_hours`: hours without any row (monitoring gap, late data) that do not
    break a run. `min_idle_share`: the share of an instance's GPUs that must be idle for the hour to
    count (0 = any idle GPU counts; its cost alone is the impact)."""

    min_idle_hours: int = Field(default=2, ge=1)
    max_gap_hours: int = Field(default=1, ge=0)
    min_idle_share: float = Field(default=0.0, ge=0, le=1)


#: The billing label GKE puts the node pool in; shown in a GKE finding's scope labels.
NODE_POOL_LABEL = "goog-k8s-node-pool-name"

#: Hours of all-idle utilization read that make a VM "forgotten" even when what was read does not
#: reach back to its first billed hour in the window (3 days: longer than a weekend between jobs).
FORGOTTEN_MIN_READ_HOURS = 72

#: Mean GPU utilization (%) at or under which an idle hour is "~0": a run of such hours right after
#: busy ones is a possibly hung job (the idle threshold itself is higher, 10% by default).
HUNG_MAX_UTIL_PCT = 2.0


def instance_key(row: GpuHour) -> tuple[str | None, str]:
    """(project, node identity key): the identity billed and estimated rows share (`row_identity`,
    inlined: four detectors ask it of every GPU hour)."""
    key = row.node_key
    if key is not None:
        return key
    return node_instance_key(row.project, row.zone, row.instance, row.instance_id, row.cluster)


@functools.lru_cache(maxsize=65536)  # a few thousand nodes; asked ~4 times of every GPU hour
def node_instance_key(
    project: str | None, zone: str | None, instance: str | None, instance_id: str | None, cluster: str | None
) -> tuple[str | None, str]:
    """`instance_key` of a GPU node's hours, from the node's (`monitor.gpus.NODE_COLUMNS`) values."""
    return project, billed_identity(project, zone, instance, instance_id, cluster).key


def instance_scope(rows: Sequence[GpuHour]) -> tuple[Scope, Scope]:
    """The scope shown (with labels, region and node pool, for routing) and its fingerprint scope."""
    last = rows[-1]
    labels: dict[str, str] = {}
    for r in rows:
        labels.update(r.labels)
    pool = node_pool(rows)
    if pool:
        labels.setdefault(NODE_POOL_LABEL, pool)
    shown = Scope(
        project=last.project,
        zone=last.zone,
        region=last.region,
        instance=last.instance,
        instance_id=last.instance_id,
        cluster=last.cluster,
        labels=labels,
    )
    return shown, row_identity(last).scope()


def node_pool(rows: Sequence[GpuHour]) -> str | None:
    """The latest node pool any of the rows names."""
    return latest_pool([r.node_pool for r in rows])


def latest_pool(pools: Sequence[str | None]) -> str | None:
    """The latest node pool named among a node's hours' `pools` (in hour order): `node_pool`, and
    `unmonitored_gpu`'s reading of the same column of a table."""
    return next((p for p in reversed(pools) if p), None)


def signal_evidence(rows: Sequence[GpuHour]) -> tuple[str | None, str | None]:
    """(signal used, note) over the monitored rows: the signal most hours were judged on; for a GKE
    node on its node duty cycle, whether that was the fallback for absent container metrics."""
    judged = [r for r in rows if r.monitored and r.signal]
    if not judged:
        return None, None
    counts: dict[str, int] = defaultdict(int)
    for r in judged:
        counts[r.signal or ""] += 1
    signal = max(counts, key=lambda k: (counts[k], k))
    on_node = [r for r in judged if r.signal == signal and r.container_metrics is not None]
    if on_node and not any(r.container_metrics for r in on_node):
        return signal, MPS_FALLBACK
    if on_node:
        return signal, "node duty cycle used (preferred over the container duty cycle by signal precedence)"
    return signal, None


def _dedupe_hours(rows: Iterable[GpuHour]) -> list[GpuHour]:
    """One row per hour, billed before estimated: an hour is never counted twice during
    reconciliation; the billed rows of one hour (a GKE node recreated under its name) are summed."""
    by_hour: dict[datetime, tuple[bool, list[GpuHour]]] = {}
    for r in rows:
        keep_billed(by_hour, r.hour, r, r.estimated)
    return [_summed(by_hour[h][1]) for h in sorted(by_hour)]


def _summed(rows: list[GpuHour]) -> GpuHour:
    """The billed rows of one node identity and hour as one: money and GPU-hours summed, utilization
    weighted by GPU-hours over the monitored rows; named by the row with most GPU-hours."""
    if len(rows) == 1:
        return rows[0]
    first = max(rows, key=lambda r: r.gpu_hours)
    seen = [r for r in rows if r.monitored]
    weight = float(sum((r.gpu_hours for r in seen), _ZERO))
    mean = (
        sum(float(r.gpu_hours) * (r.mean_utilization_pct or 0.0) for r in seen) / weight
        if weight > 0
        else (sum(r.mean_utilization_pct or 0.0 for r in seen) / len(seen) if seen else None)
    )
    spaces: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        for ns, usd in r.namespaces.items():
            spaces[ns] += usd
    return replace(
        first,
        gpus=max(r.gpus for r in rows),
        gpu_hours=sum((r.gpu_hours for r in rows), _ZERO),
        gpu_cost=sum((r.gpu_cost for r in rows), _ZERO),
        mean_utilization_pct=mean,
        idle_gpu_hours=sum((r.idle_gpu_hours for r in rows), _ZERO),
        idle_cost=sum((r.idle_cost for r in rows), _ZERO),
        gpu_credits=sum((r.gpu_credits for r in rows), _ZERO),
        memory_held=_any(r.memory_held for r in rows),
        container_metrics=_any(r.container_metrics for r in rows),
        signal=min((r.signal for r in seen if r.signal), key=Signal.rank, default=first.signal),
        labels={k: v for r in rows for k, v in r.labels.items()},
        namespaces=dict(spaces) if spaces else first.namespaces,
    )


def _any(flags: Iterable[bool | None]) -> bool | None:
    """True if one is, else False if one is known, else None (unknown)."""
    known = [f for f in flags if f is not None]
    return any(known) if known else None


@register("idle_gpu")
class IdleGpu(Detector):
    Config = IdleGpuConfig
    config: IdleGpuConfig

    @staticmethod
    def _classify(r: GpuHour, min_share: Decimal) -> str:
        """idle / busy / unknown (no utilization data: neither breaks nor extends a run).
        `min_share`: the config's `min_idle_share` as a Decimal (made once per node, not per hour)."""
        if not r.monitored or r.gpu_hours <= 0:
            return "unknown"
        share = r.idle_gpu_hours / r.gpu_hours
        if r.idle_gpu_hours > 0 and share >= min_share:
            return "idle"
        return "busy"

    def _runs(self, rows: Sequence[GpuHour]) -> list[list[GpuHour]]:
        runs: list[list[GpuHour]] = []
        cur: list[GpuHour] = []
        max_step = ONE_HOUR * (self.config.max_gap_hours + 1)
        min_share = Decimal(str(self.config.min_idle_share))
        for r in rows:
            state = self._classify(r, min_share)
            if state == "busy":
                cur = _close(runs, cur)
            elif state == "idle":
                if cur and r.hour - cur[-1].hour > max_step:
                    cur = _close(runs, cur)
                cur.append(r)
        _close(runs, cur)
        return [run for run in runs if len(run) >= self.config.min_idle_hours]

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        if not inputs.gpu_monitored:  # every hour "unknown": no run, and no need to join the hours
            return []
        # A run needs an hour with idle GPU-hours, and an hour's rows summed (`_dedupe_hours`) have
        # some only if one of them has: only those nodes are judged (1 of 1,158 at bench scale 48,
        # where judging every node took most of this detector's time), picked from the table's
        # columns; their hours alone become `GpuHour`s, which the evidence lists hour by hour
        table = inputs.idle_node_gpu_table().between(inputs.window_start, min(inputs.window_end, now))
        keys = table.node_keys()
        idle = {key for key, hours in zip(keys, table["idle_gpu_hours"], strict=True) if hours > 0}
        picked = [i for i, key in enumerate(keys) if key in idle]
        groups: dict[tuple[str | None, str], list[GpuHour]] = defaultdict(list)
        for i, r in zip(picked, table.rows(picked), strict=True):
            groups[keys[i]].append(r)
        findings = []
        # the end of the data, not the clock: billing lags usage by hours, so measured to the clock
        # a still idle node whose latest hours had not landed read as a run that ended, then as
        # ongoing again when they did: the demo's daemon flipped bob-a100-debug's fingerprint (and
        # re-alerted it) nine times in two minutes. The export's latest billed hour, unless it
        # has been silent for over a day (then the clock less a day: a stopped fleet ends its runs)
        # Nor past what utilization was read to: a node whose own billing lags is seen after it
        # only by utilization (estimated hours), so before the next read it looked stopped (the
        # demo's bob-a100-debug, billed to 11:00 and read to 12:00 while the rest was billed to 17:00)
        billed = functools.cache(
            lambda: billed_until(inputs.hourly, inputs.window_start, min(inputs.window_end, now), _EXPORT_LAG)
        )  # asked only when there is an idle run to judge
        for key in sorted(idle, key=str):
            rows = _dedupe_hours(groups[key])
            read = read_until(inputs.utilization_coverage, rows[0].project)
            for run in self._runs(rows):
                end = billed() if read is None else min(billed(), max(read, inputs.window_start))
                if (f := self._finding(rows, run, inputs, end)) is not None:
                    findings.append(f)
        return findings

    def _ongoing(self, rows: Sequence[GpuHour], run: Sequence[GpuHour], end: datetime) -> bool:
        """The run reaches the node's last hour and that hour is at the end of the data (within the
        gap tolerance, at least an hour: the current hour's samples may not be polled yet): the waste
        is still running. Being ongoing decides the fingerprint, so it must not flicker: billed hours
        after the run with no utilization read for them (polling stalled, or not read yet) do not end
        it; only a later hour whose utilization was read (busy, or idle after a gap) does."""
        if any(r.monitored and r.hour > run[-1].hour for r in rows):
            return False
        tolerance = ONE_HOUR * (max(self.config.max_gap_hours, 1) + 1)
        return rows[-1].hour + tolerance >= end

    def _story(self, rows: Sequence[GpuHour], run: Sequence[GpuHour]) -> dict[str, Any]:
        """What the history read supports about this run (see the module docstring): the variant and
        the facts its wording states."""
        read = [r for r in rows if r.monitored]
        first_read = read[0].hour if read else run[0].hour
        before = [r for r in rows if r.hour < run[0].hour and r.busy]
        covers_first = first_read - rows[0].hour <= ONE_HOUR * self.config.max_gap_hours
        read_span = (rows[-1].hour + ONE_HOUR - first_read) // ONE_HOUR
        if before:
            variant = "went_idle"
        elif not any(r.busy for r in rows) and (covers_first or read_span >= FORGOTTEN_MIN_READ_HOURS):
            variant = "never_used"
        else:
            variant = "idle"
        hung = bool(before) and all(
            r.idle_gpu_hours >= r.gpu_hours and (r.mean_utilization_pct or 0.0) <= HUNG_MAX_UTIL_PCT
            for r in run
        )
        return {
            "variant": variant,
            "possibly_hung": hung,
            "first_seen": iso(rows[0].hour),
            "first_read": iso(first_read),
            "billed_hours": len(rows),
            "read_hours": len(read),
            "read_covers_first_billed_hour": covers_first,
            "last_busy": iso(before[-1].hour) if before else None,
            "busy_until": iso(before[-1].hour + ONE_HOUR) if before else None,
        }

    def _finding(
        self, rows: Sequence[GpuHour], run: Sequence[GpuHour], inputs: DetectorInputs, end: datetime
    ) -> Finding | None:
        idle = list(run)
        impact = sum((q6(r.idle_cost) for r in idle), Decimal(0))
        # reserved GPUs billed at $0 have no idle dollars but still waste the reservation: an info
        # finding with $0 impact and the idle GPU-hours in the evidence
        reserved_only = impact == 0 and _reserved(idle)
        if not self.keep(impact) and not reserved_only:
            return None
        shown, ident = instance_scope(rows)
        last = rows[-1]
        ongoing = self._ongoing(rows, run, end)
        run_end = idle[-1].hour + ONE_HOUR
        idle_gpu_hours = sum((r.idle_gpu_hours for r in idle), Decimal(0))
        gross = sum((q6(r.idle_cost_gross) for r in idle), Decimal(0))
        if _reserved(idle):
            gross = _on_demand_equivalent(idle, inputs) or gross
        signal, note = signal_evidence(rows)
        gke = row_identity(last).kind is NodeKind.GKE
        evidence = {
            **self._story(rows, run),
            "platform": "gke" if gke else "gce",
            "cluster": last.cluster,
            "node_pool": node_pool(rows),
            "signal": signal,
            "signal_note": note,
            "machine_type": last.machine_type,
            "gpu_model": last.gpu_model,
            "gpus": max(r.gpus for r in rows),
            "idle_since": iso(idle[0].hour),
            # None while the run is still going
            "idle_until": None if ongoing else iso(run_end),
            # idle up to the end of the data: the waste is still running (not stopped since)
            "still_idle": ongoing,
            "idle_hours": len(idle),
            "max_idle_utilization_pct": max((r.mean_utilization_pct or 0.0) for r in idle),
            "idle_gpu_hours": float(idle_gpu_hours),
            "idle_cost_usd": money(impact),
            # idle dollars are at the effective price; this is the same GPU-hours before the
            # commitment / sustained-use credits (what they would cost on demand)
            "idle_cost_on_demand_usd": money(gross),
            "price_basis": "effective (gross + commitment and sustained-use credits)",
            "pricing_model": last.pricing_model,
            "reserved": _reserved(idle),
            "memory_held_hours": sum(1 for r in idle if r.memory_held),
            "estimated_hours": sum(1 for r in idle if r.estimated),
            "estimated_cost_usd": money(sum((q6(r.idle_cost) for r in idle if r.estimated), Decimal(0))),
            "price_source": _price_source(idle, inputs),
            "runs": [_run_evidence(idle)],
            "hours": [_hour_evidence(r, inputs.provisional_from) for r in idle],
        }
        title, summary, rec = wording(shown, evidence, impact)
        # the ongoing run keeps the node's fingerprint; a past run is keyed by its (fixed) end
        extra = () if ongoing else ("ended", iso(run_end) or "")
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=title,
            summary=summary,
            impact_usd=impact,
            window_start=idle[0].hour,
            window_end=run_end,
            scope=shown,
            evidence=evidence,
            recommendation=rec,
            fingerprint=fingerprint(self.name, ident, *extra),
            provisional=any(r.hour >= inputs.provisional_from for r in idle),
            estimated=any(r.estimated for r in idle),
        )


def _on_demand_equivalent(idle: Sequence[GpuHour], inputs: DetectorInputs) -> Decimal | None:
    """Idle GPU-hours of $0 reserved GPUs at the on-demand list price (None without a price)."""
    if inputs.prices is None:
        return None
    total = Decimal(0)
    for r in idle:
        unit = inputs.prices.gpu_hourly(r.gpu_model or "", r.region, "on_demand") if r.gpu_model else None
        if unit is None:
            return None
        total += q6(unit * r.idle_gpu_hours)
    return total


def _price_source(idle: Sequence[GpuHour], inputs: DetectorInputs) -> str | None:
    """Where list prices in this finding came from (estimated hours, a reserved GPU's on-demand
    equivalent); None when every figure is from billing."""
    if inputs.prices is None or not any(r.estimated or r.gpu_cost + r.gpu_credits <= 0 for r in idle):
        return None
    last = idle[-1]
    term = "spot" if last.pricing_model == "spot" else "on_demand"
    report = getattr(inputs.prices, "gpu_price_source", None)
    found = report(last.gpu_model or "", last.region, term) if report is not None else None
    return found or "price source not reported"


def _reserved(idle: Sequence[GpuHour]) -> bool:
    """The idle GPUs cost nothing per hour: a reserved variant billed at $0 (or fully credited)."""
    return bool(idle) and all(r.gpu_cost + r.gpu_credits <= 0 for r in idle)


def _close(runs: list[list[GpuHour]], cur: list[GpuHour]) -> list[GpuHour]:
    if cur:
        runs.append(cur)
    return []


def _run_evidence(run: Sequence[GpuHour]) -> dict[str, Any]:
    return {
        "start": iso(run[0].hour),
        "end": iso(run[-1].hour + ONE_HOUR),
        "hours": len(run),
        "idle_gpu_hours": float(sum((r.idle_gpu_hours for r in run), Decimal(0))),
        "idle_cost_usd": money(sum((q6(r.idle_cost) for r in run), Decimal(0))),
    }


def _hour_evidence(r: GpuHour, provisional_from: datetime) -> dict[str, Any]:
    return {
        "hour": iso(r.hour),
        "gpu_hours": float(r.gpu_hours),
        "idle_gpu_hours": float(r.idle_gpu_hours),
        "gpu_cost_usd": money(r.gpu_cost),
        "gpu_credits_usd": money(r.gpu_credits),
        "idle_cost_usd": money(r.idle_cost),
        "idle_cost_on_demand_usd": money(r.idle_cost_gross),
        "mean_utilization_pct": r.mean_utilization_pct,
        "memory_held": r.memory_held,
        "estimated": r.estimated,
        "provisional": r.hour >= provisional_from,
    }
