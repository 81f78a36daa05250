"""GKE as a first-class fleet: one identity for a GPU node, from billing and from every GKE sample.

Billing rows of GKE node VMs carry an instance id, the cluster and node pool labels
(`goog-k8s-cluster-name`, `goog-k8s-node-pool-name`) and the node VM's name in `resource.name`;
GKE utilization carries only project, location, cluster and node name (k8s_node `node_name`,
k8s_container `metadata.system_labels.node_name`, dcgm-exporter's `Hostname` on prometheus_target;
/work/shared/reference/gcp.md section 4). Samples here go through the real parser
(`parse_series` + `assemble`) from REST-shaped TimeSeries.

Node names have the real GKE shape `gke-<cluster>-<pool>-<8 hex>-<4 chars>`, as in the public
`kubectl get nodes` output `gke-standard-cluster-1-default-pool-b5e24cb4-j23k`
(Raghavendarlokineni/kubernetes-cluster, README.md). With GKE cost allocation, the node's rows are
split per `k8s-namespace` label (label names: Google's "View detailed breakdown of cluster costs",
https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations; the same keys in public
billing-export queries, e.g. willyrj/001.GKE-Workload-Costs README.md `labels.key = "k8s-namespace"`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from monitor.assemble import gpu_hours, gpu_node_hours
from monitor.billing_poll import _KEY_NAMES, HourlyCost
from monitor.detectors.idle_gpu import MPS_FALLBACK, IdleGpu, instance_key
from monitor.detectors.inputs import DetectorInputs, GpuHour
from monitor.detectors.unmonitored_gpu import UnmonitoredGpu
from monitor.gpu_identity import (
    NodeKind,
    billed_identities,
    billed_identity,
    node_pool_from_name,
    row_identity,
    sample_identities,
)
from monitor.gpu_rollups import rollups, split_exact, summarize_instances
from monitor.gpus import GpuNodeHours
from monitor.jobs.identity import parse_labels
from monitor.sources.presets import spec_for
from monitor.utilization import GpuSample, assemble, parse_series, resolve_duty_cycles, util_hours
from tests.aggregates import node_hours, stored

T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)
D = Decimal
PROJECT = "ml-prod"
CLUSTER = "h100-train"
POOL = "a3-pool"
NODES = [f"gke-{CLUSTER}-{POOL}-1a2b3c4d-{s}" for s in ("x9k2", "j23k", "v5ff", "xnfg")]
SKU = "Nvidia H100 80GB GPU running in Americas"


# ------------------------------------------------------------------------------------ the identity

IDENTITY_CASES = [
    # (project, zone, instance, instance_id, cluster) -> primary kind, primary key
    (("p", "us-central1-a", "vm-1", "42", None), NodeKind.GCE, "gce|p|42"),
    (("p", "us-central1-a", "vm-1", None, None), NodeKind.GCE_NAME, "gce_name|p|us-central1-a|vm-1"),
    (("p", "us-central1-a", NODES[0], "4242", CLUSTER), NodeKind.GKE, f"gke|p|{CLUSTER}|{NODES[0]}"),
    (("p", "us-central1-b", NODES[0], None, CLUSTER), NodeKind.GKE, f"gke|p|{CLUSTER}|{NODES[0]}"),
]


@pytest.mark.parametrize(("fields", "kind", "key"), IDENTITY_CASES)
def test_billed_identity(fields, kind, key) -> None:
    got = billed_identity(*fields)
    assert (got.kind, got.key) == (kind, key)


SAMPLE_CASES = [
    # (project, zone, instance_id, instance_name, cluster, node_name) -> keys, primary first
    (("p", "z", "42", "vm-1", None, None), ["gce|p|42", "gce_name|p|z|vm-1"]),
    (("p", "z", None, "vm-1", None, None), ["gce_name|p|z|vm-1"]),
    # k8s_node / k8s_container / prometheus_target: cluster + node, location as zone
    (
        ("p", "us-central1", None, None, CLUSTER, NODES[1]),
        [f"gke|p|{CLUSTER}|{NODES[1]}", f"gce_name|p|us-central1|{NODES[1]}"],
    ),
    # the Ops Agent on a GKE node seen with GKE labels filled in: id first, GKE last
    (
        ("p", "z", "7", NODES[1], CLUSTER, NODES[1]),
        ["gce|p|7", f"gce_name|p|z|{NODES[1]}", f"gke|p|{CLUSTER}|{NODES[1]}"],
    ),
]


@pytest.mark.parametrize(("fields", "keys"), SAMPLE_CASES)
def test_sample_identities(fields, keys) -> None:
    assert [n.key for n in sample_identities(*fields)] == keys


def test_a_gke_billing_row_answers_to_its_node_and_its_instance_id() -> None:
    ids = billed_identities("p", "us-central1-a", NODES[0], "4242", CLUSTER)
    assert [n.kind for n in ids] == [NodeKind.GKE, NodeKind.GCE]
    scope = ids[0].scope()
    assert (scope.project, scope.cluster, scope.instance, scope.instance_id) == ("p", CLUSTER, NODES[0], None)


def test_same_node_name_in_another_cluster_is_another_node() -> None:
    a = billed_identity("p", "z", NODES[0], "1", CLUSTER)
    b = billed_identity("p", "z", NODES[0], "1", "other-cluster")
    assert a.key != b.key


@pytest.mark.parametrize(
    ("cluster", "node", "pool"),
    [
        ("standard-cluster-1", "gke-standard-cluster-1-default-pool-b5e24cb4-j23k", "default-pool"),
        (CLUSTER, NODES[0], POOL),
        ("c", "gke-other-default-pool-b5e24cb4-j23k", None),  # another cluster's node
        ("c", "gke-c-pool-notahex!-j23k", None),
        (None, NODES[0], None),
    ],
)
def test_node_pool_from_name(cluster, node, pool) -> None:
    assert node_pool_from_name(cluster, node) == pool


# ---------------------------------------------------------------------------------- billing rows


def billed(
    hour: int,
    node: str = NODES[0],
    *,
    gross: int = 88_000_000,
    cud: int = 0,
    sud: int = 0,
    namespace: str | None = None,
    iid: str | None = None,  # "" = a row without an instance id
    pricing_model: str = "on_demand",
    gpu_hours: float = 8.0,
    cluster: str | None = CLUSTER,
    sku: str = SKU,
) -> HourlyCost:
    """One hourly GPU aggregate of a GKE node VM, keyed as `queries/hourly.sql` keys it."""
    return HourlyCost(
        usage_hour=T0 + hour * H,
        subcategory="compute.gpu",
        gross_micros=gross,
        cud_micros=cud,
        sud_micros=sud,
        other_credit_micros=0,
        credit_micros=cud + sud,
        net_micros=gross + cud + sud,
        row_count=1,
        provisional=False,
        keys={
            "project_id": PROJECT,
            "zone": "us-central1-a",
            "region": "us-central1",
            "resource_name": node,
            "instance_id": None if iid == "" else iid or str(4_000_000_000_000_000_000 + NODES.index(node)),
            "machine_type": "a3-highgpu-8g",
            "cluster": cluster,
            "node_pool": POOL if cluster else None,
            "namespace": namespace,
            "sku_description": sku,
            "pricing_model": pricing_model,
            "currency": "USD",
        },
        usage_amount=gpu_hours,
    )


# ------------------------------------------------------------------------- samples, parsed for real


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _points(hour: int, value: float) -> list[dict]:
    start = T0 + hour * H
    return [
        {
            "interval": {
                "startTime": _iso(start + m * timedelta(minutes=1)),
                "endTime": _iso(start + (m + 5) * timedelta(minutes=1)),
            },
            "value": {"doubleValue": value},
        }
        for m in range(0, 60, 5)
    ]


def k8s_node(node: str, gpu: str, hour: int, value: float) -> dict:
    return {
        "metric": {
            "type": "kubernetes.io/node/accelerator/duty_cycle",
            "labels": {"accelerator_id": gpu, "model": "nvidia-h100-80gb"},
        },
        "resource": {
            "type": "k8s_node",
            "labels": {
                "project_id": PROJECT,
                "location": "us-central1-a",
                "cluster_name": CLUSTER,
                "node_name": node,
            },
        },
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "unit": "%",
        "points": _points(hour, value),
    }


def k8s_container(node: str, gpu: str, hour: int, value: float) -> dict:
    return {
        "metric": {
            "type": "kubernetes.io/container/accelerator/duty_cycle",
            "labels": {"accelerator_id": gpu, "model": "nvidia-h100-80gb"},
        },
        "resource": {
            "type": "k8s_container",
            "labels": {
                "project_id": PROJECT,
                "location": "us-central1-a",
                "cluster_name": CLUSTER,
                "namespace_name": "team-llm",
                "pod_name": "trainer-0",
                "container_name": "trainer",
            },
        },
        "metadata": {"systemLabels": {"node_name": node}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "unit": "%",
        "points": _points(hour, value),
    }


def prometheus_dcgm(node: str, gpu: str, hour: int, value: float) -> dict:
    """dcgm-exporter's GPU utilization (percent) through Managed Prometheus; node in `Hostname`."""
    return {
        "metric": {
            "type": "prometheus.googleapis.com/DCGM_FI_DEV_GPU_UTIL/gauge",
            "labels": {"gpu": gpu, "Hostname": node, "modelName": "NVIDIA H100 80GB HBM3"},
        },
        "resource": {
            "type": "prometheus_target",
            "labels": {
                "project_id": PROJECT,
                "location": "us-central1-a",
                "cluster": CLUSTER,
                "namespace": "gmp",
                "job": "dcgm",
                "instance": "dcgm-exporter",
            },
        },
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "unit": "%",
        "points": _points(hour, value),
    }


def parsed(series: list[dict]) -> list[GpuSample]:
    skips: Counter = Counter()
    out = [p for ts in series if (p := parse_series(ts, skips)) is not None]
    assert not skips, skips
    return assemble(out, 300, skips, window=(T0 - 24 * H, T0 + 400 * H))


def node_series(make, node: str, hours: range, busy_until: int, gpus: int = 8) -> list[dict]:
    """`gpus` GPUs busy (90%) before `busy_until`, idle (0%) from it."""
    return [
        make(node, f"GPU-{g:02d}", h, 90.0 if h < busy_until else 0.0) for h in hours for g in range(gpus)
    ]


@dataclass
class Prices:
    """Our PriceLookup protocol from a table (list prices per GPU-hour)."""

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        return (
            {"on_demand": D("11.00"), "spot": D("3.30")}.get(pricing_model) if "H100" in gpu_model else None
        )


def detector_inputs(rows: list[GpuHour], hours: int = 48) -> DetectorInputs:
    return DetectorInputs(
        window_start=T0,
        window_end=T0 + hours * H,
        provisional_from=T0 + hours * H,
        gpu_hours=tuple(rows),
        prices=Prices(),
    )


# ------------------------------------------------------------------------------------------ join


@pytest.mark.parametrize("make", [k8s_node, k8s_container, prometheus_dcgm], ids=lambda f: f.__name__)
def test_billed_gke_node_joins_its_samples_from_every_gke_resource(make) -> None:
    """The instance id in billing does not stop the match: the node is (project, cluster, node)."""
    rows = [billed(h) for h in range(4)]
    samples = parsed(node_series(make, NODES[0], range(4), busy_until=2))
    got = gpu_hours(node_hours(rows), util_hours(samples), 10.0, None, T0 + 4 * H)
    assert [g.monitored for g in got] == [True] * 4
    assert [g.idle_gpu_hours for g in got] == [0, 0, 8, 8]
    assert [g.idle_cost for g in got] == [0, 0, D(88), D(88)]
    assert {(g.cluster, g.node_pool) for g in got} == {(CLUSTER, POOL)}


def test_one_node_seen_through_two_gke_resources_is_one_host() -> None:
    """Half the GPUs from k8s_node, half from dcgm-exporter with a regional location: 8 GPUs seen."""
    series = node_series(k8s_node, NODES[0], range(1), busy_until=1, gpus=4)
    other = [prometheus_dcgm(NODES[0], str(g), 0, 0.0) for g in range(4)]
    for ts in other:
        ts["resource"]["labels"]["location"] = "us-central1"
    (got,) = gpu_hours(node_hours([billed(0)]), util_hours(parsed(series + other)), 10.0, None, T0 + H)
    assert (got.gpus, got.idle_gpu_hours, got.idle_cost) == (8, 4, D(44))


def test_a_pool_of_four_nodes_is_monitored_not_unmonitored() -> None:
    """The reported failure: a 4-node H100 pool's whole GPU spend came out as `unmonitored_gpu`."""
    rows = [billed(h, n) for n in NODES for h in range(6)]
    samples = parsed([s for n in NODES for s in node_series(k8s_node, n, range(6), busy_until=6)])
    got = gpu_hours(node_hours(rows), util_hours(samples), 10.0, None, T0 + 6 * H)
    assert all(g.monitored for g in got) and len(got) == 24
    assert UnmonitoredGpu().evaluate(detector_inputs(got, 6), T0 + 6 * H) == []


def dcgm_sm_active(node: str, gpu: int, uuid: str, hour: int, ratio: float) -> dict:
    """dcgm-exporter's SM activity (a 0-1 ratio) through Managed Prometheus, as it labels a GPU: its
    index in `gpu` and its device UUID in `UUID` (NVIDIA/dcgm-exporter
    internal/pkg/rendermetrics/render_metrics.go)."""
    ts = prometheus_dcgm(node, str(gpu), hour, ratio)
    ts["metric"] = {
        "type": "prometheus.googleapis.com/DCGM_FI_PROF_SM_ACTIVE/gauge",
        "labels": {"gpu": str(gpu), "UUID": uuid, "Hostname": node, "modelName": "NVIDIA H100 80GB HBM3"},
    }
    ts["unit"] = "1"
    return ts


@pytest.mark.parametrize(
    ("duty_cycle", "sm_ratio", "idle_gpu_hours", "idle_cost"),
    [(60.0, 0.03, 8, D(88)), (5.0, 0.70, 0, D(0))],
    ids=["sm_idle_under_a_busy_duty_cycle", "sm_busy_under_an_idle_duty_cycle"],
)
def test_node_duty_cycle_and_dcgm_on_the_same_gpus_are_one_gpu_each(
    duty_cycle, sm_ratio, idle_gpu_hours, idle_cost
) -> None:
    """A GKE node seen by its node duty cycle (GPU keyed by `accelerator_id`, the NVML device UUID:
    google/cadvisor accelerators/nvidia.go `UpdateStats`, `ID: uuid`) and by dcgm-exporter (index in
    `gpu`, the same UUID in `UUID`) has 8 GPUs, each judged on its most trusted signal (SM activity).
    Keyed by the index, the node counted 16 GPUs and the duty cycle's half was judged too: $44.00 a
    node-hour of $88 idle in both cases."""
    uuids = [f"GPU-5c1a9e7{g}-0f3b-4c1e-9a7d-2b8e6f0d1c3{g}" for g in range(8)]
    series = [k8s_node(NODES[0], u, 0, duty_cycle) for u in uuids]
    series += [dcgm_sm_active(NODES[0], g, u, 0, sm_ratio) for g, u in enumerate(uuids)]
    (got,) = gpu_hours(node_hours([billed(0)]), util_hours(parsed(series)), 10.0, None, T0 + H)
    assert (got.gpus, got.signal, got.idle_gpu_hours, got.idle_cost) == (
        8,
        "sm_active",
        idle_gpu_hours,
        idle_cost,
    )
    # the Monitoring source groups by the UUID too, or the cross-series reducer would drop it
    spec = spec_for("prometheus.googleapis.com/DCGM_FI_PROF_SM_ACTIVE/gauge")
    assert spec is not None and "metric.label.UUID" in spec.labels.group_by_fields


def test_a_node_in_another_cluster_with_the_same_name_does_not_match() -> None:
    rows = [billed(0, cluster="other-cluster")]
    samples = parsed(node_series(k8s_node, NODES[0], range(1), busy_until=1))
    (got,) = gpu_hours(node_hours(rows), util_hours(samples), 10.0, None, T0 + H)
    assert not got.monitored


def test_a_gce_vm_seen_by_id_and_name_keeps_matching() -> None:
    """Ops Agent samples carry id and name: billed rows match by id, id-less rows by (zone, name)."""
    agent = {
        "metric": {
            "type": "agent.googleapis.com/gpu/utilization",
            "labels": {"gpu_number": "0", "model": "NVIDIA H100 80GB HBM3"},
        },
        "resource": {
            "type": "gce_instance",
            "labels": {"project_id": PROJECT, "instance_id": "555", "zone": "us-central1-a"},
        },
        "metadata": {"systemLabels": {"name": "vm-555"}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "unit": "%",
        "points": _points(0, 0.0) + _points(1, 0.0),
    }
    samples = parsed([agent])
    with_id = billed(0, "vm-555", iid="555", cluster=None, gpu_hours=1.0)
    without_id = billed(1, "vm-555", iid="", cluster=None, gpu_hours=1.0)
    got = gpu_hours(node_hours([with_id, without_id]), util_hours(samples), 10.0, None, T0 + 2 * H)
    assert [g.monitored for g in got] == [True, True]
    assert [row_identity(g).kind for g in got] == [NodeKind.GCE, NodeKind.GCE_NAME]


def test_billed_hours_carry_their_nodes_key_made_once_per_node() -> None:
    """The GPU detectors group hours by `instance_key`, 1.4 M asks a run at 5 M export rows a
    month: a billed hour carries it (`GpuHour.node_key`), one tuple per node; a hand-built hour
    without it has it computed, to the same key."""
    rows = [billed(h, node) for node in NODES[:2] for h in range(3)]
    rows.append(billed(0, "vm-9", iid="", cluster=None))
    got = gpu_hours(node_hours(rows), [], 10.0, None, T0 + 3 * H)
    assert all(g.node_key is not None for g in got)
    assert [g.node_key for g in got] == [instance_key(replace(g, node_key=None)) for g in got]
    assert len({id(g.node_key) for g in got}) == len({g.node_key for g in got}) == 3


# ------------------------------------------------------------------------ estimated -> billed


def test_an_estimated_gke_finding_and_its_billed_successor_keep_one_fingerprint() -> None:
    """Hours first estimated from node samples (billing lags), then billed: one finding, one alert."""
    samples = parsed(node_series(k8s_node, NODES[1], range(8), busy_until=2))
    end = T0 + 8 * H
    estimated = gpu_hours([], util_hours(samples), 10.0, Prices(), end, T0)
    assert estimated and all(g.estimated for g in estimated)
    (early,) = IdleGpu().evaluate(detector_inputs(estimated, 8), end)
    assert early.estimated

    rows = [billed(h, NODES[1]) for h in range(8)]
    billed_hours = gpu_hours(node_hours(rows), util_hours(samples), 10.0, Prices(), end, T0)
    assert not any(g.estimated for g in billed_hours)
    (late,) = IdleGpu().evaluate(detector_inputs(billed_hours, 8), end)
    assert not late.estimated
    assert late.fingerprint == early.fingerprint

    mixed = gpu_hours(
        node_hours(rows[:5]), util_hours(samples), 10.0, Prices(), end, T0
    )  # billing half-way in
    assert {g.estimated for g in mixed} == {True, False}
    (half,) = IdleGpu().evaluate(detector_inputs(mixed, 8), end)
    assert half.fingerprint == early.fingerprint


def test_a_node_s_summary_counts_a_billed_hour_not_its_estimate_in_either_order() -> None:
    """While billing catches up, an hour can be both estimated (from samples) and billed: the
    per-node summary (`gpucost gpus`) counts the billed hour alone, whichever comes first."""
    samples = parsed(node_series(k8s_node, NODES[1], range(8), busy_until=2))
    end = T0 + 8 * H
    estimated = gpu_hours([], util_hours(samples), 10.0, Prices(), end, T0)
    billed_hours = gpu_hours(node_hours([billed(h, NODES[1]) for h in range(8)]), util_hours(samples), 10.0,
                             Prices(), end, T0)  # fmt: skip
    (want,) = summarize_instances(billed_hours)
    assert want.usage.gpu_cost > 0 and not want.usage.estimated
    for hours in (estimated + billed_hours, billed_hours + estimated):
        (got,) = summarize_instances(hours)
        assert got.usage == want.usage


def test_gke_findings_name_cluster_and_node_pool() -> None:
    """The hung job of the report: 42 idle hours on one node, found from billed rows."""
    rows = [billed(h, NODES[2]) for h in range(48)]
    samples = parsed(node_series(k8s_node, NODES[2], range(48), busy_until=6))
    (f,) = IdleGpu().evaluate(
        detector_inputs(gpu_hours(node_hours(rows), util_hours(samples), 10.0, None, T0 + 48 * H)),
        T0 + 48 * H,
    )
    assert f.evidence["idle_hours"] == 42 and f.impact_usd == D(88) * 42
    assert f.title == (
        f"Idle GPUs on GKE node {NODES[2]} ({CLUSTER}/{POOL}): 8× H100 80GB idle for 42 h, $3,696.00"
    )
    assert f"cluster {CLUSTER}, node pool {POOL}" in f.summary
    assert (f.scope.cluster, f.scope.instance, f.scope.labels["goog-k8s-node-pool-name"]) == (
        CLUSTER,
        NODES[2],
        POOL,
    )
    assert (f.evidence["platform"], f.evidence["cluster"], f.evidence["node_pool"]) == ("gke", CLUSTER, POOL)


def test_unmonitored_gke_nodes_are_named_with_cluster_and_pool() -> None:
    rows = [billed(h, NODES[3]) for h in range(4)]
    (f,) = UnmonitoredGpu().evaluate(
        detector_inputs(gpu_hours(node_hours(rows), util_hours([]), 10.0, None, T0 + 4 * H), 4), T0 + 4 * H
    )
    assert f"GKE node {NODES[3]} of {CLUSTER}/{POOL}" in f.summary
    assert (f.evidence["instances"][0]["cluster"], f.evidence["instances"][0]["node_pool"]) == (CLUSTER, POOL)


def _recreated_node_hours() -> list[GpuHour]:
    """GKE auto-repair recreates a node VM under the same name with a new instance id: in its second
    hour the old one is billed 20 minutes and the new one 35, both in the node's one identity
    (cluster, node name); all 8 GPUs idle throughout. The bill: 88 + 29.333333 + 51.333333 + 88 + 88."""
    old, new = "7000", "7001"
    rows = [billed(0, iid=old), billed(1, iid=old, gross=29_333_333, gpu_hours=8 * 20 / 60)]
    rows += [billed(1, iid=new, gross=51_333_333, gpu_hours=8 * 35 / 60), billed(2, iid=new), billed(3, iid=new)]
    samples = parsed(node_series(k8s_node, NODES[0], range(4), busy_until=0))
    return gpu_hours(node_hours(rows), util_hours(samples), 10.0, None, T0 + 4 * H)


def test_a_node_recreated_within_an_hour_is_idle_for_both_instances() -> None:
    """Both instances are paid: the idle dollars are the bill, $344.67 (one was dropped: $293.33),
    and the hour is one hour of the idle run, not two."""
    (f,) = IdleGpu().evaluate(detector_inputs(_recreated_node_hours(), 4), T0 + 4 * H)
    assert f.evidence["idle_hours"] == 4 and len(f.evidence["hours"]) == 4
    assert f.evidence["hours"][1]["idle_cost_usd"] == 80.666666
    assert f.impact_usd == D("344.666666")


def test_a_node_recreated_within_an_hour_costs_both_instances() -> None:
    """`gpucost gpus`: the node's GPU cost adds up to the bill ($344.67; one was dropped: $293.33)."""
    (inst,) = summarize_instances(_recreated_node_hours())
    assert inst.usage.gpu_hours.quantize(D("0.000001")) == D("31.333333")
    assert (inst.usage.gpu_cost, inst.usage.idle_cost) == (D("344.666666"), D("344.666666"))


# ------------------------------------------------------------------------- signals: MPS fallback


def _signal_of(series: list[dict]) -> tuple[str | None, str | None]:
    rows = [billed(h, NODES[0]) for h in range(4)]
    hours = gpu_hours(node_hours(rows), util_hours(parsed(series)), 10.0, None, T0 + 4 * H)
    (f,) = IdleGpu().evaluate(detector_inputs(hours, 4), T0 + 4 * H)
    return f.evidence["signal"], f.evidence["signal_note"]


def test_time_shared_or_mps_node_falls_back_to_node_duty_cycle_and_says_so() -> None:
    signal, note = _signal_of(node_series(k8s_node, NODES[0], range(4), busy_until=0))
    assert signal == "node_duty_cycle"
    assert (
        note
        == MPS_FALLBACK
        == ("container metrics absent (time-shared/MPS GPUs report none); node duty cycle used")
    )


def test_with_both_duty_cycles_precedence_decides_and_no_fallback_is_claimed() -> None:
    series = node_series(k8s_node, NODES[0], range(4), busy_until=0)
    series += node_series(k8s_container, NODES[0], range(4), busy_until=4)  # container says busy
    signal, note = _signal_of(series)
    assert signal == "node_duty_cycle"  # Signal precedence: the node duty cycle outranks the container's
    assert note is not None and note != MPS_FALLBACK


def test_container_metrics_alone_are_used() -> None:
    signal, note = _signal_of(node_series(k8s_container, NODES[0], range(4), busy_until=0))
    assert (signal, note) == ("container_duty_cycle", None)


def test_resolve_duty_cycles_keeps_the_winner_and_remembers_the_container() -> None:
    samples = parsed(
        node_series(k8s_node, NODES[0], range(1), busy_until=0, gpus=1)
        + node_series(k8s_container, NODES[0], range(1), busy_until=1, gpus=1)
    )
    assert Counter(s.signal for s in samples) == {"node_duty_cycle": 12, "container_duty_cycle": 12}
    kept, container = resolve_duty_cycles(samples)
    assert {s.signal for s in kept} == {"node_duty_cycle"} and len(kept) == 12
    assert container == {(PROJECT, NODES[0], T0)}


# --------------------------------------------------------------------- rollups: pool, namespace


def split_by_namespace(h: int) -> list[HourlyCost]:
    """Node 0's hour `h` as GKE cost allocation splits it: two namespaces and an unlabeled part."""
    return [
        billed(h, NODES[0], gross=44_000_000, namespace="team-llm", gpu_hours=4.0),
        billed(h, NODES[0], gross=33_333_333, namespace="team-vision", gpu_hours=3.03),
        billed(h, NODES[0], gross=10_666_667, namespace=None, gpu_hours=0.97),
    ]


def test_rollups_per_node_pool_and_per_namespace_add_up_to_the_cent() -> None:
    """Cost allocation splits node 0's rows between two namespaces and leaves part unlabeled."""
    rows = [r for h in range(4) for r in [*split_by_namespace(h), billed(h, NODES[1])]]
    series = node_series(k8s_node, NODES[0], range(4), busy_until=2) + node_series(
        k8s_node, NODES[1], range(4), busy_until=4
    )
    hours = gpu_hours(node_hours(rows), util_hours(parsed(series)), 10.0, None, T0 + 4 * H)
    instances = summarize_instances(hours)
    assert {(i.cluster, i.node_pool) for i in instances} == {(CLUSTER, POOL)}
    rolled = rollups(instances)
    groups = {r.group for r in rolled}
    assert groups == {"project", "node_pool", "namespace"}
    pool = next(r for r in rolled if r.group == "node_pool")
    assert (pool.key, pool.instances, pool.usage.gpu_cost, pool.usage.idle_cost) == (
        f"{CLUSTER}/{POOL}",
        2,
        D(704),
        D(176),
    )
    ns = {r.key: r.usage for r in rolled if r.group == "namespace"}
    assert set(ns) == {"team-llm", "team-vision", None}
    assert sum((u.gpu_cost for u in ns.values()), D(0)) == D(704)
    assert sum((u.idle_cost for u in ns.values()), D(0)) == D(176)
    assert ns["team-llm"].gpu_cost == D(176) and ns["team-llm"].idle_cost == D(88)  # half of node 0
    assert ns[None].gpu_cost == D("42.666668") + D(352)  # unlabeled share plus the other node
    assert [r.group for r in rollups(instances, by=["node_pool"])] == ["node_pool"]


def test_the_stores_node_hours_join_column_by_column() -> None:
    """The daemon joins the store's node-hours column by column (`gpu_node_hours`), never as
    `GpuCostHour`s: namespace splits, commitment credits, an unmonitored node and estimates (the
    provisional hour utilization covers and billing does not) come out as the rows say."""
    rows = [
        r
        for h in range(4)
        for r in [*split_by_namespace(h), billed(h, NODES[1], cud=-30_000_000), billed(h, NODES[2])]
    ]  # node 2 is never monitored
    series = [s for n in NODES[:2] for s in node_series(k8s_node, n, range(5), busy_until=2)]
    util = util_hours(parsed(series))
    columns = gpu_node_hours(stored(rows), T0, T0 + 4 * H, T0 + 2 * H)
    assert len(columns) == 12
    by_columns = gpu_hours(columns, util, 10.0, Prices(), T0 + 5 * H, T0 + 2 * H)
    by_rows = gpu_hours(columns.rows(), util, 10.0, Prices(), T0 + 5 * H, T0 + 2 * H)
    assert by_columns == by_rows
    assert sum(g.estimated for g in by_columns) == 2  # hour 4 of the two monitored nodes
    assert [g.monitored for g in by_columns if g.instance == NODES[2]] == [False] * 4
    first = next(g for g in by_columns if g.instance == NODES[0])
    assert first.namespaces == {"team-llm": D(44), "team-vision": D("33.333333")}
    assert (first.gpu_hours, first.gpu_cost) == (D("8.00"), D(88))
    committed = [g for g in by_columns if g.instance == NODES[1] and not g.estimated]
    assert [g.idle_cost for g in committed] == [0, 0, D(58), D(58)]  # 88 gross - 30 CUD, idle from hour 2
    assert {g.gpu_credits for g in committed} == {D(-30)}


def test_node_hour_columns_must_be_whole() -> None:
    whole = GpuNodeHours.from_rows(node_hours([billed(0), billed(1)]))
    with pytest.raises(ValueError, match="lacks columns"):
        GpuNodeHours({k: v for k, v in whole.columns.items() if k != "zone"})
    with pytest.raises(ValueError, match="differ in length"):
        GpuNodeHours(whole.columns | {"zone": ["us-central1-a"]})


def test_split_exact_adds_up() -> None:
    parts = split_exact(D("176"), [D("44"), D("33.333333"), D("10.666667")])
    assert sum(parts, D(0)) == D("176") and parts[0] == D(88)


# ------------------------------------------------------------------- effective price, reserved


def test_idle_dollars_at_the_effective_price_with_the_on_demand_equivalent() -> None:
    """A committed H100 node: the CUD credit covers most of the GPU cost; idle dollars follow it."""
    rows = [billed(h, NODES[0], cud=-60_000_000, pricing_model="committed") for h in range(4)]
    hours = gpu_hours(
        node_hours(rows),
        util_hours(parsed(node_series(k8s_node, NODES[0], range(4), busy_until=1))),
        10.0,
        None,
        T0 + 4 * H,
    )
    assert [g.idle_cost for g in hours] == [0, D(28), D(28), D(28)]
    assert hours[1].gpu_cost == D(88) and hours[1].gpu_credits == D(-60)
    (f,) = IdleGpu().evaluate(detector_inputs(hours, 4), T0 + 4 * H)
    assert f.impact_usd == D(84)
    assert f.evidence["idle_cost_on_demand_usd"] == 264.0 and f.evidence["reserved"] is False
    assert "$264.00 on demand" in f.summary


def test_a_zero_dollar_reserved_gpu_still_shows_its_idle_gpu_hours() -> None:
    reserved = "Reserved Nvidia H100 80GB GPU running in Americas"
    rows = [billed(h, NODES[0], gross=0, pricing_model="reserved", sku=reserved) for h in range(4)]
    hours = gpu_hours(
        node_hours(rows),
        util_hours(parsed(node_series(k8s_node, NODES[0], range(4), busy_until=0))),
        10.0,
        None,
        T0 + 4 * H,
    )
    assert all(g.idle_cost == 0 and g.idle_gpu_hours == 8 for g in hours)
    (inst,) = summarize_instances(hours)
    assert inst.usage.idle_gpu_hours == 32 and inst.usage.idle_cost == 0
    (f,) = IdleGpu().evaluate(detector_inputs(hours, 4), T0 + 4 * H)
    assert f.impact_usd == 0 and f.severity.value == "info"
    assert f.evidence["reserved"] is True and f.evidence["idle_gpu_hours"] == 32.0
    assert f.evidence["idle_cost_on_demand_usd"] == 352.0  # 32 GPU-hours at the $11 list price
    assert "reserved (billed at $0)" in f.summary


def _readers_key(r: HourlyCost) -> tuple:
    """The readers' order of a node-hour's rows (`billing_poll._ORDER`: every key, NULLs last)."""
    return tuple((r.keys.get(k) is None, r.keys.get(k) or "") for k in _KEY_NAMES)


def test_node_hours_of_several_rows_take_their_first_rows_keys_and_list_the_rest_in_order() -> None:
    """The store groups one-row node-hours without sorting and numbers only the node-hours of
    several rows: pinned against the row-by-row reading of the same rows (first row in the readers'
    order gives the keys; usages, label sets, namespaces and gross listed in that order), with a
    node-hour without an instance id (NULL keys group, and must match, as equals)."""
    rows = []
    for h in range(3):
        rows += [billed(h, NODES[0]), billed(h, NODES[1], iid="")]  # one row each
        split = split_by_namespace(h)
        split[0].keys["user_labels"] = "team=llm"  # type: ignore[index]
        split[1].keys["region"] = "us-central2"  # type: ignore[index]  # not the first row's: not kept
        rows += reversed(split)  # stored out of order
        rows += [billed(h, NODES[3], iid="", namespace=ns, gross=g) for ns, g in (("b", 2), ("a", 1))]
    got = {(n.hour, n.instance): n for n in node_hours(rows)}
    groups: dict[tuple, list[HourlyCost]] = {}
    for r in rows:
        groups.setdefault((r.usage_hour, r.keys["resource_name"]), []).append(r)
    assert set(got) == set(groups)
    for key, members in groups.items():
        first, *_ = ordered = sorted(members, key=_readers_key)
        n = got[key]
        labels: dict[str, str] = {}
        for r in ordered:  # merged in order: a later row's value wins
            labels.update(parse_labels(r.keys.get("user_labels")))
        assert (n.region, n.instance_id, n.labels) == (first.keys["region"], first.keys["instance_id"], labels)
        assert n.cost_micros == sum(r.gross_micros for r in members)
        assert n.gpu_hours == sum(Decimal(str(r.usage_amount)) for r in ordered)
        assert n.namespaces == (
            {ns: sum(r.gross_micros for r in members if r.keys["namespace"] == ns)
             for ns in {r.keys["namespace"] for r in members} if ns}
        )  # fmt: skip
    assert got[(T0, NODES[0])].labels == {"team": "llm"}  # the split's first row in the readers' order
    assert got[(T0, NODES[0])].region == "us-central1"  # its second row's region is not kept
    order = [(n.hour, n.instance) for n in node_hours(rows)]
    assert order == sorted(order, key=lambda k: (k[0], k[1]))  # one project, region and zone per hour
