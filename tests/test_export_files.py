"""`--billing` files in DuckDB: Parquet read in place through a view, checked as the loader checks
what it copies; NDJSON and CSV copied into memory when small, into a temporary file (gone with its
source) when large. The same rows every way."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.errors import InputError
from monitor.simulate import write_fleet
from monitor.sources import factory
from monitor.sources.duckdb_conn import ARROW_SCHEMA, open_billing_db
from monitor.sources.loader import view_billing
from tests.export_rows import export_row, without, write_parquet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, seed=3, days=1, inject=False)
    return out / "billing"


def _where(source) -> tuple[str, str]:
    """(the path of the database holding the export, "" in memory; the export's table type)."""
    sql = "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ((path,),) = source.conn.execute(sql).fetchall()
    sql = "SELECT table_type FROM information_schema.tables WHERE table_name = 'billing_export'"
    ((kind,),) = source.conn.execute(sql).fetchall()
    return path or "", kind


def _totals(source) -> tuple:
    sql = "SELECT COUNT(*), SUM(cost::DECIMAL(38, 9)), COUNT(DISTINCT sku.id), COUNT(resource), MAX(_PARTITIONTIME)"
    return source.conn.execute(sql + " FROM billing_export").fetchall()[0]


def test_parquet_is_read_in_place_and_holds_what_the_ndjson_loads(fleet: Path) -> None:
    parquet = factory.billing_source_from_files([fleet / "export.parquet"])
    ndjson = factory.billing_source_from_files([fleet / "export.ndjson.gz"])
    assert _where(parquet) == ("", "VIEW")
    assert _where(ndjson) == ("", "BASE TABLE")  # 0.5 MB: in memory
    assert _totals(parquet) == _totals(ndjson) and _totals(parquet)[0] > 1000


def test_a_large_ndjson_export_loads_into_a_file_that_goes_away(fleet: Path, monkeypatch) -> None:
    path = fleet / "export.ndjson.gz"
    small = factory.billing_source_from_files([path])
    monkeypatch.setattr(factory, "IN_MEMORY_MAX_BYTES", path.stat().st_size - 1)
    large = factory.billing_source_from_files([path])
    where, kind = _where(large)
    assert Path(where).is_file() and Path(where).name == "export.duckdb" and kind == "BASE TABLE"
    assert _totals(large) == _totals(small)
    del large
    gc.collect()
    assert not Path(where).parent.exists()


def _view(paths: list[Path]):
    conn = open_billing_db(None, table=False)
    return conn, view_billing(paths, conn)


def test_a_viewed_file_is_checked_once_then_read_without_the_checks(tmp_path: Path) -> None:
    """The row rules run over every row once, when the files are opened (the bad-row tests below);
    the view then only casts and fills NULL lists with [], so no query pays for the checks again."""
    path = write_parquet(tmp_path / "export.parquet", [export_row(), export_row(labels=None)])
    conn, _ = _view([path])
    ((sql,),) = conn.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'billing_export'").fetchall()
    assert "error(" not in sql.lower() and "coalesce(" in sql.lower()
    assert sorted(len(labels) for (labels,) in conn.execute("SELECT labels FROM billing_export").fetchall())[0] == 0


def test_two_parquet_files_are_one_view_with_older_shapes(tmp_path: Path) -> None:
    """An older export's Parquet (credits without `type`/`id`, no price/tags/resource columns)
    beside a current one: missing columns read as NULL, REPEATED ones as []."""
    old = [without(export_row(), "price", "tags", "resource", "cost_at_list") for _ in range(2)]
    for r in old:
        r["credits"] = [{"name": "SUD", "amount": -1.5}]
    paths = [write_parquet(tmp_path / "old.parquet", old), write_parquet(tmp_path / "new.parquet", [export_row()])]
    conn, report = _view(paths)
    assert (report.rows, report.per_file[str(paths[0])], report.standard) == (3, 2, (str(paths[0]),))
    got = conn.execute(
        "SELECT credits, price, tags, resource, usage_start_time FROM billing_export ORDER BY resource NULLS FIRST"
    ).fetchall()
    assert got[0][:4] == ([{"name": "SUD", "amount": -1.5, "full_name": None, "id": None, "type": None}], None, [], None)
    assert got[0][4] == datetime(2026, 11, 1, 10, tzinfo=UTC)
    assert got[2][3] is not None


@pytest.mark.parametrize(
    ("rows", "where", "fragment"),
    [
        ([export_row(cost="1.5"), export_row(cost="abc")], ":2: cost:", 'expected a number, got "abc"'),
        ([export_row(), export_row(cost=float("nan"))], ":2: cost:", "expected a number"),
        ([export_row(), export_row(labels=[{"key": "a", "value": "b"}, None])], ":2: labels", ""),
        ([export_row(), export_row(export_time="2026-11-02T03:15:00")], ":2: export_time: no time zone", ""),
        ([export_row(), export_row(cost=-50.0, credits=[])], ":2: cost:", "mark it as the correction it is"),
    ],
    ids=["not-a-number", "nan", "null-list-element", "naive-time", "negative-cost"],
)
def test_a_bad_row_in_a_viewed_file_is_located(rows: list[dict], where: str, fragment: str, tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "export.parquet", rows)
    with pytest.raises(InputError) as info:
        _view([path])
    assert str(info.value).startswith(f"{path}{where}") and fragment in str(info.value)


def test_a_required_field_that_is_null_is_refused(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "export.parquet", [export_row(), export_row(export_time=None)])
    with pytest.raises(InputError, match=r"export\.parquet:2: export_time"):
        _view([path])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: write_parquet(p, [without(export_row(), "export_time")]), 'missing required column "export_time"'),
        (lambda p: p.write_text("not parquet") and p, "not a readable Parquet file|could not read"),
        (lambda p: write_parquet(p, [], schema=ARROW_SCHEMA), "no export rows in the file"),
        (lambda p: p, "no such file"),
    ],
    ids=["missing-column", "not-parquet", "empty", "missing-file"],
)
def test_a_bad_parquet_file_is_refused(make, message: str, tmp_path: Path) -> None:
    path = make(tmp_path / "export.parquet")
    with pytest.raises(InputError, match=message):
        _view([path])
