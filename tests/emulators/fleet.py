"""One simulated billing export for the BigQuery-source tests, and how it is shaped for the emulator.

`fleet_rows()` is deterministic (seeded) and loaded both into the emulator (through the real client,
`to_json_row`) and into the embedded DuckDB table, so the two engines see exactly the same rows.
A whole fleet goes in through one Parquet load job instead (`export_arrow`, `load_rows`).
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitor.config import BillingConfig, GoogleConfig
from monitor.schema import arrow_schema
from tests.emulators.wire import PARTITION_STANDIN
from tests.test_queries import CE, GCS, export_row

__all__ = [
    "ANONYMOUS",
    "BQ_PROJECT",
    "DATASET",
    "FLEET_END",
    "FLEET_START",
    "LoadedExport",
    "billing_config",
    "export_arrow",
    "export_table",
    "fleet_rows",
    "load_rows",
    "to_json_row",
    "with_partition_standin",
]

BQ_PROJECT = "gpucost-test"
DATASET = "billing"
FLEET_START = datetime(2026, 11, 2, tzinfo=UTC)
FLEET_END = FLEET_START + timedelta(days=3)

# Catalog wording (sources cited in monitor/simulate/catalog.py): Spot GPUs are an infix, Spot
# CPU/RAM a prefix, L4 and G2 SKUs name the city.
_SKUS = [
    ("Nvidia H100 80GB GPU running in Americas", CE),
    ("Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas", CE),
    ("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", CE),
    ("Spot Preemptible A3 Instance Core running in Americas", CE),
    ("Commitment v1: Nvidia H100 80GB GPU running in Americas for 1 Year", CE),
    ("A3 Instance Core running in Americas", CE),
    ("A3 Instance Ram running in Americas", CE),
    ("Network Inter Zone Data Transfer Out", CE),
    ("Network Inter Zone Egress", CE),
    ("Network Inter Zone Ingress", CE),
    ("Network Internet Data Transfer Out from Americas to EMEA", CE),
    ("Balanced PD Capacity in Iowa", CE),
    ("Storage PD Snapshot in Iowa", CE),
    ("Standard Storage US Multi-region", GCS),
    ("Download Worldwide Destinations (excluding Asia & Australia)", GCS),
    ("Regional Kubernetes Clusters", {"id": "CCD8-9BF1-090E", "description": "Kubernetes Engine"}),
]
_CREDIT_TYPES = [
    "COMMITTED_USAGE_DISCOUNT",
    "COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE",
    "FEE_UTILIZATION_OFFSET",
    "SUSTAINED_USAGE_DISCOUNT",
    "PROMOTION",
    "FREE_TIER",
]


def fleet_rows(seed: int = 11, n: int = 240) -> list[dict[str, Any]]:
    """A seeded export over three usage days and ~six load days (partitions), with every credit
    type, GKE and user labels, spot/commitment SKUs, ingress vs egress, corrections and tax."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        sku, svc = rnd.choice(_SKUS)
        cost = round(rnd.uniform(0, 40), rnd.choice([2, 6, 9]))
        credits = [
            (rnd.choice(_CREDIT_TYPES), -round(rnd.uniform(0, cost / 3), 6)) for _ in range(rnd.randint(0, 2))
        ]
        labels = rnd.choice([{}, {"team": "vision"}, {"team": "nlp", "job": "llm-7b"}])
        if rnd.random() < 0.3:
            labels |= {
                "goog-k8s-cluster-name": "train",
                "goog-k8s-node-pool-name": "h100",
                "k8s-namespace": "ml",
            }
        rows.append(
            export_row(
                sku,
                cost,
                hour=FLEET_START + timedelta(hours=rnd.randrange(72)),
                service=svc,
                credits=credits,
                project=rnd.choice(["ml-prod", "ml-research"]),
                zone=rnd.choice(["us-central1-a", "us-central1-b", None]),
                instance=rnd.choice(["trainer-0", "trainer-1", None]),
                instance_id=rnd.choice(["111", "222", None]),
                labels=labels,
                export_lag=timedelta(hours=rnd.randrange(2, 60)),
            )
        )
    # A correction pair for an earlier hour, loaded two days later (late data), and tax.
    late = timedelta(days=2, hours=5)
    rows.append(export_row("A3 Instance Core running in Americas", -7.25, hour=FLEET_START, export_lag=late))
    rows.append(export_row("A3 Instance Core running in Americas", 6.5, hour=FLEET_START, export_lag=late))
    tax = {"id": "TAX", "description": "Invoice"}
    rows.append(
        export_row("Tax", 12.345678, hour=FLEET_START + timedelta(hours=30), service=tax, cost_type="tax")
    )
    return rows


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def to_json_row(row: dict[str, Any]) -> dict[str, Any]:
    """An export row as the BigQuery streaming API takes it (RFC 3339 timestamps), with the
    emulator's `_PARTITIONTIME` stand-in: the load day, as the DuckDB loader derives it (the UTC day
    of `export_time`, never before that of `usage_start_time`: `monitor.sources.duckdb_conn._LOAD_DAY`)."""
    day = max(row["export_time"], row["usage_start_time"]).astimezone(UTC)
    day = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return _jsonable({**row, PARTITION_STANDIN: day})


def export_table(client: Any, name: str, *, replace: bool = False) -> Any:
    """An empty `BQ_PROJECT.DATASET.<name>` as Cloud Billing makes its detailed export table: the
    export schema and DAY ingestion-time partitions, plus the emulator's `_PARTITIONTIME` stand-in
    (tests/emulators/wire.py). `replace`: drop a table of that name first (else it is kept)."""
    from google.cloud import bigquery

    from monitor.schema import bigquery_schema

    table_id = f"{BQ_PROJECT}.{DATASET}.{name}"
    table = bigquery.Table(
        table_id, schema=[*bigquery_schema(), bigquery.SchemaField(PARTITION_STANDIN, "TIMESTAMP")]
    )
    table.time_partitioning = bigquery.TimePartitioning(type_=bigquery.TimePartitioningType.DAY)
    client.create_dataset(f"{BQ_PROJECT}.{DATASET}", exists_ok=True)
    if replace:
        client.delete_table(table_id, not_found_ok=True)
    client.create_table(table, exists_ok=not replace)
    return table


def export_arrow(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Export rows (python values, as the simulator and `export_row` make them) as the Arrow table
    `load_rows` takes: the embedded DuckDB table's conversion (`pa.Table.from_pylist` on the export
    schema), plus the `_PARTITIONTIME` stand-in."""
    return with_partition_standin(pa.Table.from_pylist(list(rows), schema=arrow_schema()))


def with_partition_standin(table: pa.Table) -> pa.Table:
    """`table` (export schema, e.g. a simulated fleet's export.parquet) plus the emulator's
    `_PARTITIONTIME` stand-in column, computed as `to_json_row` computes it: the UTC day of the later
    of `export_time` and `usage_start_time`."""
    export, usage = table["export_time"], table["usage_start_time"]
    day = pc.floor_temporal(pc.if_else(pc.greater(export, usage), export, usage), unit="day")
    return table.append_column(pa.field(PARTITION_STANDIN, pa.timestamp("us", tz="UTC")), day)


def load_rows(client: Any, table: Any, rows: pa.Table) -> None:
    """`rows` (`export_arrow`'s or `with_partition_standin`'s) into `table` through one Parquet load
    job, as `bq load --source_format=PARQUET` would. Streaming inserts of 5,000 rows took the
    emulator half a minute; an NDJSON load job of a simulated fortnight's 53 k rows took 11 s, 7 of
    them in this process making and serializing the JSON (`to_json_row` alone 5 s), where Parquet
    takes 1.8 s from the rows as Arrow. The emulator inserts a Parquet file's columns by position,
    so their order is checked first (both come from `monitor.schema.EXPORT_SCHEMA`);
    tests/test_bigquery_source.py checks the rows land as streamed ones do."""
    from google.cloud import bigquery

    columns = [f.name for f in table.schema]
    assert rows.column_names == columns, (rows.column_names, columns)
    data = io.BytesIO()
    pq.write_table(rows, data)
    data.seek(0)
    config = bigquery.LoadJobConfig(source_format=bigquery.SourceFormat.PARQUET, schema=table.schema)
    job = client.load_table_from_file(data, table, job_config=config)
    job.result()
    assert job.errors is None and client.get_table(table).num_rows == rows.num_rows, job.errors


def billing_config(endpoint: str, table: str, **extra: Any) -> BillingConfig:
    return BillingConfig(source="bigquery", table=table, project=BQ_PROJECT, api_endpoint=endpoint, **extra)


ANONYMOUS = GoogleConfig(credentials="anonymous")


@dataclass(frozen=True)
class LoadedExport:
    """The export rows loaded into the emulator's `table` (the same rows `duck_conn` holds)."""

    table: str
    rows: list[dict[str, Any]]
    load_seconds: float
