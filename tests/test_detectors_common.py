"""Detector registry, config validation (word for word), currency conversion, and a quiet clean fleet.

Also holds the small builders the other `test_detectors_*` modules share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitor.detectors import (
    BudgetSpec,
    CostHour,
    DetectorInputs,
    GpuHour,
    build_detectors,
    registered,
    run_detectors,
    to_usd,
)
from monitor.errors import ConfigError
from monitor.model import Severity

T0 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
H = timedelta(hours=1)
D = Decimal


def at(hour: int) -> datetime:
    return T0 + hour * H


def gpu(
    hour: int,
    instance: str = "train-0",
    *,
    util: float | None = 90.0,
    idle: int = 0,
    gpus: int = 8,
    price: str = "11.00",
    project: str = "ml-prod",
    zone: str = "us-central1-a",
    estimated: bool = False,
    pricing_model: str = "on_demand",
    labels: dict[str, str] | None = None,
    gpu_model: str = "H100",
    memory_held: bool | None = None,
    machine_type: str | None = "a3-highgpu-8g",
) -> GpuHour:
    """One instance-hour: `idle` of its `gpus` GPUs idle; costs at `price` per GPU-hour."""
    p = D(price)
    return GpuHour(
        hour=at(hour),
        project=project,
        instance=instance,
        instance_id=f"id-{instance}",
        zone=zone,
        region=zone.rsplit("-", 1)[0],
        machine_type=machine_type,
        gpu_model=gpu_model,
        gpus=gpus,
        gpu_hours=D(gpus),
        gpu_cost=p * gpus,
        mean_utilization_pct=util,
        idle_gpu_hours=D(idle) if util is not None else D(0),
        idle_cost=p * idle if util is not None else D(0),
        memory_held=memory_held,
        pricing_model=pricing_model,
        estimated=estimated,
        labels=labels or {},
    )


def cost(
    hour: int,
    subcategory: str = "compute.gpu",
    amount: str = "10",
    *,
    credits: str = "0",
    project: str = "ml-prod",
    zone: str | None = "us-central1-a",
    instance: str | None = None,
    cluster: str | None = None,
    sku: str | None = None,
    gib: str = "0",
    service: str | None = "Compute Engine",
    labels: dict[str, str] | None = None,
    provisional: bool = False,
) -> CostHour:
    return CostHour(
        hour=at(hour),
        project=project,
        subcategory=subcategory,
        cost=D(amount),
        credits=D(credits),
        region=zone.rsplit("-", 1)[0] if zone else None,
        zone=zone,
        service=service,
        sku=sku,
        sku_id=(sku or subcategory)[:12],
        instance=instance,
        instance_id=f"id-{instance}" if instance else None,
        cluster=cluster,
        labels=labels or {},
        usage_pricing_units=D(gib),
        pricing_unit="gibibyte" if gib != "0" else None,
        provisional=provisional,
    )


def inputs(
    hourly: list[CostHour] | tuple[CostHour, ...] = (),
    gpu_hours: list[GpuHour] | tuple[GpuHour, ...] = (),
    *,
    days: int = 14,
    provisional_hours: int = 0,
    prices: object | None = None,
    budgets: tuple[BudgetSpec, ...] = (),
) -> DetectorInputs:
    end = T0 + timedelta(days=days)
    return DetectorInputs(
        window_start=T0,
        window_end=end,
        provisional_from=end - provisional_hours * H,
        hourly=tuple(hourly),
        gpu_hours=tuple(gpu_hours),
        prices=prices,  # type: ignore[arg-type]
        budgets=budgets,
    )


def end_of(inp: DetectorInputs) -> datetime:
    return inp.window_end


@dataclass
class FakePrices:
    """Our own PriceLookup protocol, filled from a table (not a mock of anything)."""

    table: dict[tuple[str, str], Decimal] = field(
        default_factory=lambda: {
            ("H100", "on_demand"): D("11.00"),
            ("H100", "spot"): D("3.30"),
            ("H100", "commit_1y"): D("7.70"),
            ("H100", "commit_3y"): D("4.95"),
        }
    )

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        return self.table.get((gpu_model, pricing_model))

    def gpu_price_source(self, gpu_model: str, region: str | None, pricing_model: str) -> str | None:
        return "test price table" if (gpu_model, pricing_model) in self.table else None


# -- to_usd ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "rate", "usd"),
    [
        (D("100"), None, D("100")),
        (D("100"), 1, D("100")),
        (D("92.00"), 0.92, D("100")),  # EUR: cost / rate = USD
        (D("15000"), 150.0, D("100")),  # JPY
        (D("-4.60"), "0.92", D("-5")),  # credits convert too, and stay negative
        (D("1"), 3, D("0.333333")),  # micro-dollar grain
        ("7.5", "1.5", D("5")),
    ],
)
def test_to_usd(amount, rate, usd) -> None:
    assert to_usd(amount, rate) == usd


@pytest.mark.parametrize("rate", [0, -1.0, "NaN"])
def test_to_usd_rejects_bad_rates(rate) -> None:
    with pytest.raises(ValueError, match="currency_conversion_rate must be a positive number"):
        to_usd(D(1), rate)


# -- registry and config --------------------------------------------------------------------------------


def test_every_detector_of_the_issue_is_registered() -> None:
    assert list(registered()) == [
        "budget_forecast",
        "commitment_opportunity",
        "cross_region_egress",
        "cross_zone_egress",
        "idle_gpu",
        "idle_orchestration",
        "job_budget",
        "spend_anomaly",
        "spot_opportunity",
        "unmonitored_gpu",
    ]


def test_defaults_build_all_and_enabled_false_turns_one_off() -> None:
    assert [d.name for d in build_detectors({}, "x")] == list(registered())
    names = [d.name for d in build_detectors({"spot_opportunity": {"enabled": False}}, "x")]
    assert "spot_opportunity" not in names and len(names) == len(registered()) - 1


def test_config_values_reach_the_detector() -> None:
    (det,) = [d for d in build_detectors({"idle_gpu": {"min_idle_hours": 5}}, "x") if d.name == "idle_gpu"]
    assert det.config.min_idle_hours == 5  # type: ignore[attr-defined]


CONFIG_ERRORS = [
    (
        {"idle_gpus": {}},
        "gpucost.toml: detectors.idle_gpus: unknown detector; known detectors: budget_forecast, "
        "commitment_opportunity, cross_region_egress, cross_zone_egress, idle_gpu, idle_orchestration, "
        "job_budget, spend_anomaly, spot_opportunity, unmonitored_gpu",
    ),
    (
        {"idle_gpu": {"min_idle_hour": 3}},
        "gpucost.toml: detectors.idle_gpu.min_idle_hour: unknown key; [detectors.idle_gpu] accepts: "
        "enabled, min_impact_usd, warning_usd, critical_usd, min_idle_hours, max_gap_hours, min_idle_share",
    ),
    (
        {"idle_gpu": {"min_idle_hours": 0}},
        "gpucost.toml: detectors.idle_gpu.min_idle_hours: Input should be greater than or equal to 1",
    ),
    (
        {"spend_anomaly": {"baseline": "weekly"}},
        "gpucost.toml: detectors.spend_anomaly.baseline: Input should be 'auto', 'same_weekday' or "
        "'all_days', got 'weekly'",
    ),
    (
        {"cross_zone_egress": {"warning_usd": 500, "critical_usd": 100}},
        "gpucost.toml: detectors.cross_zone_egress: critical_usd (100) must be at least warning_usd (500)",
    ),
    (
        {"spot_opportunity": {"restartable_labels": ["preemptible"]}},
        'gpucost.toml: detectors.spot_opportunity.restartable_labels: expected "key=value", got "preemptible"',
    ),
    (
        {"spot_opportunity": {"name_regex": "(eval"}},
        "gpucost.toml: detectors.spot_opportunity.name_regex: not a valid regular expression "
        "(missing ), unterminated subpattern at position 0)",
    ),
    (
        {"unmonitored_gpu": {"enabled": "maybe"}},
        "gpucost.toml: detectors.unmonitored_gpu.enabled: Input should be a valid boolean, "
        "unable to interpret input, got 'maybe'",
    ),
    (
        {"budget_forecast": 3},
        "gpucost.toml: detectors.budget_forecast: expected a table ([detectors.budget_forecast] with "
        "key = value lines), got 3",
    ),
]


@pytest.mark.parametrize(("raw", "message"), CONFIG_ERRORS)
def test_config_errors_word_for_word(raw, message) -> None:
    with pytest.raises(ConfigError) as e:
        build_detectors(raw, "gpucost.toml")
    assert str(e.value) == message


def test_config_is_frozen() -> None:
    det = build_detectors({}, "x")[0]
    with pytest.raises(ValueError):
        det.config.enabled = False  # type: ignore[misc]


# -- a clean, steady fleet stays quiet ------------------------------------------------------------------


def clean_fleet(days: int = 14) -> DetectorInputs:
    """Busy GPUs, a GKE cluster with nodes, free intra-zone traffic, steady daily spend, a budget with
    headroom. Spend varies a little from hour to hour, as real spend does."""
    hourly, gpus = [], []
    for h in range(days * 24):
        wobble = str(1 + (h * 7919 % 13) / 100)  # ±6%, deterministic
        gpus += [gpu(h, "train-0", util=88.0), gpu(h, "train-1", util=92.0)]
        hourly += [
            cost(h, "compute.gpu", str(D("176") * D(wobble)), instance="train-0", cluster="gke-a"),
            cost(h, "compute.cpu", "12.5", instance="train-0", cluster="gke-a"),
            cost(h, "orchestration.gke", "0.10", cluster="gke-a", instance=None),
            cost(h, "storage.filestore", "0.30", instance="share-1"),
            cost(h, "network.intra_zone", "0", instance="train-0", gib="900", sku="Network Intra Zone"),
            cost(h, "network.inter_zone", "0.02", instance="train-0", gib="2", sku="Network Inter Zone"),
        ]
    budgets = (BudgetSpec(name="total", amount=D(200_000)),)
    return inputs(hourly, gpus, days=days, provisional_hours=72, budgets=budgets)


def test_clean_steady_fleet_has_no_warning_or_critical_finding() -> None:
    inp = clean_fleet()
    findings = run_detectors(inp, build_detectors({}, "x"), inp.window_end)
    loud = [f for f in findings if f.severity is not Severity.INFO]
    assert loud == []
    # what remains is informational and small, or an opportunity (none here: no prices)
    assert all(f.impact_usd < 50 for f in findings), [f.title for f in findings]


def test_clean_fleet_with_prices_only_raises_opportunities() -> None:
    inp = clean_fleet()
    inp = DetectorInputs(**{**inp.__dict__, "prices": FakePrices()})
    findings = run_detectors(inp, {}, inp.window_end)
    assert {f.kind for f in findings} == {"commitment_opportunity"}
    (f,) = findings
    # 16 H100 on demand in every hour: 16 x 336 h x (11.00 - 7.70)
    assert f.impact_usd == D(16 * 336) * D("3.30")
    assert f.severity is Severity.INFO  # advice, not a leak: never alerts by default, however large
    cfg = {"commitment_opportunity": {"max_severity": "warning"}}
    (loud,) = run_detectors(inp, cfg, inp.window_end)
    assert loud.severity is Severity.WARNING  # a team that wants savings alerts opts in


def test_run_detectors_sorts_by_impact_and_accepts_raw_config() -> None:
    hourly = [cost(h, "network.inter_zone", "5", instance="a", gib="500") for h in range(24)]
    hourly += [cost(h, "network.inter_zone", "9", instance="b", gib="900") for h in range(24)]
    inp = inputs(hourly)
    findings = run_detectors(inp, {"spend_anomaly": {"enabled": False}}, inp.window_end)
    assert [f.scope.instance for f in findings] == ["b", "a"]
    assert [f.impact_usd for f in findings] == [D(216), D(120)]
