"""cross_zone_egress / cross_region_egress: grouping, zones, GiB, credits, and intra-zone never flagged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monitor.detectors.egress import CrossRegionEgress, CrossZoneEgress, EgressConfig
from monitor.model import Severity
from tests.test_detectors_common import D, cost, inputs

IZ = "Network Inter Zone Data Transfer Out"


def zone_rows(hours: int, per_hour: str, gib: str, **kw) -> list:
    return [cost(h, "network.inter_zone", per_hour, sku=IZ, gib=gib, **kw) for h in range(hours)]


def evaluate(det, rows, **kw):
    inp = inputs(rows, **kw)
    return det.evaluate(inp, inp.window_end)


def test_intra_zone_is_never_flagged_however_large() -> None:
    rows = [
        cost(
            h,
            "network.intra_zone",
            "100",
            instance="a",
            gib="10000",
            sku="Network Intra Zone Data Transfer Out",
        )
        for h in range(48)
    ]
    assert evaluate(CrossZoneEgress(), rows) == []
    assert evaluate(CrossRegionEgress(), rows) == []


def test_cluster_split_across_two_zones() -> None:
    rows = []
    for node, zone in (("gke-n1", "us-central1-a"), ("gke-n2", "us-central1-b")):
        rows += zone_rows(24, "3.00", "300", instance=node, zone=zone, cluster="train")
        rows += [cost(h, "compute.gpu", "88", instance=node, zone=zone, cluster="train") for h in range(24)]
    (f,) = evaluate(CrossZoneEgress(), rows)
    assert f.kind == "cross_zone_egress"
    assert (f.scope.project, f.scope.cluster, f.scope.instance) == ("ml-prod", "train", None)
    assert f.impact_usd == D(144) and f.severity is Severity.WARNING
    assert f.evidence["gib"] == 14400.0
    assert f.evidence["zones"] == ["us-central1-a", "us-central1-b"]
    pairs = {(s["from"], s["to"]): (s["gib"], s["cost_usd"]) for s in f.evidence["by_sku"]}
    assert pairs == {
        ("us-central1-a", "us-central1-b"): (7200.0, 72.0),
        ("us-central1-b", "us-central1-a"): (7200.0, 72.0),
    }
    assert sum(D(str(s["cost_usd"])) for s in f.evidence["by_sku"]) == f.impact_usd
    assert "zonal node pool" in f.recommendation
    assert "14,400.0 GiB between zones (us-central1-a, us-central1-b)" in f.summary


def test_vms_without_cluster_are_named_to_co_locate() -> None:
    rows = zone_rows(24, "2.5", "250", instance="w-0") + zone_rows(
        24, "2.5", "250", instance="w-1", zone="us-central1-c"
    )
    findings = evaluate(CrossZoneEgress(), rows)
    assert sorted(f.scope.instance for f in findings) == ["w-0", "w-1"]
    assert all(f.impact_usd == 60 for f in findings)
    assert "Co-locate the VMs" in findings[0].recommendation


def test_workload_label_groups_vms_of_one_job() -> None:
    rows = zone_rows(24, "2.5", "250", instance="w-0", labels={"job": "llm"})
    rows += zone_rows(24, "2.5", "250", instance="w-1", zone="us-central1-c", labels={"job": "llm"})
    (f,) = evaluate(CrossZoneEgress(EgressConfig(workload_label="job")), rows)
    assert f.scope.labels == {"job": "llm"} and f.impact_usd == 120
    assert [s["instance"] for s in f.evidence["senders"]] == ["w-0", "w-1"]
    assert "w-0 (us-central1-a), w-1 (us-central1-c)" in f.recommendation


def test_small_workloads_roll_up_into_one_project_finding_without_double_counting() -> None:
    rows = zone_rows(24, "5", "500", instance="big")  # $120: its own finding
    for i in range(6):  # six $12 senders: each below $25, together $72
        rows += zone_rows(24, "0.5", "50", instance=f"small-{i}")
    rows += zone_rows(24, "0.25", "25", instance=None)  # unattributed: $6
    findings = evaluate(CrossZoneEgress(), rows)
    by_scope = {(f.scope.instance or "project"): f.impact_usd for f in findings}
    assert by_scope == {"big": D(120), "project": D(78)}
    assert len({f.fingerprint for f in findings}) == 2


@pytest.mark.parametrize(
    ("amount", "credits", "expected"),
    [
        ("2", "0", D(48)),
        ("2", "-0.5", D(36)),  # net is what counts
        ("2", "-1.5", None),  # $12 net: below the minimum
        ("2", "-3", None),  # credits larger than cost: negative net is never a finding
    ],
)
def test_credits(amount, credits, expected) -> None:
    rows = [
        cost(h, "network.inter_zone", amount, credits=credits, instance="a", gib="200", sku=IZ)
        for h in range(24)
    ]
    findings = evaluate(CrossZoneEgress(), rows)
    assert [f.impact_usd for f in findings] == ([] if expected is None else [expected])


def test_provisional_hours_mark_the_finding() -> None:
    rows = zone_rows(48, "2", "200", instance="a")
    (f,) = evaluate(CrossZoneEgress(), rows, days=2, provisional_hours=6)
    assert f.provisional
    (g,) = evaluate(CrossZoneEgress(), rows, days=3, provisional_hours=6)
    assert not g.provisional and g.fingerprint == f.fingerprint


def test_cross_region_gcs_reads_from_a_bucket_elsewhere() -> None:
    sku = "Network Data Transfer GCP Inter Region within Northern America"
    rows = [
        cost(
            h,
            "network.inter_region",
            "4",
            gib="200",
            sku=sku,
            instance="datasets-us-east1",
            zone=None,
            service="Cloud Storage",
        )
        for h in range(24)
    ]
    rows += [
        cost(
            h,
            "network.inter_region",
            "1.5",
            gib="75",
            sku="Network Inter Region Data Transfer Out from Americas to EMEA",
            instance="train-0",
        )
        for h in range(24)
    ]
    findings = evaluate(CrossRegionEgress(), rows)
    by = {f.scope.instance: f for f in findings}
    gcs, vm = by["datasets-us-east1"], by["train-0"]
    assert gcs.impact_usd == 96 and vm.impact_usd == 36
    assert "bucket in the same region" in gcs.recommendation
    assert "Cloud Storage reads" in gcs.summary
    assert vm.evidence["by_sku"][0]["from"] == "Americas" and vm.evidence["by_sku"][0]["to"] == "EMEA"
    assert gcs.evidence["by_sku"][0]["to"] == "within Northern America"
    assert evaluate(CrossZoneEgress(), rows) == []  # inter-region is not inter-zone


def _bucket_rows(sku: str, amount: str, gib: str, hours: int, bucket: str) -> list:
    """A bucket's Cloud Storage traffic rows of `sku`, one an hour: no zone, the bucket as resource."""
    return [
        cost(
            h,
            "network.inter_region",
            amount,
            gib=gib,
            sku=sku,
            instance=bucket,
            zone=None,
            service="Cloud Storage",
        )
        for h in range(hours)
    ]


def test_a_bucket_is_named_a_bucket_not_a_vm() -> None:
    """A Cloud Storage row's resource is the bucket: "Cross-region traffic in VM dataset-bucket"
    named a bucket read from another region a VM (helper 59's audit)."""
    rows = _bucket_rows(
        "Network Data Transfer GCP Inter Region within Northern America", "4", "200", 72, "dataset-bucket"
    )
    rows += [
        cost(h, "network.inter_region", "1.5", gib="75",
             sku="Network Inter Region Data Transfer Out from Americas to EMEA", instance="train-0")
        for h in range(72)
    ]  # fmt: skip
    by = {f.scope.instance: f for f in evaluate(CrossRegionEgress(), rows)}
    bucket, vm = by["dataset-bucket"], by["train-0"]
    assert bucket.title == "Cross-region traffic from Cloud Storage bucket dataset-bucket (ml-prod): $288.00"
    assert bucket.summary.startswith("Cloud Storage bucket dataset-bucket (ml-prod) sent 14,400.0 GiB across")
    assert "VM" not in bucket.title + bucket.summary and "bucket in the same region" in bucket.recommendation
    assert bucket.evidence["senders"] == [
        {"bucket": "dataset-bucket", "zone": None, "gib": 14400.0, "cost_usd": 288.0}
    ]
    assert (bucket.scope.instance_id, bucket.scope.zone) == (None, None)
    assert vm.title == "Cross-region traffic in VM train-0 (ml-prod): $108.00"
    assert vm.evidence["senders"][0]["instance"] == "train-0"


def test_traffic_rows_stay_in_the_engine() -> None:
    """Workloads, their sums per SKU and sender, and their hours cross into Python, not the traffic
    rows: two nodes' fortnight of hourly rows (672) and a small sender's (336) fetch a handful."""
    rows = []
    for node, zone in (("gke-n1", "us-central1-a"), ("gke-n2", "us-central1-b")):
        rows += zone_rows(336, "3.00", "0.1", instance=node, zone=zone, cluster="train")
    rows += zone_rows(336, "0.01", "0.1", instance="quiet")  # $3.36: below the minimum
    inp = inputs(rows)
    (f,) = CrossZoneEgress().evaluate(inp, inp.window_end)
    assert f.impact_usd == D("2016") and f.evidence["gib"] == 67.2 and f.evidence["hours"] == 336
    assert [s["instance"] for s in f.evidence["senders"]] == ["gke-n1", "gke-n2"]  # tied: as read
    assert inp.hourly.fetched < 20, inp.hourly.fetched


def test_a_workloads_zones_come_from_all_its_rows_not_only_its_traffic() -> None:
    """Only one node of the cluster is billed the traffic; the other shows up by its GPU rows: the
    evidence names both zones and the traffic's destination."""
    rows = zone_rows(24, "3.00", "300", instance="gke-n1", zone="us-central1-a", cluster="train")
    rows += [
        cost(h, "compute.gpu", "88", instance="gke-n2", zone="us-central1-b", cluster="train")
        for h in range(24)
    ]
    rows += [cost(h, "compute.gpu", "88", instance="elsewhere", zone="us-east1-c") for h in range(24)]
    (f,) = evaluate(CrossZoneEgress(), rows)
    assert f.evidence["zones"] == ["us-central1-a", "us-central1-b"]
    assert [(s["from"], s["to"]) for s in f.evidence["by_sku"]] == [("us-central1-a", "us-central1-b")]


def test_traffic_rows_without_a_zone_are_sent_from_the_senders_zone() -> None:
    """Real exports bill network SKUs to a region with no zone: koku's detailed export rows
    (/work/shared/data/external/koku-gcp-billing-export, 2022-08-01_5.csv: `Network Internet Egress
    from Americas to APAC`, resource.name instance-1, location.region us-central1, location.zone
    empty; agpl/tmp_example.csv: `Network Inter Zone Egress`, zone empty). The sender's zone is the
    VM's, from its other rows: "from us-central1 to us-central1-a" named the VM's own zone as where
    its traffic went, and the recommendation said "w-0 (None)"."""

    def zoneless(rows: list) -> list:
        return [replace(r, zone=None, region="us-central1") for r in rows]

    rows = zoneless(zone_rows(24, "3", "300", instance="w-0"))
    rows += [cost(h, "compute.gpu", "88", instance="w-0") for h in range(24)]
    (f,) = evaluate(CrossZoneEgress(), rows)
    assert [(s["from"], s["to"]) for s in f.evidence["by_sku"]] == [("us-central1-a", "other zones")]
    assert f.evidence["senders"] == [
        {"instance": "w-0", "zone": "us-central1-a", "gib": 7200.0, "cost_usd": 72.0}
    ]
    assert "(w-0 (us-central1-a))" in f.recommendation and f.scope.zone == "us-central1-a"
    rows = []
    for node, zone in (("gke-n1", "us-central1-a"), ("gke-n2", "us-central1-b")):
        rows += zoneless(zone_rows(24, "3.00", "300", instance=node, cluster="train"))
        rows += [cost(h, "compute.gpu", "88", instance=node, zone=zone, cluster="train") for h in range(24)]
    (f,) = evaluate(CrossZoneEgress(), rows)
    assert sorted((s["from"], s["to"]) for s in f.evidence["by_sku"]) == [
        ("us-central1-a", "us-central1-b"),
        ("us-central1-b", "us-central1-a"),
    ]
    assert f.impact_usd == D(144) and f.evidence["gib"] == 14400.0


def test_a_sender_that_is_not_a_vm_is_not_called_a_vm() -> None:
    """Spanner bills `Network Intra-region Cross-Zone Data Transfer Out` (Google's BigQuery docs,
    "Spanner federated queries", fixture source bq-spanner): inter-zone traffic whose resource is a
    Spanner instance, which the finding named "VM orders-db" and told to co-locate VMs."""
    rows = [
        cost(h, "network.inter_zone", "3", gib="300", sku="Network Intra-region Cross-Zone Data Transfer Out",
             instance="orders-db", zone=None, service="Cloud Spanner")
        for h in range(24)
    ]  # fmt: skip
    (f,) = evaluate(CrossZoneEgress(), rows)
    assert f.title == "Cross-zone traffic in Cloud Spanner resource orders-db (ml-prod): $72.00"
    assert "VM" not in f.title + f.summary + f.recommendation and "(None)" not in f.recommendation


def test_gcs_traffic_between_continents_names_them() -> None:
    """`GCP Storage egress between NA and EU`: Cloud Storage traffic billed to a bucket read from
    another continent (fixture source zeunert); the evidence said only "another region"."""
    rows = [
        cost(h, "network.inter_region", "4", gib="50", sku="GCP Storage egress between NA and EU",
             instance="images-us", zone=None, service="Cloud Storage")
        for h in range(24)
    ]  # fmt: skip
    (f,) = evaluate(CrossRegionEgress(), rows)
    assert [(s["from"], s["to"]) for s in f.evidence["by_sku"]] == [("?", "between NA and EU")]
    assert f.impact_usd == D(96) and "bucket in the same region" in f.recommendation


def test_gcs_replication_of_writes_is_not_advised_a_multi_region_bucket() -> None:
    """`Network Data Transfer GCP Replication within Northern America` (fixture source flyem-gcs):
    Cloud Storage copying each byte written to a multi-region bucket to its other regions, read as
    `network.other` before. The finding said "reads of the bucket from outside its region" and
    advised "a dual-/multi-region bucket", which is what bills the copies."""
    copies = _bucket_rows(
        "Network Data Transfer GCP Replication within Northern America", "40", "2000", 24, "flyem-export"
    )
    (f,) = evaluate(CrossRegionEgress(), copies)
    assert f.title == "Cross-region traffic from Cloud Storage bucket flyem-export (ml-prod): $960.00"
    assert f.summary.endswith(
        "for $960.00: Cloud Storage copies of what is written to the bucket to its other regions."
    )
    assert [(s["from"], s["to"]) for s in f.evidence["by_sku"]] == [
        ("dual- or multi-region bucket", "within Northern America")
    ]
    assert "bucket in the GPUs' region" in f.recommendation and "use a dual" not in f.recommendation
    assert "Read training data" not in f.recommendation
    reads = _bucket_rows("GCP Storage egress between NA and EU", "4", "50", 24, "flyem-export")
    (g,) = evaluate(CrossRegionEgress(), copies + reads)
    assert (
        "Cloud Storage reads of the bucket from outside its region, and copies of what is written"
        in g.summary
    )
    assert g.recommendation.endswith("Read training data from a bucket in the GPUs' region too.")
    (h,) = evaluate(CrossRegionEgress(), reads)
    assert h.summary.endswith("Cloud Storage reads of the bucket from outside its region.")
    unnamed = [replace(r, instance=None, instance_id=None) for r in copies]  # no resource name
    (u,) = evaluate(CrossRegionEgress(), unnamed)
    assert u.summary.endswith("Part of it is Cloud Storage copying what is written to a dual- or multi-region bucket"
                              " to its other regions.")  # fmt: skip
    assert "reads" not in u.summary and "use a dual" not in u.recommendation


def test_gcs_reads_of_a_multi_region_bucket_are_not_advised_a_multi_region_bucket() -> None:
    """`Network Data Transfer GCP Multi-region within Northern America` (fixture source seenit):
    reads of a multi-region bucket by a VM in a region on its continent, free until Google's 2022
    Cloud Storage pricing change and since then billed per GiB even from a region the multi-region
    covers (monitor.sku.MULTI_REGION), read as `network.other` before. Its rows carry no region: the
    evidence named the sender "?", and a reading advice of "a dual-/multi-region bucket" is what
    bills them."""
    sku = "Network Data Transfer GCP Multi-region within Northern America"
    reads = _bucket_rows(sku, "40", "2000", 24, "datasets-us")  # $0.02/GiB
    (f,) = evaluate(CrossRegionEgress(), reads)
    assert f.title == "Cross-region traffic from Cloud Storage bucket datasets-us (ml-prod): $960.00"
    assert f.summary == (
        "Cloud Storage bucket datasets-us (ml-prod) sent 48,000.0 GiB across regions (multi-region bucket"
        " -> within Northern America) for $960.00: Cloud Storage reads of the multi-region bucket from"
        " regions on its continent."
    )
    assert [(s["from"], s["to"]) for s in f.evidence["by_sku"]] == [
        ("multi-region bucket", "within Northern America")
    ]
    assert f.recommendation.startswith("Keep training data in a bucket in the same region as the GPUs")
    assert "even from a region the multi-region covers" in f.recommendation
    assert "use a dual" not in f.recommendation and "Write checkpoints" not in f.recommendation
    copies = _bucket_rows(
        "Network Data Transfer GCP Replication within Northern America", "4", "200", 24, "datasets-us"
    )
    (g,) = evaluate(CrossRegionEgress(), reads + copies)
    assert g.summary.endswith(
        "Cloud Storage reads of the multi-region bucket from regions on its continent, and copies of"
        " what is written to the bucket to its other regions."
    )
    assert g.recommendation.endswith("Read training data from a bucket in the GPUs' region too.")
    unnamed = [replace(r, instance=None, instance_id=None) for r in reads]  # no resource name
    (u,) = evaluate(CrossRegionEgress(), unnamed)
    assert u.summary.endswith("Part of it is Cloud Storage reads of a multi-region bucket from a region.")
    assert "outside the readers' region" not in u.summary and "use a dual" not in u.recommendation


def test_evidence_line_of_traffic_with_no_zone() -> None:
    """A bucket's traffic has no zone: the digest's line read "... over 24 h in ; ..."."""
    from monitor.render import evidence_line

    rows = [
        replace(r, region="us-east1")
        for r in (
            cost(h, "network.inter_region", "4", gib="50", sku="GCP Storage egress between NA and EU",
                 instance="images-us", zone=None, service="Cloud Storage")
            for h in range(24)
        )
    ]  # fmt: skip
    (f,) = evaluate(CrossRegionEgress(), rows)
    assert evidence_line({"kind": f.kind, "evidence": f.evidence}) == (
        "1,200.0 GiB over 24 h in us-east1; GCP Storage egress between NA and EU us-east1 → between NA and EU:"
        " 1,200.0 GiB $96.00"
    )


def test_the_workloads_zones_are_read_once_a_run_and_only_for_a_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both egress detectors name each workload's zones from the same rows: one read of the engine
    per run (`DetectorInputs.derived`) for detectors that name workloads alike, none when no
    workload is worth a finding. The findings are those each detector gives on its own."""
    from monitor.detectors.costs import Costs

    asked: list[str] = []
    select = Costs.select

    def counted(self: Costs, sql: str, params=()):  # type: ignore[no-untyped-def]
        if "SELECT DISTINCT project, wk, wv, zone" in sql:
            asked.append(sql)
        return select(self, sql, params)

    monkeypatch.setattr(Costs, "select", counted)
    rows = []
    for node, zone in (("gke-n1", "us-central1-a"), ("gke-n2", "us-central1-b")):
        rows += zone_rows(24, "3.00", "300", instance=node, zone=zone, cluster="train")
        rows += [
            cost(h, "network.inter_region", "5", instance=node, zone=zone, cluster="train", gib="250",
                 sku="Network Inter Region Data Transfer Out from Iowa to Oregon")
            for h in range(24)
        ]  # fmt: skip
    alone = [evaluate(CrossZoneEgress(), rows), evaluate(CrossRegionEgress(), rows)]
    assert all(alone) and len(asked) == 2  # each run on its own inputs reads them once
    asked.clear()
    inp = inputs(rows)
    together = [d.evaluate(inp, inp.window_end) for d in (CrossZoneEgress(), CrossRegionEgress())]
    assert together == alone and len(asked) == 1
    labelled = CrossRegionEgress(EgressConfig(workload_label="job"))  # names workloads otherwise
    labelled.evaluate(inp, inp.window_end)
    assert len(asked) == 2
    asked.clear()
    quiet = zone_rows(24, "0.01", "1", instance="w-0")  # $0.24 of traffic: nothing worth a finding
    assert evaluate(CrossZoneEgress(), quiet) == evaluate(CrossRegionEgress(), quiet) == []
    assert asked == []
