"""Hidden-cost detectors: a registry of small, pure classes, built from `[detectors.<name>]` config.

    detectors = build_detectors(config.detectors, "gpucost.toml")
    findings = run_detectors(inputs, detectors, now)

Every registered detector runs with its defaults unless its section says `enabled = false`; a section
for an unknown detector, an unknown key or a bad value is a `ConfigError` naming
`detectors.<name>.<key>` and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from monitor.detectors import (  # noqa: F401  (importing registers the detectors)
    budget_forecast,
    commitment_opportunity,
    egress,
    idle_gpu,
    idle_orchestration,
    job_budget,
    spend_anomaly,
    spot_opportunity,
    unmonitored_gpu,
)
from monitor.detectors.base import Detector, DetectorConfig, register, registered
from monitor.detectors.inputs import BudgetSpec, CostHour, DetectorInputs, GpuHour, PriceLookup, to_usd
from monitor.errors import ConfigError
from monitor.model import Finding

__all__ = [
    "BudgetSpec",
    "CostHour",
    "Detector",
    "DetectorConfig",
    "DetectorInputs",
    "GpuHour",
    "PriceLookup",
    "build_detectors",
    "history_needed",
    "register",
    "registered",
    "run_detectors",
    "run_in_window",
    "sort_findings",
    "to_usd",
]


def _error_line(source: str, name: str, err: Mapping[str, Any], cls: type[Detector]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    where = f"detectors.{name}.{loc}" if loc else f"detectors.{name}"
    kind = err["type"]
    if kind == "extra_forbidden":
        keys = ", ".join(cls.Config.model_fields)
        return f"{source}: {where}: unknown key; [detectors.{name}] accepts: {keys}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind.startswith("literal_error") or kind in ("bool_parsing", "bool_type"):
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{source}: {where}: {msg}"


def _build_one(name: str, body: Any, source: str, jobs: Any = None) -> Detector:
    cls = registered()[name]
    if not isinstance(body, Mapping):
        raise ConfigError(
            f"{source}: detectors.{name}: expected a table ([detectors.{name}] with key = value lines), "
            f"got {body!r}"
        )
    try:
        cfg = cls.Config.model_validate(dict(body))
    except ValidationError as e:
        raise ConfigError("\n".join(_error_line(source, name, err, cls) for err in e.errors())) from None
    if getattr(cls, "needs_jobs", False):
        return cls(cfg, jobs=jobs)  # type: ignore[call-arg]
    return cls(cfg)


def build_detectors(raw: Mapping[str, Any] | None, source: str = "<config>", *, jobs: Any = None) -> list[Detector]:
    """Every registered detector, configured from `raw` (the `[detectors]` table), minus disabled ones.
    `jobs`: the `[jobs]` config (`monitor.jobs.JobsConfig`) for the detectors that need it
    (`job_budget`: the budgets and the job label keys); None: its defaults.

    Sections are validated in name order so the first error reported is deterministic.
    """
    raw = raw or {}
    known = registered()
    for name in sorted(raw):
        if name not in known:
            raise ConfigError(
                f"{source}: detectors.{name}: unknown detector; known detectors: {', '.join(known)}"
            )
    built = [_build_one(name, raw.get(name, {}), source, jobs) for name in registered()]
    return [d for d in built if d.config.enabled]


def sort_findings(findings: Sequence[Finding]) -> list[Finding]:
    """Largest impact first; ties by severity, then kind and fingerprint so output is stable."""
    return sorted(findings, key=lambda f: (-f.impact_usd, -f.severity.rank, f.kind, f.fingerprint))


def run_detectors(
    inputs: DetectorInputs,
    detectors: Sequence[Detector] | Mapping[str, Any] | None,
    now: datetime,
) -> list[Finding]:
    """Run each detector over the same inputs; findings sorted by impact.

    `detectors` is what `build_detectors` returned, or the raw `[detectors]` table (built here).
    """
    if detectors is None or isinstance(detectors, Mapping):
        detectors = build_detectors(detectors)
    findings: list[Finding] = []
    for det in detectors:
        findings.extend(det.evaluate(inputs, now))
    return sort_findings(findings)


def history_needed(detectors: Sequence[Detector]) -> timedelta:
    """How much billing before the analysed window the detectors' baselines need."""
    return timedelta(days=max((d.history_days() for d in detectors), default=0))


def run_in_window(
    inputs: DetectorInputs, detectors: Sequence[Detector], now: datetime, window_start: datetime
) -> list[Finding]:
    """Impacts count strictly inside [window_start, inputs.window_end); only month-to-date detectors
    (budget forecasts), fed the invoice month to date by the caller, see before `window_start`.
    The rest get what lies before `window_start` as history (`history_start`) for their baselines:
    a 7-day window still has `baseline_days` of spend history when the caller read that far."""
    start = max(window_start, inputs.window_start)
    history = min(inputs.history_start or inputs.window_start, inputs.window_start)
    narrow = replace(inputs, window_start=start, history_start=history if history < start else None)
    return sort_findings(
        run_detectors(narrow, [d for d in detectors if not d.month_to_date], now)
        + run_detectors(inputs, [d for d in detectors if d.month_to_date], now)
    )
