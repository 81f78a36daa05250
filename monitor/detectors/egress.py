"""`cross_zone_egress` and `cross_region_egress`: paid traffic between zones or regions.

Traffic inside one zone over internal IPs is free (`network.intra_zone` is never read here). A
training cluster spread over two zones pays for every all-reduce; a dataset in a bucket in another
region is paid for on every epoch. Rows are grouped by *workload*: the GKE cluster when the row has
one, else the value of `workload_label` (e.g. a `job` label shared by the VMs of one training run),
else the bucket of a Cloud Storage row (its resource name: the traffic is reads of that bucket), else
the sending instance. Workloads at or above `min_impact_usd` get their own finding; the rest of a
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
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor.detectors.base import ONE_HOUR, Detector, DetectorConfig, fmt_usd, money, register
from monitor.detectors.costs import Costs, one_of
from monitor.detectors.inputs import DetectorInputs
from monitor.model import Finding, Scope, fingerprint, micros_to_decimal
from monitor.sku import MULTI_REGION, REPLICATION, ci
from monitor.timeutil import from_naive_utc, naive_utc

__all__ = ["CrossRegionEgress", "CrossZoneEgress", "EgressConfig"]

_PAIR = re.compile(r"\bfrom (.+?) to (.+?)$", re.IGNORECASE)
#: Cloud Storage's `... within Northern America` and older `GCP Storage egress between NA and EU`.
_WITHIN = re.compile(r"\b((?:within|between) .+)$", re.IGNORECASE)
#: Cloud Storage's replication of writes to a dual- or multi-region bucket (`monitor.sku.REPLICATION`).
_REPLICATION = re.compile(ci(REPLICATION))
#: Cloud Storage's reads of a multi-region bucket from a region on its continent (`monitor.sku.MULTI_REGION`).
_MULTI_REGION = re.compile(ci(MULTI_REGION))

Workload = tuple[str, str] | None  # ("cluster" | "label" | "bucket" | "instance", value), None = unattributed

#: A Cloud Storage row (`service` is the service's description): its resource is a bucket, not a VM.
_GCS_ROW = "coalesce(instance, '') <> '' AND lower(coalesce(service, '')) = 'cloud storage'"


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

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        costs, span = inputs.hourly, {"start": inputs.window_start, "end": min(inputs.window_end, now)}
        traffic, params = self._tagged(costs, **span, subcategories=(self.subcategory,))
        # each workload's net dollars and hours of traffic: which are worth a finding of their own
        worth: dict[str | None, dict[Workload, bool]] = defaultdict(dict)
        for project, kind, value, net, hours in costs.select(
            f"{traffic} SELECT project, wk, wv, SUM(cost + credits), COUNT(DISTINCT hour) FROM t GROUP BY ALL",
            params,
        ):
            wl = (kind, value) if kind is not None else None
            worth[project][wl] = wl is not None and self._worth(micros_to_decimal(net), hours)
        mine = [(p, *wl) for p, wls in worth.items() for wl, ok in wls.items() if ok and wl is not None]
        placed = costs.where(**span, has_zone=True)
        groups = self._groups(costs, traffic, params, placed, mine, inputs.provisional_from)
        zones = self._zones(inputs, span) if mine else {}
        findings: list[Finding] = []
        for project in sorted(worth, key=str):
            for wl in sorted(worth[project], key=str):
                if worth[project][wl]:
                    where = zones.get((project, wl), frozenset())
                    findings.append(self._finding(project, wl, groups[(project, wl)], where))
            rest = groups.get((project, None))
            if rest is not None and self._worth(rest.net, rest.hours):
                findings.append(self._finding(project, None, rest, frozenset()))
        return findings

    def _zones(
        self, inputs: DetectorInputs, span: dict[str, datetime]
    ) -> Mapping[tuple[str | None, Workload], frozenset[str]]:
        """The zones each workload ran in, from any of its rows (compute, disks, traffic): the same
        for both egress detectors when they name workloads alike, so read from the engine once a
        run (`DetectorInputs.derived`), and only by a detector with a workload worth a finding."""

        def read() -> dict[tuple[str | None, Workload], frozenset[str]]:
            every, more = self._tagged(inputs.hourly, **span, has_zone=True)
            zones: dict[tuple[str | None, Workload], set[str]] = defaultdict(set)
            for project, kind, value, zone in inputs.hourly.select(
                f"{every} SELECT DISTINCT project, wk, wv, zone FROM t WHERE wk IS NOT NULL", more
            ):
                zones[(project, (kind, value))].add(zone)
            return {k: frozenset(v) for k, v in zones.items()}

        key = ("egress zones", self.config.workload_label, span["start"], span["end"])
        return inputs.derived(key, read)

    def _tagged(self, costs: Costs, **where: Any) -> tuple[str, list[Any]]:
        """`t`: the rows `where` selects (`Costs.sums`' filters), each with its workload and its place
        in the readers' order (`pos`). The workload (`wk`, `wv`: kind and value, NULL for none) is
        the GKE cluster when the row has one, else the value of `workload_label`, else the bucket
        of a Cloud Storage row, else the sending instance (see the module docstring)."""
        where, params = costs.where(**where)
        lbl = self.config.workload_label
        sets = {k: f"{lbl}={v[lbl]}" for k, v in costs.label_sets.items() if lbl and v.get(lbl)}
        named = {
            "cluster": "coalesce(c.cluster, '') <> ''",
            "label": "l.v IS NOT NULL",
            "bucket": _GCS_ROW,
            "instance": "coalesce(c.instance, '') <> ''",
        }
        kind = " ".join(f"WHEN {cond} THEN '{k}'" for k, cond in named.items())
        value = " ".join(
            f"WHEN {cond} THEN {v}"
            for cond, v in zip(named.values(), ("c.cluster", "l.v", "c.instance", "c.instance"), strict=True)
        )
        sql = f"""
            WITH w AS (SELECT *, row_number() OVER (ORDER BY {costs.order}) AS pos FROM costs{where}),
            l AS (SELECT unnest(?::VARCHAR[]) AS k, unnest(?::VARCHAR[]) AS v),
            t AS (
              SELECT c.*, CASE {kind} END AS wk, CASE {value} END AS wv
              FROM w AS c LEFT JOIN l ON c.labels = l.k
            )
        """
        return sql, [*params, list(sets), list(sets.values())]

    def _groups(
        self,
        costs: Costs,
        traffic: str,
        params: list[Any],
        placed: tuple[str, list[Any]],
        mine: list[tuple],
        provisional_from: datetime,
    ) -> dict[tuple[str | None, Workload], _Group]:
        """Per project, each workload worth a finding of its own and the rest of the project's
        traffic (workload None), summed in the engine by what the evidence names (SKU and endpoints,
        sender), so no traffic row crosses into Python: at bench scale 48 the detectors fetched
        their 33,600 per-VM traffic rows, three quarters of `analyze`'s cost rows. Dollars are
        exact (integer micros); GiB are summed per part as floats, as the store sums usage per
        hour, and shown to the MiB (`_round_gib`).

        The export bills network SKUs to a region with no zone (see the test of zone-less rows), so
        a VM's traffic is placed in the one zone its other rows of the window (`placed`: those with
        a zone) give that VM; a bucket's, or a name seen in two zones, keeps the row's region."""
        own = one_of(("t.project", "t.wk", "t.wv"), mine)
        where, where_params = placed
        keyed = f"""{traffic},
            vz AS (
              SELECT project, instance, min(zone) AS vz_zone FROM costs{where}
              {"AND" if where else "WHERE"} instance IN (SELECT instance FROM t)
              GROUP BY ALL HAVING count(DISTINCT zone) = 1
            ),
            g AS (
              SELECT t.* REPLACE (
                CASE WHEN lower(coalesce(t.service, '')) = 'cloud storage' THEN t.zone
                  ELSE coalesce(t.zone, vz.vz_zone) END AS zone
              ), {own.cond} AS own
              FROM t LEFT JOIN vz ON t.project IS NOT DISTINCT FROM vz.project AND t.instance = vz.instance
            )"""
        args = [*params, *where_params, *own.params]
        group = "project, CASE WHEN own THEN wk END, CASE WHEN own THEN wv END"
        out: dict[tuple[str | None, Workload], _Group] = {}
        for project, kind, value, hours in costs.select(
            f"{keyed} SELECT {group}, COUNT(DISTINCT hour) FROM g GROUP BY ALL", args
        ):
            out[(project, (kind, value) if kind is not None else None)] = _Group(hours=hours)
        for (project, kind, value, _pos, sku_id, sku, zone, region, instance, iid, storage, cost, credits,
             gib, first, last, prov, bucket, service) in costs.select(
            f"{keyed} SELECT {group}, MIN(pos), sku_id, sku, zone, region, instance, instance_id,"
            " bool_or(contains(lower(coalesce(service, '')), 'storage')), SUM(cost), SUM(credits),"
            " SUM(usage), MIN(hour), MAX(hour), bool_or(provisional OR hour >= ?),"
            f" bool_or({_GCS_ROW}), MIN(service)"
            f" FROM g GROUP BY {group}, sku_id, sku, zone, region, instance, instance_id ORDER BY 4",
            [*args, naive_utc(provisional_from)],
        ):  # fmt: skip
            g = out[(project, (kind, value) if kind is not None else None)]
            g.parts.append(
                _Part(sku_id, sku, zone, region, instance, iid, storage, micros_to_decimal(cost),
                      micros_to_decimal(credits), Decimal(str(gib)), from_naive_utc(first),
                      from_naive_utc(last), prov, bucket, service)
            )  # fmt: skip
        return out

    def _worth(self, impact: Decimal, hours: int) -> bool:
        """At the minimum in total and per day of traffic (see the module docstring)."""
        days = max(Decimal(1), Decimal(hours) / 24)
        return self.keep(impact) and impact / days >= self.config.min_usd_per_day

    def _finding(
        self, project: str | None, wl: Workload, group: _Group, wl_zones: AbstractSet[str]
    ) -> Finding:
        impact = group.net
        ev = self._evidence(group, wl_zones)
        start = min(p.first for p in group.parts)
        end = max(p.last for p in group.parts) + ONE_HOUR
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
            provisional=any(p.provisional for p in group.parts),
        )

    def _evidence(self, group: _Group, wl_zones: AbstractSet[str]) -> dict[str, Any]:
        # parts come in the order of their first row (`pos`): the order the rows were read in
        by_sku: dict[tuple[str | None, str | None, str, str], list[_Part]] = defaultdict(list)
        senders: dict[tuple[str, str | None, str | None], list[_Part]] = defaultdict(list)
        for p in group.parts:
            src, dst = self._endpoints(p, wl_zones)
            by_sku[(p.sku_id, p.sku, src, dst)].append(p)
            senders[("bucket" if p.bucket else "instance", p.instance, p.zone)].append(p)
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
            {k[0]: k[1], "zone": k[2], "gib": _round_gib(_gib(v)), "cost_usd": money(_net(v))}
            for k, v in senders.items()
        ]
        return {
            "gib": _round_gib(_gib(group.parts)),
            "cost_usd": money(sum((p.cost for p in group.parts), Decimal(0))),
            "credits_usd": money(sum((p.credits for p in group.parts), Decimal(0))),
            "net_usd": money(group.net),
            "hours": group.hours,
            "zones": sorted({p.zone for p in group.parts if p.zone} | wl_zones),
            "regions": sorted({p.region for p in group.parts if p.region}),
            "by_sku": sorted(sku_rows, key=lambda e: -e["cost_usd"]),
            "senders": sorted(sender_rows, key=lambda e: -e["cost_usd"])[:20],
        }

    def _endpoints(self, r: _Part, wl_zones: AbstractSet[str]) -> tuple[str, str]:
        raise NotImplementedError

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: _Group,
    ) -> tuple[str, str, str]:
        raise NotImplementedError


@dataclass(slots=True)
class _Part:
    """A workload's traffic rows of one SKU, place and sender, summed in the engine."""

    sku_id: str | None
    sku: str | None
    zone: str | None
    region: str | None
    instance: str | None
    instance_id: str | None
    storage: bool  # a Cloud Storage row among them (`service` names storage)
    cost: Decimal
    credits: Decimal
    gib: Decimal
    first: datetime
    last: datetime
    provisional: bool
    bucket: bool  # `instance` names a Cloud Storage bucket (`_GCS_ROW`), not a VM
    service: str | None = None


@dataclass(slots=True)
class _Group:
    """The traffic of one finding: its parts, in the order of their first row, and its hours."""

    hours: int
    parts: list[_Part] = field(default_factory=list)

    @property
    def net(self) -> Decimal:
        return _net(self.parts)


def _net(parts: Sequence[_Part]) -> Decimal:
    return sum((p.cost + p.credits for p in parts), Decimal(0))


def _gib(parts: Sequence[_Part]) -> Decimal:
    return sum((p.gib for p in parts), Decimal(0))


def _scope(project: str | None, wl: Workload, group: _Group) -> Scope:
    if wl is None:
        return Scope(project=project)
    kind, value = wl
    if kind == "cluster":
        return Scope(project=project, cluster=value)
    if kind == "label":
        key, _, val = value.partition("=")
        return Scope(project=project, labels={key: val})
    if kind == "bucket":  # named in `instance` as a Filestore share is: a fingerprint as before
        regions = {p.region for p in group.parts if p.region}
        return Scope(
            project=project, instance=value, region=next(iter(regions)) if len(regions) == 1 else None
        )
    ids = {p.instance_id for p in group.parts if p.instance_id}
    zones = {p.zone for p in group.parts if p.zone}
    return Scope(
        project=project,
        instance=value,
        instance_id=next(iter(ids)) if len(ids) == 1 else None,
        zone=next(iter(zones)) if len(zones) == 1 else None,
    )


_NOUNS = {"cluster": "GKE cluster", "label": "workload", "bucket": "Cloud Storage bucket"}
#: Services whose traffic rows name a VM (a GKE node is one) as their resource.
_VM_SERVICES = frozenset({"Compute Engine", "Kubernetes Engine", None})


def _noun(wl: Workload, group: _Group) -> str:
    """What a workload is called. A resource of a managed service is no VM: Spanner, for one,
    bills traffic between zones (`Network Intra-region Cross-Zone Data Transfer Out`)."""
    kind = wl[0] if wl is not None else "project"
    if kind != "instance":
        return _NOUNS.get(kind, kind)
    others = sorted(str(s) for s in {p.service for p in group.parts} - _VM_SERVICES)
    return f"{others[0]} resource" if len(others) == 1 else "resource" if others else "VM"


def _who(project: str | None, wl: Workload, group: _Group) -> str:
    if wl is None:
        return f"project {project}"
    return f"{_noun(wl, group)} {wl[1]} ({project})"


@register("cross_zone_egress")
class CrossZoneEgress(_Egress):
    subcategory = "network.inter_zone"

    def _endpoints(self, r: _Part, wl_zones: AbstractSet[str]) -> tuple[str, str]:
        src = r.zone or r.region or "?"
        others = sorted(wl_zones - {src})
        return src, ", ".join(others) if others else "other zones"

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: _Group,
    ) -> tuple[str, str, str]:
        who = _who(project, wl, group)
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
        senders = ", ".join(
            f"{s['instance']} ({s['zone']})" if s["zone"] else s["instance"]
            for s in ev["senders"][:6]
            if s.get("instance")
        )
        if wl is not None and wl[0] == "cluster":
            rec = (
                f"Run cluster {wl[1]}'s GPU node pool in a single zone (a zonal node pool, or pin the "
                "training job with a zone node selector / compact placement) so all-reduce stays in-zone."
            )
        elif wl is not None and wl[0] == "instance" and _noun(wl, group) != "VM":
            rec = (
                f"Keep {_noun(wl, group)} {wl[1]} and what it exchanges data with in one zone where the "
                "service allows it: traffic between zones is billed per GiB."
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

    def _endpoints(self, r: _Part, wl_zones: AbstractSet[str]) -> tuple[str, str]:
        sku = r.sku or ""
        if m := _PAIR.search(sku):
            return m.group(1), m.group(2)
        if m := _WITHIN.search(sku):
            # a dual- or multi-region bucket's rows carry no region (the export gives only its
            # `location.location`, `us`, which the hourly rows do not keep: the Cloud Storage rows
            # of project-koku/koku tmp_example.csv, fixture source koku-agpl): the SKU names the sender
            return r.region or _bucket_place(sku), m.group(1)
        return r.region or r.zone or "?", "another region"

    def _wording(
        self,
        project: str | None,
        wl: Workload,
        ev: dict[str, Any],
        impact: Decimal,
        group: _Group,
    ) -> tuple[str, str, str]:
        who = _who(project, wl, group)
        pairs = ", ".join(sorted({f"{s['from']} -> {s['to']}" for s in ev["by_sku"]}))
        copying = [bool(_REPLICATION.search(p.sku or "")) for p in group.parts]
        multi = [bool(_MULTI_REGION.search(p.sku or "")) for p in group.parts]
        reading = any(
            p.storage and not c and not m for p, c, m in zip(group.parts, copying, multi, strict=True)
        )
        if wl is not None and wl[0] == "bucket":  # every part is the bucket's own traffic
            title = f"Cross-region traffic from {who}: {fmt_usd(impact)}"
            why = [
                text
                for text, present in (
                    ("reads of the bucket from outside its region", reading),
                    ("reads of the multi-region bucket from regions on its continent", any(multi)),
                    ("copies of what is written to the bucket to its other regions", any(copying)),
                )
                if present
            ]
            summary = (
                f"{who} sent {ev['gib']:,} GiB across regions ({pairs}) for {fmt_usd(impact)}: "
                f"Cloud Storage {_and(why)}."
            )
        else:
            title = f"Cross-region traffic in {who}: {fmt_usd(impact)}"
            summary = f"{who} moved {ev['gib']:,} GiB across regions ({pairs}) for {fmt_usd(impact)}."
            if any(copying):
                summary += (
                    " Part of it is Cloud Storage copying what is written to a dual- or multi-region bucket"
                    " to its other regions."
                )
            if any(multi):
                summary += " Part of it is Cloud Storage reads of a multi-region bucket from a region."
            if reading:
                summary += " Part of it is Cloud Storage reads from a bucket outside the readers' region."
        if any(copying):
            # a dual- or multi-region bucket copies every byte written to it: the fix is where the
            # writes go, not a bucket spanning regions, which is what bills the copies
            rec = (
                "Write checkpoints, scratch and intermediate data to a bucket in the GPUs' region (or "
                "stage them on local disk and upload once); keep dual- and multi-region buckets for data "
                "read from several regions, since each byte written to them is copied to their other "
                "regions and billed."
            )
            if reading or any(multi):
                rec += " Read training data from a bucket in the GPUs' region too."
        elif any(multi):
            # since Google's 2022 Cloud Storage pricing change a read of a multi-region bucket from a
            # region is billed even when the multi-region covers that region (monitor.sku.MULTI_REGION):
            # only a bucket in the readers' own region reads free
            rec = (
                "Keep training data in a bucket in the same region as the GPUs (copy the dataset once) "
                "instead of a multi-region bucket: reads of a multi-region bucket from a region are "
                "billed per GiB, even from a region the multi-region covers."
            )
        elif reading:
            rec = (
                "Keep training data in a bucket in the same region as the GPUs (copy the dataset once, "
                "or use a dual-region bucket that includes it) instead of reading across regions "
                "every epoch."
            )
        else:
            rec = (
                "Keep the VMs that exchange data, and their data, in one region; replicate once rather "
                "than streaming across regions."
            )
        return title, summary, rec


def _bucket_place(sku: str) -> str:
    """What sent the bytes of a Cloud Storage SKU billed with no region: a multi-region bucket for
    its reads (`monitor.sku.MULTI_REGION`), a dual- or multi-region one for its replication."""
    if _MULTI_REGION.search(sku):
        return "multi-region bucket"
    if _REPLICATION.search(sku):
        return "dual- or multi-region bucket"
    return "?"


def _and(items: Sequence[str]) -> str:
    """`a`, `a, and b`, `a, b, and c`."""
    return items[-1] if len(items) == 1 else f"{', '.join(items[:-1])}, and {items[-1]}"
