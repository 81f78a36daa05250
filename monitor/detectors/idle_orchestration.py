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
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import Field

from monitor.detectors.base import ONE_HOUR, Detector, DetectorConfig, fmt_usd, iso, money, q6, register
from monitor.detectors.costs import Costs, one_of
from monitor.detectors.inputs import CostHour, DetectorInputs
from monitor.model import Finding, Scope, counted, fingerprint
from monitor.timeutil import from_naive_utc

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

#: A fee row's resource: the cluster for a GKE fee that names one, else the row's own instance.
_INSTANCE = (
    "CASE WHEN subcategory = 'orchestration.gke' AND coalesce(cluster, '') <> '' THEN NULL ELSE instance END"
)


def _key(r: CostHour) -> Key:
    inst = None if r.subcategory == "orchestration.gke" and r.cluster else r.instance
    return (r.subcategory, r.project, r.cluster, inst)


@register("idle_orchestration")
class IdleOrchestration(Detector):
    Config = IdleOrchestrationConfig
    config: IdleOrchestrationConfig

    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        costs, end = inputs.hourly, min(inputs.window_end, now)
        runs: dict[Key, list[tuple[datetime, datetime]]] = defaultdict(list)
        for *key, first, last in costs.select(*self._runs_sql(costs, inputs.window_start, end)):
            runs[tuple(key)].append((from_naive_utc(first), from_naive_utc(last)))
        if not runs:
            return []
        # only the fee rows of the resources with a long enough idle run cross into Python
        keys = sorted(runs, key=str)
        fees: dict[Key, dict[datetime, list[CostHour]]] = {k: defaultdict(list) for k in keys}
        on = one_of(("subcategory", "project", "cluster", _INSTANCE), keys)
        for r in costs.rows(start=inputs.window_start, end=end, subcategories=tuple(_KINDS), condition=on):
            fees[_key(r)][r.hour].append(r)
        findings = []
        for key in keys:
            hours = sorted(fees[key])
            spans = [[h for h in hours if first <= h <= last] for first, last in sorted(runs[key])]
            if (f := self._finding(key, spans, fees[key], inputs)) is not None:
                findings.append(f)
        return findings

    def _runs_sql(self, costs: Costs, start: datetime, end: datetime) -> tuple[str, list[Any]]:
        """Each idle run of `min_idle_hours` or more (key, first hour, last hour), found in the engine.

        A fee hour is idle when its cluster (a GKE fee naming one) or else its project ran no compute
        in that hour; a run is consecutive idle fee hours of one key, bridging at most `max_gap_hours`
        hours with no fee row and broken by any fee hour that is not idle. Only the runs cross into
        Python: at bench scale 48 the detector fetched every fee row and every running (project,
        cluster, hour), 68,544 of `analyze`'s 113,793 cost rows and sums, to find a few runs.
        """
        fee, fee_params = costs.where(start=start, end=end, subcategories=tuple(_KINDS))
        running, run_params = costs.where(
            start=start, end=end, categories=("compute",), exclude=tuple(_NOT_RUNNING), positive=True
        )
        sql = f"""
            WITH fee AS (
              SELECT DISTINCT subcategory, project, cluster, {_INSTANCE} AS instance, hour FROM costs{fee}
            ),
            running AS (SELECT DISTINCT project, cluster, hour FROM costs{running}),
            marked AS (
              SELECT f.*, NOT EXISTS (
                SELECT 1 FROM running AS r
                WHERE r.project IS NOT DISTINCT FROM f.project AND r.hour = f.hour
                  AND (coalesce(f.cluster, '') = '' OR r.cluster = f.cluster)
              ) AS idle
              FROM fee AS f
            ),
            stepped AS (
              SELECT *, idle AND (
                  lag(idle) OVER k IS DISTINCT FROM true
                  OR epoch(hour) - epoch(lag(hour) OVER k) > ?
                ) AS starts
              FROM marked WINDOW k AS (PARTITION BY subcategory, project, cluster, instance ORDER BY hour)
            ),
            numbered AS (
              SELECT *, sum(starts::INTEGER) OVER k AS run
              FROM stepped WINDOW k AS (PARTITION BY subcategory, project, cluster, instance ORDER BY hour)
            )
            SELECT subcategory, project, cluster, instance, min(hour), max(hour)
            FROM numbered WHERE idle
            GROUP BY subcategory, project, cluster, instance, run
            HAVING count(*) >= ?
        """
        step = ONE_HOUR * (self.config.max_gap_hours + 1)
        return sql, [*fee_params, *run_params, step.total_seconds(), self.config.min_idle_hours]

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
                f"{what} {name} ({project}) billed {fmt_usd(impact)} over {counted(idle_hours, 'hour')} in which "
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
