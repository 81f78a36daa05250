"""The built-in attribution rules, as data: an ordered list, first match wins.

Every rule names one `category.subcategory` from `monitor.model.SUBCATEGORIES` and, for compute,
optionally the pricing model the SKU itself implies (Spot, commitment fee, reserved). Rules match on
the billing export's own fields (service, SKU description / id, cost type, transaction type), never
on prices, so they keep working when prices change. Patterns are RE2 (BigQuery's and DuckDB's regex
engine) and case-insensitive; both the older (`... Egress`) and newer (`... Data Transfer Out`) SKU
names are covered. SKU wording (what is a GPU, Spot, a commitment, reserved / DWS) comes from
`monitor.sku`, the same constants the Python parser uses. The order encodes the judgement calls:

- tax and marketplace before anything that looks at the SKU text;
- commitment fees before GPU/CPU/RAM (`Commitment v1: Nvidia H100 ... GPU` is a fee, not usage);
- Spot (prefix or infix) and reserved / DWS before the plain capacity rule of each kind;
- ingress before every egress rule, so an ingress SKU is never egress;
- network egress (including Cloud Storage downloads) before storage, so a GCS download is egress;
- Vertex AI management fees before accelerators (a fee on a GPU is not a GPU);
- accelerators before CPU/RAM, snapshots before disks, local SSD before persistent disks;
- BigQuery storage SKUs before the rest of BigQuery, which is query processing (`Analysis`).

`gpucost skus` lists what every SKU in the data gets; `[attribution] rules` in config run first.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor import sku
from monitor.model import SUBCATEGORIES, PricingModel

__all__ = ["BUILTIN_RULES", "COMPUTE_SERVICES", "SERVICE_IDS", "Rule"]

#: Service ids from the reference (shared/reference/gcp.md section 3).
SERVICE_IDS = {
    "compute": "6F81-5844-456A",
    "storage": "95FF-2EF5-5EA1",
    "gke": "CCD8-9BF1-090E",
    "networking": "E505-1604-58F8",
    "vertex": "C7E2-9256-1C43",
    "bigquery": "24E6-581D-38E5",
}

#: Services whose CPU/RAM SKUs are VM (or pod) capacity; elsewhere "vCPU" means a managed service.
COMPUTE_SERVICES = r"(?i)^(Compute Engine|Kubernetes Engine)$"


@dataclass(frozen=True)
class Rule:
    """One attribution rule; every condition given must hold (AND), absent ones are ignored.

    `service` matches the service description case-insensitively or the service id exactly;
    `service_regex` / `sku_regex` / `transaction_type_regex` are RE2 patterns; `cost_type` is exact.
    `pricing_model` is what the SKU implies; None lets the row decide (CUD credits -> committed,
    else on_demand) for compute, and means "not applicable" elsewhere.
    """

    name: str
    category: str
    sku_regex: str | None = None
    service: str | None = None
    service_regex: str | None = None
    sku_id: str | None = None
    cost_type: str | None = None
    transaction_type_regex: str | None = None
    pricing_model: PricingModel | None = None

    def __post_init__(self) -> None:
        if self.category not in SUBCATEGORIES:
            raise ValueError(f"rule {self.name!r}: unknown category {self.category!r}")
        conditions = (
            self.sku_regex,
            self.service,
            self.service_regex,
            self.sku_id,
            self.cost_type,
            self.transaction_type_regex,
        )
        if all(c is None for c in conditions):
            raise ValueError(f"rule {self.name!r}: needs at least one condition")


def _capacity(kind: str, pattern: str, service_regex: str | None) -> tuple[Rule, ...]:
    """Spot, reserved/DWS and plain variants of one compute capacity kind (gpu, cpu, ram).

    The Spot rule matches both wordings: the prefix of CPU/RAM SKUs (`Spot Preemptible A3 Instance
    Core ...`) and the infix of GPU SKUs (`Nvidia L4 GPU attached to Spot Preemptible VMs ...`).
    """
    cat = f"compute.{kind}"
    return (
        Rule(f"{kind}-spot", cat, sku.with_pricing(sku.SPOT, pattern), service_regex=service_regex,
             pricing_model=PricingModel.SPOT),
        Rule(f"{kind}-reserved", cat, sku.with_pricing(sku.RESERVED, pattern),
             service_regex=service_regex, pricing_model=PricingModel.RESERVED),
        Rule(kind, cat, sku.ci(pattern), service_regex=service_regex),
    )  # fmt: skip


BUILTIN_RULES: tuple[Rule, ...] = (
    # What the invoice adds on top of usage.
    Rule("tax", "tax", cost_type="tax"),
    Rule("rounding", "other", cost_type="rounding_error"),
    Rule("marketplace", "licensing.marketplace", transaction_type_regex=r"(?i)^THIRD_PARTY"),
    Rule("support", "support", service_regex=r"(?i)^(Support|Cloud Support|Google Cloud Support)\b"),
    Rule("os-licence", "licensing.os", r"(?i)^Licensing Fee for\b"),
    # Commitment fees bill the commitment whether or not it is used.
    Rule("commitment-fee", "compute.commitment_fee", sku.ci(sku.COMMITMENT),
         pricing_model=PricingModel.COMMITTED),
    # Network: ingress first (never egress), then the egress kinds, then the rest of networking.
    Rule("ingress", "network.ingress", r"(?i)(\bIngress\b|\bData Transfer In\b)"),
    Rule("intra-zone", "network.intra_zone", r"(?i)\bIntra[ -]?Zone\b"),
    # Spanner's `Network Intra-region Cross-Zone Data Transfer Out` is traffic between zones; Cloud
    # Storage's older `GCP Storage egress between NA and EU` is traffic between continents inside
    # Google Cloud, and its `Network Data Transfer GCP Replication within Northern America` copies
    # every byte written to a multi-region bucket to other regions, while `Network Data Transfer GCP
    # Multi-region within Northern America` bills reads of a multi-region bucket from a region on its
    # continent, at the inter-region rate since 2022 (monitor.sku.MULTI_REGION; sources in
    # tests/fixtures/skus/real_skus.tsv: bq-spanner, zeunert, flyem-gcs, seenit).
    Rule("inter-zone", "network.inter_zone", r"(?i)(\bInter[ -]?Zone\b|\bCross[ -]?Zone\b)"),
    Rule("inter-region", "network.inter_region",
         rf"(?i)(\bInter[ -]?Region\b|\bStorage egress between\b|{sku.REPLICATION}|{sku.MULTI_REGION})"),
    Rule("google", "network.google", r"(?i)(\bNetwork Google\b|\bto Google\b|\bGoogle Egress\b)"),
    Rule("internet", "network.internet",
         r"(?i)(\bInternet\b|\bStandard Data Transfer Out\b|^Download\b|\bEgress to Worldwide\b)"),
    Rule("network-other", "network.other",
         r"(?i)(\bExternal IP\b|\bStatic IP\b|\bIP address\b|Load Balanc|\bNAT\b|\bPeering\b"
         r"|\bInterconnect\b|\bVPN\b|\bForwarding Rule\b|\bCloud Armor\b|\bEgress\b"
         r"|\bData Transfer\b|^Network\b)"),
    Rule("networking-service", "network.other", service=SERVICE_IDS["networking"]),
    # Vertex AI's management fees name the GPU they manage but are not GPU capacity (monitor.sku).
    # Same name as the service rule below: one rule, "Vertex AI spend that is not accelerator
    # capacity", whose fee half must run before the accelerator rules (rules are AND-only).
    Rule("vertex", "orchestration.vertex_ai", sku.ci(sku.MANAGEMENT_FEE)),
    # Compute capacity: accelerators (any service: Vertex AI training GPUs are GPU spend), CPU, RAM.
    *_capacity("gpu", sku.GPU, None),
    *_capacity("cpu", sku.CPU_CORE, COMPUTE_SERVICES),
    *_capacity("ram", sku.RAM, COMPUTE_SERVICES),
    # Storage.
    Rule("snapshot", "storage.snapshot", r"(?i)\bSnapshot\b"),
    Rule("local-ssd", "storage.other", r"(?i)\bLocal (SSD|Storage)\b"),
    Rule("persistent-disk", "storage.persistent_disk",
         r"(?i)(\bPD\b|\bPersistent Disk\b|\bHyperdisk\b|\bSSD backed\b)"),
    Rule("filestore", "storage.filestore", service_regex=r"(?i)\bFilestore\b"),
    Rule("filestore-sku", "storage.filestore", r"(?i)\bFilestore\b"),
    Rule("gcs", "storage.gcs", service=SERVICE_IDS["storage"]),
    Rule("gcs-name", "storage.gcs", service_regex=r"(?i)^Cloud Storage$"),
    # BigQuery bills storage and query processing (`Analysis`, slots) under the same services.
    Rule("bigquery", "storage.bigquery", sku.ci(sku.BIGQUERY_STORAGE),
         service_regex=sku.ci(sku.BIGQUERY_SERVICE)),
    Rule("bigquery-query", "other", service_regex=sku.ci(sku.BIGQUERY_SERVICE)),
    Rule("storage-other", "storage.other", r"(?i)\bStorage\b"),
    # Orchestration.
    Rule("gke", "orchestration.gke", r"(?i)\bKubernetes Clusters\b"),
    Rule("gke-service", "orchestration.gke", service=SERVICE_IDS["gke"]),
    Rule("vertex", "orchestration.vertex_ai", service_regex=r"(?i)^(Vertex AI|Cloud Machine Learning)"),
    Rule("orchestration-other", "orchestration.other",
         service_regex=r"(?i)^(Cloud Composer|Batch|Cloud Scheduler|Workflows|Cloud Tasks)$"),
    # Whatever else Compute Engine bills (sole-tenancy premiums, images, ...).
    Rule("compute-other", "compute.other", service=SERVICE_IDS["compute"]),
)  # fmt: skip
