"""The fleet simulator: files in the export's real shapes, deterministic, with a ground truth that
matches the rows to the micro."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor.cli import main
from monitor.schema import EXPORT_SCHEMA, Column
from monitor.simulate import FleetSimulator, to_export_json, write_fleet
from monitor.simulate.export import LineEncoder

START = datetime(2026, 11, 1, tzinfo=UTC)
BQ_TS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})? UTC$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
GPU_SKU = re.compile(r"^(Spot Preemptible )?Nvidia .* GPU running in ")


def _ts(text: str) -> datetime:
    return datetime.strptime(text.replace(" UTC", "").split(".")[0], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _micros(value: float) -> int:
    return int(Decimal(repr(value)) * 1_000_000)


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


def _hidden(truth: dict, kind: str, variant: str | None = None) -> dict:
    found = [h for h in truth["hidden_costs"] if h["kind"] == kind and variant in (None, h["variant"])]
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


def test_rows_look_like_a_gpu_fleet(fleet: dict) -> None:
    rows = fleet["rows"]
    skus = {r["sku"]["description"] for r in rows}
    for needed in (
        "Nvidia H100 80GB GPU running in Americas",
        "Spot Preemptible Nvidia Tesla A100 GPU running in Americas",
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
            sys = {kv["key"]: kv["value"] for kv in r["system_labels"]}
            assert sys["compute.googleapis.com/machine_spec"] in (
                "a3-highgpu-8g",
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
            assert abs(Decimal(repr(r["cost"])) - expected) < Decimal("0.000001")
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
    rows, totals = fleet["rows"], fleet["truth"]["totals"]
    cost = sum(_micros(r["cost"]) for r in rows)
    credits = sum(_micros(c["amount"]) for r in rows for c in r["credits"])
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
    ("kind", "variant"),
    [("idle_gpu", "went_idle"), ("idle_gpu", "never_used"), ("unmonitored_gpu", "agent_missing")],
)
def test_gpu_impacts_are_the_gpu_rows_of_the_instance(fleet: dict, kind: str, variant: str) -> None:
    h = _hidden(fleet["truth"], kind, variant)
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
    assert len(fleet["truth"]["hidden_costs"]) == 5
    rows = clean["rows"]
    assert not [r for r in rows if r["sku"]["description"] == "Network Inter Zone Data Transfer Out"]
    for project in {r["project"]["id"] for r in rows}:
        days = list(_daily(rows, project).values())
        assert max(days) < 1.35 * min(days), (project, days)
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


def _utilization(out: Path) -> dict[str, list[float]]:
    values: dict[str, list[float]] = defaultdict(list)
    for path in sorted((out / "utilization").glob("*.json.gz")):
        for ts in json.loads(gzip.decompress(path.read_bytes()))["timeSeries"]:
            values[ts["metadata"]["systemLabels"]["name"]] += [
                p["value"]["doubleValue"] for p in ts["points"]
            ]
    return values


def test_utilization_is_monitoring_json_newest_first(fleet: dict) -> None:
    page = json.loads(gzip.decompress((fleet["out"] / "utilization" / "2026-11-02.json.gz").read_bytes()))
    assert set(page) == {"timeSeries"}
    ts = page["timeSeries"][0]
    assert ts["metric"]["type"] == "agent.googleapis.com/gpu/utilization"
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
    assert all(0 <= p["value"]["doubleValue"] <= 100 for t in page["timeSeries"] for p in t["points"])


def test_utilization_shows_the_idle_and_the_busy(fleet: dict) -> None:
    truth = fleet["truth"]
    util = _utilization(fleet["out"])
    assert _hidden(truth, "unmonitored_gpu")["scope"]["instance"] not in util
    never = _hidden(truth, "idle_gpu", "never_used")["scope"]["instance"]
    assert max(util[never]) < 2
    went = _hidden(truth, "idle_gpu", "went_idle")
    sim = FleetSimulator(11, START, 5)
    t0 = datetime.fromisoformat(went["window_start"])
    t1 = datetime.fromisoformat(went["window_end"])
    idle = [
        p["value"]["doubleValue"]
        for s in sim.utilization_series(t0, t1)
        if s["metadata"]["systemLabels"]["name"] == went["scope"]["instance"]
        for p in s["points"]
    ]
    assert idle and max(idle) < 2
    busy = {n: sum(v) / len(v) for n, v in util.items() if n not in (never, went["scope"]["instance"])}
    assert min(busy.values()) > 30


# -- command line ---------------------------------------------------------------------------------


def test_cli_prints_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--days", "1", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"wrote [\d,]+ billing rows, 1 days from 2026-11-01 00:00Z", out)
    assert "total cost $" in out and "idle_gpu/never_used" in out
    assert (tmp_path / "billing" / "export.parquet").is_file()


def test_cli_rejects_a_start_off_the_hour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--days", "1", "--start", "2026-11-01T00:30:00Z"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "gpucost: error: simulate: start 2026-11-01T00:30:00Z must be on the hour (usage windows are hourly)"
    )


@pytest.mark.slow
def test_default_fleet_size(tmp_path: Path) -> None:
    summary = write_fleet(tmp_path, seed=7, days=14)
    assert 20_000 <= summary["rows"] <= 80_000
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 30 * 2**20
