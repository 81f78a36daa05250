"""The six projects of the simulated fleet, and where the hidden costs go.

ml-training-prod  GKE training cluster `llm-train`: a GPU node pool of four A3 (H100 x8) nodes, two
                  on a 1-year commitment, reporting GKE node metrics; two on-demand A3 fine-tuning
                  VMs (Ops Agent), checkpoints bucket, Filestore, snapshots.
ml-research       Spot A100 VMs, notebooks (A100 x1, L4), an A100 VM monitored by the Ops Agent's
                  DCGM v1 receiver (SM activity as a 0-1 ratio), a datasets bucket.
inference-prod    GKE inference cluster of L4 nodes (on-demand and Spot pools, GKE node metrics),
                  internet egress, a Vertex AI endpoint.
data-platform     N2 ETL workers (sustained-use credits), an embeddings L4 VM, the data lake.
ml-batch          All Spot: two Spot A3 (H100 x8) batch VMs, and a Spot L4 backfill job recreated in
                  another zone halfway (one job, two VMs). Nothing to move to Spot here.
vision-eu         An H100 VM in europe-west4 at that region's price, billed to a second billing
                  account invoiced in EUR.

Hidden costs (first fleet copy, `inject=True`): a fine-tuning VM goes idle for about a day
(`went_idle`), a forgotten A100 VM in europe-west4 never used (`never_used`), the training cluster
split across two zones (`cross_zone_egress`), a hyper-parameter sweep tripling ml-research's spend
for the last days (`spend_anomaly`), the embeddings VM without the monitoring agent
(`unmonitored_gpu`), and one node of the GKE GPU pool whose job hangs for 42 hours: billed, 0 % duty
cycle (`idle_gpu`, the node named by cluster, pool and node name).
"""

from __future__ import annotations

from decimal import Decimal

from monitor.simulate.catalog import (
    GCS_DOWNLOAD,
    GKE_ZONAL,
    INTER_ZONE_INGRESS,
    INTER_ZONE_OLD,
    INTRA_ZONE,
    MACHINES,
    Pricing,
    filestore_sku,
    gcs_sku,
    inter_region_sku,
    internet_sku,
    snapshot_sku,
    vertex_skus,
)
from monitor.simulate.compute import Commitment, Monitoring, UtilProfile
from monitor.simulate.fleet import EU, US, Builder, Fleet, make_project
from monitor.simulate.rows import Account, Place, Project
from monitor.simulate.services import (
    Bucket,
    ClusterFee,
    Filestore,
    Flow,
    Snapshot,
    Tax,
    VertexEndpoint,
    cluster_flows,
)

__all__ = ["EUR_ACCOUNT", "build_fleet", "hung_hours", "went_idle_hours"]

P = Pricing
#: A second billing account, invoiced in euros. The rate is a plausible 2026 EUR per USD; the export
#: states it per row (`currency_conversion_rate`), and `cost / rate` is the USD amount.
EUR_ACCOUNT = Account("01C8E2-7A3F19-D40B55", "EUR", Decimal("0.9235"))


def went_idle_hours(hours: int) -> tuple[int, int]:
    """About a day, from 03:00 of the day ~55% into the window."""
    a = (hours // 24) * 55 // 100 * 24 + 3
    return a, min(a + 26, hours)


def hung_hours(hours: int) -> tuple[int, int] | None:
    """42 hours from 09:00 of the day ~30% into the window (shorter at the window's end)."""
    a = (hours // 24) * 30 // 100 * 24 + 9
    return (a, min(a + 42, hours)) if a < hours else None


def anomaly_first_hour(hours: int) -> int | None:
    """The sweep runs for the last 3 days (fewer in short windows; none under 4 days)."""
    days = hours // 24
    if days < 4:
        return None
    return hours - 24 * (3 if days >= 10 else days // 4)


def build_fleet(seed: int, hours: int, scale: int = 1, inject: bool = True) -> Fleet:
    fleet = Fleet(seed, hours)
    projects = {
        pid: make_project(seed, pid, labels, folder, tags)
        for pid, labels, folder, tags in (
            ("ml-training-prod", (("env", "prod"), ("cost-center", "ml")), "ml", (("env", "prod"),)),
            ("ml-research", (("env", "dev"), ("cost-center", "research")), "ml", ()),
            ("inference-prod", (("env", "prod"), ("cost-center", "serving")), "serving", (("env", "prod"),)),
            ("data-platform", (("env", "prod"), ("cost-center", "data")), "data", ()),
            ("ml-batch", (("env", "prod"), ("cost-center", "ml")), "ml", ()),
        )
    }
    projects["vision-eu"] = make_project(
        seed, "vision-eu", (("env", "prod"), ("cost-center", "vision")), "vision", (), EUR_ACCOUNT
    )
    fleet.projects = list(projects.values())
    for r in range(scale):
        b = Builder(fleet, "" if r == 0 else f"-r{r}", inject and r == 0)
        _training(b, projects["ml-training-prod"])
        _research(b, projects["ml-research"])
        _inference(b, projects["inference-prod"])
        _data(b, projects["data-platform"])
        _batch(b, projects["ml-batch"])
        _vision(b, projects["vision-eu"])
    fleet.add(*(Tax(p) for p in fleet.projects))
    return fleet


def _training(b: Builder, p: Project) -> None:
    _training_cluster(b, p)
    _finetune(b, p)


#: GKE cost allocation labels on a node's rows (cloud.google.com/kubernetes-engine/docs/how-to/
#: cost-allocations): the namespace and the Kubernetes labels of the workload holding the node, as
#: `k8s-label/<pod label key>` (the shape real exports carry: mozilla/bigquery-etl filters on
#: `k8s-label/workflows.argoproj.io/workflow`, see monitor/jobs/config.py). The training job is a
#: JobSet, whose controller labels every pod `jobset.sigs.k8s.io/jobset-name=<name>`. One training
#: job holds all of a node's requests, so every row of the node carries its namespace and labels.
_LLM_ALLOCATION = (
    ("k8s-namespace", "llm-pretrain"),
    ("k8s-label/app", "llm-pretrain"),
    ("k8s-label/jobset.sigs.k8s.io/jobset-name", "llm-pretrain"),
)
#: The label keys the simulator names jobs with (ground truth per job: `monitor.simulate.jobs`).
JOB_LABEL_KEYS = ("job", "k8s-label/jobset.sigs.k8s.io/jobset-name")


def _training_cluster(b: Builder, p: Project) -> None:
    """A GPU node pool of four A3 nodes, two on the commitment; split over two zones when injected,
    and then the job on the last node hangs for 42 hours."""
    cluster = f"llm-train{b.sfx}"
    zones = ["us-central1-a", "us-central1-a", "us-central1-c", "us-central1-c"]
    if not b.inject:
        zones = ["us-central1-a"] * 4
    cud = Commitment(f"h100-commit-1y{b.sfx}", p, US, MACHINES["a3-highgpu-8g"], 2, b.ident("cud", cluster))
    hung = hung_hours(b.hours) if b.inject else None
    fleet_nodes = []
    for i, zone in enumerate(zones):
        name, kw = b.gke_node(cluster, "h100-pool", i, "us-central1-a")
        vm = b.vm(
            p,
            name,
            zone,
            "a3-highgpu-8g",
            P.COMMITTED if i < 2 else P.ON_DEMAND,
            **{**kw, "labels": (*kw["labels"], ("team", "llm"), *_LLM_ALLOCATION)},
            commitment=cud if i < 2 else None,
            idle=hung if i == 3 else None,
        )
        fleet_nodes.append(vm)
        if i == 3 and hung is not None:
            b.fleet.injected.hung_node = vm
    b.fleet.add(cud, *cluster_flows(fleet_nodes, gib_per_hour=900.0))
    b.fleet.add(ClusterFee(cluster, p, US, "us-central1-a", GKE_ZONAL))
    if b.inject:
        b.fleet.injected.cross_zone = tuple(fleet_nodes)
        b.fleet.injected.cross_zone_cluster = cluster


def _finetune(b: Builder, p: Project) -> None:
    """Two on-demand A3 fine-tuning VMs (the first goes idle when injected) and their storage."""
    idle = went_idle_hours(b.hours)
    for i, job in ((1, "finetune-llama"), (2, "finetune-mistral")):
        vm = b.vm(
            p,
            f"a3-finetune-0{i}",
            "us-central1-a",
            "a3-highgpu-8g",
            P.ON_DEMAND,
            labels=(("team", "llm"), ("job", job)),
            idle=idle if (b.inject and i == 1) else None,
        )
        b.disk(vm, "data", 2048)
        if b.inject and i == 1:
            b.fleet.injected.went_idle = vm
    b.fleet.add(
        Snapshot(f"a3-finetune-data-daily{b.sfx}", p, US, 1800, 40, snapshot_sku(US), b.ident("snap", b.sfx)),
        Bucket(
            f"ml-training-prod-checkpoints{b.sfx}",
            p,
            Place.regional(US),
            250_000,
            gcs_sku("Iowa", "0.020"),
            labels=(("team", "llm"), ("job", "llm-pretrain")),  # the JobSet's checkpoints
        ),
        Filestore(f"train-shared{b.sfx}", p, US, "us-central1-a", 10_240, filestore_sku(US)),
    )


def _research(b: Builder, p: Project) -> None:
    for i in range(3):
        b.vm(
            p,
            f"research-spot-a100-{i}",
            "us-central1-b",
            "a2-highgpu-8g",
            P.SPOT,
            labels=(("team", "research"), ("job", f"ablation-{i}")),
        )
    for i in (1, 2):
        b.vm(
            p,
            f"notebook-a100-{i}",
            "us-central1-b",
            "a2-highgpu-1g",
            P.ON_DEMAND,
            labels=(("team", "research"), ("job", "notebook")),
            util=UtilProfile.NOTEBOOK,
        )
    b.vm(
        p,
        "research-l4-01",
        "us-central1-b",
        "g2-standard-8",
        P.ON_DEMAND,
        labels=(("team", "research"), ("job", "notebook")),
        util=UtilProfile.NOTEBOOK,
    )
    b.vm(  # busy: its SM activity reaches Monitoring as a 0-1 ratio (e.g. 0.78), never as percent
        p,
        "dcgm-a100-01",
        "us-central1-c",
        "a2-highgpu-1g",
        P.ON_DEMAND,
        labels=(("team", "research"), ("job", "distill")),
        monitoring=Monitoring.DCGM_V1,
    )
    b.fleet.add(
        Bucket(
            f"ml-research-datasets{b.sfx}",
            p,
            Place("us", "US", None),
            40_000,
            gcs_sku("US Multi-region", "0.026"),
            GCS_DOWNLOAD,
            30.0,
            (("team", "research"),),
        )
    )
    if not b.inject:
        return
    inj = b.fleet.injected
    inj.never_used = b.vm(
        p,
        "bob-a100-debug",
        "europe-west4-a",
        "a2-highgpu-8g",
        P.ON_DEMAND,
        labels=(("team", "research"), ("job", "debug")),
        first_hour=-37,
        util=UtilProfile.IDLE,
    )
    first = anomaly_first_hour(b.hours)
    if first is None:
        return
    inj.anomaly_project, inj.anomaly_first_hour, inj.anomaly_job = p, first, "hparam-sweep"
    for i in range(5):
        b.vm(
            p,
            f"hparam-sweep-{i}",
            "us-central1-b",
            "a2-highgpu-8g",
            P.ON_DEMAND,
            labels=(("team", "research"), ("job", "hparam-sweep")),
            first_hour=first,
        )


def _inference(b: Builder, p: Project) -> None:
    cluster, zone = f"inference-gke{b.sfx}", "us-central1-a"
    for pool, count, pricing in (("l4-pool", 4, P.ON_DEMAND), ("l4-spot", 2, P.SPOT)):
        for i in range(count):
            name, kw = b.gke_node(cluster, pool, i, zone)
            vm = b.vm(
                p,
                name,
                zone,
                "g2-standard-8",
                pricing,
                **{**kw, "labels": (*kw["labels"], ("team", "serving"), ("k8s-namespace", "serving"))},
                util=UtilProfile.INFERENCE,
            )
            b.fleet.add(Flow("internet-us", vm, internet_sku(US, "Americas"), 20.0, weekly=True))
            if i < 2:
                b.fleet.add(Flow("internet-eu", vm, internet_sku(US, "EMEA"), 5.0, weekly=True))
    core, ram = vertex_skus(US)
    b.fleet.add(
        ClusterFee(cluster, p, US, zone, GKE_ZONAL, free_tier=not b.sfx),
        VertexEndpoint(f"reranker-endpoint{b.sfx}", b.ident("endpoint", b.sfx), p, US, 2, 4, 15, core, ram),
        Bucket(
            f"inference-prod-models{b.sfx}",
            p,
            Place.regional(US),
            8_000,
            gcs_sku("Iowa", "0.020"),
            labels=(("team", "serving"),),
        ),
    )


def _data(b: Builder, p: Project) -> None:
    workers = []
    for i in range(3):
        vm = b.vm(
            p,
            f"etl-worker-{i}",
            "us-central1-a",
            "n2-standard-16",
            P.ON_DEMAND,
            labels=(("team", "data"), ("job", "etl")),
            correction_hour=min(30, b.hours - 1) if (i == 0 and not b.sfx) else None,
        )
        workers.append(vm)
    w0, w1, w2 = workers
    b.disk(w0, "scratch", 4096)
    b.fleet.add(
        Flow("intra", w0, INTRA_ZONE, 50.0),
        Flow("inter-zone", w0, INTER_ZONE_OLD, 3.0),
        Flow("inter-zone-in", w0, INTER_ZONE_INGRESS, 3.0),
        Flow("internet-eu", w1, internet_sku(US, "EMEA", old=True), 2.0, weekly=True),
        Flow("replication", w2, inter_region_sku(US, EU), 10.0),
    )
    emb = b.vm(
        p,
        "embeddings-l4-01",
        "us-central1-a",
        "g2-standard-8",
        P.ON_DEMAND,
        labels=(("team", "data"), ("job", "embeddings")),
        monitoring=Monitoring.NONE if b.inject else Monitoring.OPS_AGENT,
    )
    if b.inject:
        b.fleet.injected.unmonitored = emb
    b.fleet.add(
        Bucket(
            f"data-platform-lake{b.sfx}",
            p,
            Place("us", "US", None),
            400_000,
            gcs_sku("US Multi-region", "0.026"),
            GCS_DOWNLOAD,
            15.0,
            (("team", "data"),),
        ),
        Bucket(
            f"data-platform-eu-replica{b.sfx}",
            p,
            Place.regional(EU),
            100_000,
            gcs_sku("Netherlands", "0.020"),
            labels=(("team", "data"),),
        ),
    )


def _batch(b: Builder, p: Project) -> None:
    """An all-Spot project: Spot H100 VMs (`... GPU attached to Spot Preemptible VMs ...`), and a
    Spot L4 backfill job whose VM was deleted halfway and recreated in another zone (a new
    instance, name and id; its boot disk unlabelled, as a disk created without labels is): one job
    over two VMs and two zones."""
    for i in range(2):
        b.vm(
            p,
            f"batch-spot-h100-{i}",
            "us-central1-b",
            "a3-highgpu-8g",
            P.SPOT,
            labels=(("team", "batch"), ("job", "batch-infer")),
        )
    half = b.hours // 2
    for suffix, zone, hours in (
        ("x7q2", "us-central1-b", {"last_hour": half}),
        ("k9m4", "us-central1-f", {"first_hour": half}),
    ):
        b.vm(
            p,
            f"embed-backfill-{suffix}",
            zone,
            "g2-standard-8",
            P.SPOT,
            labels=(("team", "batch"), ("job", "embed-backfill")),
            boot_disk_labels=(),
            **hours,
        )


def _vision(b: Builder, p: Project) -> None:
    """An H100 VM in europe-west4 at that region's own price, invoiced in EUR."""
    b.vm(
        p,
        "vision-h100-eu-01",
        "europe-west4-b",
        "a3-highgpu-1g",
        P.ON_DEMAND,
        labels=(("team", "vision"), ("job", "detector-train")),
    )
