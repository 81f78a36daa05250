"""The detector contract, the registry, and small helpers every detector shares.

A detector is a class with a strict frozen pydantic `Config` and a pure `evaluate(inputs, now)`;
`@register("idle_gpu")` puts it in the registry under the name its config section uses
(`[detectors.idle_gpu]`). Severity comes from the dollar impact, so one scale applies to every kind:
info below `warning_usd`, warning below `critical_usd`, critical above.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from monitor.detectors.inputs import DetectorInputs
from monitor.model import Finding, Severity
from monitor.model import usd as fmt_usd  # `$1,234.56` for titles and summaries
from monitor.timeutil import to_iso

__all__ = [
    "ONE_HOUR",
    "Detector",
    "DetectorConfig",
    "first_last",
    "fmt_usd",
    "human",
    "iso",
    "jsonable",
    "money",
    "q6",
    "register",
    "registered",
    "severity_for",
]

ONE_HOUR = timedelta(hours=1)
_MICRO = Decimal("0.000001")


class DetectorConfig(BaseModel):
    """Keys every `[detectors.<name>]` section accepts.

    `min_impact_usd`: below it a finding is not emitted at all (noise). `warning_usd` / `critical_usd`:
    the impact at which a finding becomes a warning / critical (alerts default to warning and up).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    min_impact_usd: Decimal = Field(default=Decimal(10), ge=0)
    warning_usd: Decimal = Field(default=Decimal(50), ge=0)
    critical_usd: Decimal = Field(default=Decimal(1000), ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> DetectorConfig:
        if self.critical_usd < self.warning_usd:
            raise ValueError(
                f"critical_usd ({self.critical_usd}) must be at least warning_usd ({self.warning_usd})"
            )
        return self


C = TypeVar("C", bound=DetectorConfig)


class Detector(ABC):
    """Base of every detector: holds its validated config; `evaluate` is pure (no I/O, no clock)."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[DetectorConfig]] = DetectorConfig
    #: True for detectors that give advice (a cheaper way to buy the same thing) rather than report
    #: money leaking: their findings are `info` by default and are not hidden costs.
    advice: ClassVar[bool] = False
    #: True for detectors that judge the calendar month to date (budget forecasts): they are given
    #: inputs reaching back to the 1st; the others judge exactly the analysed window.
    month_to_date: ClassVar[bool] = False

    def history_days(self) -> int:
        """Days of billing before the window this detector's baselines need (0: none). The callers
        read that much more (`monitor.detectors.history_needed`) and say so in `history_start`."""
        return 0

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @abstractmethod
    def evaluate(self, inputs: DetectorInputs, now: datetime) -> list[Finding]:
        """Findings for `inputs`' window as of `now` (injected, timezone-aware UTC)."""

    def severity(self, impact: Decimal) -> Severity:
        return severity_for(impact, self.config.warning_usd, self.config.critical_usd)

    def keep(self, impact: Decimal) -> bool:
        """Whether an impact is worth a finding at all (strictly positive and at the minimum)."""
        return impact > 0 and impact >= self.config.min_impact_usd

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


_REGISTRY: dict[str, type[Detector]] = {}


def register(name: str) -> Callable[[type[Detector]], type[Detector]]:
    """Class decorator: make a detector known under `name` (its config section name)."""

    def deco(cls: type[Detector]) -> type[Detector]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"detector {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def registered() -> dict[str, type[Detector]]:
    """The known detectors by name, sorted (a copy: the registry is filled only at import)."""
    return dict(sorted(_REGISTRY.items()))


def severity_for(impact: Decimal, warning_usd: Decimal, critical_usd: Decimal) -> Severity:
    """info < warning_usd <= warning < critical_usd <= critical.

    >>> severity_for(Decimal("49.99"), Decimal(50), Decimal(1000)).value
    'info'
    >>> severity_for(Decimal("1000"), Decimal(50), Decimal(1000)).value
    'critical'
    """
    if impact >= critical_usd:
        return Severity.CRITICAL
    if impact >= warning_usd:
        return Severity.WARNING
    return Severity.INFO


def q6(value: Decimal) -> Decimal:
    """Round to micro-dollars, the grain of evidence, so evidence items sum exactly to the impact."""
    return value.quantize(_MICRO)


def money(value: Decimal) -> float:
    """A JSON number for evidence; exact for micro-dollar values (15 significant digits); zero is
    0.0, never -0.0."""
    micros = q6(value)
    return float(micros) if micros else 0.0


def iso(dt: datetime | None) -> str | None:
    return to_iso(dt)


def human(value: datetime | str | None) -> str:
    """`2026-11-02 10:00 UTC` for summaries (evidence keeps ISO 8601)."""
    if value is None:
        return "?"
    s = to_iso(value) if isinstance(value, datetime) else value
    return s.replace("T", " ").removesuffix(":00Z").removesuffix("Z") + " UTC"


def first_last(hours: Iterable[datetime]) -> tuple[datetime, datetime]:
    """(first hour, end of last hour) of a non-empty set of hour starts."""
    hs = sorted(hours)
    return hs[0], hs[-1] + ONE_HOUR


def jsonable(obj: Any) -> Any:
    """Evidence must be JSON-able: Decimals become numbers, datetimes ISO strings."""
    if isinstance(obj, Decimal):
        return money(obj)
    if isinstance(obj, datetime):
        return to_iso(obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj
