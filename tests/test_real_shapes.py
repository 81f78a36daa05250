"""Acceptance of issue 10 ("Right on real fleets") on the simulator's mixed fleet, through the CLI.

The default simulated fleet mixes every shape real Google Cloud fleets have and earlier versions got
wrong: a GKE GPU node pool reporting `kubernetes.io/node/accelerator/duty_cycle` on `k8s_node` (one
node's job hangs for 42 hours), Spot GPUs in the catalog's infix wording and an all-Spot project, an
A100 VM monitored by the Ops Agent's DCGM v1 receiver (SM activity as a 0-1 ratio), an H100 in
europe-west4 at that region's catalog price, and a billing account invoiced in EUR.

`gpucost analyze` (and `gpucost gpus`) on it must find every injected hidden cost within 10% and raise
no `unmonitored_gpu`, `idle_gpu` or `spot_opportunity` finding where there is none: the GKE pool is
not unmonitored, the busy DCGM v1 VM is not idle, the all-Spot project gets no Spot advice. Whether a
VM is Spot, how it is monitored and which pool it is in come from the ground truth the simulator wrote
from what it built (`ground_truth.json` "fleet"), never from our SKU parser.

The second half runs the same through `--config`: billing from the BigQuery emulator (real client),
utilization from the gRPC Monitoring stand-in serving the fleet's series with their real units.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.emulators.fleet import BQ_PROJECT, DATASET, export_table, load_rows, with_partition_standin
from tests.fakes.monitoring_server import ScopedMonitoringServer, from_rest_json
from tests.shared_fleets import cli_json, shared_cli_json, shared_fleet
from tests.test_ground_truth import IMPACT_TOLERANCE, matches, rel_error

pytest_plugins = ("tests.conftest_bq",)
pytestmark = pytest.mark.slow

SEED = 7
DAYS = 14


def _analyze(out: Path, extra: list[str]) -> dict[str, Any]:
    return {
        "truth": json.loads((out / "ground_truth.json").read_text()),
        "analyze": cli_json(["analyze", *extra]),
        "gpus": cli_json(["gpus", *extra]),
    }


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed 7's fortnight, the ground-truth suite's first fleet (`tests.shared_fleets`)."""
    return shared_fleet(tmp_path_factory, SEED, DAYS)[0]


@pytest.fixture(scope="module")
def files(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    src = [
        "--billing",
        str(fleet_dir / "billing" / "export.parquet"),
        "--utilization",
        str(fleet_dir / "utilization"),
    ]
    return {
        "truth": json.loads((fleet_dir / "ground_truth.json").read_text()),
        "analyze": shared_cli_json(tmp_path_factory, ["analyze", *src]),
        "gpus": shared_cli_json(tmp_path_factory, ["gpus", *src]),
    }


def _inventory(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["instance"]: v for v in run["truth"]["fleet"]["gpu_vms"]}


def _hung(run: dict[str, Any]) -> dict[str, Any]:
    (h,) = [h for h in run["truth"]["hidden_costs"] if h["details"].get("cause") == "hung_job"]
    return h


# -- the checks, shared by both routes ------------------------------------------------------------


def check_the_fleet_is_mixed(run: dict[str, Any]) -> None:
    """Guard: the fleet really holds every shape, or the checks below would pass vacuously."""
    inv = _inventory(run).values()
    assert {v["monitoring"] for v in inv} == {"gke_node", "ops_agent_dcgm_v1", "ops_agent_nvml", "none"}
    assert {v["pricing"] for v in inv} == {"on_demand", "spot", "committed"}
    assert {v["region"] for v in inv} == {"us-central1", "europe-west4"}
    assert {v["currency"] for v in inv} == {"USD", "EUR"}
    assert {v["node_pool"] for v in inv if v["cluster"] == "llm-train"} == {"h100-pool"}
    assert run["truth"]["fleet"]["all_spot_projects"] == ["ml-batch"]
    assert _hung(run)["details"]["gpu_hours"] == 8 * 42


def check_every_injected_cost_is_found(run: dict[str, Any]) -> None:
    findings = run["analyze"]["findings"]
    misses = []
    for h in run["truth"]["hidden_costs"]:
        found = [f for f in findings if matches(h, f)]
        if len(found) != 1:
            misses.append(
                (h["kind"], h["variant"], h["scope"]["instance"] or h["scope"]["project"], len(found))
            )
        elif rel_error(found[0]["impact_usd"], h["impact_usd"]) > IMPACT_TOLERANCE:
            misses.append((h["kind"], h["variant"], found[0]["impact_usd"], h["impact_usd"]))
    assert misses == []


def check_the_gke_finding_names_cluster_and_pool(run: dict[str, Any]) -> None:
    h = _hung(run)
    (f,) = [f for f in run["analyze"]["findings"] if matches(h, f)]
    ev = f["evidence"]
    assert (ev["cluster"], ev["node_pool"]) == ("llm-train", "h100-pool")
    assert f["scope"]["instance"] == h["details"]["node_name"]
    assert ev["idle_gpu_hours"] == pytest.approx(h["details"]["gpu_hours"], rel=IMPACT_TOLERANCE)
    assert not f["estimated"]  # every hour is billed
    pools = {r["key"]: r for r in run["gpus"]["rollups"] if r["group"] == "node_pool"}
    assert pools["llm-train/h100-pool"]["instances"] == 4
    assert rel_error(pools["llm-train/h100-pool"]["idle_cost_usd"], h["impact_usd"]) <= IMPACT_TOLERANCE


def check_no_unmonitored_gpu_where_none(run: dict[str, Any]) -> None:
    """The GKE pools (node metrics) and the DCGM v1 VM are monitored; only the injected VM is not."""
    injected = {
        h["scope"]["instance"] for h in run["truth"]["hidden_costs"] if h["kind"] == "unmonitored_gpu"
    }
    flagged = {
        i["instance"]
        for f in run["analyze"]["findings"]
        if f["kind"] == "unmonitored_gpu"
        for i in f["evidence"]["instances"]
    }
    assert flagged - injected == set()
    inv = _inventory(run)
    by_name = {i["instance"]: i for i in run["gpus"]["instances"]}
    loud = {n: by_name[n]["unmonitored_cost_usd"] for n, v in inv.items() if v["monitoring"] != "none"}
    assert {n: c for n, c in loud.items() if c} == {}


def check_no_idle_gpu_where_none(run: dict[str, Any]) -> None:
    """No idle finding the truth does not hold; the busy DCGM v1 VM reads busy (ratio, not percent)."""
    hidden = run["truth"]["hidden_costs"]
    extra = [
        (f["scope"]["instance"], f["impact_usd"])
        for f in run["analyze"]["findings"]
        if f["kind"] == "idle_gpu" and not any(matches(h, f) for h in hidden)
    ]
    assert extra == []
    dcgm = [n for n, v in _inventory(run).items() if v["monitoring"] == "ops_agent_dcgm_v1"]
    by_name = {i["instance"]: i for i in run["gpus"]["instances"]}
    assert dcgm and all(by_name[n]["idle_gpu_hours"] == 0 for n in dcgm)
    assert all(by_name[n]["mean_utilization_pct"] > 50 for n in dcgm)


def check_no_spot_advice_for_spot(run: dict[str, Any]) -> None:
    """An all-Spot project gets no Spot advice, and no advice names a VM that already is Spot."""
    all_spot = set(run["truth"]["fleet"]["all_spot_projects"])
    inv = _inventory(run)
    advice = [f for f in run["analyze"]["findings"] if f["kind"] == "spot_opportunity"]
    assert [f["scope"]["project"] for f in advice if f["scope"]["project"] in all_spot] == []
    named = {i["instance"] for f in advice for i in f["evidence"].get("instances", [])}
    assert {n for n in named if inv.get(n, {}).get("pricing") == "spot"} == set()


def check_totals_in_usd_across_currencies(run: dict[str, Any]) -> None:
    t = run["truth"]["totals"]
    assert run["analyze"]["totals"] == {"cost": t["cost"], "credits": t["credits"], "net_cost": t["net_cost"]}


CHECKS = [
    check_the_fleet_is_mixed,
    check_every_injected_cost_is_found,
    check_the_gke_finding_names_cluster_and_pool,
    check_no_unmonitored_gpu_where_none,
    check_no_idle_gpu_where_none,
    check_no_spot_advice_for_spot,
    check_totals_in_usd_across_currencies,
]
IDS = [c.__name__.removeprefix("check_") for c in CHECKS]


@pytest.mark.parametrize("check", CHECKS, ids=IDS)
def test_analyze_on_files(files: dict[str, Any], check: Any) -> None:
    check(files)


# -- the same through --config: the BigQuery emulator and the gRPC Monitoring stand-in -------------


def _monitoring_series(out: Path) -> Iterator[Any]:
    """The fleet's utilization files as the real service's protobuf TimeSeries (REST JSON parsed)."""
    for path in sorted((out / "utilization").glob("*.json.gz")):
        for ts in json.loads(gzip.decompress(path.read_bytes()))["timeSeries"]:
            yield from_rest_json(ts)


@pytest.fixture(scope="module")
def live(
    fleet_dir: Path, bq_client: Any, bq_wire: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The same fortnight (a shorter window would make the spend step a single day) loaded into the
    emulator through the real client, its utilization served by the gRPC stand-in. The rows are the
    fleet's own export.parquet, the simulator's rows as written (simulating them again and making
    JSON of them was 7 s of this fixture)."""
    out = fleet_dir
    table_id = f"{BQ_PROJECT}.{DATASET}.mixed_fleet"
    table = export_table(bq_client, "mixed_fleet")
    load_rows(bq_client, table, with_partition_standin(pq.read_table(out / "billing" / "export.parquet")))
    truth = json.loads((out / "ground_truth.json").read_text())
    projects = sorted({v["project"] for v in truth["fleet"]["gpu_vms"]})
    with ScopedMonitoringServer(page_size=100) as server:
        server.add(*_monitoring_series(out))
        config = tmp_path_factory.mktemp("mixed-live") / "gpucost.toml"  # not in the shared fleet
        config.write_text(
            '[google]\ncredentials = "anonymous"\n\n'
            f'[billing]\nsource = "bigquery"\ntable = "{table_id}"\nproject = "{BQ_PROJECT}"\n'
            f'api_endpoint = "{bq_wire.url}"\n\n'
            f'[utilization]\nsource = "cloud_monitoring"\nprojects = {json.dumps(projects)}\n'
            'presets = ["ops_agent_nvml", "ops_agent_dcgm", "gke"]\n'
            f'api_endpoint = "{server.address}"\ninsecure = true\n',
            encoding="utf-8",
        )
        start = truth["window"]["start"]
        end = truth["window"]["end"]
        yield _analyze(out, ["--config", str(config), "--start", start, "--end", end])


@pytest.mark.integration
@pytest.mark.parametrize("check", CHECKS, ids=IDS)
def test_analyze_through_config_on_the_emulators(live: dict[str, Any], check: Any) -> None:
    check(live)
