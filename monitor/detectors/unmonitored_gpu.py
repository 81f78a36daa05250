"""`unmonitored_gpu`: GPU spend with no utilization data, so idle waste there cannot be seen.

Not waste by itself, a blind spot: the fix is to install the Ops Agent (or DCGM exporter) on the
instances listed (GKE nodes are named with their cluster and node pool). One finding per project (the fix is usually one image or one policy per project);
the evidence lists each instance's unmonitored hours and GPU cost, and when a single instance is
involved the scope names it (the identity stays the project's, so a second instance joining later
updates the same finding). Only hours whose utilization was READ count (`inputs.utilization_coverage`):
on a first start the backfill has not reached older hours yet, and an unread hour is neither
monitored nor unmonitored; the evidence names the range read and what was left out. Severity is capped at
`max_severity` (default warning) because the dollars are spend without visibility, not proven loss.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

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
from monitor.detectors.idle_gpu import NODE_POOL_LABEL, latest_pool
from monitor.detectors.inputs import DetectorInputs, GpuHourTable
from monitor.model import Finding, Scope, Severity, counted, fingerprint
from monitor.utilization.coverage import ALL, hours_covered

__all__ = ["UnmonitoredGpu", "UnmonitoredGpuConfig"]


class UnmonitoredGpuConfig(DetectorConfig):
    """`min_impact_usd`: unmonitored GPU dollars per project worth a finding. `min_hours`: an instance
    needs this many unmonitored hours to count (the agent often misses a VM's first minutes).
    `max_severity`: the highest severity this detector raises."""

    min_impact_usd: Decimal = Field(default=Decimal(50), ge=0)
    min_hours: int = Field(default=2, ge=1)
    max_severity: Literal["info", "warning", "critical"] = "warning"


@register("unmonitored_gpu")
class UnmonitoredGpu(Detector):
    Config = UnmonitoredGpuConfig
    config: UnmonitoredGpuConfig

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        # read as columns (row numbers grouped per project and instance): at 5 M export rows a
        # month, where utilization covered 3 of the window's 14 days, building a `GpuHour` for
        # each of the 299,128 unmonitored hours cost more than judging them
        table = inputs.unmonitored_gpu_table()
        c = table.columns
        keys = table.node_keys()
        by_project: dict[str | None, dict[tuple[str | None, str], list[int]]] = defaultdict(
            lambda: defaultdict(list)
        )
        unread: dict[str | None, list[int]] = defaultdict(list)  # hours whose utilization was not read
        covered = hours_covered(inputs.utilization_coverage)
        lo, hi = inputs.window_start, min(inputs.window_end, now)
        hours, projects = c["hour"], c["project"]
        for i, (hour, pct, cost) in enumerate(
            zip(hours, c["mean_utilization_pct"], c["gpu_cost"], strict=True)
        ):
            if not (lo <= hour < hi and pct is None and cost > 0):
                continue
            project = projects[i]
            if covered(project, hour):
                by_project[project][keys[i]].append(i)
            else:
                unread[project].append(i)
        findings = []
        for project in sorted(by_project, key=str):
            instances = {
                k: sorted(v, key=hours.__getitem__)
                for k, v in by_project[project].items()
                if len({hours[i] for i in v}) >= self.config.min_hours
            }
            if (
                instances
                and (f := self._finding(project, table, instances, inputs, unread[project])) is not None
            ):
                findings.append(f)
        return findings

    def _finding(
        self,
        project: str | None,
        table: GpuHourTable,
        instances: dict[tuple[str | None, str], list[int]],
        inputs: DetectorInputs,
        unread: list[int],
    ) -> Finding | None:
        c = table.columns
        hour, cost = c["hour"], c["gpu_cost"]
        rows = [i for k in sorted(instances, key=str) for i in instances[k]]
        # each instance's dollars once (a q6 per hour is most of the work: 300k hours at 5 M export
        # rows a month); exact sums, so the impact is their sum in any order
        dollars = {k: sum((q6(cost[i]) for i in v), Decimal(0)) for k, v in instances.items()}
        impact = sum(dollars.values(), Decimal(0))
        if not self.keep(impact):
            return None
        per_instance = [
            {
                "instance": c["instance"][v[0]],
                "instance_id": c["instance_id"][v[0]],
                "zone": c["zone"][v[0]],
                "cluster": c["cluster"][v[-1]],
                "node_pool": latest_pool([c["node_pool"][i] for i in v]),
                "gpu_model": c["gpu_model"][v[0]],
                "gpus": max(c["gpus"][i] for i in v),
                "hours": len(v),
                "first_hour": iso(hour[v[0]]),
                "last_hour": iso(hour[v[-1]]),
                "gpu_cost_usd": money(dollars[k]),
            }
            for k, v in sorted(instances.items(), key=lambda kv: str(kv[0]))
        ]
        per_instance.sort(key=lambda e: -e["gpu_cost_usd"])
        names = ", ".join(_name(e) for e in per_instance[:5])
        more = f" and {len(per_instance) - 5} more" if len(per_instance) > 5 else ""
        hours = sorted({hour[i] for i in rows})
        sev = min(self.severity(impact), Severity(self.config.max_severity), key=lambda s: s.rank)
        read = _coverage_evidence(project, inputs, [cost[i] for i in unread])
        return Finding(
            kind=self.name,
            severity=sev,
            title=f"GPU spend without utilization data in {project}: {fmt_usd(impact)}",
            summary=(
                f"{counted(len(per_instance), 'GPU instance')} in {project} ({names}{more}) billed "
                f"{fmt_usd(impact)} of GPU time with no utilization metrics, so idle GPUs there "
                "cannot be detected." + _coverage_note(read)
            ),
            impact_usd=impact,
            window_start=hours[0],
            window_end=hours[-1] + ONE_HOUR,
            scope=_scope(project, c, instances),
            evidence={
                "instances": per_instance,
                "unmonitored_hours": len(rows),
                "gpu_cost_usd": money(impact),
                **read,
            },
            recommendation=(
                "Install the Ops Agent with GPU metrics (or the DCGM exporter on GKE) on these "
                "instances, e.g. in the image or instance template, so idle GPUs become visible."
            ),
            fingerprint=fingerprint(self.name, Scope(project=project)),
            provisional=any(hour[i] >= inputs.provisional_from for i in rows),
            estimated=any(c["estimated"][i] for i in rows),
        )


def _coverage_evidence(project: str | None, inputs: DetectorInputs, unread: list[Decimal]) -> dict:
    """Which utilization was read for the project within the window (nothing without a coverage
    record, e.g. `gpucost analyze`, whose files cover the whole window), and the billed GPU-hours
    left out because their utilization was not read yet (`unread`: their GPU costs)."""
    coverage = inputs.utilization_coverage
    if coverage is None:
        return {}
    ranges = coverage.get(project or "", coverage.get(ALL, ()))
    lo, hi = inputs.window_start, inputs.window_end
    clipped = [(max(s, lo), min(e, hi)) for s, e in ranges if s < hi and e > lo]
    return {
        "coverage_start": iso(clipped[0][0]) if clipped else None,
        "coverage": [[iso(s), iso(e)] for s, e in clipped],
        "hours_outside_coverage": len(unread),
        "cost_outside_coverage_usd": money(sum((q6(cost) for cost in unread), Decimal(0))),
    }


def _coverage_note(read: dict) -> str:
    if not read.get("hours_outside_coverage"):
        return ""
    cost = fmt_usd(Decimal(str(read["cost_outside_coverage_usd"])))
    since = f" (read back to {human(read['coverage_start'])})" if read["coverage_start"] else ""
    unread = read["hours_outside_coverage"]
    return (
        f" Only hours whose utilization was read count{since}: "
        f"{counted(unread, 'instance-hour')} ({cost}) not read yet {'is' if unread == 1 else 'are'} not judged."
    )


def _name(e: dict) -> str:
    """An instance as the summary names it; a GKE node with its cluster and node pool."""
    name = str(e["instance"] or e["instance_id"])
    if e["cluster"]:
        return f"GKE node {name} of {e['cluster']}/{e['node_pool'] or '?'}"
    return name


def _scope(
    project: str | None, c: dict[str, list[Any]], instances: dict[tuple[str | None, str], list[int]]
) -> Scope:
    """The project; with one instance, that instance too (zone, name, id, cluster)."""
    if len(instances) != 1:
        return Scope(project=project)
    (rows,) = instances.values()
    last = rows[-1]
    pool = latest_pool([c["node_pool"][i] for i in rows])
    return Scope(
        project=project,
        zone=c["zone"][last],
        region=c["region"][last],
        instance=c["instance"][last],
        instance_id=c["instance_id"][last],
        cluster=c["cluster"][last],
        labels={NODE_POOL_LABEL: pool} if pool else {},
    )
