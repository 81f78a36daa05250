"""The Cloud Billing *detailed* export schema, declared once.

Everything that writes, loads or checks export rows (the simulator, the loaders, the BigQuery
emulator fixtures, the schema tests) derives from `EXPORT_SCHEMA`, so the embedded DuckDB table and
BigQuery's table cannot drift apart. Source: ../shared/reference/gcp.md section 1 and Google's
published schema for `gcp_billing_export_resource_v1_*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "EXPORT_SCHEMA",
    "OPTIONAL_COLUMNS",
    "TABLE_NAME",
    "Column",
    "arrow_schema",
    "arrow_type",
    "bigquery_schema",
    "duckdb_create_table",
    "duckdb_type",
]

BqType = Literal["STRING", "TIMESTAMP", "FLOAT", "BOOLEAN", "RECORD", "INTEGER"]
Mode = Literal["NULLABLE", "REPEATED", "REQUIRED"]

#: Name of the export table inside the embedded DuckDB file; queries are written against it and
#: the configured BigQuery table name is substituted for it at run time (see monitor.sql).
TABLE_NAME = "billing_export"


@dataclass(frozen=True)
class Column:
    name: str
    type: BqType
    mode: Mode = "NULLABLE"
    fields: tuple[Column, ...] = field(default=())


def _s(name: str) -> Column:
    return Column(name, "STRING")


def _kv(name: str) -> Column:
    return Column(name, "RECORD", "REPEATED", (_s("key"), _s("value")))


EXPORT_SCHEMA: tuple[Column, ...] = (
    _s("billing_account_id"),
    Column("service", "RECORD", fields=(_s("id"), _s("description"))),
    Column("sku", "RECORD", fields=(_s("id"), _s("description"))),
    Column("usage_start_time", "TIMESTAMP"),
    Column("usage_end_time", "TIMESTAMP"),
    Column(
        "project",
        "RECORD",
        fields=(
            _s("id"),
            _s("number"),
            _s("name"),
            _kv("labels"),
            _s("ancestry_numbers"),
            Column("ancestors", "RECORD", "REPEATED", (_s("resource_name"), _s("display_name"))),
        ),
    ),
    _kv("labels"),
    _kv("system_labels"),
    Column(
        "location",
        "RECORD",
        fields=(_s("location"), _s("country"), _s("region"), _s("zone")),
    ),
    Column("resource", "RECORD", fields=(_s("name"), _s("global_name"))),
    Column(
        "tags",
        "RECORD",
        "REPEATED",
        (_s("key"), _s("value"), Column("inherited", "BOOLEAN"), _s("namespace")),
    ),
    Column("export_time", "TIMESTAMP"),
    Column("cost", "FLOAT"),
    _s("currency"),
    Column("currency_conversion_rate", "FLOAT"),
    Column(
        "usage",
        "RECORD",
        fields=(
            Column("amount", "FLOAT"),
            _s("unit"),
            Column("amount_in_pricing_units", "FLOAT"),
            _s("pricing_unit"),
        ),
    ),
    Column(
        "credits",
        "RECORD",
        "REPEATED",
        (_s("name"), Column("amount", "FLOAT"), _s("full_name"), _s("id"), _s("type")),
    ),
    Column("invoice", "RECORD", fields=(_s("month"), _s("publisher_type"))),
    _s("cost_type"),
    Column(
        "adjustment_info",
        "RECORD",
        fields=(_s("id"), _s("description"), _s("mode"), _s("type")),
    ),
    Column("cost_at_list", "FLOAT"),
    Column(
        "price",
        "RECORD",
        fields=(
            Column("effective_price", "FLOAT"),
            Column("tier_start_amount", "FLOAT"),
            _s("unit"),
            Column("pricing_unit_quantity", "FLOAT"),
        ),
    ),
    _s("transaction_type"),
    _s("seller_name"),
    Column("subscription", "RECORD", fields=(_s("instance_id"),)),
    Column("consumption_model", "RECORD", fields=(_s("id"), _s("description"))),
)

#: Columns older exports (or the standard, non-resource export) may lack; loaders fill them with
#: NULL (or an empty list for REPEATED columns) instead of rejecting the file.
OPTIONAL_COLUMNS: frozenset[str] = frozenset(
    {
        "resource",
        "tags",
        "cost_at_list",
        "price",
        "transaction_type",
        "seller_name",
        "subscription",
        "consumption_model",
        "adjustment_info",
        "system_labels",
        "currency_conversion_rate",
        "project",
        "location",
        "labels",
        "credits",
        "invoice",
        "cost_type",
        "billing_account_id",
    }
)

_DUCK_SCALAR = {
    "STRING": "VARCHAR",
    "TIMESTAMP": "TIMESTAMPTZ",
    "FLOAT": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "INTEGER": "BIGINT",
}


def duckdb_type(col: Column) -> str:
    """DuckDB type mirroring BigQuery's: RECORD -> STRUCT, REPEATED -> LIST."""
    if col.type == "RECORD":
        inner = ", ".join(f'"{f.name}" {duckdb_type(f)}' for f in col.fields)
        base = f"STRUCT({inner})"
    else:
        base = _DUCK_SCALAR[col.type]
    return f"{base}[]" if col.mode == "REPEATED" else base


def duckdb_create_table(name: str = TABLE_NAME) -> str:
    """DDL for the embedded export table.

    `_PARTITIONTIME` is a real column here (BigQuery has it as a pseudo-column of ingestion-time
    partitioned tables): the load day, `export_time` truncated to the UTC day, never before the usage
    day (`monitor.sources.duckdb_conn._LOAD_DAY`). Queries filter it exactly as they would in BigQuery.
    """
    cols = [f'"{c.name}" {duckdb_type(c)}' for c in EXPORT_SCHEMA]
    cols.append('"_PARTITIONTIME" TIMESTAMPTZ')
    return f'CREATE TABLE IF NOT EXISTS "{name}" (\n  ' + ",\n  ".join(cols) + "\n)"


def bigquery_schema() -> list:
    """The schema as `google.cloud.bigquery.SchemaField`s, for loading emulator tables."""
    from google.cloud import bigquery

    def conv(c: Column) -> bigquery.SchemaField:
        return bigquery.SchemaField(c.name, c.type, mode=c.mode, fields=[conv(f) for f in c.fields])

    return [conv(c) for c in EXPORT_SCHEMA]


def arrow_type(col: Column) -> Any:
    """BigQuery type -> Arrow: RECORD -> struct, REPEATED -> list, TIMESTAMP -> timestamp[us, UTC]."""
    import pyarrow as pa

    scalar = {
        "STRING": pa.string(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "FLOAT": pa.float64(),
        "BOOLEAN": pa.bool_(),
        "INTEGER": pa.int64(),
    }
    if col.type == "RECORD":
        base = pa.struct([pa.field(f.name, arrow_type(f)) for f in col.fields])
    else:
        base = scalar[col.type]
    return pa.list_(base) if col.mode == "REPEATED" else base


def arrow_schema() -> Any:
    """The export schema as a `pyarrow.Schema` (Parquet files, bulk inserts into DuckDB)."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c)) for c in EXPORT_SCHEMA])
