"""`cross_zone_egress` and `cross_region_egress`: paid traffic between zones or regions.

Traffic inside one zone over internal IPs is free (`network.intra_zone` is never read here). A
training cluster spread over two zones pays for every all-reduce; a dataset in a bucket in another
region is paid for on every epoch. Rows are grouped by *workload*: the GKE cluster when the row has
one, else the value of `workload_label` (e.g. a `job` label shared by the VMs of one training run),
else the sending instance. Workloads at or above `min_impact_usd` get their own finding; the rest of a
project's traffic is summed into one project-level finding when that reaches the minimum, so no dollar
is reported twice.

Both a total and a rate must be reached: `min_impact_usd` in the window and `min_usd_per_day` per day
the traffic ran (hours with traffic / 24, at least one day). Steady low-rate traffic (a replication
job moving a few hundred GiB a day) is the normal price of keeping data in two places and adds up
over a long window; a workload paying tens of dollars a day for traffic that co-location would make
free is the hidden cost worth an alert.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor.detectors.base import (
    Detector,
    DetectorConfig,
    first_last,
    fmt_usd,
    money,
    q6,
    register,
)
from monitor.detectors.inputs import CostHour, DetectorInputs
from monitor.model import Finding, Scope, fingerprint

__all__ = ["CrossRegionEgress", "CrossZoneEgress", "EgressConfig"]

_PAIR = re.compile(r"\bfrom (.+?) to (.+?)$", re.IGNORECASE)
_WITHIN = re.compile(r"\b(within .+)$", re.IGNORECASE)

Workload = tuple[str, str] | None  # ("cluster" | "label" | "instance", value), None = unattributed


class EgressConfig(DetectorConfig):
    """`min_impact_usd`: net traffic dollars in the window for a workload (or the rest of a project)
    worth a finding. `min_usd_per_day`: and at least this much per day the traffic ran.
    `workload_label`: a label whose value groups VMs into one workload when they are not in a GKE
    cluster (e.g. "job"); unset groups by sending instance."""

    min_impact_usd: Decimal = Field(default=Decimal(25), ge=0)
    min_usd_per_day: Decimal = Field(default=Decimal(25), ge=0)
    workload_label: str | None = None


def _round_gib(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.001")))


class _Egress(Detector):
    """Shared logic; subclasses set the subcategory they read and their wording."""

    Config = EgressConfig
    config: EgressConfig
    subcategory: str = ""
    noun: str = ""

    def _workload(self, cluster: str | None, labels: Mapping[str, str], instance: str | None) -> Workload:
        if cluster:
            return ("cluster", cluster)
        lbl = self.config.workload_label
        if lbl and labels.get(lbl):
            return ("label", f"{lbl}={labels[lbl]}")
        if instance:
            return ("instance", instance)
        return None

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        rows: dict[str | None, dict[Workload, list[CostHour]]] = defaultdict(lambda: defaultdict(list))
        zones: dict[tuple[str | None, Workload], set[str]] = defaultdict(set)
        costs, span = inputs.hourly, {"start": inputs.window_start, "end": min(inputs.window_end, now)}
        for r in costs.rows(**span, subcategories=(self.subcategory,)):
            rows[r.project][self._workload(r.cluster, r.labels, r.instance)].append(r)
        # the zones each workload ran in, from any of its rows (compute, disks, traffic)
        for project, cluster, labels, instance, zone in costs.sums(
            ("project", "cluster", "labels", "instance", "zone"), **span, has_zone=True
        ):
            wl = self._workload(cluster, costs.labels_of(labels), instance)
            if wl is not None:
                zones[(project, wl)].add(zone)
        findings: list[Finding] = []
        for project in sorted(rows, key=str):
            rest: list[CostHour] = []
            for wl in sorted(rows[project], key=str):
                group = rows[project][wl]
                if wl is not None and self._worth(group):
                    findings.append(self._finding(project, wl, group, zones[(project, wl)], inputs))
                else:
                    rest.extend(group)
            if rest and self._worth(rest):
                findings.append(self._finding(project, None, rest, set(), inputs))
        return findings

    def _worth(self, group: Sequence[CostHour]) -> bool:
        """At the minimum in total and per day of traffic (see the module docstring)."""
        impact = _net(group)
        days = max(Decimal(1), Decimal(len({r.hour for r in group})) / 24)
        return self.keep(impact) and impact / days >= self.config.min_usd_per_day

    def _finding(
        self,
        project: str | None,
        wl: Workload,
        group: Sequence[CostHour],
        wl_zones: set[str],
        inputs: DetectorInputs,
    ) -> Finding:
        impact = _net(group)
        ev = self._evidence(group, wl_zones)
        start, end = first_last(r.hour for r in group)
        scope = _scope(project, wl, group)
        title, summary, rec = self._wording(project, wl, ev, impact, group)
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=title,
            summary=summary,
            impact_usd=impact,
            window_start=start,
            window_end=end,
            scope=scope,
            evidence=ev,
            recommendation=rec,
            fingerprint=fingerprint(
                self.name,
                Scope(project=project, instance=scope.instance, cluster=scope.cluster, labels=scope.labels),
            ),
            provisional=any(r.hour >= inputs.provisional_from or r.provisional for r in group),
        )

    def _evidence(self, group: Sequence[CostHour], wl_zones: set[str]) -> dict[str, Any]:
        by_sku: dict[tuple[str | None, str | None, str, str], list[CostHour]] = defaultdict(list)
        senders: dict[tuple[str | None, str | None], list[CostHour]] = defaultdict(list)
        for r in group:
            src, dst = self._endpoints(r, wl_zones)
            by_sku[(r.sku_id, r.sku, src, dst)].append(r)
            senders[(r.instance, r.zone)].append(r)
        sku_rows = [
            {
                "sku": k[1],
                "sku_id": k[0],
                "from": k[2],
                "to": k[3],
                "gib": _round_gib(_gib(v)),
                "cost_usd": money(_net(v)),
            }
            for k, v in by_sku.items()
        ]
        sender_rows = [
            {"instance": k[0], "zone": k[1], "gib": _round_gib(_gib(v)), "cost_usd": money(_net(v))}
            for k, v in senders.items()
        ]
        return {
            "gib": _round_gib(_gib(group)),
            "cost_usd": money(sum((q6(r.cost) for r in group), Decimal(0))),
            "credits_usd": money(sum((q6(r.credits) for r in group), Decimal(0))),
            "net_usd": money(_net(group)),
            "hours": len({r.hour for r in group}),
            "zones": sorted({r.zone for r in group if r.zone} | wl_zones),
            "regions": sorted({r.region for r in group if r.region}),
            "by_sku": sorted(sku_rows, key=lambda e: -e["cost_usd"]),
            "senders": sorted(sender_rows, key=lambda e: -e["cost_usd"])[:20],
        }

    def _endpoints(self, r: CostHour, wl_zones: set[str]) -> tuple[str, str]:
        raise NotImplementedError

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: Sequence[CostHour],
    ) -> tuple[str, str, str]:
        raise NotImplementedError


def _net(rows: Sequence[CostHour]) -> Decimal:
    return sum((q6(r.cost) + q6(r.credits) for r in rows), Decimal(0))


def _gib(rows: Sequence[CostHour]) -> Decimal:
    return sum((r.usage_pricing_units for r in rows), Decimal(0))


def _scope(project: str | None, wl: Workload, group: Sequence[CostHour]) -> Scope:
    if wl is None:
        return Scope(project=project)
    kind, value = wl
    if kind == "cluster":
        return Scope(project=project, cluster=value)
    if kind == "label":
        key, _, val = value.partition("=")
        return Scope(project=project, labels={key: val})
    ids = {r.instance_id for r in group if r.instance_id}
    zones = {r.zone for r in group if r.zone}
    return Scope(
        project=project,
        instance=value,
        instance_id=next(iter(ids)) if len(ids) == 1 else None,
        zone=next(iter(zones)) if len(zones) == 1 else None,
    )


def _who(project: str | None, wl: Workload) -> str:
    if wl is None:
        return f"project {project}"
    kind, value = wl
    return {"cluster": f"GKE cluster {value}", "label": f"workload {value}"}.get(kind, f"VM {value}") + (
        f" ({project})"
    )


@register("cross_zone_egress")
class CrossZoneEgress(_Egress):
    subcategory = "network.inter_zone"

    def _endpoints(self, r: CostHour, wl_zones: set[str]) -> tuple[str, str]:
        src = r.zone or r.region or "?"
        others = sorted(wl_zones - {src})
        return src, ", ".join(others) if others else "other zones"

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: Sequence[CostHour],
    ) -> tuple[str, str, str]:
        who = _who(project, wl)
        zl = list(ev["zones"])
        zones = (
            f"between zones ({', '.join(zl)})"
            if len(zl) > 1
            else f"from {zl[0] if zl else '?'} to other zones"
        )
        title = f"Cross-zone traffic in {who}: {fmt_usd(impact)}"
        summary = (
            f"{who} sent {ev['gib']:,} GiB {zones} for {fmt_usd(impact)}; "
            "the same traffic inside one zone over internal IPs would be free."
        )
        senders = ", ".join(f"{s['instance']} ({s['zone']})" for s in ev["senders"][:6] if s["instance"])
        if wl is not None and wl[0] == "cluster":
            rec = (
                f"Run cluster {wl[1]}'s GPU node pool in a single zone (a zonal node pool, or pin the "
                "training job with a zone node selector / compact placement) so all-reduce stays in-zone."
            )
        else:
            rec = (
                f"Co-locate the VMs that talk to each other in one zone ({senders or 'see evidence'}); "
                "use internal IPs (traffic to an external IP is billed even within a zone)."
            )
        return title, summary, rec


@register("cross_region_egress")
class CrossRegionEgress(_Egress):
    subcategory = "network.inter_region"

    def _endpoints(self, r: CostHour, wl_zones: set[str]) -> tuple[str, str]:
        sku = r.sku or ""
        if m := _PAIR.search(sku):
            return m.group(1), m.group(2)
        if m := _WITHIN.search(sku):
            return r.region or "?", m.group(1)
        return r.region or r.zone or "?", "another region"

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: Sequence[CostHour],
    ) -> tuple[str, str, str]:
        who = _who(project, wl)
        pairs = ", ".join(sorted({f"{s['from']} -> {s['to']}" for s in ev["by_sku"]}))
        gcs = any("storage" in (r.service or "").lower() for r in group)
        title = f"Cross-region traffic in {who}: {fmt_usd(impact)}"
        summary = f"{who} moved {ev['gib']:,} GiB across regions ({pairs}) for {fmt_usd(impact)}."
        if gcs:
            summary += " Part of it is Cloud Storage reads from a bucket outside the readers' region."
            rec = (
                "Keep training data in a bucket in the same region as the GPUs (copy the dataset once, "
                "or use a dual-/multi-region bucket that includes it) instead of reading across regions "
                "every epoch."
            )
        else:
            rec = (
                "Keep the VMs that exchange data, and their data, in one region; replicate once rather "
                "than streaming across regions."
            )
        return title, summary, rec
