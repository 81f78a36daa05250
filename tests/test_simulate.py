"""The fleet simulator: files in the export's real shapes, deterministic, with a ground truth that
matches the rows to the micro.

The simulator imitates Google Cloud, not our code: its SKU strings are the catalog's wording (cited
in `monitor/simulate/catalog.py`), so the tests below spell the expected strings out in full and
never run our SKU parser; the simulator does not import it either.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import sys
from collections import Counter, OrderedDict, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor.cli import main
from monitor.schema import EXPORT_SCHEMA, Column
from monitor.simulate import FleetSimulator, to_export_json, write_fleet
from monitor.simulate.export import LineEncoder
from monitor.simulate.utilization import DCGM_V1_METRIC, GKE_NODE_METRIC, METRIC_TYPE, write_page
from tests.shared_fleets import shared_fleet

START = datetime(2026, 11, 1, tzinfo=UTC)
BQ_TS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})? UTC$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# The catalog's GPU wordings: Spot is an infix (`... GPU attached to Spot Preemptible VMs running in`).
GPU_SKU = re.compile(r"^Nvidia .* GPU( attached to Spot Preemptible VMs)? running in ")
SIM_DIR = Path(__file__).resolve().parent.parent / "monitor" / "simulate"


def _ts(text: str) -> datetime:
    return datetime.strptime(text.replace(" UTC", "").split(".")[0], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _micros(value: float) -> int:
    return int(Decimal(repr(value)) * 1_000_000)


def _usd_micros(value: float, row: dict) -> int:
    """A row amount in USD micros: the export's `cost / currency_conversion_rate`, per row."""
    rate = row["currency_conversion_rate"]
    return _micros(value) if rate == 1 else round(value / rate * 1_000_000)


def _read_ndjson(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 5-day injected fleet on disk, read back."""
    out = tmp_path_factory.mktemp("fleet")
    summary = write_fleet(out, seed=11, days=5)
    return {
        "out": out,
        "summary": summary,
        "rows": _read_ndjson(out / "billing" / "export.ndjson.gz"),
        "truth": json.loads((out / "ground_truth.json").read_text()),
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("clean")
    assert main(["simulate", "--out", str(out), "--days", "5", "--seed", "11", "--clean"]) == 0
    return {
        "out": out,
        "rows": _read_ndjson(out / "billing" / "export.ndjson.gz"),
        "truth": json.loads((out / "ground_truth.json").read_text()),
    }


def _hidden(truth: dict, kind: str, variant: str | None = None, cause: str | None = None) -> dict:
    found = [
        h
        for h in truth["hidden_costs"]
        if h["kind"] == kind and variant in (None, h["variant"]) and h["details"].get("cause") == cause
    ]
    assert len(found) == 1, (kind, variant, truth["hidden_costs"])
    return found[0]


def _labels(row: dict) -> dict[str, str]:
    return {kv["key"]: kv["value"] for kv in row.get("labels", [])}


def _in_window(row: dict, h: dict) -> bool:
    start = _ts(row["usage_start_time"])
    return (
        _ts(h["window_start"].replace("T", " ").replace("Z", " UTC"))
        <= start
        < _ts(h["window_end"].replace("T", " ").replace("Z", " UTC"))
    )


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_simulating_again_into_a_directory_leaves_no_day_of_the_last_run(tmp_path: Path) -> None:
    # re-simulated with fewer days, the old run's utilization days stayed and analyses read them
    write_fleet(tmp_path, seed=3, days=2)
    (tmp_path / "utilization" / "notes.json.gz").write_bytes(b"")  # not a day: not ours to remove
    # a day the last run did not write (another tool's, the demo's): not ours either (a review)
    (tmp_path / "utilization" / "2026-10-01.json.gz").write_bytes(b"")
    write_fleet(tmp_path, seed=3, days=1, start=datetime(2026, 11, 5, tzinfo=UTC))
    assert sorted(p.name for p in (tmp_path / "utilization").iterdir()) == [
        "2026-10-01.json.gz",
        "2026-11-05.json.gz",
        "notes.json.gz",
    ]


def test_an_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    assert main(["simulate", "--out", str(tmp_path / "file" / "fleet"), "--days", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cannot write (Not a directory): pass a writable --out directory" in err


# -- determinism ----------------------------------------------------------------------------------


def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        write_fleet(tmp_path / name, seed=seed, days=1)
    a, b, c = (_files(tmp_path / n) for n in "abc")
    assert a == b
    assert a.keys() == c.keys()
    for name in ("billing/export.ndjson.gz", "billing/export.parquet", "utilization/2026-11-01.json.gz"):
        assert a[name] != c[name], name


def test_an_hour_does_not_depend_on_the_rest_of_the_window() -> None:
    """The demo daemon renders hours one at a time: the same entity-hour, same rows."""
    short = FleetSimulator(5, START, 2, inject=False)
    long = FleetSimulator(5, START, 3, inject=False)
    assert list(short.hour_rows(40)) == list(long.hour_rows(40))
    assert short.utilization_series(START + timedelta(hours=40), START + timedelta(hours=41)) == (
        long.utilization_series(START + timedelta(hours=40), START + timedelta(hours=41))
    )


# -- the export shape -----------------------------------------------------------------------------


def _check_json(col: Column, value: Any, seen: set[str], path: str) -> None:
    seen.add(path)
    if col.mode == "REPEATED":
        assert isinstance(value, list), path
        for item in value:
            _check_json(Column(col.name, col.type, "NULLABLE", col.fields), item, seen, path)
        return
    if col.type == "RECORD":
        assert isinstance(value, dict), path
        known = {f.name: f for f in col.fields}
        assert set(value) <= set(known), (path, set(value) - set(known))
        for k, v in value.items():
            _check_json(known[k], v, seen, f"{path}.{k}")
    elif col.type == "STRING":
        assert isinstance(value, str), path
    elif col.type == "FLOAT":
        assert isinstance(value, int | float) and not isinstance(value, bool), path
    elif col.type == "BOOLEAN":
        assert isinstance(value, bool), path
    elif col.type == "TIMESTAMP":
        assert isinstance(value, str) and BQ_TS.match(value), (path, value)


def _all_paths(cols: tuple[Column, ...], prefix: str = "") -> set[str]:
    out = set()
    for c in cols:
        out.add(prefix + c.name)
        out |= _all_paths(c.fields, prefix + c.name + ".")
    return out


def test_ndjson_has_every_schema_column_with_its_json_type(fleet: dict) -> None:
    schema = {c.name: c for c in EXPORT_SCHEMA}
    seen: set[str] = set()
    for row in fleet["rows"]:
        assert set(row) <= set(schema), set(row) - set(schema)
        for name, value in row.items():
            assert value is not None, name  # NULLs are left out, as bq extract does
            _check_json(schema[name], value, seen, name)
    assert _all_paths(EXPORT_SCHEMA) - seen == set()


_EXPECTED_ARROW = {
    "STRING": pa.string(),
    "FLOAT": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "INTEGER": pa.int64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def _expect_arrow(col: Column, typ: pa.DataType, path: str) -> None:
    if col.mode == "REPEATED":
        assert pa.types.is_list(typ), path
        _expect_arrow(Column(col.name, col.type, fields=col.fields), typ.value_type, path)
    elif col.type == "RECORD":
        assert pa.types.is_struct(typ), path
        assert [typ.field(i).name for i in range(typ.num_fields)] == [f.name for f in col.fields], path
        for f in col.fields:
            _expect_arrow(f, typ.field(f.name).type, f"{path}.{f.name}")
    else:
        assert typ == _EXPECTED_ARROW[col.type], (path, typ)


def test_parquet_schema_follows_export_schema_and_holds_the_same_rows(fleet: dict) -> None:
    table = pq.read_table(fleet["out"] / "billing" / "export.parquet")
    assert table.schema.names == [c.name for c in EXPORT_SCHEMA]
    for col in EXPORT_SCHEMA:
        _expect_arrow(col, table.schema.field(col.name).type, col.name)
    assert table.schema.metadata is None or b"pandas" not in table.schema.metadata
    assert table.num_rows == len(fleet["rows"])
    costs = table.column("cost").to_pylist()
    assert sum(map(_micros, costs)) == sum(_micros(r["cost"]) for r in fleet["rows"])
    first = table.slice(0, 1).to_pylist()[0]
    assert first["usage_start_time"] == _ts(fleet["rows"][0]["usage_start_time"])
    assert first["sku"] == fleet["rows"][0]["sku"]


def test_line_encoder_writes_exactly_the_bq_extract_json() -> None:
    sim = FleetSimulator(2, START, 2)
    enc = LineEncoder()
    for row in list(sim.hour_rows(30)) + list(sim.hour_rows(31)):
        assert enc.encode(row) == json.dumps(to_export_json(row), separators=(",", ":"), ensure_ascii=False)
    row = next(sim.hour_rows(0))
    shaped = to_export_json(row)
    assert shaped["usage_start_time"] == "2026-11-01 00:00:00 UTC"
    assert "adjustment_info" not in shaped and isinstance(shaped["credits"], list)


def test_line_encoder_writes_what_json_writes_for_types_the_simulator_does_not_make() -> None:
    """The encoder dispatches on exact types (float, str, datetime, dict, list); a str or dict
    subclass, an int, a bool, NaN or a NULL inside a record must still come out as `json` writes
    them."""

    class Kind(StrEnum):
        ODD = 'quote " and é'

    row = {
        "cost_type": Kind.ODD,
        "cost": float("nan"),
        "cost_at_list": -0.0,
        "usage": OrderedDict(amount=3, unit=None, amount_in_pricing_units=1e-07),
        "credits": [{"name": "x", "amount": -1.25, "id": None}],
        "labels": [],
        "export_time": datetime(2026, 11, 1, 10, 0, 0, 123000, tzinfo=UTC),
        "invoice": {"month": "202611", "publisher_type": None},
        "seller_name": True,
        "adjustment_info": None,
    }
    want = json.dumps(to_export_json(row), separators=(",", ":"), ensure_ascii=False)
    assert LineEncoder().encode(row) == want


def test_a_written_day_file_is_json_of_the_series() -> None:
    """`write_page` writes each point from text made once per bucket: the bytes must be
    `json.dumps` of `utilization_series` over the same window, here one cut mid-bucket at both ends
    (the DCGM ratio, GKE nodes and partial hours of preempted Spot VMs inside)."""
    sim = FleetSimulator(2, START, 2)
    t0, t1 = START + timedelta(hours=5, minutes=12), START + timedelta(hours=29, minutes=37)
    out = io.BytesIO()
    write_page(out, sim.ctx, sim.fleet.vms, sim.hours, t0, t1)
    series = sim.utilization_series(t0, t1)
    assert out.getvalue() == json.dumps({"timeSeries": series}, separators=(",", ":")).encode()
    assert {t["metric"]["type"] for t in series} == {METRIC_TYPE, DCGM_V1_METRIC, GKE_NODE_METRIC}
    assert len({len(t["points"]) for t in series}) > 1  # VMs that ran part of the window


def test_rows_look_like_a_gpu_fleet(fleet: dict) -> None:
    rows = fleet["rows"]
    skus = {r["sku"]["description"] for r in rows}
    for needed in (
        "Nvidia H100 80GB GPU running in Americas",
        "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
        "Commitment v1: Nvidia H100 80GB GPU running in Americas for 1 Year",
        "Zonal Kubernetes Clusters",
        "Network Inter Zone Ingress",
        "Network Intra Zone Data Transfer Out",
        "Network Internet Egress from Americas to EMEA",
        "Balanced PD Capacity in Iowa",
    ):
        assert needed in skus
    for r in rows:
        if GPU_SKU.match(r["sku"]["description"]):
            system = {kv["key"]: kv["value"] for kv in r["system_labels"]}
            assert system["compute.googleapis.com/machine_spec"] in (
                "a3-highgpu-8g",
                "a3-highgpu-1g",
                "a2-highgpu-8g",
                "a2-highgpu-1g",
                "g2-standard-8",
            )
            assert re.fullmatch(
                r"//compute\.googleapis\.com/projects/\d{12}/zones/[a-z0-9-]+/instances/\d+",
                r["resource"]["global_name"],
            )
            assert r["usage"]["unit"] == "seconds" and r["usage"]["pricing_unit"] == "hour"
            expected = Decimal(repr(r["usage"]["amount_in_pricing_units"])) * Decimal(
                repr(r["price"]["effective_price"])
            )
            assert abs(Decimal(repr(r["cost"])) - expected) < Decimal("0.00001")
    types = {c["type"] for r in rows for c in r["credits"]}
    assert {"COMMITTED_USAGE_DISCOUNT", "SUSTAINED_USAGE_DISCOUNT", "FREE_TIER"} <= types
    assert {r["cost_type"] for r in rows} == {"regular", "tax", "adjustment"}
    free = [r for r in rows if r["sku"]["description"] == "Network Intra Zone Data Transfer Out"]
    assert free and all(r["cost"] == 0 for r in free)
    gke = [
        r for r in rows if "goog-k8s-cluster-name" in _labels(r) and GPU_SKU.match(r["sku"]["description"])
    ]
    assert gke


# -- money ----------------------------------------------------------------------------------------


def test_ground_truth_totals_are_the_sums_of_the_rows(fleet: dict) -> None:
    """In USD: rows invoiced in another currency count `cost / currency_conversion_rate`."""
    rows, totals = fleet["rows"], fleet["truth"]["totals"]
    cost = sum(_usd_micros(r["cost"], r) for r in rows)
    credits = sum(_usd_micros(c["amount"], r) for r in rows for c in r["credits"])
    assert {r["currency"] for r in rows} == {"USD", "EUR"}
    assert totals["rows"] == len(rows)
    assert (totals["cost_micros"], totals["credits_micros"], totals["net_cost_micros"]) == (
        cost,
        credits,
        cost + credits,
    )
    cent = Decimal("0.01")
    assert Decimal(repr(totals["cost"])) == (Decimal(cost) / 1_000_000).quantize(cent)
    assert Decimal(repr(totals["net_cost"])) == (Decimal(cost + credits) / 1_000_000).quantize(cent)
    assert fleet["truth"]["window"] == {"start": "2026-11-01T00:00:00Z", "end": "2026-11-06T00:00:00Z"}


def _gpu_cost_of(rows: list[dict], h: dict) -> int:
    s = h["scope"]
    return sum(
        _micros(r["cost"])
        for r in rows
        if r["project"]["id"] == s["project"]
        and r.get("resource", {}).get("name") == s["instance"]
        and GPU_SKU.match(r["sku"]["description"])
        and _in_window(r, h)
    )


@pytest.mark.parametrize(
    ("kind", "variant", "cause"),
    [
        ("idle_gpu", "went_idle", None),
        ("idle_gpu", "never_used", None),
        ("unmonitored_gpu", "agent_missing", None),
        ("idle_gpu", "went_idle", "hung_job"),
    ],
)
def test_gpu_impacts_are_the_gpu_rows_of_the_instance(
    fleet: dict, kind: str, variant: str, cause: str | None
) -> None:
    h = _hidden(fleet["truth"], kind, variant, cause)
    assert h["impact_micros"] == _gpu_cost_of(fleet["rows"], h) > 0
    assert Decimal(repr(h["impact_usd"])) == (Decimal(h["impact_micros"]) / 1_000_000).quantize(
        Decimal("0.01")
    )
    gid = h["scope"]["instance_id"]
    assert any(
        r.get("resource", {}).get("global_name", "").endswith(f"/instances/{gid}") for r in fleet["rows"]
    )


def test_cross_zone_impact_is_the_clusters_inter_zone_egress(fleet: dict) -> None:
    h = _hidden(fleet["truth"], "cross_zone_egress")
    rows = [
        r
        for r in fleet["rows"]
        if _labels(r).get("goog-k8s-cluster-name") == h["scope"]["cluster"]
        and r["sku"]["description"] == "Network Inter Zone Data Transfer Out"
    ]
    assert h["impact_micros"] == sum(_micros(r["cost"]) for r in rows) > 0
    assert {r["location"]["zone"] for r in rows} == set(h["details"]["zones"]) and len(
        h["details"]["zones"]
    ) == 2
    assert {r["resource"]["name"] for r in rows} == set(h["details"]["instances"])


def _daily(rows: list[dict], project: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["project"]["id"] == project:
            out[r["usage_start_time"][:10]] += _micros(r["cost"])
    return dict(sorted(out.items()))


def test_spend_anomaly_impact_is_the_extra_spend_and_it_stands_out(fleet: dict) -> None:
    h = _hidden(fleet["truth"], "spend_anomaly")
    project = h["scope"]["project"]
    job = h["details"]["cause_labels"]["job"]
    extra = [r for r in fleet["rows"] if r["project"]["id"] == project and _labels(r).get("job") == job]
    assert h["impact_micros"] == sum(_micros(r["cost"]) for r in extra) > 0
    assert all(_in_window(r, h) for r in extra)
    days = list(_daily(fleet["rows"], project).values())
    first = (_ts(h["window_start"].replace("T", " ").replace("Z", " UTC")) - START).days
    before, during = days[:first], days[first:]
    assert min(during) > 2 * max(before)
    assert max(before) < 1.25 * min(before)


def test_a_clean_fleet_has_no_hidden_cost_and_steady_spend(clean: dict, fleet: dict) -> None:
    assert clean["truth"]["hidden_costs"] == [] and clean["truth"]["injected"] is False
    assert len(fleet["truth"]["hidden_costs"]) == 6
    rows = clean["rows"]
    assert not [r for r in rows if r["sku"]["description"] == "Network Inter Zone Data Transfer Out"]
    for project in {r["project"]["id"] for r in rows}:
        days = list(_daily(rows, project).values())
        # one Spot preemption of a small all-Spot project moves its day more than that
        assert max(days) < 1.5 * min(days), (project, days)
    util = _utilization(clean["out"])
    names = {r["resource"]["name"] for r in rows if GPU_SKU.match(r["sku"]["description"])}
    assert names == set(util)  # every GPU VM is monitored in a clean fleet
    for name, values in util.items():
        assert sum(values) / len(values) > 30, name


# -- late data ------------------------------------------------------------------------------------


def test_rows_arrive_late_in_loads(fleet: dict) -> None:
    rows = fleet["rows"]
    lag = [_ts(r["export_time"]) - _ts(r["usage_end_time"]) for r in rows]
    assert min(lag) >= timedelta(0)
    late = [
        r for r, x in zip(rows, lag, strict=True) if x > timedelta(days=2) and r["cost_type"] == "regular"
    ]
    assert len({(r["resource"]["name"] if "resource" in r else r["sku"]["id"]) for r in late}) > 3
    assert sum(x <= timedelta(hours=34) for x in lag) > 0.95 * len(rows)
    loads = sorted({r["export_time"] for r in rows})
    assert len(loads) < len(rows) / 50  # rows come in loads, not one by one
    assert all("." in t for t in loads)


def test_a_correction_pair_negates_and_rebills_the_original(fleet: dict) -> None:
    adj = [r for r in fleet["rows"] if r["cost_type"] == "adjustment"]
    assert len(adj) == 2
    neg, fixed = sorted(adj, key=lambda r: r["cost"])
    assert neg["adjustment_info"] == fixed["adjustment_info"] and neg["adjustment_info"]["id"]
    key = (neg["sku"]["id"], neg["resource"]["name"], neg["usage_start_time"], neg["usage_end_time"])
    originals = [
        r
        for r in fleet["rows"]
        if r["cost_type"] == "regular"
        and (r["sku"]["id"], r.get("resource", {}).get("name"), r["usage_start_time"], r["usage_end_time"])
        == key
    ]
    assert len(originals) == 1
    assert neg["cost"] == -originals[0]["cost"] and 0 < fixed["cost"] < originals[0]["cost"]
    assert (fixed["usage_start_time"], fixed["usage_end_time"]) == key[2:]
    assert _ts(neg["export_time"]) > _ts(originals[0]["export_time"])


def test_rows_exported_between_consecutive_windows_partition_the_rows() -> None:
    sim = FleetSimulator(9, START, 2)
    canon = lambda r: json.dumps(to_export_json(r), sort_keys=True)  # noqa: E731
    everything = Counter(canon(r) for r in sim.billing_rows())
    seen: Counter[str] = Counter()
    t, step = START, timedelta(hours=5, minutes=17)
    while t < sim.last_export_time():
        seen.update(canon(r) for r in sim.rows_exported_between(t, t + step))
        t += step
    assert seen == everything
    assert sum(everything.values()) > 4000


# -- utilization ----------------------------------------------------------------------------------


def _machine_name(ts: dict) -> str:
    """The VM a series is about: `metadata.systemLabels.name` on gce_instance, the node on k8s_node."""
    if ts["resource"]["type"] == "k8s_node":
        return ts["resource"]["labels"]["node_name"]
    return ts["metadata"]["systemLabels"]["name"]


def _percent(ts: dict) -> list[float]:
    """Points as percent busy, read by the unit the series declares ("1" = a 0-1 ratio)."""
    scale = {"%": 1.0, "1": 100.0}[ts["unit"]]
    return [p["value"]["doubleValue"] * scale for p in ts["points"]]


def _series(out: Path) -> list[dict]:
    return [
        ts
        for path in sorted((out / "utilization").glob("*.json.gz"))
        for ts in json.loads(gzip.decompress(path.read_bytes()))["timeSeries"]
    ]


def _utilization(out: Path) -> dict[str, list[float]]:
    values: dict[str, list[float]] = defaultdict(list)
    for ts in _series(out):
        values[_machine_name(ts)] += _percent(ts)
    return values


def test_utilization_is_monitoring_json_newest_first(fleet: dict) -> None:
    page = json.loads(gzip.decompress((fleet["out"] / "utilization" / "2026-11-02.json.gz").read_bytes()))
    assert set(page) == {"timeSeries"}
    agent = [t for t in page["timeSeries"] if t["metric"]["type"] == "agent.googleapis.com/gpu/utilization"]
    ts = agent[0]
    assert set(ts["metric"]["labels"]) == {"gpu_number", "model", "uuid"}
    assert ts["resource"]["type"] == "gce_instance"
    assert set(ts["resource"]["labels"]) == {"project_id", "instance_id", "zone"}
    assert (ts["metricKind"], ts["valueType"]) == ("GAUGE", "DOUBLE")
    ends = [p["interval"]["endTime"] for p in ts["points"]]
    assert all(RFC3339.match(e) for e in ends) and ends == sorted(ends, reverse=True)
    assert (
        ends[0] == "2026-11-03T00:00:00Z"
        and ts["points"][-1]["interval"]["startTime"] == "2026-11-02T00:00:00Z"
    )
    assert all(0 <= v <= 100 for t in page["timeSeries"] for v in _percent(t))


def test_utilization_shows_the_idle_and_the_busy(fleet: dict) -> None:
    truth = fleet["truth"]
    util = _utilization(fleet["out"])
    assert _hidden(truth, "unmonitored_gpu")["scope"]["instance"] not in util
    never = _hidden(truth, "idle_gpu", "never_used")["scope"]["instance"]
    assert max(util[never]) < 2
    sim = FleetSimulator(11, START, 5)
    idled = {never}
    for cause in (None, "hung_job"):
        went = _hidden(truth, "idle_gpu", "went_idle", cause)
        t0 = datetime.fromisoformat(went["window_start"])
        t1 = datetime.fromisoformat(went["window_end"])
        idle = [
            v
            for s in sim.utilization_series(t0, t1)
            if _machine_name(s) == went["scope"]["instance"]
            for v in _percent(s)
        ]
        assert idle and max(idle) < 2
        idled.add(went["scope"]["instance"])
    busy = {n: sum(v) / len(v) for n, v in util.items() if n not in idled}
    assert min(busy.values()) > 30


# -- command line ---------------------------------------------------------------------------------


def test_cli_prints_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--days", "1", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"wrote [\d,]+ billing rows, 1 days from 2026-11-01 00:00Z", out)
    assert "total cost $" in out and "idle_gpu/never_used" in out
    assert (tmp_path / "billing" / "export.parquet").is_file()


def test_one_billing_format_writes_that_file_alone_with_the_same_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--billing-format parquet` (the test fleets' and large simulations' choice: the NDJSON's
    encoding is about half of the time) writes the Parquet both formats write, byte for byte, and
    removes the NDJSON an earlier run left: `--billing` given the directory's files would read both."""
    both, one = tmp_path / "both", tmp_path / "one"
    write_fleet(both, seed=3, days=1)
    write_fleet(one, seed=3, days=1)  # an earlier run into the same directory, in both formats
    argv = ["simulate", "--out", str(one), "--days", "1", "--seed", "3", "--billing-format", "parquet"]
    assert main(argv) == 0
    assert sorted(p.name for p in (one / "billing").iterdir()) == ["export.parquet"]
    same = _files(one)["billing/export.parquet"] == _files(both)["billing/export.parquet"]
    assert same
    assert "files: billing/export.parquet, utilization/*.json.gz (1)" in capsys.readouterr().out
    summary = write_fleet(one, seed=3, days=1, formats=("ndjson",))
    assert sorted(p.name for p in (one / "billing").iterdir()) == ["export.ndjson.gz"]
    assert _files(one)["billing/export.ndjson.gz"] == _files(both)["billing/export.ndjson.gz"]
    assert summary["files"][0] == "billing/export.ndjson.gz" and len(summary["files"]) == 3
    with pytest.raises(ValueError, match="choose from ndjson, parquet"):
        write_fleet(one, seed=3, days=1, formats=("csv",))


def test_cli_rejects_a_start_off_the_hour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--days", "1", "--start", "2026-11-01T00:30:00Z"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "gpucost: error: simulate: start 2026-11-01T00:30:00Z must be on the hour (usage windows are hourly)"
    )


@pytest.mark.slow
def test_default_fleet_size(tmp_path_factory: pytest.TempPathFactory) -> None:
    fleet, summary = shared_fleet(tmp_path_factory, 7, 14)  # `write_fleet(seed=7, days=14)`'s
    assert 20_000 <= summary["rows"] <= 80_000
    assert sum(p.stat().st_size for p in fleet.rglob("*") if p.is_file()) < 30 * 2**20


# -- real fleet shapes (issue 10) -----------------------------------------------------------------
# Expected strings are the catalog's own wording, spelled out (sources in monitor/simulate/catalog.py).


def _gpu_vms(truth: dict) -> dict[str, dict]:
    return {v["instance"]: v for v in truth["fleet"]["gpu_vms"]}


def test_spot_skus_are_the_catalogs_wording(fleet: dict) -> None:
    skus = {r["sku"]["description"] for r in fleet["rows"]}
    assert {
        "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas",
        "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
        "Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa",  # L4 SKUs name the city
        "Spot Preemptible A3 Instance Core running in Americas",
        "Spot Preemptible A3 Instance Ram running in Americas",
        "Spot Preemptible A2 Instance Core running in Americas",
        "Spot Preemptible G2 Instance Core running in Iowa",
        "Nvidia L4 GPU running in Iowa",
        "G2 Instance Core running in Iowa",
        "Commitment v1: A3 Cpu in Americas for 1 Year",
        "Commitment v1: A3 Ram in Americas for 1 Year",
    } <= skus
    assert not [s for s in skus if s.startswith("Spot Preemptible Nvidia")]  # not how the catalog says it
    # the ground truth knows which VMs are Spot from what it built, not from the strings
    for name, vm in _gpu_vms(fleet["truth"]).items():
        spot_wording = " attached to Spot Preemptible VMs " in vm["gpu_sku"]
        assert spot_wording == (vm["pricing"] == "spot"), name
    assert fleet["truth"]["fleet"]["all_spot_projects"] == ["ml-batch"]


def test_a_second_region_bills_its_own_catalog_price(fleet: dict) -> None:
    """H100 per GPU-hour (catalog-derived, cited in catalog.py): 12.73552 in europe-west4 vs
    9.796550569 for the Americas SKU (x1.30); A100 2.93391 in both (x1.00): not one multiplier."""
    price = {
        (r["sku"]["description"], r["currency"]): Decimal(repr(r["price"]["effective_price"]))
        / Decimal(repr(r["currency_conversion_rate"]))
        for r in fleet["rows"]
        if r["cost_type"] == "regular" and GPU_SKU.match(r["sku"]["description"])
    }
    cent = Decimal("0.0001")
    assert price[("Nvidia H100 80GB GPU running in EMEA", "EUR")].quantize(cent) == Decimal("12.7355")
    assert price[("Nvidia H100 80GB GPU running in Americas", "USD")] == Decimal("9.796550569")
    assert price[("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", "USD")] == (
        Decimal("5.8632")
    )
    assert price[("Nvidia Tesla A100 GPU running in EMEA", "USD")] == Decimal("2.93391")
    assert price[("Nvidia Tesla A100 GPU running in Americas", "USD")] == Decimal("2.93391")
    assert price[("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", "USD")] == Decimal(
        "0.2231"
    )


def test_an_account_invoiced_in_eur_states_amounts_in_eur(fleet: dict) -> None:
    eur = [r for r in fleet["rows"] if r["currency"] == "EUR"]
    assert eur and {r["project"]["id"] for r in eur} == {"vision-eu"}
    assert {(r["billing_account_id"], r["currency_conversion_rate"]) for r in eur} == {
        ("01C8E2-7A3F19-D40B55", 0.9235)
    }
    usd = [r for r in fleet["rows"] if r["currency"] == "USD"]
    assert {r["billing_account_id"] for r in usd} == {"01A7C3-5E92D4-B81F06"}
    gpu = next(r for r in eur if r["sku"]["description"] == "Nvidia H100 80GB GPU running in EMEA")
    secs = Decimal(repr(gpu["usage"]["amount"]))
    usd_cost = secs * Decimal("12.73552") / 3600
    assert abs(Decimal(repr(gpu["cost"])) - usd_cost * Decimal("0.9235")) < Decimal("0.000001")


def test_the_gke_gpu_pool_bills_like_gke(fleet: dict) -> None:
    """Node VMs bill Compute Engine GPU/Core/RAM rows with GKE's labels and the VM's real names."""
    labelled = [
        r
        for r in fleet["rows"]
        if _labels(r).get("goog-k8s-node-pool-name") == "h100-pool" and r["cost_type"] == "regular"
    ]
    assert {r["service"]["description"] for r in labelled} == {"Compute Engine"}
    pool = [r for r in labelled if "/instances/" in r["resource"]["global_name"]]
    assert {"/disk/" in r["resource"]["global_name"] for r in labelled} == {True, False}  # + boot disks
    names = {r["resource"]["name"] for r in pool}
    assert len(names) == 4
    assert all(re.fullmatch(r"gke-llm-train-h100-pool-[0-9a-f]{8}-[0-9a-z]{4}", n) for n in names)
    for r in pool:
        labels = _labels(r)
        assert labels["goog-k8s-cluster-name"] == "llm-train"
        assert labels["goog-k8s-cluster-location"] == "us-central1-a"
        assert labels["k8s-namespace"] == "llm-pretrain" and labels["k8s-label/app"] == "llm-pretrain"
        assert re.fullmatch(
            r"//compute\.googleapis\.com/projects/\d{12}/zones/us-central1-[ac]/instances/\d{19}",
            r["resource"]["global_name"],
        )
    kinds = {r["sku"]["description"] for r in pool}
    assert {"Nvidia H100 80GB GPU running in Americas", "A3 Instance Core running in Americas"} <= kinds
    fee = [r for r in fleet["rows"] if r["sku"]["description"] == "Zonal Kubernetes Clusters"]
    assert {r["service"]["description"] for r in fee} == {"Kubernetes Engine"}
    assert {_labels(r)["goog-k8s-cluster-name"] for r in fee} == {"llm-train", "inference-gke"}


def test_gke_nodes_report_node_duty_cycle_on_k8s_node(fleet: dict) -> None:
    series = [t for t in _series(fleet["out"]) if t["resource"]["type"] == "k8s_node"]
    assert series
    for ts in series:
        assert ts["metric"]["type"] == "kubernetes.io/node/accelerator/duty_cycle"
        assert set(ts["metric"]["labels"]) == {"accelerator_id", "make", "model"}
        assert ts["metric"]["labels"]["make"] == "nvidia"
        assert set(ts["resource"]["labels"]) == {"project_id", "location", "cluster_name", "node_name"}
        assert (ts["metricKind"], ts["unit"]) == ("GAUGE", "%") and "metadata" not in ts
    nodes = {t["resource"]["labels"]["node_name"] for t in series}
    vms = _gpu_vms(fleet["truth"])
    assert nodes == {n for n, v in vms.items() if v["monitoring"] == "gke_node"}
    assert {vms[n]["cluster"] for n in nodes} == {"llm-train", "inference-gke"}
    # GKE nodes run no Ops Agent: no gce_instance series for them
    agent = {_machine_name(t) for t in _series(fleet["out"]) if t["resource"]["type"] == "gce_instance"}
    assert not nodes & agent


def test_the_hung_gke_node_is_an_exact_idle_gpu_truth(fleet: dict) -> None:
    h = _hidden(fleet["truth"], "idle_gpu", "went_idle", "hung_job")
    s, d = h["scope"], h["details"]
    assert (s["cluster"], s["node_pool"], d["node_name"]) == ("llm-train", "h100-pool", s["instance"])
    assert d["gpu_hours"] == 8 * 42 and d["gpus"] == 8
    rows = [
        r
        for r in fleet["rows"]
        if r.get("resource", {}).get("name") == s["instance"]
        and r["sku"]["description"] == "Nvidia H100 80GB GPU running in Americas"
        and _in_window(r, h)
    ]
    assert len(rows) == 42 and h["impact_micros"] == sum(_micros(r["cost"]) for r in rows)
    t0, t1 = (datetime.fromisoformat(h[k]) for k in ("window_start", "window_end"))
    sim = FleetSimulator(11, START, 5)
    during = [
        v
        for t in sim.utilization_series(t0, t1)
        if t["resource"]["labels"].get("node_name") == s["instance"]
        for v in _percent(t)
    ]
    assert len(during) == 8 * 42 * 12 and max(during) < 2


def test_the_dcgm_v1_vm_reports_a_ratio_and_is_busy(fleet: dict) -> None:
    series = [
        t
        for t in _series(fleet["out"])
        if t["metric"]["type"] == "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"
    ]
    assert {_machine_name(t) for t in series} == {"dcgm-a100-01"}
    for ts in series:
        assert ts["resource"]["type"] == "gce_instance" and ts["unit"] == "1"
        assert set(ts["metric"]["labels"]) == {"gpu_number", "model", "uuid"}
        values = [p["value"]["doubleValue"] for p in ts["points"]]
        assert all(0 <= v <= 1 for v in values) and sum(values) / len(values) > 0.6
    assert _gpu_vms(fleet["truth"])["dcgm-a100-01"]["monitoring"] == "ops_agent_dcgm_v1"


def test_the_simulator_never_imports_our_parser() -> None:
    """Its SKU strings and ground truth come from the world, so tests cannot share the parser's
    mistakes: neither the source nor a fresh import pulls in the SKU parser or attribution."""
    banned = ("monitor.sku", "monitor.gpu_models", "monitor.attribution", "monitor.pricebook")
    for path in SIM_DIR.glob("*.py"):
        text = path.read_text()
        assert not [b for b in banned if re.search(rf"\b{re.escape(b)}\b", text)], path.name
    code = (
        "import sys, monitor.simulate, monitor.simulate.layout, monitor.simulate.truth; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('monitor'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods = set(loaded.stdout.split())
    assert "monitor.simulate.truth" in mods
    assert not [m for m in mods if m.startswith(banned)], mods
