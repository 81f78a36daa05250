"""Attribution: the per-SKU classification table, run through the engine's compiled CASE."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlglot
from sqlglot import exp

from monitor.attribution import BUILTIN_RULES, classify, compile_rules, render_query
from monitor.attribution.rules import Rule
from monitor.config import AttributionRule, parse_config
from monitor.errors import ConfigError
from monitor.model import SUBCATEGORIES
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from tests.test_queries import CE, GCS, T0, export_row, load_rows, params

GKE = {"id": "CCD8-9BF1-090E", "description": "Kubernetes Engine"}
NET = {"id": "E505-1604-58F8", "description": "Networking"}
VERTEX = {"id": "C7E2-9256-1C43", "description": "Vertex AI"}
BQ = {"id": "24E6-581D-38E5", "description": "BigQuery"}
FILESTORE = {"id": "D97E-AB26-5D95", "description": "Cloud Filestore"}
INVOICE = {"id": "0000-TAX0-0000", "description": "Invoice"}
SUPPORT = {"id": "2062-016F-44A2", "description": "Support"}
LOGGING = {"id": "5490-F7B7-8DF6", "description": "Cloud Logging"}

# (service, SKU description, cost_type, expected subcategory, expected pricing model)
TABLE: list[tuple[dict[str, str], str, str, str, str | None]] = [
    # GPUs: on-demand, Spot (an infix for GPUs), reserved / DWS, commitment fee. Real catalog
    # wording; sources in tests/fixtures/skus/real_skus.tsv (the full table is tests/test_sku.py).
    (CE, "Nvidia Tesla A100 GPU running in Americas", "regular", "compute.gpu", "on_demand"),
    (CE, "Nvidia L4 GPU running in Salt Lake City", "regular", "compute.gpu", "on_demand"),
    (CE, "Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", "regular", "compute.gpu", "spot"),
    (CE, "TpuV5e attached to Spot Preemptible VMs running in Americas", "regular", "compute.gpu", "spot"),
    (CE, "Reserved Nvidia Tesla A100 80GB GPU in Americas", "regular", "compute.gpu", "reserved"),
    (CE, "Reserved Nvidia H100 80GB GPU in Seoul in Calendar Mode", "regular", "compute.gpu", "reserved"),
    (CE, "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Seoul", "regular",
     "compute.gpu", "reserved"),
    (CE, "DWS Calendar Mode A4 Nvidia B200 (1 gpu slice) in Seoul", "regular", "compute.gpu", "reserved"),
    # DWS CPU/RAM: prefixed, without "Instance" (yshimojo/zenn-articles articles/dws-flex-new-skus.md).
    (CE, "DWS Defined Duration A3 Core running in Americas", "regular", "compute.cpu", "reserved"),
    (CE, "DWS Defined Duration A3 Ram running in Americas", "regular", "compute.ram", "reserved"),
    (CE, "Commitment v1: Nvidia Tesla T4 GPU running in Americas for 1 Year", "regular",
     "compute.commitment_fee", "committed"),
    (CE, "Commitment v1: A4 Nvidia B200 (1 gpu slice) in Americas for 1 Year", "regular",
     "compute.commitment_fee", "committed"),
    (CE, "Commitment v1: SLES for SAP for VM with 4 VCPU for 3 Year", "regular", "compute.commitment_fee",
     "committed"),
    # CPU / RAM.
    (CE, "A2 Instance Core running in Americas", "regular", "compute.cpu", "on_demand"),
    (CE, "A2 Instance Ram running in Americas", "regular", "compute.ram", "on_demand"),
    (CE, "G2 Instance Core running in Iowa", "regular", "compute.cpu", "on_demand"),
    (CE, "Spot Preemptible G2 Instance Core running in Iowa", "regular", "compute.cpu", "spot"),
    (CE, "Spot Preemptible G2 Instance Ram running in Las Vegas", "regular", "compute.ram", "spot"),
    (CE, "E2 Instance Core running in Americas", "regular", "compute.cpu", "on_demand"),
    (CE, "Memory-optimized Instance Ram running in Americas", "regular", "compute.ram", "on_demand"),
    (GKE, "Autopilot Pod mCPU Requests (us-central1)", "regular", "compute.cpu", "on_demand"),
    (GKE, "Autopilot Pod Memory Requests (us-central1)", "regular", "compute.ram", "on_demand"),
    (CE, "Sole Tenancy Premium for Sole Tenancy Instance Core", "regular", "compute.cpu", "on_demand"),
    (CE, "Licensing Fee for Debian 10 Buster (CPU cost)", "regular", "licensing.os", None),
    (CE, "Licensing Fee for Windows Server 2022 Datacenter Edition (RAM cost)", "regular",
     "licensing.os", None),
    # Network: old and new names alike; ingress never egress; GCS downloads are egress.
    (CE, "Network Inter Zone Egress", "regular", "network.inter_zone", None),
    (CE, "Network Inter Zone Data Transfer Out", "regular", "network.inter_zone", None),
    (CE, "Network Inter Zone Ingress", "regular", "network.ingress", None),
    (CE, "Network Intra Zone Data Transfer Out", "regular", "network.intra_zone", None),
    (CE, "Network Intra Zone Egress", "regular", "network.intra_zone", None),
    (CE, "Network Inter Region Egress from Americas to EMEA", "regular", "network.inter_region", None),
    (CE, "Network Inter Region Data Transfer Out from Americas to Virginia", "regular",
     "network.inter_region", None),
    (CE, "Network Inter Region Ingress from EMEA to Americas", "regular", "network.ingress", None),
    (CE, "Network Internet Egress from Americas to APAC", "regular", "network.internet", None),
    (CE, "Network Internet Data Transfer Out from Americas to EMEA", "regular", "network.internet", None),
    (CE, "Network Standard Data Transfer Out to Internet from Americas", "regular", "network.internet",
     None),
    (CE, "Network Internet Ingress from APAC to Americas", "regular", "network.ingress", None),
    (CE, "Network Google Egress from Americas to Americas", "regular", "network.google", None),
    (CE, "Network Google Ingress from Americas to Americas", "regular", "network.ingress", None),
    (GCS, "Download Worldwide Destinations (excluding Asia & Australia)", "regular", "network.internet",
     None),
    (GCS, "Download APAC", "regular", "network.internet", None),
    (GCS, "Network Data Transfer GCP Inter Region within Northern America", "regular",
     "network.inter_region", None),
    (CE, "External IP Charge on a Standard VM", "regular", "network.other", None),
    (CE, "Static Ip Charge", "regular", "network.other", None),
    (NET, "Cloud NAT Gateway Uptime", "regular", "network.other", None),
    (NET, "Networking Cloud Load Balancing Forwarding Rule Minimum", "regular", "network.other", None),
    (CE, "Network HTTP Load Balancing Ingress from Load Balancer", "regular", "network.ingress", None),
    (CE, "Network Egress via Carrier Peering Network - Americas Based", "regular", "network.other", None),
    (CE, "Network Ingress via Carrier Peering Network - Americas Based", "regular", "network.ingress", None),
    # Storage.
    (CE, "Storage PD Capacity", "regular", "storage.persistent_disk", None),
    (CE, "Balanced PD Capacity in Iowa", "regular", "storage.persistent_disk", None),
    (CE, "SSD backed PD Capacity", "regular", "storage.persistent_disk", None),
    (CE, "Hyperdisk Balanced Throughput in Iowa", "regular", "storage.persistent_disk", None),
    (CE, "Storage PD Snapshot in US", "regular", "storage.snapshot", None),
    (CE, "SSD backed Local Storage", "regular", "storage.other", None),
    (CE, "Storage Image", "regular", "storage.other", None),
    (GCS, "Standard Storage US Multi-region", "regular", "storage.gcs", None),
    (GCS, "Multi-Region Standard Class B Operations", "regular", "storage.gcs", None),
    (FILESTORE, "Filestore Capacity Basic HDD (Standard) Iowa", "regular", "storage.filestore", None),
    (BQ, "Active Storage", "regular", "storage.bigquery", None),
    (BQ, "Analysis", "regular", "other", None),  # query processing, not storage
    # Orchestration.
    (GKE, "Zonal Kubernetes Clusters", "regular", "orchestration.gke", None),
    (GKE, "Regional Kubernetes Clusters", "regular", "orchestration.gke", None),
    (GKE, "Autopilot Kubernetes Clusters", "regular", "orchestration.gke", None),
    (VERTEX, "Vertex AI: Training/Pipelines Management Fee", "regular", "orchestration.vertex_ai", None),
    (VERTEX, "Custom Training: Nvidia Tesla A100 GPU running in Americas", "regular", "compute.gpu",
     "on_demand"),
    ({"id": "X-COMPOSER", "description": "Cloud Composer"}, "Cloud Composer Compute vCPU time", "regular",
     "orchestration.other", None),
    # Invoice-level and everything else.
    (INVOICE, "Tax", "tax", "tax", None),
    (CE, "Nvidia Tesla A100 GPU running in Americas", "tax", "tax", None),
    (INVOICE, "Rounding", "rounding_error", "other", None),
    (SUPPORT, "Enhanced Support", "regular", "support", None),
    (LOGGING, "Log Volume", "regular", "other", None),
    ({"id": "FBF2-FC68-171A", "description": "Security Command Center"},
     "Event Threat Detection Log Ingest Bytes", "regular", "other", None),
    (CE, "Sole Tenancy Premium", "regular", "compute.other", "on_demand"),
    (NET, "Private Service Connect Endpoint", "regular", "network.other", None),
    (GKE, "Backup for GKE Protected Pods", "regular", "orchestration.gke", None),
]  # fmt: skip


@pytest.fixture(scope="module")
def engine_rows() -> dict[tuple[str, str, str], dict]:
    """Every table SKU loaded as one export row, attributed by the engine (skus.sql)."""
    conn = open_billing_db(None)
    rows = []
    for i, (svc, sku, cost_type, _, _) in enumerate(TABLE):
        rows.append(export_row(sku, 1.0 + i, service=svc, cost_type=cost_type, sku_id=f"SKU-{i:03d}"))
    load_rows(conn, rows)
    got = DuckDBBillingSource(conn).run("skus", params(T0, T0 + timedelta(hours=1))).rows
    conn.close()
    return {(r["service_description"], r["sku_description"], r["sku_id"]): r for r in got}


@pytest.mark.parametrize(("service", "sku", "cost_type", "subcategory", "pricing_model"), TABLE)
def test_sku_classification(
    engine_rows: dict, service: dict, sku: str, cost_type: str, subcategory: str, pricing_model: str | None
) -> None:
    i = next(n for n, t in enumerate(TABLE) if t[:3] == (service, sku, cost_type))
    row = engine_rows[(service["description"], sku, f"SKU-{i:03d}")]
    assert (row["subcategory"], row["pricing_model"]) == (subcategory, pricing_model), row["rule"]


def test_every_builtin_rule_is_exercised_by_the_table(engine_rows: dict) -> None:
    """A rule nothing in the table reaches is either dead or untested."""
    hit = {r["rule"] for r in engine_rows.values()}
    unreached = {r.name for r in BUILTIN_RULES} - hit
    # Name twins of id rules (exports that renamed a service), marketplace (tested below, needs a
    # transaction type).
    assert unreached <= {"filestore-sku", "gcs-name", "marketplace"}, (
        unreached
    )


def test_categories_are_the_fixed_vocabulary() -> None:
    assert {r.category for r in BUILTIN_RULES} <= set(SUBCATEGORIES)
    with pytest.raises(ValueError, match="unknown category"):
        Rule("bad", "compute.quantum", sku_regex="x")
    with pytest.raises(ValueError, match="needs at least one condition"):
        Rule("empty", "other")


def test_marketplace_by_transaction_type() -> None:
    rules = compile_rules()
    rule = classify(
        rules, service="Some Partner Product", sku="Usage", transaction_type="THIRD_PARTY_RESELLER"
    )
    assert rule is not None and rule.category == "licensing.marketplace"


def test_cud_credits_make_on_demand_rows_committed_but_never_spot_ones() -> None:
    conn = open_billing_db(None)
    cud = [("COMMITTED_USAGE_DISCOUNT", -0.5)]
    load_rows(
        conn,
        [
            export_row("A3 Instance Core running in Americas", 1.0, credits=cud),
            export_row("A3 Instance Core running in Americas", 1.0, instance="other"),
            export_row("Spot Preemptible A3 Instance Core running in Americas", 1.0, credits=cud),
            export_row("Balanced PD Capacity in Iowa", 1.0, credits=cud),
        ],
    )
    got = DuckDBBillingSource(conn).run("hourly", params(T0, T0 + timedelta(hours=1))).rows
    models = sorted((r["sku_description"][:10], r["pricing_model"] or "-") for r in got)
    assert models == [
        ("A3 Instanc", "committed"),
        ("A3 Instanc", "on_demand"),
        ("Balanced P", "-"),
        ("Spot Preem", "spot"),
    ]


def test_config_overrides_go_first() -> None:
    cfg = parse_config(
        {
            "attribution": {
                "rules": [
                    {"sku_regex": "(?i)^Network Inter Zone", "category": "network.other"},
                    {"service": "compute engine", "sku_id": "ABCD-1234", "category": "compute.gpu",
                     "pricing_model": "reserved"},
                ]
            }
        }
    )  # fmt: skip
    rules = compile_rules(cfg.attribution.rules)
    assert [r.name for r in rules[:2]] == ["attribution.rules[0]", "attribution.rules[1]"]
    hit = classify(rules, service="Compute Engine", sku="Network Inter Zone Data Transfer Out")
    assert hit is not None and (hit.name, hit.category) == ("attribution.rules[0]", "network.other")
    # The ingress SKU also starts with "Network Inter Zone": the override wins there too, by design.
    hit = classify(rules, service_id="6F81-5844-456A", service="Compute Engine", sku_id="ABCD-1234", sku="x")
    assert hit is not None and (hit.category, hit.pricing_model) == ("compute.gpu", "reserved")
    # ... but only for Compute Engine's SKU of that id.
    assert classify(rules, service="Cloud Storage", sku_id="ABCD-1234", sku="x").category == "storage.gcs"


def test_override_patterns_enter_the_sql_only_as_literals() -> None:
    nasty = r"it's \d+'\); DROP TABLE billing_export; --"
    rules = compile_rules([AttributionRule(sku_regex=nasty, category="support")])
    for dialect in ("duckdb", "bigquery"):
        sql = render_query("skus", dialect, rules=rules)
        statements = sqlglot.parse(sql, read=dialect)
        assert len(statements) == 1  # the pattern stayed inside a literal, no second statement
        tree = statements[0]
        literals = [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string]
        assert nasty in literals, dialect
    hit = classify(rules, service="Compute Engine", sku="it's 42'); DROP TABLE billing_export; --")
    assert hit is not None and hit.category == "support"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"sku_regex": "(?i)gpu(?!s)", "category": "compute.gpu"}, "attribution.rules[0].sku_regex"),
        ({"sku_regex": r"(a)\1", "category": "compute.gpu"}, "is not valid RE2"),
        ({"category": "compute.gpu"}, "give at least one of service, sku_regex or sku_id"),
    ],
)
def test_bad_override_rules_are_config_errors(rule: dict, message: str) -> None:
    # as the config loads, so `gpucost check` says so too (a rule without a condition passed it)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"attribution": {"rules": [rule]}})
