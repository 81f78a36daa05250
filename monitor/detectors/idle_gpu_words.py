"""How `idle_gpu` words a finding: only what the utilization read shows (see the rules in
`monitor.detectors.idle_gpu`'s docstring). Pure text from a finding's scope and evidence."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from monitor.detectors.base import fmt_usd, human
from monitor.model import Scope

__all__ = ["MPS_FALLBACK", "wording"]

#: The evidence note when a GKE node's container metrics are absent and its node metrics are used.
MPS_FALLBACK = "container metrics absent (time-shared/MPS GPUs report none); node duty cycle used"


def wording(scope: Scope, ev: dict[str, Any], impact: Decimal) -> tuple[str, str, str]:
    """(title, summary, recommendation); a GKE node is named with its cluster and node pool."""
    gpus = f"{ev['gpus']}× {ev['gpu_model'] or 'GPU'}"
    if ev["platform"] == "gke":
        name, pool = scope.instance or "?", ev["node_pool"] or "?"
        where = f"GKE node {name} (cluster {scope.cluster}, node pool {pool}, {scope.project}, {scope.zone})"
        title, rec = gke_title_rec(name, scope.cluster, pool, gpus, ev, impact)
        summary = summary_text(where, gpus, ev, impact, holder="a pod")
    else:
        name = scope.instance or scope.instance_id or "?"
        where = f"{name} ({scope.project}, {scope.zone})"
        title, rec = gce_title_rec(name, gpus, ev, impact)
        summary = summary_text(where, gpus, ev, impact, holder="a process")
    return title, tail(summary, ev), rec


def until(ev: dict[str, Any]) -> str:
    return "" if ev["idle_until"] is None else f" until {human(ev['idle_until'])}"


def gce_title_rec(name: str, gpus: str, ev: dict[str, Any], impact: Decimal) -> tuple[str, str]:
    h, usd, past = ev["idle_hours"], fmt_usd(impact), ev["idle_until"] is not None
    if ev["variant"] == "never_used":
        title = f"Forgotten GPU VM {name}: {gpus} unused for {h} h{until(ev)}, {usd}"
        act = (
            f"If {name} still exists and nobody uses it, delete it"
            if past
            else f"Stop or delete {name} if nobody is using it"
        )
        return title, (
            f"{act} (snapshot its disk first if unsure); add an idle-shutdown policy or a TTL label for "
            "interactive GPU VMs."
        )
    if ev["variant"] == "went_idle":
        hung = " (possibly hung)" if ev["possibly_hung"] else ""
        how = f"for {h} h{until(ev)}" if past else f"idle for {h} h so far"
        title = f"Idle GPUs on {name}: {gpus} went idle{hung}{',' if not past else ''} {how}, {usd}"
        fix = "" if past else " Kill or restart it, or stop the VM."
        return title, (
            f"Check the job on {name}: a hung or finished job {'kept' if past else 'is keeping'} the GPUs "
            "allocated. Look at the job's logs for why (a stuck NCCL collective, a dead data loader, a "
            f"job waiting for input).{fix} Add a watchdog that stops the VM (or fails the job) when GPU "
            "utilization stays near zero."
        )
    return f"Idle GPUs on {name}: {gpus} idle for {h} h{until(ev)}, {usd}", (
        f"Check whether {name} is in use: if nothing should run on it, stop or delete it (snapshot its "
        "disk first if unsure); if a job should, look at the job's logs. An idle-shutdown policy or a "
        "TTL label stops interactive GPU VMs nobody uses."
    )


def gke_title_rec(
    name: str, cluster: str | None, pool: str, gpus: str, ev: dict[str, Any], impact: Decimal
) -> tuple[str, str]:
    """GKE wording: "Idle GPUs on GKE node <node> (<cluster>/<pool>)"; the fix is on the pool or the
    job's pods."""
    h, usd = ev["idle_hours"], fmt_usd(impact)
    if ev["variant"] == "never_used":
        return f"Unused GPU node {name} in {cluster}/{pool}: {gpus} unused for {h} h{until(ev)}, {usd}", (
            f"Scale node pool {pool} of cluster {cluster} down (or let the cluster autoscaler remove "
            "empty GPU nodes, min size 0) if nothing is scheduled to use its GPUs."
        )
    return f"Idle GPUs on GKE node {name} ({cluster}/{pool}): {gpus} idle for {h} h{until(ev)}, {usd}", (
        f"Check the pods on {name} (kubectl get pods -A --field-selector spec.nodeName={name}): a hung "
        f"or finished job {'kept' if ev['idle_until'] else 'is keeping'} the GPUs allocated. Look at the job's logs (e.g. a stuck NCCL "
        "collective), delete or restart it, and add a GPU-idle watchdog or activeDeadlineSeconds; let "
        f"node pool {pool} scale down when it is free."
    )


def summary_text(where: str, gpus: str, ev: dict[str, Any], impact: Decimal, holder: str) -> str:
    """The story the history read supports, never more: "since" the first hour read, and "in the N
    hours of utilization read" when fewer hours were read than billed."""
    h, usd, past = ev["idle_hours"], fmt_usd(impact), ev["idle_until"] is not None
    since, until = human(ev["idle_since"]), human(ev["idle_until"])
    if ev["variant"] == "never_used":
        summary = (
            f"{where} {'had' if past else 'has'} {gpus} that showed no GPU activity {seen(ev)}: {h} idle "
            f"hours{f' from {since} to {until}' if past else ''} cost {usd} in GPU charges alone."
        )
    elif ev["variant"] == "went_idle":
        start = "" if ev["idle_since"] == ev["busy_until"] else f" from {since}"
        summary = (
            f"{where} was busy until {human(ev['busy_until'])}, then its GPUs sat idle for {h} hours"
            f"{start}{f' until {until}' if past else ''}, costing {usd} in idle GPU time."
        )
        if ev["possibly_hung"]:
            summary += (
                f" Utilization fell to ~0% busy (at most {ev['max_idle_utilization_pct']:g}% in any idle "
                "hour) and stayed there: the pattern of a hung job."
            )
    else:
        span = f"from {since} to {until}" if past else f"since {since}"
        summary = f"{where} had {gpus} idle for {h} hours {span}, costing {usd} in idle GPU time."
        summary += unknown_before(ev)
    if ev["memory_held_hours"]:
        summary += f" GPU memory stayed allocated while idle: {holder} is holding the GPUs."
    return summary


def seen(ev: dict[str, Any]) -> str:
    """Where no activity was seen: every billed hour since the first one read, or only those read."""
    read, billed, first = ev["read_hours"], ev["billed_hours"], human(ev["first_read"])
    if read >= billed:
        return f"in any hour since {first}"
    return (
        f"in the {read} hours of utilization read since {first} (of {billed} hours billed since "
        f"{human(ev['first_seen'])})"
    )


def unknown_before(ev: dict[str, Any]) -> str:
    """The `idle` variant: what was (not) read before the stretch."""
    read, billed, first = ev["read_hours"], ev["billed_hours"], human(ev["first_read"])
    if read < billed and read == ev["idle_hours"]:  # every hour read is in this stretch
        return f" It showed no GPU activity {seen(ev)}; what it did before {first} is not known."
    if read < billed:
        return (
            f" No GPU activity was read before this stretch; utilization was read for {read} of the "
            f"{billed} hours billed since {human(ev['first_seen'])}, from {first}."
        )
    return f" No GPU activity was read before this stretch (utilization read since {first})."


def tail(summary: str, ev: dict[str, Any]) -> str:
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
