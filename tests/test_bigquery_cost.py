"""The BigQuery size rules `bench/bigquery_cost.py` prices gpucost's queries with.

Pinned on hand-computed values (cloud.google.com/bigquery/docs/storage_overview#data_type_sizes:
STRING = 2 + UTF-8 bytes, FLOAT64 / TIMESTAMP = 8, NULL free; arrays = the sum of their elements)
and on which export columns a query is charged for.
"""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from monitor.schema import arrow_schema

_PATH = Path(__file__).resolve().parents[1] / "bench" / "bigquery_cost.py"
_spec = importlib.util.spec_from_file_location("bigquery_cost", _PATH)
assert _spec is not None and _spec.loader is not None
bc = importlib.util.module_from_spec(_spec)
sys.modules["bigquery_cost"] = bc  # dataclasses look their module up
_spec.loader.exec_module(bc)


@pytest.mark.parametrize(
    ("bq_type", "value", "size"),
    [
        ("STRING", "gpu-a", 7),  # 2 + 5 ASCII bytes
        ("STRING", "é", 4),  # 2 + 2 UTF-8 bytes, not 1 character
        ("STRING", "", 2),
        ("STRING", None, 0),  # NULL is free
        ("FLOAT", 0.0, 8),
        ("TIMESTAMP", datetime(2026, 11, 1, tzinfo=UTC), 8),
        ("BOOLEAN", False, 1),
    ],
)
def test_value_bytes(bq_type: str, value: object, size: int) -> None:
    assert bc.value_bytes(bq_type, value) == size


def test_billed_bytes_rounds_up_to_the_mb_with_a_10_mb_floor() -> None:
    assert bc.billed_bytes(1) == 10 * 2**20
    assert bc.billed_bytes(10 * 2**20 + 1) == 11 * 2**20


def test_leaf_bytes_sums_repeated_fields_and_skips_nulls() -> None:
    rows = [
        {"labels": [{"key": "team", "value": "ml"}, {"key": "env", "value": None}], "cost": 1.5},
        {"labels": [], "cost": None},
        {"labels": None, "cost": 2.0},
    ]
    table = pa.Table.from_pylist(
        rows, schema=pa.schema([f for f in arrow_schema() if f.name in ("labels", "cost")])
    )
    assert bc.leaf_bytes(table, ("labels", "key")) == (2 + 4) + (2 + 3)
    assert bc.leaf_bytes(table, ("labels", "value")) == 2 + 2
    assert bc.leaf_bytes(table, ("cost",)) == 16


def test_referenced_leaves_resolves_structs_and_unnest_aliases_only_from_the_export() -> None:
    sql = """
    WITH e AS (
      SELECT project.id AS project_id, cost,
        (SELECT MAX(l.value) FROM UNNEST(labels) AS l WHERE l.key = 'k') AS team
      FROM `p`.`d`.`t` WHERE _PARTITIONTIME >= @a
    )
    SELECT project_id, team, SUM(cost) AS currency FROM e GROUP BY project_id, team
    """
    got = bc.referenced_leaves(sql, "p.d.t")
    assert got == {("project", "id"), ("cost",), ("labels", "key"), ("labels", "value")}
