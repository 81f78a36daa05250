"""The one SKU parser against real catalog wording, in both engines and in Python.

Every row of tests/fixtures/skus/real_skus.tsv is a SKU description copied from a public
catalog-derived source (named in the file's header). Each is checked four ways: `parse_sku` in
Python, the compiled attribution SQL on DuckDB, the same SQL on the BigQuery emulator through the
real google-cloud-bigquery client, and Python against SQL row by row.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import bigquery

from monitor.attribution import BUILTIN_RULES
from monitor.gpu_models import GpuModel, PriceKind, parse_sku_description
from monitor.model import SUBCATEGORIES, PricingModel
from monitor.sku import (
    BIGQUERY_STORAGE,
    COMMITMENT,
    CPU_CORE,
    GEO,
    GPU,
    GPU_MODELS,
    RAM,
    RESERVED,
    SPOT,
    Counts,
    ci,
    parse_sku,
    with_pricing,
)
from monitor.sources.billing_bigquery import BigQueryBillingSource
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from tests.emulators.fleet import ANONYMOUS, BQ_PROJECT, DATASET, billing_config, export_table, to_json_row
from tests.test_queries import T0, export_row, load_rows, params

pytest_plugins = ("tests.conftest_bq",)

FIXTURE = Path(__file__).parent / "fixtures" / "skus" / "real_skus.tsv"
#: Service ids as the export carries them (koku's real export rows, see the fixture header).
SERVICE_IDS: dict[str, str | None] = {
    "Compute Engine": "6F81-5844-456A",
    "Cloud Storage": "95FF-2EF5-5EA1",
    "BigQuery": "24E6-581D-38E5",
    "Stackdriver Logging": "5490-F7B7-8DF6",
    "Security Command Center": "FBF2-FC68-171A",
    # Ids not seen in a real export row: these rows are matched on their descriptions.
    "Cloud Monitoring": None,
    "Kubernetes Engine": None,
    "BigQuery Storage API": None,
    "BigQuery Reservation API": None,
    "Vertex AI": None,
    "Cloud Machine Learning Engine": None,
    "Cloud Filestore": None,
    "Cloud Composer": None,
    "Networking": None,
    "Cloud Spanner": None,
}
CAPACITY = {"compute.gpu": Counts.GPU, "compute.cpu": Counts.CPU, "compute.ram": Counts.RAM}


@dataclass(frozen=True)
class Row:
    n: int
    service: str
    sku: str
    subcategory: str
    pricing_model: str | None
    gpu_model: str | None
    source: str

    @property
    def sku_id(self) -> str:
        return f"REAL-{self.n:04d}"


def _load() -> list[Row]:
    lines = [ln for ln in FIXTURE.read_text().splitlines() if not ln.startswith("#")]
    reader = csv.DictReader(lines, delimiter="\t")
    return [
        Row(
            n=i,
            service=r["service"],
            sku=r["sku_description"],
            subcategory=r["subcategory"],
            pricing_model=r["pricing_model"] or None,
            gpu_model=r["gpu_model"] or None,
            source=r["source"],
        )
        for i, r in enumerate(reader)
    ]


ROWS = _load()
IDS = [f"{r.n:03d}-{r.sku[:48]}" for r in ROWS]


def _export_rows() -> list[dict[str, Any]]:
    return [
        export_row(
            r.sku,
            1.0,
            service={"id": SERVICE_IDS[r.service], "description": r.service},
            sku_id=r.sku_id,
        )
        for r in ROWS
    ]


# --- the fixture itself -------------------------------------------------------------------------


def test_fixture_is_big_real_and_well_formed() -> None:
    header = FIXTURE.read_text().split("\nservice\t", 1)[0]
    assert len(ROWS) >= 150
    assert len({(r.service, r.sku) for r in ROWS}) == len(ROWS), "duplicate rows"
    for r in ROWS:
        assert r.subcategory in SUBCATEGORIES, r
        assert r.pricing_model is None or r.pricing_model in {m.value for m in PricingModel}, r
        assert r.gpu_model is None or r.gpu_model in {m.value for m in GpuModel}, r
        assert re.search(rf"^#\s+{re.escape(r.source)}\s", header, re.M), f"source {r.source!r} not in header"
        assert r.service in SERVICE_IDS, r
    # The shapes this parser exists for are all present.
    skus = [r.sku for r in ROWS]
    assert any("attached to Spot Preemptible VMs" in s for s in skus)
    assert any(s.startswith("Spot Preemptible") for s in skus)
    assert any(s.startswith("Commitment v1:") and s.endswith("1 Year") for s in skus)
    assert any(s.startswith("Commitment v1:") and s.endswith("3 Years") for s in skus)
    assert any(s.startswith("Reserved") for s in skus) and any("DWS" in s for s in skus)
    assert any("attached to preemptible VMs" in s for s in skus)  # the older Spot wording
    assert any(s.startswith("Vertex AI:") and "management fee" in s for s in skus)
    assert {r.subcategory for r in ROWS} >= {
        "storage.bigquery",
        "other",
        "network.inter_zone",
        "orchestration.vertex_ai",
        "storage.filestore",
    }


# --- (1) Python ---------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_python_parser(row: Row) -> None:
    p = parse_sku(row.sku)
    assert (p.gpu_model.value if p.gpu_model else None) == row.gpu_model
    if row.pricing_model is not None:
        assert p.pricing_model.value == row.pricing_model
    if row.subcategory in CAPACITY:
        assert p.counts is CAPACITY[row.subcategory]
    # The compatibility view gives the same answers.
    d = parse_sku_description(row.sku)
    assert d.model == p.gpu_model and d.resource == (p.counts.value if p.counts else None)


@pytest.mark.parametrize(
    ("sku", "kind", "years", "family", "geo"),
    [
        ("Commitment v1: Nvidia Tesla T4 GPU running in Americas for 3 Years", PriceKind.COMMIT_3Y, 3, None,
         "Americas"),
        ("Commitment v1: Nvidia Tesla V100 GPU running in Seoul for 1 Year", PriceKind.COMMIT_1Y, 1, None,
         "Seoul"),
        ("Nvidia L4 GPU attached to Spot Preemptible VMs running in Salt Lake City", PriceKind.SPOT, None, None,
         "Salt Lake City"),
        ("Spot Preemptible G2 Instance Ram running in Las Vegas", PriceKind.SPOT, None, "G2", "Las Vegas"),
        ("T2D AMD Instance Core running in Singapore", PriceKind.ON_DEMAND, None, "T2D", "Singapore"),
        ("N1 Standard Instance Ram running in Americas", PriceKind.ON_DEMAND, None, "N1", "Americas"),
        ("Reserved Nvidia H100 80GB GPU in Seoul in Calendar Mode", PriceKind.ON_DEMAND, None, None, "Seoul"),
        ("Network Inter Zone Egress", PriceKind.ON_DEMAND, None, None, None),
        ("Network Internet Data Transfer In from EMEA to Virginia", PriceKind.ON_DEMAND, None, None, None),
        ("Commitment v1: A4 Nvidia B200 (1 gpu slice) in Americas for 1 Year", PriceKind.COMMIT_1Y, 1, None,
         "Americas"),
        ("Nvidia Tesla K80 GPU attached to preemptible VMs running in Americas", PriceKind.SPOT, None, None,
         "Americas"),
        ("Commitment v1: Memory-optimized Cpu in Singapore for 3 Year", PriceKind.COMMIT_3Y, 3, None,
         "Singapore"),
    ],
)  # fmt: skip
def test_kind_family_and_place(
    sku: str, kind: PriceKind, years: int | None, family: str | None, geo: str
) -> None:
    p = parse_sku(sku)
    assert (p.kind, p.commitment_years, p.family, p.geo) == (kind, years, family, geo)


def test_spot_b200_slices_use_the_prefix() -> None:
    """A4's per-GPU SKUs put Spot in front (dstackai/gpuhunt src/gpuhunt/providers/gcp.py matches
    descriptions starting with this text), unlike the other GPUs' infix."""
    p = parse_sku("Spot Preemptible A4 Nvidia B200 (1 gpu slice)")
    assert (p.counts, p.gpu_model, p.pricing_model) == (Counts.GPU, GpuModel.B200, PricingModel.SPOT)


def test_vertex_management_fees_are_not_capacity() -> None:
    """The fee names the GPU it manages; counted as a GPU it would double the GPU-hours of the
    Compute Engine SKU it is billed beside (fixture source zenn-dws). Vertex GPU usage stays GPU."""
    fee = parse_sku("Vertex AI: Training/Pipelines management fee on NVIDIA H100 80GB in Iowa")
    usage = parse_sku("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa")
    assert (fee.counts, fee.gpu_model) == (None, None)
    assert (usage.counts, usage.gpu_model) == (Counts.GPU, GpuModel.H100_80GB)


def test_reserved_and_dws_are_variants_the_price_book_skips() -> None:
    for sku in (
        "Reserved Nvidia Tesla A100 GPU in Americas",
        "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Seoul",
    ):
        assert parse_sku(sku).variant is not None
    assert parse_sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa").variant is None


def test_every_pattern_is_re2() -> None:
    """RE2 has no look-arounds or back-references; DuckDB's regexp_matches compiles with RE2."""
    import duckdb

    patterns = [GPU, CPU_CORE, RAM, SPOT, COMMITMENT, RESERVED, GEO, BIGQUERY_STORAGE]
    patterns += [p for p, _ in GPU_MODELS] + [with_pricing(SPOT, GPU), with_pricing(RESERVED, RAM)]
    with duckdb.connect(":memory:") as conn:
        for p in patterns:
            conn.execute("SELECT regexp_matches('x', $1)", [ci(p)]).fetchall()


# --- (2) DuckDB, (4) Python vs SQL --------------------------------------------------------------


@pytest.fixture(scope="module")
def duck_rows() -> dict[str, dict[str, Any]]:
    conn = open_billing_db(None)
    load_rows(conn, _export_rows())
    got = DuckDBBillingSource(conn).run("skus", params(T0, T0 + timedelta(hours=1))).rows
    conn.close()
    return {r["sku_id"]: r for r in got}


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_duckdb_attribution(duck_rows: dict[str, dict[str, Any]], row: Row) -> None:
    got = duck_rows[row.sku_id]
    assert (got["subcategory"], got["pricing_model"]) == (row.subcategory, row.pricing_model), got["rule"]


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_python_and_sql_agree(duck_rows: dict[str, dict[str, Any]], row: Row) -> None:
    """The compiled CASE and `parse_sku` read the same constants, so they cannot disagree."""
    got, p = duck_rows[row.sku_id], parse_sku(row.sku)
    if got["subcategory"] in CAPACITY:
        assert p.counts is CAPACITY[got["subcategory"]]
    if got["subcategory"] == "compute.commitment_fee":
        assert p.pricing_model is PricingModel.COMMITTED
    if got["pricing_model"] is not None:
        assert p.pricing_model.value == got["pricing_model"]


def test_every_capacity_rule_is_reached_by_real_wording(duck_rows: dict[str, dict[str, Any]]) -> None:
    hit = {r["rule"] for r in duck_rows.values()}
    wanted = {"gpu", "gpu-spot", "gpu-reserved", "cpu", "cpu-spot", "cpu-reserved", "ram", "ram-spot",
              "ram-reserved", "commitment-fee", "bigquery", "bigquery-query", "gke", "snapshot", "local-ssd",
              "persistent-disk", "filestore", "vertex", "inter-region", "inter-zone", "internet"}  # fmt: skip
    assert wanted <= hit, wanted - hit
    assert wanted <= {r.name for r in BUILTIN_RULES}


# --- (3) BigQuery emulator ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bq_table(bq_client: bigquery.Client) -> str:
    name = f"{BQ_PROJECT}.{DATASET}.real_skus"
    table = export_table(bq_client, "real_skus")
    errors = bq_client.insert_rows_json(table, [to_json_row(r) for r in _export_rows()])
    assert errors == [], errors[:3]
    return name


@pytest.mark.integration
def test_bigquery_attribution_matches_fixture_and_duckdb(
    bq_wire: Any, bq_table: str, duck_rows: dict[str, dict[str, Any]]
) -> None:
    source = BigQueryBillingSource(billing_config(bq_wire.url, bq_table), ANONYMOUS)
    got = {r["sku_id"]: r for r in source.run("skus", params(T0, T0 + timedelta(hours=1))).rows}
    wrong = [
        (r.sku, got.get(r.sku_id, {}).get("subcategory"), got.get(r.sku_id, {}).get("pricing_model"))
        for r in ROWS
        if (got.get(r.sku_id, {}).get("subcategory"), got.get(r.sku_id, {}).get("pricing_model"))
        != (r.subcategory, r.pricing_model)
    ]
    assert wrong == []
    assert {k: v["rule"] for k, v in got.items()} == {k: v["rule"] for k, v in duck_rows.items()}
