"""Valid billing export rows for tests, and writers for every file format the loader reads.

`export_row()` returns one detailed-export row in the shape `bq extract` writes to NDJSON
(timestamps as `... UTC` strings, nested objects, `{key, value}` lists); override any field, nested
ones by dotted path:

>>> r = export_row({"usage.amount": "7.5", "labels": []}, cost=2.0)
>>> r["usage"]["amount"], r["labels"], r["cost"]
('7.5', [], 2.0)
"""

from __future__ import annotations

import copy
import csv
import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from monitor.schema import EXPORT_SCHEMA

__all__ = [
    "export_row",
    "flatten_for_csv",
    "set_field",
    "without",
    "write_csv",
    "write_ndjson",
    "write_parquet",
]

_BASE: dict[str, Any] = {
    "billing_account_id": "01A7C3-5E92D4-B81F06",
    "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
    "sku": {"id": "E8F2-1A3B-9C4D", "description": "Nvidia H100 80GB GPU running in Americas"},
    "usage_start_time": "2026-11-01 10:00:00 UTC",
    "usage_end_time": "2026-11-01 11:00:00 UTC",
    "project": {
        "id": "ml-train",
        "number": "441570621172",
        "name": "ml-train",
        "labels": [{"key": "env", "value": "prod"}],
        "ancestry_numbers": "/1000/2000/",
        "ancestors": [{"resource_name": "projects/441570621172", "display_name": "ml-train"}],
    },
    "labels": [{"key": "team", "value": "ml"}, {"key": "goog-k8s-cluster-name", "value": "train"}],
    "system_labels": [{"key": "compute.googleapis.com/machine_spec", "value": "a3-highgpu-8g"}],
    "location": {
        "location": "us-central1-a",
        "country": "US",
        "region": "us-central1",
        "zone": "us-central1-a",
    },
    "resource": {
        "name": "gpu-node-1",
        "global_name": "//compute.googleapis.com/projects/441570621172/zones/us-central1-a/instances/42",
    },
    "tags": [{"key": "cost-center", "value": "research", "inherited": True, "namespace": "1000"}],
    "export_time": "2026-11-02 03:15:00.123 UTC",
    "cost": 88.0,
    "currency": "USD",
    "currency_conversion_rate": 1.0,
    "usage": {
        "amount": 28800.0,
        "unit": "seconds",
        "amount_in_pricing_units": 8.0,
        "pricing_unit": "hour",
    },
    "credits": [
        {
            "name": "Sustained Usage Discount",
            "amount": -8.5,
            "full_name": None,
            "id": "",
            "type": "SUSTAINED_USAGE_DISCOUNT",
        }
    ],
    "invoice": {"month": "202611", "publisher_type": "GOOGLE"},
    "cost_type": "regular",
    "adjustment_info": None,
    "cost_at_list": 88.0,
    "price": {
        "effective_price": 11.0,
        "tier_start_amount": 0.0,
        "unit": "hour",
        "pricing_unit_quantity": 1.0,
    },
    "transaction_type": "GOOGLE",
    "seller_name": "Google",
    "subscription": None,
    "consumption_model": {"id": "default", "description": "Default"},
}


def set_field(row: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `row["a"]["b"]` for `dotted="a.b"`, creating the parent object when it is NULL."""
    *parents, leaf = dotted.split(".")
    target = row
    for name in parents:
        if target.get(name) is None:
            target[name] = {}
        target = target[name]
    target[leaf] = value


def export_row(overrides: Mapping[str, Any] | None = None, /, **top: Any) -> dict[str, Any]:
    """A fresh valid export row; `overrides` keys may be dotted (`"usage.amount"`)."""
    row = copy.deepcopy(_BASE)
    for key, value in {**(overrides or {}), **top}.items():
        set_field(row, key, value)
    return row


def without(row: Mapping[str, Any], *dotted: str) -> dict[str, Any]:
    """A copy of `row` lacking the given (possibly nested) fields, as an older export would."""
    out = copy.deepcopy(dict(row))
    for path in dotted:
        *parents, leaf = path.split(".")
        target = out
        for name in parents:
            target = target[name]
        target.pop(leaf, None)
    return out


def write_ndjson(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """One JSON object per line, gzip-compressed when `path` ends in `.gz`."""
    text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _cell(value: Any, style: Literal["json", "repr"]) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value) if style == "json" else repr(value)
    return str(value)


def flatten_for_csv(row: Mapping[str, Any], style: Literal["json", "repr"] = "json") -> dict[str, str]:
    """Dotted columns for RECORD fields; REPEATED fields as a JSON array or a Python repr."""
    flat: dict[str, str] = {}
    for col in EXPORT_SCHEMA:
        if col.name not in row:
            continue
        value = row[col.name]
        if col.type == "RECORD" and col.mode != "REPEATED":
            for f in col.fields:
                inner = None if value is None else value.get(f.name)
                if value is None or f.name in value:
                    flat[f"{col.name}.{f.name}"] = _cell(inner, style)
        else:
            flat[col.name] = _cell(value, style)
    return flat


def write_csv(
    path: Path,
    rows: Iterable[Mapping[str, Any]],
    style: Literal["json", "repr"] = "json",
    extra: Mapping[str, str] | None = None,
) -> Path:
    """A CSV like koku's: header of dotted names, `extra` columns appended (e.g. partition_date)."""
    flat = [{**flatten_for_csv(r, style), **(extra or {})} for r in rows]
    header = list(dict.fromkeys(k for r in flat for k in r))
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(flat)
    return path


def write_parquet(path: Path, rows: Iterable[Mapping[str, Any]], schema: pa.Schema | None = None) -> Path:
    """Parquet with nested types inferred by Arrow from the Python values (or an explicit schema)."""
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path)
    return path
