"""`gpucost gpus` end to end, in process, on a small simulated fleet: the JSON fields of issue 4
item 4, idle and unmonitored dollars against the simulator's ground truth, rollups, table output."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from monitor.detectors.inputs import GpuHourTable
from monitor.simulate import write_fleet
from tests.export_rows import export_row, write_ndjson

INSTANCE_KEYS = {
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


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, seed=5, days=3, formats=("ndjson",))  # the NDJSON route
    return out


def run(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def args(fleet: Path) -> list[str]:
    return [
        "gpus",
        "--billing",
        str(fleet / "billing" / "export.ndjson.gz"),
        "--utilization",
        str(fleet / "utilization"),
    ]


@pytest.fixture(scope="module")
def doc(fleet: Path) -> dict[str, Any]:
    rc, out = run([*args(fleet), "--format", "json"])
    assert rc == 0
    return json.loads(out)


@pytest.mark.slow
def test_json_fields(doc: dict[str, Any]) -> None:
    assert set(doc) == {"instances", "rollups"}
    assert doc["instances"] and doc["rollups"]
    for i in doc["instances"]:
        assert set(i) == INSTANCE_KEYS
        assert isinstance(i["gpus"], int) and i["gpus"] >= 1 and i["gpu_hours"] > 0
        assert i["idle_cost_usd"] <= i["gpu_cost_usd"] and i["unmonitored_cost_usd"] <= i["gpu_cost_usd"]
        assert i["mean_utilization_pct"] is None or 0 <= i["mean_utilization_pct"] <= 100
    for r in doc["rollups"]:
        assert set(r) == {"group", "key", "instances"} | (
            INSTANCE_KEYS
            - {"instance", "instance_id", "project", "zone", "cluster", "node_pool", "machine_type"}
            - {"gpu_model", "gpus"}
        )
    groups = {r["group"] for r in doc["rollups"]}
    assert {"project", "label:team", "label:job"} <= groups  # billing.labels defaults
    assert groups <= {"project", "node_pool", "namespace", "label:team", "label:job"}


@pytest.mark.slow
def test_idle_and_unmonitored_dollars_match_the_ground_truth(fleet: Path, doc: dict[str, Any]) -> None:
    truth = json.loads((fleet / "ground_truth.json").read_text())
    by_id = {i["instance_id"]: i for i in doc["instances"]}
    for h in truth["hidden_costs"]:
        inst = by_id.get(h["scope"]["instance_id"])
        if h["kind"] == "idle_gpu":
            assert inst["idle_cost_usd"] == pytest.approx(h["impact_usd"], rel=0.05)
            assert inst["instance"] == h["scope"]["instance"] and inst["gpus"] == h["details"]["gpus"]
        elif h["kind"] == "unmonitored_gpu":
            assert inst["unmonitored_cost_usd"] == pytest.approx(h["impact_usd"], rel=0.05)
            assert inst["mean_utilization_pct"] is None and inst["idle_cost_usd"] == 0
    never = next(h for h in truth["hidden_costs"] if h["variant"] == "never_used")
    assert by_id[never["scope"]["instance_id"]]["cost_per_busy_gpu_hour_usd"] is None  # nothing busy
    idle = [i["idle_cost_usd"] for i in doc["instances"]]
    assert idle == sorted(idle, reverse=True) and idle[0] > 0  # largest idle cost first


@pytest.mark.slow
def test_rollups_add_up_to_the_instances(doc: dict[str, Any]) -> None:
    total = round(sum(i["gpu_cost_usd"] for i in doc["instances"]), 2)
    for group in ("project", "label:team"):
        rolled = sum(r["gpu_cost_usd"] for r in doc["rollups"] if r["group"] == group)
        assert rolled == pytest.approx(total, abs=0.01 * len(doc["rollups"]))
        assert sum(r["instances"] for r in doc["rollups"] if r["group"] == group) == len(doc["instances"])


@pytest.mark.slow
def test_table(fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The joined GPU hours are summed per node from their table's columns: no `GpuHour` is built
    from it."""

    def no_rows(table: GpuHourTable, picked: object = None) -> list:
        raise AssertionError("a GpuHour was built from the joined table")

    monkeypatch.setattr(GpuHourTable, "rows", no_rows)
    rc, out = run(args(fleet))
    assert rc == 0 and "Per instance" in out and "bob-a100-debug" in out and "Rolled up" in out


def test_a_window_without_gpu_spend_says_so(tmp_path: Path, capsys) -> None:
    """koku's real exports hold no GPU row: `gpus` printed its two tables as bare headers."""
    row = export_row({"sku.description": "E2 Instance Core running in Americas"})  # koku's real SKU
    assert main(["gpus", "--billing", str(write_ndjson(tmp_path / "export.ndjson", [row]))]) == 0
    out = capsys.readouterr().out
    assert "No GPU spend in this window" in out and "Per instance" not in out and "Rolled up" not in out
    assert main(["analyze", "--billing", str(tmp_path / "export.ndjson")]) == 0
    assert "none found in this window" in capsys.readouterr().out  # no finding: the table says so


def test_bad_window_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    tiny = write_ndjson(tmp_path / "export.ndjson", [export_row()])
    assert main(["gpus", "--billing", str(tiny), "--start", "2026-13-01"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "bad timestamp" in err


def test_billing_without_utilization_is_all_unmonitored(tmp_path: Path, capsys) -> None:
    tiny = write_ndjson(tmp_path / "export.ndjson", [export_row()])
    assert main(["gpus", "--billing", str(tiny), "--format", "json"]) == 0
    (inst,) = json.loads(capsys.readouterr().out)["instances"]
    assert (inst["instance"], inst["instance_id"], inst["gpus"], inst["gpu_model"]) == (
        "gpu-node-1",
        "42",
        8,
        "H100 80GB",
    )
    assert inst["gpu_cost_usd"] == inst["unmonitored_cost_usd"] == 88.0
    assert inst["mean_utilization_pct"] is None and inst["idle_cost_usd"] == 0.0


def test_gke_pool_rolls_up_per_node_pool_and_namespace(tmp_path: Path, capsys) -> None:
    """A GKE node pool with cost allocation on: billing labels as GKE writes them (see
    tests/test_gke_identity.py for their sources), node duty cycle as Cloud Monitoring serves it."""
    from tests.test_gke_identity import CLUSTER, NODES, POOL, PROJECT, T0, k8s_node, node_series

    rows = []
    for h in range(3):
        start = T0 + timedelta(hours=h)
        for n, node in enumerate(NODES[:2]):
            for ns, cost in (("team-llm", 60.0), ("kube:unallocated", 28.0)):
                rows.append(
                    export_row(
                        {
                            "usage_start_time": start.strftime("%Y-%m-%d %H:%M:%S UTC"),
                            "usage_end_time": (start + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S UTC"),
                            "project.id": PROJECT,
                            "resource.name": node,
                            "resource.global_name": "//compute.googleapis.com/projects/441570621172/zones/"
                            f"us-central1-a/instances/{7000 + n}",
                            "usage.amount_in_pricing_units": 8.0 * cost / 88.0,
                            "usage.amount": 28800.0 * cost / 88.0,
                        },
                        labels=[
                            {"key": "goog-k8s-cluster-name", "value": CLUSTER},
                            {"key": "goog-k8s-node-pool-name", "value": POOL},
                            {"key": "k8s-namespace", "value": ns},
                        ],
                        cost=cost,
                        credits=[],
                    )
                )
    billing = write_ndjson(tmp_path / "export.ndjson", rows)
    series = node_series(k8s_node, NODES[0], range(3), busy_until=3)
    series += node_series(k8s_node, NODES[1], range(3), busy_until=1)
    util = tmp_path / "util.json"
    util.write_text(json.dumps({"timeSeries": series}))
    window = ["--start", "2026-11-02T00:00:00Z", "--end", "2026-11-02T03:00:00Z"]
    argv = ["gpus", "--billing", str(billing), "--utilization", str(util), *window, "--format", "json"]
    assert main([*argv, "--by", "node_pool", "--by", "namespace"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(i["cluster"], i["node_pool"]) for i in doc["instances"]} == {(CLUSTER, POOL)}
    assert all(i["unmonitored_cost_usd"] == 0 for i in doc["instances"])
    pool = [r for r in doc["rollups"] if r["group"] == "node_pool"]
    assert [(r["key"], r["instances"], r["gpu_cost_usd"], r["idle_cost_usd"]) for r in pool] == [
        (f"{CLUSTER}/{POOL}", 2, 528.0, 176.0)
    ]
    ns = {r["key"]: r for r in doc["rollups"] if r["group"] == "namespace"}
    assert (ns["team-llm"]["gpu_cost_usd"], ns["team-llm"]["idle_cost_usd"]) == (360.0, 120.0)
    assert (ns["kube:unallocated"]["gpu_cost_usd"], ns["kube:unallocated"]["idle_cost_usd"]) == (168.0, 56.0)
    assert {r["group"] for r in doc["rollups"]} == {"node_pool", "namespace", "label:team", "label:job"}
    assert main(argv[:-2]) == 0  # the table names cluster and pool
    table = capsys.readouterr().out
    assert "Node pool" in table and POOL in table and "node_pool" in table
