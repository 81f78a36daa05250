"""`idle_gpu`: GPUs billed while idle for `min_idle_hours` or more, per instance.

The utilization layer already decided which GPU-hours were idle (mean below its threshold, or memory
held at 0% busy) and what they cost; this detector finds runs of consecutive idle hours long enough to
be waste rather than a pause, and tells two stories apart:

- *never used*: no GPU on the instance was busy in any hour of the window since it was first seen,
  the forgotten VM;
- *went idle*: the GPUs were busy and then stopped working, the hung or finished-but-not-stopped job.

One finding per GPU node (its fingerprint is kind + the node identity of `monitor.gpu_identity`:
project + instance id for a GCE VM, project + cluster + node name for a GKE node; never the window,
the amount or whether the cost is estimated), so a finding first raised from estimated prices is
reconciled when the billing rows land instead of alerting twice. GKE findings name the cluster and
node pool, and say which utilization signal the node was judged on (a time-shared / MPS GPU has no
container metrics, only the node duty cycle).

Idle dollars are at the effective price (gross GPU cost plus its commitment and sustained-use
credits); the evidence carries the on-demand (gross) equivalent, and a reserved GPU billed at $0
shows its idle GPU-hours with $0 idle dollars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor.detectors.base import (
    ONE_HOUR,
    Detector,
    DetectorConfig,
    fmt_usd,
    human,
    iso,
    money,
    q6,
    register,
)
from monitor.detectors.inputs import DetectorInputs, GpuHour
from monitor.gpu_identity import NodeKind, row_identity
from monitor.model import Finding, Scope, fingerprint

__all__ = [
    "MPS_FALLBACK",
    "NODE_POOL_LABEL",
    "IdleGpu",
    "IdleGpuConfig",
    "instance_key",
    "instance_scope",
    "node_pool",
    "signal_evidence",
]


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

#: Evidence wording for a GKE node judged on its node duty cycle because it has no container metrics.
MPS_FALLBACK = "container metrics absent (time-shared/MPS GPUs report none); node duty cycle used"


def instance_key(row: GpuHour) -> tuple[str | None, str]:
    """(project, node identity key): the identity billed and estimated rows share."""
    return row.project, row_identity(row).key


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
    return next((r.node_pool for r in reversed(rows) if r.node_pool), None)


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
    """One row per hour, billed before estimated: an hour is never counted twice during reconciliation."""
    by_hour: dict[datetime, GpuHour] = {}
    for r in rows:
        cur = by_hour.get(r.hour)
        if cur is None or (cur.estimated and not r.estimated):
            by_hour[r.hour] = r
    return [by_hour[h] for h in sorted(by_hour)]


@register("idle_gpu")
class IdleGpu(Detector):
    Config = IdleGpuConfig
    config: IdleGpuConfig

    def _classify(self, r: GpuHour) -> str:
        """idle / busy / unknown (no utilization data: neither breaks nor extends a run)."""
        if not r.monitored or r.gpu_hours <= 0:
            return "unknown"
        share = r.idle_gpu_hours / r.gpu_hours
        if r.idle_gpu_hours > 0 and share >= Decimal(str(self.config.min_idle_share)):
            return "idle"
        return "busy"

    def _runs(self, rows: Sequence[GpuHour]) -> list[list[GpuHour]]:
        runs: list[list[GpuHour]] = []
        cur: list[GpuHour] = []
        max_step = ONE_HOUR * (self.config.max_gap_hours + 1)
        for r in rows:
            state = self._classify(r)
            if state == "busy":
                cur = _close(runs, cur)
            elif state == "idle":
                if cur and r.hour - cur[-1].hour > max_step:
                    cur = _close(runs, cur)
                cur.append(r)
        _close(runs, cur)
        return [run for run in runs if len(run) >= self.config.min_idle_hours]

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        groups: dict[tuple[str | None, str], list[GpuHour]] = defaultdict(list)
        for r in inputs.gpu_hours:
            if inputs.window_start <= r.hour < inputs.window_end and r.hour < now:
                groups[instance_key(r)].append(r)
        findings = []
        end = min(inputs.window_end, now)
        for key in sorted(groups, key=str):
            rows = _dedupe_hours(groups[key])
            runs = self._runs(rows)
            if runs and (f := self._finding(rows, runs, inputs, end)) is not None:
                findings.append(f)
        return findings

    def _finding(
        self, rows: Sequence[GpuHour], runs: list[list[GpuHour]], inputs: DetectorInputs, end: datetime
    ) -> Finding | None:
        idle = [r for run in runs for r in run]
        impact = sum((q6(r.idle_cost) for r in idle), Decimal(0))
        # reserved GPUs billed at $0 have no idle dollars but still waste the reservation: an info
        # finding with $0 impact and the idle GPU-hours in the evidence
        reserved_only = impact == 0 and _reserved(idle)
        if not self.keep(impact) and not reserved_only:
            return None
        never_used = not any(r.monitored and r.idle_gpu_hours < r.gpu_hours for r in rows)
        shown, ident = instance_scope(rows)
        busy = [r.hour for r in rows if self._classify(r) == "busy"]
        last = rows[-1]
        gpus = max(r.gpus for r in rows)
        idle_gpu_hours = sum((r.idle_gpu_hours for r in idle), Decimal(0))
        gross = sum((q6(r.idle_cost_gross) for r in idle), Decimal(0))
        if _reserved(idle):
            gross = _on_demand_equivalent(idle, inputs) or gross
        signal, note = signal_evidence(rows)
        gke = row_identity(last).kind is NodeKind.GKE
        evidence = {
            "variant": "never_used" if never_used else "went_idle",
            "platform": "gke" if gke else "gce",
            "cluster": last.cluster,
            "node_pool": node_pool(rows),
            "signal": signal,
            "signal_note": note,
            "machine_type": last.machine_type,
            "gpu_model": last.gpu_model,
            "gpus": gpus,
            "first_seen": iso(rows[0].hour),
            "last_busy": iso(max(busy)) if busy else None,
            "idle_since": iso(runs[-1][0].hour),
            # idle up to the end of the data: the waste is still running (not stopped since)
            "still_idle": runs[-1][-1] is last
            and last.hour + ONE_HOUR * (self.config.max_gap_hours + 1) >= end,
            "idle_hours": len(idle),
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
            "runs": [_run_evidence(run) for run in runs],
            "hours": [_hour_evidence(r, inputs.provisional_from) for r in idle],
        }
        title, summary, rec = _wording(shown, evidence, impact)
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=title,
            summary=summary,
            impact_usd=impact,
            window_start=idle[0].hour,
            window_end=idle[-1].hour + ONE_HOUR,
            scope=shown,
            evidence=evidence,
            recommendation=rec,
            fingerprint=fingerprint(self.name, ident),
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


def _wording(scope: Scope, ev: dict[str, Any], impact: Decimal) -> tuple[str, str, str]:
    if ev["platform"] == "gke":
        return _gke_wording(scope, ev, impact)
    name = scope.instance or scope.instance_id or "?"
    where = f"{name} ({scope.project}, {scope.zone})"
    gpus = f"{ev['gpus']}× {ev['gpu_model'] or 'GPU'}"
    hours = ev["idle_hours"]
    if ev["variant"] == "never_used":
        title = f"Forgotten GPU VM {name}: {gpus} unused for {hours} h, {fmt_usd(impact)}"
        summary = (
            f"{where} has {gpus} that showed no GPU activity in any hour since {human(ev['first_seen'])}: "
            f"{hours} idle hours cost {fmt_usd(impact)} in GPU charges alone."
        )
        rec = (
            f"Stop or delete {name} if nobody is using it (snapshot its disk first if unsure); "
            "add an idle-shutdown policy or a TTL label for interactive GPU VMs."
        )
    else:
        title = f"Idle GPUs on {name}: {gpus} idle for {hours} h, {fmt_usd(impact)}"
        runs = len(ev["runs"])
        stretches = "" if runs == 1 else f" in {runs} stretches"
        summary = (
            f"{where} did GPU work and then sat idle for {hours} hours{stretches} (latest from "
            f"{human(ev['idle_since'])}), costing {fmt_usd(impact)} in idle GPU time."
        )
        if ev["memory_held_hours"]:
            summary += " GPU memory stayed allocated while idle: a process is holding the GPUs."
        rec = (
            f"Check the job on {name}: a hung or finished job is keeping the GPUs allocated. Kill or "
            "restart it, or stop the VM; add a watchdog that stops the VM (or fails the job) when GPU "
            "utilization stays near zero."
        )
    return title, _tail(summary, ev), rec


def _gke_wording(scope: Scope, ev: dict[str, Any], impact: Decimal) -> tuple[str, str, str]:
    """A GKE node: named with its cluster and node pool; the fix is on the pool or the job's pods."""
    name = scope.instance or "?"
    pool = ev["node_pool"] or "?"
    where = f"GKE node {name} (cluster {scope.cluster}, node pool {pool}, {scope.project}, {scope.zone})"
    gpus = f"{ev['gpus']}× {ev['gpu_model'] or 'GPU'}"
    hours = ev["idle_hours"]
    if ev["variant"] == "never_used":
        title = f"Unused GPU node {name} in {scope.cluster}/{pool}: {gpus} unused for {hours} h, {fmt_usd(impact)}"
        summary = (
            f"{where} has {gpus} that showed no GPU activity in any hour since {human(ev['first_seen'])}: "
            f"{hours} idle hours cost {fmt_usd(impact)} in GPU charges alone."
        )
        rec = (
            f"Scale node pool {pool} of cluster {scope.cluster} down (or let the cluster autoscaler "
            "remove empty GPU nodes, min size 0) if nothing is scheduled to use its GPUs."
        )
    else:
        title = f"Idle GPUs on GKE node {name} ({scope.cluster}/{pool}): {gpus} idle for {hours} h, {fmt_usd(impact)}"
        summary = (
            f"{where} did GPU work and then sat idle for {hours} hours (latest from "
            f"{human(ev['idle_since'])}), costing {fmt_usd(impact)} in idle GPU time."
        )
        if ev["memory_held_hours"]:
            summary += " GPU memory stayed allocated while idle: a pod is holding the GPUs."
        rec = (
            f"Check the pods on {name} (kubectl get pods -A --field-selector spec.nodeName={name}): a hung "
            "or finished job is keeping the GPUs allocated. Delete or restart it, and add a GPU-idle "
            f"watchdog or activeDeadlineSeconds; let node pool {pool} scale down when it is free."
        )
    return title, _tail(summary, ev), rec


def _tail(summary: str, ev: dict[str, Any]) -> str:
    """What every idle-GPU summary ends with: still idle, signal fallback, prices, estimates."""
    if ev["still_idle"]:
        summary += " Still idle at the end of the window."
    if ev["signal_note"] == MPS_FALLBACK:
        summary += (
            " Judged on the node duty cycle: the node reports no container GPU metrics (time-shared/MPS)."
        )
    if ev["reserved"]:
        summary += (
            f" The GPUs are reserved (billed at $0): {ev['idle_gpu_hours']:g} idle GPU-hours, "
            f"{fmt_usd(Decimal(str(ev['idle_cost_on_demand_usd'])))} on demand."
        )
    elif ev["idle_cost_on_demand_usd"] > ev["idle_cost_usd"]:
        summary += (
            " At the effective price after commitment / sustained-use credits; "
            f"{fmt_usd(Decimal(str(ev['idle_cost_on_demand_usd'])))} on demand."
        )
    if ev["estimated_hours"]:
        summary += (
            f" {ev['estimated_hours']} of the hours ({fmt_usd(Decimal(str(ev['estimated_cost_usd'])))}) are "
            "priced from list prices"
            + (f" ({ev['price_source']})" if ev.get("price_source") else "")
            + ": their billing rows have not arrived yet."
        )
    return summary
