"""The ground truth: the hidden costs injected, each with its exact dollar impact, the totals of
every row, and an inventory of the GPU machines as the simulator built them. Impacts are sums of the
very rows written (re-rendered from the same entities), so a detector's figure can be checked against
them to the cent.

Everything here is written from what the simulator injected, never by parsing its own rows with our
SKU parser: a GPU row is known by the entity that wrote it, a Spot VM by the pricing it was given.
Money is USD: a row invoiced in another currency counts `cost / currency_conversion_rate`, rounded to
the micro per row (how the export defines USD, and how `hourly.sql` converts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from monitor.simulate.catalog import INTER_ZONE, Pricing
from monitor.simulate.compute import Vm
from monitor.simulate.fleet import Fleet
from monitor.simulate.rows import Project
from monitor.simulate.services import Disk, Flow
from monitor.timeutil import to_iso

__all__ = [
    "Tally",
    "credit_usd_micros",
    "fleet_inventory",
    "hidden_costs",
    "micros_of",
    "row_usd_micros",
    "usd",
]

CENT = Decimal("0.01")


def micros_of(value: float) -> int:
    """The export FLOAT back to exact micros: rows are written as micros / 1e6, so rounding
    value * 1e6 recovers the integer exactly (far below 2**53 / 1e6 dollars per row)."""
    return round(value * 1_000_000)


def _to_usd_micros(value: float, rate: float) -> int:
    return micros_of(value) if rate == 1 else round(value / rate * 1_000_000)


def row_usd_micros(row: dict) -> int:
    """A row's cost in USD micros (`cost / currency_conversion_rate`)."""
    return _to_usd_micros(row["cost"], row["currency_conversion_rate"])


def credit_usd_micros(row: dict) -> int:
    """A row's credits in USD micros, each converted on its own like the cost."""
    rate = row["currency_conversion_rate"]
    return sum(_to_usd_micros(c["amount"], rate) for c in row["credits"])


def usd(micros: int) -> float:
    """Micros as a JSON number rounded to the cent."""
    return float((Decimal(micros) / 1_000_000).quantize(CENT))


@dataclass
class Tally:
    """Totals over every row, and cost per (project, UTC day) for the spend baseline."""

    rows: int = 0
    cost: int = 0
    credits: int = 0
    by_project_day: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, row: dict) -> None:
        self.rows += 1
        cost = row_usd_micros(row)
        self.cost += cost
        self.credits += credit_usd_micros(row)
        self.by_project_day[(row["project"]["id"], row["usage_start_time"].date().isoformat())] += cost

    def totals(self) -> dict:
        net = self.cost + self.credits
        return {
            "rows": self.rows,
            "cost": usd(self.cost),
            "credits": usd(self.credits),
            "net_cost": usd(net),
            "cost_micros": self.cost,
            "credits_micros": self.credits,
            "net_cost_micros": net,
        }


RowSum = Callable[[Iterable[Any], range, Callable[[dict], bool]], int]


def _scope(vm: Vm | None = None, **kw: Any) -> dict:
    scope = dict.fromkeys(("project", "zone", "region", "instance", "instance_id", "cluster", "node_pool"))
    if vm is not None:
        scope.update(project=vm.project.id, zone=vm.zone, region=vm.region.name, instance=vm.name)
        scope.update(instance_id=vm.instance_id, cluster=vm.cluster, node_pool=vm.node_pool)
    scope.update(kw)
    return scope


def _any(row: dict) -> bool:
    return True


@dataclass(frozen=True)
class _Truth:
    fleet: Fleet
    start: datetime
    tally: Tally
    row_sum: RowSum

    def entry(
        self, kind: str, variant: str, scope: dict, hours: tuple[int, int], micros: int, details: dict
    ) -> dict:
        def iso(h: int) -> str | None:
            return to_iso(self.start + timedelta(hours=h))

        return {
            "kind": kind,
            "variant": variant,
            "scope": scope,
            "window_start": iso(hours[0]),
            "window_end": iso(hours[1]),
            "impact_usd": usd(micros),
            "impact_micros": micros,
            "details": details,
        }

    def gpu_vm(self, kind: str, variant: str, vm: Vm, hours: tuple[int, int], **details: Any) -> dict:
        """A hidden cost that is the GPU rows of one VM over some hours (known by the SKU the VM
        was given, not by reading descriptions)."""
        gpu_sku = vm.skus["gpu"].description
        micros = self.row_sum([vm], range(*hours), lambda row: row["sku"]["description"] == gpu_sku)
        m = vm.machine
        facts = {"gpus": m.gpus, "gpu_hours": m.gpus * (hours[1] - hours[0]), "machine_type": m.name}
        facts["sku"] = vm.skus["gpu"].description
        return self.entry(kind, variant, _scope(vm), hours, micros, {**facts, **details})

    def cross_zone(self) -> dict:
        inj, hours = self.fleet.injected, self.fleet.hours
        nodes = inj.cross_zone
        flows = [
            e
            for e in self.fleet.entities
            if isinstance(e, Flow) and e.sku == INTER_ZONE and any(e.vm is n for n in nodes)
        ]
        micros = self.row_sum(flows, range(hours), _any)
        scope = _scope(
            project=nodes[0].project.id, region=nodes[0].region.name, cluster=inj.cross_zone_cluster
        )
        details = {
            "zones": sorted({n.zone for n in nodes}),
            "instances": [n.name for n in nodes],
            "instance_ids": [n.instance_id for n in nodes],
            "sku": INTER_ZONE.description,
            "approx_gib_per_hour": round(sum(f.gib_per_hour for f in flows), 1),
        }
        return self.entry("cross_zone_egress", "split_cluster", scope, (0, hours), micros, details)

    def anomaly(self, project: Project, first: int) -> dict:
        """The rows of the sweep's VMs and disks; the baseline is the project's mean day before it."""
        job = ("job", self.fleet.injected.anomaly_job or "")
        extra = [
            e
            for e in self.fleet.entities
            if isinstance(e, Vm | Disk) and e.project == project and job in e.labels
        ]
        micros = self.row_sum(extra, range(first, self.fleet.hours), _any)
        by_day = self.tally.by_project_day
        days = sorted(d for (p, d) in by_day if p == project.id)
        before, during = days[: first // 24], days[first // 24 :]
        base = sum(by_day[(project.id, d)] for d in before) // max(1, len(before))
        spike = sum(by_day[(project.id, d)] for d in during) // max(1, len(during))
        details = {
            "baseline_daily_usd": usd(base),
            "anomaly_daily_usd": usd(spike),
            "ratio": round(spike / base, 2) if base else None,
            "cause_labels": {"job": job[1]},
            "instances": [e.name for e in extra if isinstance(e, Vm)],
        }
        return self.entry(
            "spend_anomaly", "step_up", _scope(project=project.id), (first, self.fleet.hours), micros, details
        )


def hidden_costs(fleet: Fleet, start: datetime, tally: Tally, row_sum: RowSum) -> list[dict]:
    """One entry per injected hidden cost, in a fixed order."""
    inj, hours = fleet.injected, fleet.hours
    t = _Truth(fleet, start, tally, row_sum)
    out = []
    if (vm := inj.went_idle) is not None and vm.idle is not None:
        out.append(t.gpu_vm("idle_gpu", "went_idle", vm, vm.idle, max_utilization_pct=2.0))
    if (vm := inj.never_used) is not None:
        started = to_iso(start + timedelta(hours=vm.first_hour))
        out.append(
            t.gpu_vm("idle_gpu", "never_used", vm, (0, hours), started_at=started, max_utilization_pct=2.0)
        )
    if inj.cross_zone:
        out.append(t.cross_zone())
    if inj.anomaly_project is not None and inj.anomaly_first_hour is not None:
        out.append(t.anomaly(inj.anomaly_project, inj.anomaly_first_hour))
    if (vm := inj.unmonitored) is not None:
        out.append(t.gpu_vm("unmonitored_gpu", "agent_missing", vm, (0, hours)))
    if (vm := inj.hung_node) is not None and vm.idle is not None:
        node = {"cluster": vm.cluster, "node_pool": vm.node_pool, "node_name": vm.name}
        out.append(
            t.gpu_vm("idle_gpu", "went_idle", vm, vm.idle, max_utilization_pct=2.0, cause="hung_job", **node)
        )
    return out


def _gpu_vm_record(vm: Vm) -> dict:
    return {
        "project": vm.project.id,
        "instance": vm.name,
        "instance_id": vm.instance_id,
        "zone": vm.zone,
        "region": vm.region.name,
        "machine_type": vm.machine.name,
        "gpus": vm.machine.gpus,
        "gpu_sku": vm.skus["gpu"].description,
        "gpu_price_usd_per_hour": str(vm.skus["gpu"].price),
        "pricing": vm.pricing.value,
        "monitoring": vm.monitoring.value,
        "cluster": vm.cluster,
        "node_pool": vm.node_pool,
        "billing_account": vm.project.account.id,
        "currency": vm.project.account.currency,
    }


def fleet_inventory(fleet: Fleet) -> dict:
    """Every GPU machine as built (its SKU, pricing model, how it is monitored, GKE pool) and the
    projects whose GPUs are all Spot already (no Spot opportunity can exist there)."""
    gpu_vms = [v for v in fleet.vms if v.machine.gpus]
    by_project: dict[str, set[Pricing]] = defaultdict(set)
    for v in gpu_vms:
        by_project[v.project.id].add(v.pricing)
    return {
        "gpu_vms": [_gpu_vm_record(v) for v in gpu_vms],
        "all_spot_projects": sorted(p for p, kinds in by_project.items() if kinds == {Pricing.SPOT}),
        "billing_accounts": sorted(
            {(p.account.id, p.account.currency, str(p.account.rate)) for p in fleet.projects}
        ),
    }
