"""Acceptance against the simulator's ground truth (issues 4, 5 and 10), through the real CLI.

The fleet holds the real shapes of issue 10 (a GKE GPU node pool on node metrics with one hung node,
Spot GPUs in the catalog's wording, a DCGM v1 VM, a second region, an account invoiced in EUR);
`tests/test_real_shapes.py` checks those shapes one by one.

For several seeds, a 14-day fleet with injected hidden costs must give:
- every injected hidden cost as a finding of the right kind and scope, impact within 10% of truth;
- the idle GPUs and their idle dollars in `gpucost gpus` within 5%;
- no finding above $50 the ground truth does not contain;
- totals equal to the export's to the cent.
A `--clean` fleet (same fleet, nothing injected) must give no warning or critical finding.

Advice is not a hidden cost: `commitment_opportunity` and `spot_opportunity` (detectors marked
`advice`) price a cheaper way to buy GPU hours that were used, nothing leaked. The simulator does not
inject them, so they are left out of the "nothing unexpected" check; they are `info` by default, so
the clean fleet check covers them: they never alert.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from monitor.render import is_advice
from tests.shared_fleets import shared_cli_json, shared_fleet

pytestmark = pytest.mark.slow

SEEDS = (7, 11, 23)
DAYS = 14
IMPACT_TOLERANCE = 0.10
GPUS_TOLERANCE = 0.05
NOISE_USD = 50


def run_fleet(factory: pytest.TempPathFactory, seed: int, inject: bool) -> dict[str, Any]:
    """The fleet (`tests.shared_fleets`: written once per session) and what `analyze` and `gpus` say."""
    out, _ = shared_fleet(factory, seed, DAYS, inject)
    src = ["--billing", str(out / "billing" / "export.parquet"), "--utilization", str(out / "utilization")]
    return {
        "pin": f"seed{seed}" if inject else "clean",
        "truth": json.loads((out / "ground_truth.json").read_text()),
        "analyze": shared_cli_json(factory, ["analyze", *src]),
        "gpus": shared_cli_json(factory, ["gpus", *src]),
    }


@pytest.fixture(scope="module", params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_fleet(tmp_path_factory, request.param, inject=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_fleet(tmp_path_factory, SEEDS[0], inject=False)


def same_machine(want: dict[str, Any], got: dict[str, Any]) -> bool:
    """The same VM: by instance id, or for a GKE node by (cluster, node name) when a finding made from
    node metrics alone carries no instance id."""
    if got.get("instance_id") is not None:
        return got["instance_id"] == want["instance_id"]
    return want["cluster"] is not None and (got.get("cluster"), got.get("instance")) == (
        want["cluster"],
        want["instance"],
    )


def matches(truth: dict[str, Any], f: dict[str, Any]) -> bool:
    """Same kind and the same thing: instance, cluster, or project (and variant where it has one)."""
    want, got = truth["scope"], f["scope"]
    if f["kind"] != truth["kind"] or got["project"] != want["project"]:
        return False
    kind = truth["kind"]
    if kind == "idle_gpu":
        return same_machine(want, got) and f["evidence"]["variant"] == truth["variant"]
    if kind == "unmonitored_gpu":
        ids = {i["instance_id"] for i in f["evidence"]["instances"]}
        return got["instance_id"] == want["instance_id"] and ids == {want["instance_id"]}
    if kind == "cross_zone_egress":
        return got["cluster"] == want["cluster"]
    if kind == "spend_anomaly":
        return f["evidence"]["category"] is None  # the project as a whole, not one category
    raise AssertionError(f"no matching rule for injected kind {kind}")


def rel_error(found: float, truth: float) -> float:
    return abs(found - truth) / truth


def test_totals_equal_the_export_to_the_cent(fleet: dict[str, Any]) -> None:
    t = fleet["truth"]["totals"]
    assert fleet["analyze"]["totals"] == {
        "cost": t["cost"],
        "credits": t["credits"],
        "net_cost": t["net_cost"],
    }


def test_every_injected_hidden_cost_is_found_with_its_impact(fleet: dict[str, Any]) -> None:
    findings = fleet["analyze"]["findings"]
    hidden = fleet["truth"]["hidden_costs"]
    assert {h["kind"] for h in hidden} == {
        "idle_gpu",
        "cross_zone_egress",
        "spend_anomaly",
        "unmonitored_gpu",
    }
    for h in hidden:
        found = [f for f in findings if matches(h, f)]
        assert len(found) == 1, f"{h['kind']}/{h['variant']} {h['scope']}: {len(found)} findings"
        err = rel_error(found[0]["impact_usd"], h["impact_usd"])
        assert err <= IMPACT_TOLERANCE, (
            f"{h['kind']}/{h['variant']}: {found[0]['impact_usd']} vs {h['impact_usd']}"
        )
        assert found[0]["severity"] in ("warning", "critical")  # each of these is worth an alert
        assert not found[0]["estimated"]  # every hour is billed


def test_gpus_finds_the_idle_gpus_and_their_idle_dollars(fleet: dict[str, Any]) -> None:
    by_id = {i["instance_id"]: i for i in fleet["gpus"]["instances"]}
    idle_truth = [h for h in fleet["truth"]["hidden_costs"] if h["kind"] == "idle_gpu"]
    assert len(idle_truth) == 3  # a VM gone idle, one never used, a GKE node whose job hung
    for h in idle_truth:
        inst = by_id[h["scope"]["instance_id"]]
        assert inst["instance"] == h["scope"]["instance"]
        assert inst["idle_gpu_hours"] == pytest.approx(h["details"]["gpu_hours"], rel=GPUS_TOLERANCE)
        assert rel_error(inst["idle_cost_usd"], h["impact_usd"]) <= GPUS_TOLERANCE
    injected = {h["scope"]["instance_id"] for h in idle_truth}
    others = [i for i in fleet["gpus"]["instances"] if i["instance_id"] not in injected]
    assert sum(i["idle_cost_usd"] for i in others) <= NOISE_USD  # no other GPU reported idle


def test_nothing_above_noise_that_was_not_injected(fleet: dict[str, Any]) -> None:
    hidden = fleet["truth"]["hidden_costs"]
    extra = [
        (f["kind"], f["scope"], f["impact_usd"])
        for f in fleet["analyze"]["findings"]
        if f["impact_usd"] > NOISE_USD and not is_advice(f["kind"]) and not any(matches(h, f) for h in hidden)
    ]
    assert extra == []


def test_a_clean_fleet_raises_no_warning(clean: dict[str, Any]) -> None:
    assert clean["truth"]["hidden_costs"] == []
    loud = [
        (f["kind"], f["severity"], f["impact_usd"])
        for f in clean["analyze"]["findings"]
        if f["severity"] != "info"
    ]
    assert loud == []
    assert all(i["idle_cost_usd"] == 0 for i in clean["gpus"]["instances"])
    t = clean["truth"]["totals"]
    assert clean["analyze"]["totals"]["net_cost"] == t["net_cost"]


# -- the analyze contract, pinned ---------------------------------------------------------------------

PINNED = Path(__file__).parent / "fixtures" / "analyze"
#: Set to re-pin after a change meant to move figures: the files are rewritten and the test fails,
#: so the diff is read before it is committed.
REPIN = os.environ.get("GPUCOST_REPIN") == "1"


def differences(want: Any, got: Any, path: str = "$") -> list[str]:
    """Where two JSON documents differ: exact, except floats to 1e-9 relative (utilization means,
    summed in an order an engine may choose)."""
    if isinstance(want, float) or isinstance(got, float):
        same = isinstance(want, int | float) and isinstance(got, int | float)
        return (
            []
            if same and math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-9)
            else [f"{path}: {want!r} -> {got!r}"]
        )
    if isinstance(want, dict) and isinstance(got, dict):
        out = [
            f"{path}.{k}: only {'pinned' if k in want else 'now'}" for k in sorted(want.keys() ^ got.keys())
        ]
        return out + [
            d for k in sorted(want.keys() & got.keys()) for d in differences(want[k], got[k], f"{path}.{k}")
        ]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [
            d
            for i, (w, g) in enumerate(zip(want, got, strict=True))
            for d in differences(w, g, f"{path}[{i}]")
        ]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def check_pinned(run: dict[str, Any]) -> None:
    """Every `analyze` JSON figure, finding (evidence included) and fingerprint is what was pinned in
    tests/fixtures/analyze (README there: where the files come from); `stats` is how the figures
    were read (time, rows fetched), not what they are."""
    doc = {k: v for k, v in run["analyze"].items() if k != "stats"}
    path = PINNED / f"{run['pin']}.json.gz"
    if REPIN:
        path.write_bytes(gzip.compress(json.dumps(doc, indent=1, sort_keys=True).encode(), mtime=0))
        pytest.fail(f"re-pinned {path}: review its diff (zcat) before committing")
    diff = differences(json.loads(gzip.decompress(path.read_bytes())), doc)
    assert diff == [], f"{len(diff)} difference(s) from {path.name}:\n" + "\n".join(diff[:20])
    # -0.0 == 0.0, so the comparison cannot see a signed zero: a commitment with nothing unused
    # printed "usd": -0.0 in every seed's document
    signed = re.findall(r'"[^"]+": -0\.0(?![0-9])', json.dumps(run["analyze"]))
    assert signed == [], signed[:5]


def test_analyze_json_is_the_pinned_one(fleet: dict[str, Any]) -> None:
    check_pinned(fleet)


def test_analyze_json_of_the_clean_fleet_is_the_pinned_one(clean: dict[str, Any]) -> None:
    check_pinned(clean)


def test_a_moved_figure_is_a_difference() -> None:
    """The comparison can fail: a cent, a float past its tolerance, a finding more, a key renamed."""
    doc = {"totals": {"cost": 10.25}, "findings": [{"fingerprint": "ab", "evidence": {"mean": 0.1}}]}
    assert differences(doc, json.loads(json.dumps(doc))) == []
    assert differences(doc, {**doc, "totals": {"cost": 10.26}}) == ["$.totals.cost: 10.25 -> 10.26"]
    assert (
        differences(doc, {**doc, "findings": [{"fingerprint": "ab", "evidence": {"mean": 0.1 + 1e-12}}]})
        == []
    )
    assert differences(doc, {**doc, "findings": [{"fingerprint": "ab", "evidence": {"mean": 0.1001}}]})
    assert differences(doc, {**doc, "findings": [*doc["findings"], doc["findings"][0]]})
    assert differences(doc, {**doc, "findings": [{"fingerprint": "ac", "evidence": {"mean": 0.1}}]})
    assert differences(doc, {"totals": doc["totals"], "finding": doc["findings"]}) == [
        "$.finding: only now",
        "$.findings: only pinned",
    ]
