"""`--billing` files load into memory when small and into a temporary DuckDB file when large: the
same rows either way, and the temporary file goes away with its source."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from monitor.simulate import write_fleet
from monitor.sources import factory


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, seed=3, days=1, inject=False)
    return out / "billing" / "export.parquet"


def _where(source) -> str:
    """The path of the database holding the export ("" in memory)."""
    sql = "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ((path,),) = source.conn.execute(sql).fetchall()
    return path or ""


def _totals(source) -> tuple:
    return source.conn.execute("SELECT COUNT(*), SUM(cost::DECIMAL(38, 9)), COUNT(DISTINCT sku.id) FROM billing_export").fetchall()[0]


def test_small_exports_load_into_memory_large_ones_into_a_file_that_goes_away(export, monkeypatch) -> None:
    small = factory.billing_source_from_files([export])
    assert export.stat().st_size <= factory.IN_MEMORY_MAX_BYTES and _where(small) == ""
    monkeypatch.setattr(factory, "IN_MEMORY_MAX_BYTES", export.stat().st_size - 1)
    large = factory.billing_source_from_files([export])
    path = Path(_where(large))
    assert path.is_file() and path.name == "export.duckdb"
    assert _totals(large) == _totals(small) and _totals(small)[0] > 1000
    del large
    gc.collect()
    assert not path.parent.exists()


def test_a_directory_of_exports_counts_every_file(export) -> None:
    assert factory._size(export.parent) == sum(f.stat().st_size for f in export.parent.iterdir())
    assert factory._size(export.parent / "missing.parquet") == 0
