"""`idle_orchestration`: GKE cluster fees and Filestore instances with no compute behind them.

A GKE cluster left running after its node pools were deleted keeps billing its management fee; a
Filestore share kept for a finished training run keeps billing its capacity. Both are found from
billing alone: fee hours (`orchestration.gke`) or capacity hours (`storage.filestore`) in which the
same cluster (when the row names one) or else the same project had no compute spend at all.
Commitment fees (`compute.commitment_fee`) are not compute running: a commitment bills every hour
whether or not anything uses it, so it never keeps an abandoned cluster or share looking busy.
Only runs of at least `min_idle_hours` consecutive idle hours count: a cluster whose node pools scale
to zero overnight is doing the right thing, not leaking.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from pydantic import Field

from monitor.detectors.base import ONE_HOUR, Detector, DetectorConfig, fmt_usd, iso, money, q6, register
from monitor.detectors.inputs import CostHour, DetectorInputs
from monitor.model import Finding, Scope, fingerprint

__all__ = ["IdleOrchestration", "IdleOrchestrationConfig"]

_KINDS = {"orchestration.gke": "GKE cluster", "storage.filestore": "Filestore instance"}
#: Compute subcategories billed whether or not anything runs.
_NOT_RUNNING = frozenset({"compute.commitment_fee"})


class IdleOrchestrationConfig(DetectorConfig):
    """`min_idle_hours`: consecutive hours without compute before a fee counts as idle.
    `max_gap_hours`: hours without any fee row that do not break a run (late or missing data)."""

    min_impact_usd: Decimal = Field(default=Decimal(10), ge=0)
    min_idle_hours: int = Field(default=48, ge=1)
    max_gap_hours: int = Field(default=1, ge=0)


Key = tuple[str, str | None, str | None, str | None]  # (subcategory, project, cluster, instance)


@register("idle_orchestration")
class IdleOrchestration(Detector):
    Config = IdleOrchestrationConfig
    config: IdleOrchestrationConfig

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        end = min(inputs.window_end, now)
        costs, span = inputs.hourly, {"start": inputs.window_start, "end": end}
        # hours in which something ran: compute rows with a positive cost, per project and cluster
        running = {"categories": ("compute",), "exclude": tuple(_NOT_RUNNING), "positive": True}
        by_project = set(costs.sums(("project", "hour"), **span, **running))
        by_cluster = {k for k in costs.sums(("project", "cluster", "hour"), **span, **running) if k[1]}
        fees: dict[Key, dict[datetime, list[CostHour]]] = defaultdict(lambda: defaultdict(list))
        for r in costs.rows(**span, subcategories=tuple(_KINDS)):
            inst = None if r.subcategory == "orchestration.gke" and r.cluster else r.instance
            fees[(r.subcategory, r.project, r.cluster, inst)][r.hour].append(r)
        findings = []
        for key in sorted(fees, key=str):
            _, project, cluster, _ = key
            idle = {
                h: rs
                for h, rs in fees[key].items()
                if ((project, cluster, h) not in by_cluster if cluster else (project, h) not in by_project)
            }
            runs = self._runs(sorted(fees[key]), idle)
            if runs and (f := self._finding(key, runs, fees[key], inputs)) is not None:
                findings.append(f)
        return findings

    def _runs(self, hours: Sequence[datetime], idle: dict[datetime, list[CostHour]]) -> list[list[datetime]]:
        runs: list[list[datetime]] = []
        cur: list[datetime] = []
        step = ONE_HOUR * (self.config.max_gap_hours + 1)
        for h in hours:
            if h not in idle or (cur and h - cur[-1] > step):
                if cur:
                    runs.append(cur)
                cur = []
            if h in idle:
                cur.append(h)
        if cur:
            runs.append(cur)
        return [r for r in runs if len(r) >= self.config.min_idle_hours]

    def _finding(
        self,
        key: Key,
        runs: list[list[datetime]],
        fees: dict[datetime, list[CostHour]],
        inputs: DetectorInputs,
    ) -> Finding | None:
        subcat, project, cluster, inst = key
        idle_rows = [r for run in runs for h in run for r in fees[h]]
        impact = sum((q6(r.cost) + q6(r.credits) for r in idle_rows), Decimal(0))
        if not self.keep(impact):
            return None
        what = _KINDS[subcat]
        name = (cluster if subcat == "orchestration.gke" else inst) or cluster or inst or "(unnamed)"
        idle_hours = sum(len(r) for r in runs)
        total = sum((q6(r.cost) + q6(r.credits) for rs in fees.values() for r in rs), Decimal(0))
        skus = sorted({r.sku for r in idle_rows if r.sku})
        scope = Scope(
            project=project,
            cluster=cluster,
            instance=inst,
            zone=_one({r.zone for r in idle_rows}),
            region=_one({r.region for r in idle_rows}),
        )
        basis = f"cluster {cluster}" if cluster else f"project {project}"
        return Finding(
            kind=self.name,
            severity=self.severity(impact),
            title=f"{what} {name} billed with no compute behind it: {fmt_usd(impact)}",
            summary=(
                f"{what} {name} ({project}) billed {fmt_usd(impact)} over {idle_hours} hours in which "
                f"{basis} ran no compute at all (longest stretch {max(len(r) for r in runs)} h)."
            ),
            impact_usd=impact,
            window_start=runs[0][0],
            window_end=runs[-1][-1] + ONE_HOUR,
            scope=scope,
            evidence={
                "resource": subcat,
                "compute_checked_in": basis,
                "idle_hours": idle_hours,
                "idle_cost_usd": money(impact),
                "fee_cost_in_window_usd": money(total),
                "skus": skus,
                "runs": [
                    {
                        "start": iso(run[0]),
                        "end": iso(run[-1] + ONE_HOUR),
                        "hours": len(run),
                        "cost_usd": money(
                            sum((q6(r.cost) + q6(r.credits) for h in run for r in fees[h]), Decimal(0))
                        ),
                    }
                    for run in runs
                ],
            },
            recommendation=(
                f"Delete GKE cluster {name} if it is no longer used (its management fee bills per hour "
                "even with no nodes)."
                if subcat == "orchestration.gke"
                else f"Back up and delete Filestore instance {name} if the work that used it is finished, "
                "or shrink it; capacity bills whether or not anything mounts it."
            ),
            fingerprint=fingerprint(self.name, scope, subcat),
            provisional=any(r.hour >= inputs.provisional_from or r.provisional for r in idle_rows),
        )


def _one(values: set[str | None]) -> str | None:
    vals = {v for v in values if v}
    return next(iter(vals)) if len(vals) == 1 else None
