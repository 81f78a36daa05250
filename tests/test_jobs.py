"""Jobs as the unit: identity from labels, `queries/jobs.sql` on DuckDB, and the per-job figures.

Pure logic is table-driven; the query runs on the embedded engine over hand-made export rows whose
dollars are known, so every figure here is checked against arithmetic done in the test.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from pydantic import ValidationError

from monitor.analysis import Window
from monitor.attribution import compile_rules
from monitor.detectors.inputs import GpuHour, GpuHourTable
from monitor.jobs import JobsConfig, job_of, parse_labels
from monitor.jobs.build import build_jobs, cents_summing_to, paired_cents
from monitor.jobs.run import job_table_columns, jobs_params
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from tests.test_queries import GCS, T0, export_row, load_rows

KEYS = JobsConfig().label_keys()
JOBSET = "k8s-label/jobset.sigs.k8s.io/jobset-name"
H100 = "Nvidia H100 80GB GPU running in Americas"
GKE = {"id": "CCD8-9BF1-090E", "description": "Kubernetes Engine"}


# --------------------------------------------------------------------------------- identity, config


@pytest.mark.parametrize(
    ("labels", "job"),
    [
        ({}, None),
        ({"job": "llm"}, "llm"),
        ({"run": "r7"}, "r7"),
        ({"job": "llm", "run": "r7"}, "llm"),  # first configured key present wins
        ({"job": "", "run": "r7"}, "r7"),  # an empty value names nothing
        ({JOBSET: "pretrain"}, "pretrain"),
        ({JOBSET: "pretrain", "job": "llm"}, "llm"),  # plain labels before Kubernetes labels
        ({"k8s-label/batch.kubernetes.io/job-name": "eval-3"}, "eval-3"),
        ({"vertex-ai-pipelines-run-billing-id": "8123"}, "8123"),
        ({"team": "llm", "k8s-label/app": "x"}, None),  # not job keys
    ],
)
def test_the_first_configured_label_present_names_the_job(labels: dict[str, str], job: str | None) -> None:
    assert job_of(labels, KEYS) == job


def test_label_keys_precedence_and_the_k8s_prefix() -> None:
    assert KEYS == (
        "job",
        "run",
        JOBSET,
        "k8s-label/batch.kubernetes.io/job-name",
        "k8s-label/job-name",
        "vertex-ai-pipelines-run-billing-id",
    )
    assert parse_labels("job=a,k8s-label/x.io/y=b") == {"job": "a", "k8s-label/x.io/y": "b"}
    assert parse_labels(None) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"label": ["job"]}, "Extra inputs are not permitted"),
        ({"labels": ["job", "job"]}, "a label key is listed twice"),
        ({"labels": ["job=x"]}, 'label keys are non-empty, without spaces, "," or "=", got "job=x"'),
        ({"running_within_hours": 0}, "greater than or equal to 1"),
    ],
)
def test_jobs_config_is_strict(raw: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobsConfig.model_validate(raw)


@pytest.mark.parametrize(
    "values",
    [
        [Decimal("0.004")] * 3,
        [Decimal("1.005"), Decimal("2.005"), Decimal("-0.015"), Decimal("7.123456")],
        [Decimal("0.333333")] * 9,
    ],
)
def test_cents_add_up_to_the_rounded_total(values: list[Decimal]) -> None:
    cents = cents_summing_to(values)
    assert sum(cents) == sum(values).quantize(Decimal("0.01"))
    assert all(abs(c - v) < Decimal("0.01") for c, v in zip(cents, values, strict=True))


def test_a_job_without_credits_shows_one_figure_for_cost_and_net() -> None:
    """Rounded column by column, seed 7's batch-infer (no credits) showed cost 31,764.26 and net
    31,764.27: the cost and net columns still sum to their rounded totals, and a job whose net is
    its cost shows the same cents in both."""
    costs = [Decimal(v) for v in ("133720.434", "31764.266", "10872.394", "1240.052")]
    nets = [Decimal(v) for v in ("72073.139", "31764.266", "10872.394", "1083.468")]
    assert cents_summing_to(nets)[1] != cents_summing_to(costs)[1]  # the case: rounded apart
    cost_cents, net_cents = paired_cents(costs, nets)
    assert cost_cents == cents_summing_to(costs)
    assert (net_cents[1], net_cents[2]) == (cost_cents[1], cost_cents[2])
    assert sum(net_cents) == sum(nets).quantize(Decimal("0.01"))
    assert all(abs(c - v) < Decimal("0.02") for c, v in zip(net_cents, nets, strict=True))


# -------------------------------------------------------------------------------- jobs.sql on DuckDB


def _gpu_row(instance: str, iid: str, cost: float, labels: dict, *, hour=T0, zone="us-central1-a") -> dict:
    row = export_row(H100, cost, hour=hour, instance=instance, instance_id=iid, labels=labels, zone=zone)
    row["usage"]["amount_in_pricing_units"] = 8.0  # 8 GPUs for the hour
    row["system_labels"] = [{"key": "compute.googleapis.com/machine_spec", "value": "a3-highgpu-8g"}]
    return row


def _rows() -> list[dict]:
    """Job `llm` (a VM, its unlabelled boot disk, its inter-zone traffic, its bucket), job
    `pretrain` (a GKE node named by its JobSet, sharing its cluster with an unlabelled node, whose
    fee is split by node-hours), and unlabelled spend."""
    llm = {"team": "ml", "job": "llm"}
    gke = {"goog-k8s-cluster-name": "train", "goog-k8s-node-pool-name": "h100"}
    return [
        _gpu_row("vm-llm", "11", 80.0, llm),
        export_row("A3 Instance Core running in Americas", 10.0, instance="vm-llm", instance_id="11", labels=llm),
        export_row("Balanced PD Capacity in Iowa", 1.5, instance="vm-llm", labels={}),  # boot disk
        export_row("Balanced PD Capacity in Iowa", 0.25, instance="other-disk", labels={}),
        export_row("Network Inter Zone Data Transfer Out", 3.0, instance="vm-llm", instance_id="11", labels=llm),
        export_row("Standard Storage US Multi-region", 2.0, service=GCS, zone=None, instance="ckpt",
                   labels={"job": "llm"}),
        _gpu_row("gke-train-h100-a", "21", 80.0, {**gke, JOBSET: "pretrain"}),
        export_row("A3 Instance Core running in Americas", 10.0, instance="gke-train-h100-a", instance_id="21",
                   labels={**gke, JOBSET: "pretrain"}),
        export_row("A3 Instance Core running in Americas", 10.0, instance="gke-train-h100-b", instance_id="22",
                   labels=gke),
        export_row("Zonal Kubernetes Clusters", 0.1, service=GKE, instance="train",
                   labels={"goog-k8s-cluster-name": "train"}, credits=[("FREE_TIER", -0.04)]),
        export_row("Standard Storage US Multi-region", 5.0, service=GCS, zone=None, instance="lake"),
    ]  # fmt: skip


def _jobs_sql(rows: list[dict], start: datetime, end: datetime) -> list[dict]:
    """`jobs.sql`'s rows on DuckDB for the export `rows`, over [start, end)."""
    conn = open_billing_db(None)
    try:
        load_rows(conn, rows)
        source = DuckDBBillingSource(conn, rules=compile_rules())
        return source.run("jobs", jobs_params(Window(start, end, end), KEYS)).rows
    finally:
        conn.close()


@pytest.fixture
def jobs_rows() -> list[dict]:
    return _jobs_sql(_rows(), T0 - timedelta(hours=1), T0 + timedelta(hours=2))


def _by_job(rows: list[dict]) -> dict:
    return {j.job: j for j in build_jobs(rows, [], keys=KEYS, window_end=T0 + timedelta(hours=1))}


def test_jobs_sql_names_each_row_and_conserves_every_micro(jobs_rows: list[dict]) -> None:
    total = sum(r["gross_micros"] for r in jobs_rows)
    assert total == round(sum(r["cost"] for r in _rows()) * 1_000_000)
    jobs = _by_job(jobs_rows)
    assert set(jobs) == {"llm", "pretrain", None}
    assert sum(j.gross_micros for j in jobs.values()) == total
    assert sum(j.net_micros for j in jobs.values()) == total - 40_000


def test_a_jobs_traffic_comes_summed_over_its_resources_and_its_compute_per_resource() -> None:
    """The jobs engine reads a network row's money alone: two VMs' inter-zone traffic in one hour
    is one row, while their compute rows keep each VM (its node-hours, its instances)."""
    llm = {"job": "llm"}
    traffic = "Network Inter Zone Data Transfer Out"
    rows = [
        *(_gpu_row(vm, iid, 80.0, llm) for vm, iid in (("vm-a", "41"), ("vm-b", "42"))),
        *(export_row(traffic, 3.0, instance=vm, instance_id=iid, labels=llm) for vm, iid in (("vm-a", "41"), ("vm-b", "42"))),
    ]  # fmt: skip
    got = _jobs_sql(rows, T0, T0 + timedelta(hours=1))
    summed = [r for r in got if r["subcategory"] == "network.inter_zone"]
    assert [(r["resource_name"], r["instance_id"]) for r in summed] == [(None, None)]
    assert [r["gross_micros"] for r in summed] == [6_000_000]
    assert sorted(r["resource_name"] for r in got if r["subcategory"] == "compute.gpu") == ["vm-a", "vm-b"]
    (job,) = build_jobs(got, [], keys=KEYS, window_end=T0 + timedelta(hours=1))
    assert job.instances == ("vm-a", "vm-b") and job.by_subcategory["network.inter_zone"] == 6_000_000


def test_a_jobs_cpu_rows_off_clusters_name_each_vm_once_and_sum_after() -> None:
    """Off a cluster, a CPU row's resource only lists the job's instances: each VM's first hour of
    the job names it, the later hours come summed over the VMs. A cluster node's CPU rows keep
    their node every hour (its node-hours share the cluster's fee)."""
    core = "N2 Instance Core running in Americas"
    gke = {"goog-k8s-cluster-name": "train", "job": "etl"}
    rows = [
        export_row(core, 1.0, hour=T0 + timedelta(hours=h), instance=vm, instance_id=iid, labels={"job": "etl"})
        for h in range(2)
        for vm, iid in (("cpu-a", "51"), ("cpu-b", "52"))
    ] + [export_row(core, 1.0, hour=T0 + timedelta(hours=h), instance="gke-node", instance_id="53", labels=gke)
         for h in range(2)]  # fmt: skip
    got = _jobs_sql(rows, T0, T0 + timedelta(hours=2))
    hour = {T0: 0, T0 + timedelta(hours=1): 1}
    cpu = sorted(
        (hour[r["usage_hour"]], r["cluster"] or "", r["resource_name"] or "", r["gross_micros"])
        for r in got
        if r["subcategory"] == "compute.cpu"
    )
    assert cpu == [
        (0, "", "cpu-a", 1_000_000), (0, "", "cpu-b", 1_000_000), (0, "train", "gke-node", 1_000_000),
        (1, "", "", 2_000_000), (1, "train", "gke-node", 1_000_000),
    ]  # fmt: skip
    (job,) = build_jobs(got, [], keys=KEYS, window_end=T0 + timedelta(hours=2))
    assert job.instances == ("cpu-a", "cpu-b", "gke-node") and job.by_subcategory["compute.cpu"] == 6_000_000


def test_a_jobs_boot_disk_bucket_and_traffic_are_the_jobs(jobs_rows: list[dict]) -> None:
    llm = _by_job(jobs_rows)["llm"]
    assert dict(llm.by_subcategory) == {
        "compute.gpu": 80_000_000,
        "compute.cpu": 10_000_000,
        "network.inter_zone": 3_000_000,
        "storage.gcs": 2_000_000,
        "storage.persistent_disk": 1_500_000,  # the unlabelled disk named like the VM
    }
    assert llm.single_zone_savings == Decimal(3)
    assert dict(llm.labels) == {"job": ("llm",)}
    assert llm.instances == ("vm-llm",) and llm.zones == ("us-central1-a",)


def test_a_boot_disk_takes_the_job_of_its_vm_at_its_hour() -> None:
    """VM `trainer-0` runs job `alpha` for hours 0-3, stops, and is recreated as job `beta` for
    hours 6-9 (a new instance id, the same name); its unlabelled boot disk bills every hour. The
    disk took the highest label of the VM over the window: all ten hours went to `beta` (helper
    68's audit). Each disk hour takes the VM's latest labelled hour at or before it."""
    hours = [T0 + timedelta(hours=h) for h in range(10)]
    rows = [_gpu_row("trainer-0", "31", 80.0, {"job": "alpha"}, hour=hours[h]) for h in range(4)]
    rows += [_gpu_row("trainer-0", "32", 80.0, {"job": "beta"}, hour=hours[h]) for h in range(6, 10)]
    disk = "Balanced PD Capacity in Iowa"
    rows += [export_row(disk, 1.0, hour=t, instance="trainer-0", labels={}) for t in hours]
    got = _jobs_sql(rows, T0, T0 + timedelta(hours=10))
    jobs = {j.job: j for j in build_jobs(got, [], keys=KEYS, window_end=T0 + timedelta(hours=10))}
    disks = {name: jobs[name].by_subcategory.get("storage.persistent_disk") for name in jobs}
    assert disks == {"alpha": 6_000_000, "beta": 4_000_000}  # hours 4 and 5: the VM stopped, still alpha's


@pytest.mark.parametrize("reverse", [False, True], ids=["alpha_first", "beta_first"])
def test_two_instances_of_a_name_in_the_disks_hour_give_it_one_job_whatever_the_order(reverse: bool) -> None:
    """`trainer-0` billed as two instances in one hour (recreated within it), each of its own job:
    its unlabelled disk's job followed the rows' physical order (helper 69's review). The higher
    instance id's, always."""
    vms = [
        _gpu_row("trainer-0", "31", 80.0, {"job": "alpha"}),
        _gpu_row("trainer-0", "32", 80.0, {"job": "beta"}),
    ]
    rows = [
        *(vms[::-1] if reverse else vms),
        export_row("Balanced PD Capacity in Iowa", 1.0, instance="trainer-0"),
    ]
    got = _jobs_sql(rows, T0, T0 + timedelta(hours=1))
    jobs = build_jobs(got, [], keys=KEYS, window_end=T0 + timedelta(hours=1))
    assert {j.job: j.by_subcategory.get("storage.persistent_disk") for j in jobs} == {
        "alpha": None,
        "beta": 1_000_000,
    }


def test_cluster_fees_are_shared_by_node_hours(jobs_rows: list[dict]) -> None:
    """Two nodes billed compute in the cluster-hour, one of them the JobSet's: half the fee each."""
    jobs = _by_job(jobs_rows)
    assert jobs["pretrain"].by_subcategory["orchestration.gke"] == 50_000
    assert jobs["pretrain"].net_by_subcategory["orchestration.gke"] == 30_000
    assert jobs[None].by_subcategory["orchestration.gke"] == 50_000
    assert jobs[None].by_subcategory["storage.persistent_disk"] == 250_000


def test_the_engine_s_arrow_result_as_columns_gives_the_records_its_rows_give() -> None:
    """`gpucost jobs` reads `jobs.sql` as Arrow columns (`job_table_columns`: hours as aware UTC,
    decimal sums as ints, names shared), not dicts: the same records, GPU splits and fees included."""
    conn = open_billing_db(None)
    try:
        load_rows(conn, _rows())
        source = DuckDBBillingSource(conn, rules=compile_rules())
        window = Window(T0 - timedelta(hours=1), T0 + timedelta(hours=2), T0 + timedelta(hours=2))
        rows = source.run("jobs", jobs_params(window, KEYS)).rows
        columns = job_table_columns(source.run("jobs", jobs_params(window, KEYS), arrow=True).table)
    finally:
        conn.close()
    assert [type(v) for v in columns["gross_micros"]] == [int] * len(rows)
    assert columns["usage_hour"] == [r["usage_hour"] for r in rows] and T0 in columns["usage_hour"]
    gpu = [
        GpuHour(r["usage_hour"], r["project_id"], r["resource_name"], "H100", 8, Decimal(8), Decimal(80), 5.0,
                Decimal(8), Decimal(80), zone=r["zone"], instance_id=r["instance_id"], cluster=r["cluster"])
        for r in rows
        if r["subcategory"] == "compute.gpu"
    ]  # fmt: skip
    want = build_jobs(rows, gpu, keys=KEYS, window_end=T0 + timedelta(hours=1))
    assert {j.job for j in want} == {"llm", "pretrain", None} and want[0].gpu.idle_cost > 0
    assert build_jobs(columns, gpu, keys=KEYS, window_end=T0 + timedelta(hours=1)) == want


# ------------------------------------------------------------------------------ GPU hours and prices


def _hour(instance: str, iid: str, *, h: int = 0, util: float | None = 50.0, idle: int = 0, **kw) -> GpuHour:
    base = dict(
        hour=T0 + timedelta(hours=h),
        project="ml-prod",
        instance=instance,
        gpu_model="H100 80GB",
        gpus=8,
        gpu_hours=Decimal(8),
        gpu_cost=Decimal(80),
        mean_utilization_pct=util,
        idle_gpu_hours=Decimal(idle),
        idle_cost=Decimal(10 * idle),
        zone="us-central1-a",
        region="us-central1",
        instance_id=iid,
        machine_type="a3-highgpu-8g",
        pricing_model="on_demand",
    )
    return GpuHour(**(base | kw))


class _Prices:
    """A price lookup with per-GPU prices only (no whole-machine table)."""

    def gpu_hourly(self, gpu_model: str, region: str | None, pricing_model: str) -> Decimal | None:
        return {"on_demand": Decimal(10), "spot": Decimal(4)}.get(pricing_model)

    def gpu_price_source(self, gpu_model: str, region: str | None, pricing_model: str) -> str | None:
        return "test book"


def test_gpu_hours_idle_dollars_and_spot_follow_the_joined_hours(jobs_rows: list[dict]) -> None:
    hours = [_hour("vm-llm", "11", idle=2), _hour("gke-train-h100-a", "21", cluster="train", util=None)]
    jobs = {
        j.job: j
        for j in build_jobs(jobs_rows, hours, keys=KEYS, window_end=T0 + timedelta(hours=1), prices=_Prices())
    }
    llm, pre = jobs["llm"], jobs["pretrain"]
    assert (llm.gpu.gpu_hours, llm.gpu.idle_gpu_hours, llm.gpu.idle_cost) == (8, 2, 20)
    assert llm.busy_gpu_hours == 6 and llm.gpus == 8 and llm.gpu_model == "H100 80GB"
    assert llm.cost_per_busy_gpu_hour == llm.net_cost / 6
    assert llm.spot_savings == Decimal(48) and llm.spot_price_source == "test book"  # 8 GPU-h x (10 - 4)
    assert pre.gpu.unmonitored_cost == 80 and pre.busy_gpu_hours == 0 and pre.cost_per_busy_gpu_hour is None
    assert llm.running and not llm.estimated


def test_no_spot_saving_for_a_vm_that_did_no_work() -> None:
    """A job whose VM sat idle in every hour read (72 or more) is offered no Spot saving, as
    `spot_opportunity` offers none: seed 11's `debug` job (0.2% busy) showed $5,524.21."""
    from monitor.jobs.build import _spot

    table = GpuHourTable.from_rows(
        [_hour("vm-debug", "31", h=h, util=0.0, idle=8) for h in range(72)]
        + [_hour("vm-llm", "11", h=h) for h in range(72)]
    )
    idle = [(i, Decimal(1)) for i in range(72)]
    busy = [(i, Decimal(1)) for i in range(72, 144)]
    assert _spot(table, idle, _Prices(), {}) == (Decimal(0), None)
    assert _spot(table, idle[:71], _Prices(), {})[0] == 71 * 8 * 6  # too little read to call it unused
    assert _spot(table, busy + idle, _Prices(), {})[0] == 72 * 8 * 6  # 8 GPU-h x (10 - 4) an hour


def test_a_node_hour_shared_by_two_jobs_is_split_by_their_gpu_usage() -> None:
    rows = [
        {"usage_hour": T0, "job_labels": "job=a", "project_id": "p", "region": "r", "zone": "z", "cluster": None,
         "resource_name": "vm", "instance_id": "1", "node_pool": None, "machine_type": None,
         "sku_description": H100, "subcategory": "compute.gpu", "pricing_model": "on_demand", "row_count": 1,
         "usage_amount": amount, "gross_micros": amount * 10_000_000, "cud_micros": 0, "sud_micros": 0,
         "credit_micros": 0, "net_micros": amount * 10_000_000}
        for amount in (6, 2)
    ]  # fmt: skip
    rows[1]["job_labels"] = "job=b"
    h = _hour("vm", "1", idle=4, project="p", zone="z")
    jobs = {j.job: j for j in build_jobs(rows, [h], keys=KEYS, window_end=T0)}
    assert (jobs["a"].gpu.gpu_hours, jobs["a"].gpu.idle_gpu_hours, jobs["a"].gpu.idle_cost) == (6, 3, 30)
    assert (jobs["b"].gpu.gpu_hours, jobs["b"].gpu.idle_gpu_hours, jobs["b"].gpu.idle_cost) == (2, 1, 10)
    assert jobs["a"].gpus == 6 and jobs["b"].gpus == 2


def test_estimated_hours_belong_to_the_nodes_latest_job_and_keep_it_running(jobs_rows: list[dict]) -> None:
    """An hour utilization covers and billing does not yet: reported beside the billed cost, and
    the job counts as running at a window end 8 hours after its last billed hour."""
    est = _hour("vm-llm", "11", h=5, estimated=True, gpu_cost=Decimal(80))
    end = T0 + timedelta(hours=8)
    jobs = {j.job: j for j in build_jobs(jobs_rows, [est], keys=KEYS, window_end=end)}
    llm = jobs["llm"]
    assert llm.estimated and llm.estimated_gpu.gpu_cost == 80 and llm.last_hour == est.hour
    assert llm.gross_micros == 96_500_000  # billed only: the estimate is not in cost
    assert llm.running
    stale = {j.job: j for j in build_jobs(jobs_rows, [], keys=KEYS, window_end=end)}["llm"]
    assert not stale.running and not stale.estimated
