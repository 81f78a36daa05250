"""The pieces `gpucost analyze` / `gpucost gpus` add on top of the daemon's steps: exact attribution,
live estimates only where billing is missing, per-instance GPU figures and the window rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitor.analysis import Window, attribution, detection_start, resolve_window
from monitor.assemble import gpu_hours
from monitor.billing_poll import HourlyCost
from monitor.errors import UserError
from monitor.gpu_rollups import rollups, summarize_instances
from monitor.utilization import GpuSample, util_hours
from tests.aggregates import cost_rows, node_hours
from tests.test_detectors_common import FakePrices, gpu

T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
D = Decimal


def hourly(
    hour: int,
    sub: str = "compute.gpu",
    gross: int = 88_000_000,
    credit: int = 0,
    *,
    instance: str | None = "train-0",
    iid: str | None = "111",
    pricing_model: str | None = "on_demand",
    gpu_hours: float | None = 8.0,
) -> HourlyCost:
    return HourlyCost(
        usage_hour=T0 + hour * H,
        subcategory=sub,
        gross_micros=gross,
        cud_micros=0,
        sud_micros=0,
        other_credit_micros=credit,
        credit_micros=credit,
        net_micros=gross + credit,
        row_count=1,
        provisional=False,
        keys={
            "project_id": "ml",
            "zone": "us-central1-a",
            "region": "us-central1",
            "resource_name": instance,
            "instance_id": iid,
            "sku_description": "Nvidia H100 80GB GPU running in Americas",
            "pricing_model": pricing_model,
            "currency": "USD",
        },
        usage_amount=gpu_hours,
    )


def samples(hour: int, util: float, *, iid: str | None = "111", name: str = "train-0", gpus: int = 8):
    start = T0 + hour * H
    return [
        GpuSample(
            "ml",
            "us-central1-a",
            iid,
            name,
            None,
            None,
            str(g),
            "NVIDIA H100 80GB HBM3",
            start,
            start + H,
            util,
            "nvml_utilization",
            None,
        )
        for g in range(gpus)
    ]


# ------------------------------------------------------------------------------------- attribution


def test_attribution_sums_micros_exactly_per_subcategory_and_pricing_model() -> None:
    rows = [hourly(h, gross=333_333) for h in range(3)]  # 3 x $0.333333: floats would drift
    rows += [hourly(0, "compute.gpu", 1_000_000, -1_000_000, pricing_model="committed")]
    rows += [hourly(1, "network.inter_zone", 10_000_000, -2_500_000, pricing_model=None, instance=None)]
    lines = attribution(cost_rows(rows))
    got = {(a.subcategory, a.pricing_model): (a.category, a.cost, a.credits, a.net_cost) for a in lines}
    assert got == {
        ("compute.gpu", "on_demand"): ("compute", D("0.999999"), D(0), D("0.999999")),
        ("compute.gpu", "committed"): ("compute", D(1), D(-1), D(0)),
        ("network.inter_zone", None): ("network", D(10), D("-2.5"), D("7.5")),
    }
    assert [a.subcategory for a in lines] == ["network.inter_zone", "compute.gpu", "compute.gpu"]
    assert lines[0].to_dict() == {
        "category": "network",
        "subcategory": "network.inter_zone",
        "pricing_model": None,
        "cost": 10.0,
        "credits": -2.5,
        "net_cost": 7.5,
    }


# ---------------------------------------------------------------------------------- live estimates


def test_unbilled_hours_are_estimated_only_in_the_provisional_period() -> None:
    billed = [hourly(h) for h in (0, 1, 2, 5)]  # hours 3 and 4 not billed yet (rows land out of order)
    utils = [s for h in range(8) for s in samples(h, 0.0)]
    prov = T0 + 4 * H
    got = gpu_hours(
        node_hours(billed),
        util_hours(utils),
        10.0,
        FakePrices(table={("H100 80GB", "on_demand"): D(11)}),
        T0 + 7 * H,
        prov,
    )
    est = sorted((g.hour - T0) // H for g in got if g.estimated)
    assert est == [4, 6]  # 3 is settled (no invented cost), 5 is billed, 7 is not a whole hour yet
    four = next(g for g in got if g.estimated and g.hour == T0 + 4 * H)
    assert (four.gpu_cost, four.idle_cost, four.gpus, four.instance) == (D(88), D(88), 8, "train-0")
    assert sorted((g.hour - T0) // H for g in got if not g.estimated) == [0, 1, 2, 5]


def test_a_billed_hour_is_never_estimated_again_whatever_identity_billing_used() -> None:
    billed = [hourly(0, iid=None)]  # the billing row has a name but no numeric id
    utils = samples(0, 0.0) + samples(1, 0.0)
    got = gpu_hours(
        node_hours(billed),
        util_hours(utils),
        10.0,
        FakePrices(table={("H100 80GB", "on_demand"): D(11)}),
        T0 + 2 * H,
        T0,
    )
    assert [(g.hour - T0) // H for g in got if g.estimated] == [1]
    assert [g.monitored for g in got if not g.estimated] == [True]  # joined by (project, zone, name)


def test_an_instance_billing_has_not_seen_is_priced_from_its_monitoring_model() -> None:
    utils = samples(0, 50.0, iid="999", name="new-vm", gpus=2)
    (g,) = gpu_hours(
        [], util_hours(utils), 10.0, FakePrices(table={("H100 80GB", "on_demand"): D(11)}), T0 + H, T0
    )
    assert (g.estimated, g.instance, g.gpu_model, g.gpus, g.gpu_cost, g.idle_cost) == (
        True,
        "new-vm",
        "H100 80GB",
        2,
        D(22),
        D(0),
    )
    assert gpu_hours([], util_hours(utils), 10.0, None, T0 + H, T0) == []  # no prices: no guess


# ---------------------------------------------------------------------------- per-instance figures


def test_instance_summary_prefers_billed_hours_and_prices_a_busy_gpu_hour() -> None:
    hours = [gpu(h, "a", util=80.0, idle=0) for h in range(6)]
    hours += [gpu(h, "a", util=1.0, idle=8) for h in range(6, 10)]
    hours += [gpu(9, "a", util=1.0, idle=8, estimated=True, price="12")]  # reconciled: billed wins
    hours += [gpu(h, "dark", util=None, gpus=1, price="2") for h in range(5)]
    by = {i.instance: i.to_dict() for i in summarize_instances(hours)}
    a = by["a"]
    assert a["gpu_hours"] == 80.0 and a["gpu_cost_usd"] == 880.0
    assert a["idle_gpu_hours"] == 32.0 and a["idle_cost_usd"] == 352.0
    assert a["mean_utilization_pct"] == 48.4  # (6 x 80 + 4 x 1) / 10, weighted by GPU-hours
    assert a["cost_per_busy_gpu_hour_usd"] == 18.33  # $880 / 48 busy GPU-hours
    assert a["unmonitored_cost_usd"] == 0.0
    dark = by["dark"]
    assert dark["unmonitored_cost_usd"] == 10.0 and dark["mean_utilization_pct"] is None
    assert dark["cost_per_busy_gpu_hour_usd"] is None and dark["idle_cost_usd"] == 0.0
    assert set(a) == {
        "instance",
        "instance_id",
        "project",
        "zone",
        "cluster",
        "node_pool",
        "machine_type",
        "gpu_model",
        "gpus",
        "gpu_hours",
        "mean_utilization_pct",
        "gpu_cost_usd",
        "idle_gpu_hours",
        "idle_cost_usd",
        "unmonitored_cost_usd",
        "cost_per_busy_gpu_hour_usd",
        "estimated_cost_usd",
    }
    assert a["estimated_cost_usd"] == 0.0  # the estimated hour was reconciled: billed wins


def test_hours_not_billed_yet_are_counted_apart() -> None:
    """The demo's `gpus` for its last day showed $17,750.50 of GPU cost, $4,928.85 of it hours not
    billed yet and priced from the price list, with no word: they are now counted apart
    (`estimated_cost_usd`) and marked in the table."""
    from monitor.cli.gpus import _table

    hours = [gpu(h, "a", price="10") for h in range(3)] + [gpu(3, "a", price="10", estimated=True)]
    hours += [gpu(h, "b") for h in range(4)]
    by = {i.instance: i.to_dict() for i in summarize_instances(hours)}
    assert (by["a"]["gpu_cost_usd"], by["a"]["estimated_cost_usd"]) == (320.0, 80.0)
    assert by["b"]["estimated_cost_usd"] == 0.0
    rolled = {(r["group"], r["key"]): r for r in (x.to_dict() for x in rollups(summarize_instances(hours), []))}
    assert rolled[("project", "ml-prod")]["estimated_cost_usd"] == 80.0
    table = _table("Per instance", ["Instance"], list(by.values()), ["instance"])
    assert sorted(table.columns[0]._cells) == ["*a", "b"] and "not billed yet" in str(table.caption)


def test_rollups_per_project_and_per_label_value() -> None:
    hours = [gpu(0, "a", labels={"team": "llm"}, idle=8, util=0.0), gpu(0, "b", labels={"team": "llm"})]
    hours += [gpu(0, "c", project="other"), gpu(0, "d", util=None)]
    rolled = [r.to_dict() for r in rollups(summarize_instances(hours), ["team"])]
    key = {(r["group"], r["key"]): r for r in rolled}
    assert key[("project", "ml-prod")]["instances"] == 3 and key[("project", "other")]["instances"] == 1
    llm = key[("label:team", "llm")]
    assert (llm["instances"], llm["gpu_cost_usd"], llm["idle_cost_usd"]) == (2, 176.0, 88.0)
    assert key[("label:team", None)]["unmonitored_cost_usd"] == 88.0
    total = sum(r["gpu_cost_usd"] for r in rolled if r["group"] == "project")
    assert total == sum(r["gpu_cost_usd"] for r in rolled if r["group"] == "label:team") == 352.0


# ------------------------------------------------------------------------------------------ window


def test_live_window_ends_now_and_looks_back_fourteen_days() -> None:
    now = datetime(2026, 11, 20, 13, 37, tzinfo=UTC)
    w = resolve_window(None, None, None, now, live=True)  # type: ignore[arg-type]  # no query when live
    assert (w.start, w.end, w.as_of) == (now - timedelta(days=14), now, now)
    with pytest.raises(UserError, match=r"--start \(2026-11-20T13:37:00Z\) must be before --end"):
        resolve_window(None, now, now - H, now, live=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # the invoice month to date, read from the previous month's start (corrections of its
        # usage are invoiced this month); billing months start at midnight Pacific (07:00 UTC in PDT)
        ("2026-11-05", "2026-11-19", "2026-10-01T07:00"),
        ("2026-10-20", "2026-11-03", "2026-10-01T07:00"),
        ("2026-10-18", "2026-11-01", "2026-09-01T07:00"),  # ends Oct 31 17:00 Pacific: October's month
    ],
)
def test_detectors_see_the_month_to_date(start: str, end: str, expected: str) -> None:
    def ts(s: str) -> datetime:
        return datetime.fromisoformat(s).replace(tzinfo=UTC)

    assert detection_start(Window(ts(start), ts(end), ts(end))) == ts(expected)
    # and the history spend baselines need, when it reaches back further
    window = Window(ts("2026-11-20"), ts("2026-11-27"), ts("2026-11-27"))
    assert detection_start(window, timedelta(days=29)) == ts("2026-10-01T07:00")
    assert detection_start(window, timedelta(days=60)) == ts("2026-09-21")


def test_analyze_a_seven_day_window_judges_spend_against_28_days_before_it(tmp_path, capsys) -> None:
    """`gpucost analyze --start --end` over 7 days: spend_anomaly reads `baseline_days` of billing
    before the window (without it, 7 days are too few to judge anything); totals stay the window's."""
    import json

    from monitor.cli import main
    from monitor.month import month_at
    from tests.export_rows import export_row, write_ndjson

    start = datetime(2026, 11, 1, tzinfo=UTC)
    jump = datetime(2026, 12, 2, tzinfo=UTC)  # a Wednesday, in the window's fourth day
    rows = []
    for h in range(35 * 24):
        t = start + h * H
        rows.append(
            export_row(
                {
                    "usage_start_time": f"{t:%Y-%m-%d %H:%M:%S} UTC",
                    "usage_end_time": f"{t + H:%Y-%m-%d %H:%M:%S} UTC",
                    "export_time": f"{t + 3 * H:%Y-%m-%d %H:%M:%S} UTC",
                    "invoice.month": month_at(t),
                    "usage.amount_in_pricing_units": 1.0,
                    "usage.amount": 3600.0,
                    "credits": [],
                },
                cost=105.0 if jump <= t < jump + 24 * H else 40.0,
                cost_at_list=40.0,
            )
        )
    path = write_ndjson(tmp_path / "export.ndjson", rows)
    args = [
        "analyze",
        "--billing",
        str(path),
        "--start",
        "2026-11-29",
        "--end",
        "2026-12-06",
        "--format",
        "json",
    ]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["totals"]["cost"] == 7 * 24 * 40 + 24 * 65  # the window only
    (f,) = [f for f in d["findings"] if f["kind"] == "spend_anomaly"]
    (day,) = f["evidence"]["days"]
    assert day["date"] == "2026-12-02" and day["excess_usd"] == 24 * 65
    assert (day["baseline"], day["baseline_points"]) == ("same_weekday", 4)
