"""`gpucost load`: every export format lands in the DuckDB table in BigQuery's shape, or nothing does."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from monitor.cli import main
from monitor.errors import InputError
from monitor.schema import OPTIONAL_COLUMNS
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_billing, load_rows
from tests.export_rows import export_row, without, write_csv, write_ndjson, write_parquet

EXTERNAL = Path(__file__).resolve().parents[2] / "shared/data/external"
KOKU = EXTERNAL / "koku-gcp-billing-export"

Writer = Callable[[Path, list[dict]], Path]


def _ndjson(tmp: Path, rows: list[dict]) -> Path:
    return write_ndjson(tmp / "billing.ndjson", rows)


def _ndjson_gz(tmp: Path, rows: list[dict]) -> Path:
    return write_ndjson(tmp / "billing.ndjson.gz", rows)


def _csv_json(tmp: Path, rows: list[dict]) -> Path:
    return write_csv(tmp / "export.csv", rows, "json")


def _csv_repr(tmp: Path, rows: list[dict]) -> Path:
    return write_csv(tmp / "export.csv", rows, "repr", extra={"partition_date": "2026-11-01"})


def _parquet(tmp: Path, rows: list[dict]) -> Path:
    return write_parquet(tmp / "export.parquet", rows)


WRITERS: dict[str, Writer] = {
    "ndjson": _ndjson,
    "ndjson.gz": _ndjson_gz,
    "csv-json": _csv_json,
    "csv-repr": _csv_repr,
    "parquet": _parquet,
}


@pytest.fixture
def conn() -> duckdb.DuckDBPyConnection:
    c = open_billing_db(None)
    yield c
    c.close()


def _count(conn: duckdb.DuckDBPyConnection) -> int:
    return conn.execute("SELECT count(*) FROM billing_export").fetchone()[0]


def _three_rows() -> list[dict]:
    return [
        export_row(),
        export_row(
            {"usage.amount": 3600.0, "sku.description": "A3 Instance Core running in Americas"},
            cost=12.5,
            labels=[{"key": "team", "value": "infra"}],
            credits=[],
        ),
        export_row(
            cost=-2.25,  # a negating correction: the only row the export writes a negative cost on
            cost_type="adjustment",
            adjustment_info={"id": "adj-1", "description": "usage correction", "mode": None, "type": None},
            credits=[
                {
                    "name": "CUD",
                    "amount": -1.0,
                    "full_name": None,
                    "id": "c1",
                    "type": "COMMITTED_USAGE_DISCOUNT",
                },
                {"name": "Promo", "amount": -0.5, "full_name": "Promo X", "id": "p1", "type": "PROMOTION"},
            ],
            usage_start_time="2026-11-01 11:00:00 UTC",
        ),
    ]


# --- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_each_format_round_trips_nested_fields(fmt: str, tmp_path: Path, conn) -> None:
    path = WRITERS[fmt](tmp_path, _three_rows())
    report = load_billing([path], conn)
    assert (report.files, report.rows, report.per_file) == (1, 3, {str(path): 3})

    micros, credit_micros = conn.execute(
        "SELECT sum(CAST(round(cost * 1e6) AS BIGINT)),"
        " sum((SELECT sum(CAST(round(c.amount * 1e6) AS BIGINT)) FROM unnest(credits) AS t(c)))"
        " FROM billing_export"
    ).fetchone()
    assert micros == 98_250_000  # 88 + 12.5 - 2.25, exact
    assert credit_micros == -8_500_000 - 1_500_000

    labels = conn.execute(
        "SELECT list_transform(labels, lambda l: l.key || '=' || l.value) FROM billing_export ORDER BY cost"
    ).fetchall()
    assert [r[0] for r in labels] == [
        ["team=ml", "goog-k8s-cluster-name=train"],
        ["team=infra"],
        ["team=ml", "goog-k8s-cluster-name=train"],
    ]
    row = conn.execute(
        "SELECT service.description, sku.description, usage.amount, project.labels, system_labels,"
        " tags[1].inherited, price.effective_price, usage_start_time, _PARTITIONTIME, credits"
        " FROM billing_export WHERE cost = -2.25"
    ).fetchone()
    assert row[:7] == (
        "Compute Engine",
        "Nvidia H100 80GB GPU running in Americas",
        28800.0,
        [{"key": "env", "value": "prod"}],
        [{"key": "compute.googleapis.com/machine_spec", "value": "a3-highgpu-8g"}],
        True,
        11.0,
    )
    assert row[7] == datetime(2026, 11, 1, 11, tzinfo=UTC)
    assert row[8] == datetime(2026, 11, 2, tzinfo=UTC)  # export_time 2026-11-02 03:15 -> its UTC day
    assert row[9][1] == {
        "name": "Promo",
        "amount": -0.5,
        "full_name": "Promo X",
        "id": "p1",
        "type": "PROMOTION",
    }


def test_ndjson_accepts_numbers_as_strings_and_ignores_unknown_keys(tmp_path: Path, conn) -> None:
    row = export_row({"usage.amount": "7.5", "credits": [{"name": "SUD", "amount": "-10.0"}]}, cost="35.0")
    row["some_future_column"] = {"x": 1}
    row["service"]["new_sub_field"] = "ignored"
    load_billing([write_ndjson(tmp_path / "b.ndjson", [row])], conn)
    assert conn.execute(
        "SELECT cost, usage.amount, credits[1].amount, credits[1].type FROM billing_export"
    ).fetchone() == (
        35.0,
        7.5,
        -10.0,
        None,
    )


def test_parquet_with_older_nested_shape_loads(tmp_path: Path, conn) -> None:
    """An older export's Parquet: credits without `type`/`id`, no price/tags/resource columns."""
    rows = [without(export_row(), "price", "tags", "resource", "cost_at_list") for _ in range(2)]
    for r in rows:
        r["credits"] = [{"name": "SUD", "amount": -1.5}]
        r["usage_start_time"] = datetime(2026, 11, 1, 10, tzinfo=UTC)
    path = write_parquet(tmp_path / "old.parquet", rows)
    assert load_billing([path], conn).rows == 2
    assert conn.execute(
        "SELECT credits, price, tags, resource, usage_start_time FROM billing_export"
    ).fetchone() == (
        [{"name": "SUD", "amount": -1.5, "full_name": None, "id": None, "type": None}],
        None,
        [],
        None,
        datetime(2026, 11, 1, 10, tzinfo=UTC),
    )


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_missing_optional_columns_load_as_null(fmt: str, tmp_path: Path, conn) -> None:
    optional = sorted(OPTIONAL_COLUMNS)
    path = WRITERS[fmt](tmp_path, [without(export_row(), *optional)])
    load_billing([path], conn)
    cols = ", ".join(f'"{c}"' for c in optional)
    got = dict(zip(optional, conn.execute(f"SELECT {cols} FROM billing_export").fetchone(), strict=True))
    repeated = {"labels", "system_labels", "tags", "credits"}
    assert got == {c: ([] if c in repeated else None) for c in optional}
    assert conn.execute("SELECT cost, service.id FROM billing_export").fetchone() == (88.0, "6F81-5844-456A")


def test_load_rows_takes_python_values_and_appends_without_dedupe(conn) -> None:
    row = export_row(
        usage_start_time=datetime(2026, 11, 1, 12, tzinfo=UTC),
        usage_end_time="2026-11-01T13:00:00Z",
        export_time=datetime.fromisoformat("2026-11-01T23:30:00-02:00"),
    )
    assert load_rows(conn, [row]) == 1
    assert load_rows(conn, iter([row, row])) == 2
    assert _count(conn) == 3
    starts, parts = conn.execute(
        "SELECT list(DISTINCT usage_start_time), list(DISTINCT _PARTITIONTIME) FROM billing_export"
    ).fetchone()
    assert starts == [datetime(2026, 11, 1, 12, tzinfo=UTC)]
    assert parts == [datetime(2026, 11, 2, tzinfo=UTC)]  # 23:30 at -02:00 is 01:30 UTC the next day


def test_file_database_keeps_appends_across_opens(tmp_path: Path) -> None:
    db_file = tmp_path / "sub" / "gpucost.duckdb"
    for i, expected in enumerate((3, 6)):  # two export files (one file loads once)
        path = write_ndjson(tmp_path / f"b{i}.ndjson", [{**r, "cost": r["cost"] + i} for r in _three_rows()])
        c = open_billing_db(db_file)
        load_billing([path], c)
        assert _count(c) == expected
        assert c.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
        c.close()


def test_several_files_in_one_call(tmp_path: Path, conn) -> None:
    a = write_ndjson(tmp_path / "a.ndjson", _three_rows())
    b = write_csv(tmp_path / "b.csv", _three_rows()[:2])
    report = load_billing([a, b], conn)
    assert (report.files, report.rows, report.per_file) == (2, 5, {str(a): 3, str(b): 2})


def test_a_file_loads_once_into_a_database(tmp_path: Path) -> None:
    """The export never repeats a row, so the same bytes loaded again (under any name) would count
    their costs twice: refused, naming the first load; `again` appends them anyway."""
    db_file = tmp_path / "gpucost.duckdb"
    a = write_ndjson(tmp_path / "a.ndjson", _three_rows())
    copy = tmp_path / "downloaded-again.ndjson"
    copy.write_bytes(a.read_bytes())
    c = open_billing_db(db_file)
    load_billing([a], c)
    c.close()
    c = open_billing_db(db_file)
    for path in (a, copy):
        with pytest.raises(InputError, match=rf"already loaded \(3 rows, as {a}, at .*Z\).*--again") as info:
            load_billing([path], c)
        assert info.value.path == str(path)
    assert _count(c) == 3
    assert load_billing([copy], c, again=True).rows == 3
    assert _count(c) == 6
    assert c.execute("SELECT name, rows FROM gpucost_loaded_files ORDER BY loaded_at").fetchall() == [
        (str(a), 3),
        (str(copy), 3),
    ]
    c.close()


@pytest.mark.parametrize("fmt", ["ndjson", "parquet"])
def test_the_same_contents_twice_in_one_call_are_refused(tmp_path: Path, conn, fmt: str) -> None:
    """Given twice, or as two copies, one file's costs would count twice: `gpucost analyze --billing A
    --billing A` and `gpucost load` refuse it (Parquet is read in place: `view_billing`)."""
    from monitor.sources.factory import billing_source_from_files

    write = write_ndjson if fmt == "ndjson" else write_parquet
    a = write(tmp_path / f"a.{fmt}", _three_rows())
    b = tmp_path / f"b.{fmt}"
    b.write_bytes(a.read_bytes())
    with pytest.raises(InputError, match=rf"^{b}: the same bytes as {a}: its costs would count twice"):
        billing_source_from_files([a, b])
    with pytest.raises(InputError, match=rf"^{a}: given twice"):
        billing_source_from_files([a, a])
    with pytest.raises(InputError, match="the same bytes as"):
        load_billing([a, b], conn, again=True)  # `again` is about earlier loads, not this one
    assert _count(conn) == 0


def test_the_same_rows_in_another_format_are_refused(tmp_path: Path) -> None:
    """`simulate` writes the export as gzipped NDJSON and as Parquet: both to `--billing` counted
    every dollar twice, and `gpucost load` took the .ndjson.gz after the .ndjson (other bytes, the
    same rows). Their rows' count, exact cost, usage span and latest export tell them apart."""
    from monitor.sources.factory import billing_source_from_files

    rows = _three_rows()
    plain = write_ndjson(tmp_path / "a.ndjson", rows)
    gz = write_ndjson(tmp_path / "a.ndjson.gz", rows)
    pq = write_parquet(tmp_path / "a.parquet", rows)
    other = write_parquet(tmp_path / "b.parquet", rows[:2])
    said = r"the same rows as {} \(3 rows, usage .* to .*\): its costs would count twice"
    with pytest.raises(InputError, match=f"^{re.escape(str(gz))}: " + said.format(re.escape(str(pq)))):
        billing_source_from_files([pq, gz])
    reordered = write_parquet(tmp_path / "reordered.parquet", rows[::-1])  # other bytes (read in place)
    assert reordered.read_bytes() != pq.read_bytes()
    with pytest.raises(InputError, match=f"^{re.escape(str(reordered))}: " + said.format(re.escape(str(pq)))):
        billing_source_from_files([pq, reordered])
    assert billing_source_from_files([other, pq]) is not None  # some of the rows: not the same
    # a bad row is told before the same rows, read in place too (it was for NDJSON only)
    bad = [dict(r) for r in rows]
    bad[1] = bad[1] | {"cost": float("nan")}
    bad_a = write_parquet(tmp_path / "bad_a.parquet", bad)
    bad_b = write_parquet(tmp_path / "bad_b.parquet", bad[::-1])
    with pytest.raises(InputError, match="cost") as info:
        billing_source_from_files([bad_a, bad_b])
    assert "the same rows" not in str(info.value)
    db_file = tmp_path / "gpucost.duckdb"
    c = open_billing_db(db_file)
    load_billing([plain], c)
    with pytest.raises(InputError, match=rf"the same rows as {re.escape(str(plain))}, loaded at .*--again"):
        load_billing([gz], c)
    assert _count(c) == 3
    assert load_billing([gz], c, again=True).rows == 3
    c.close()


# --- malformed input: precise errors, nothing committed -----------------------------------------


def _bad_rows(kind: str) -> tuple[list[dict], str, str]:
    """Three rows, the third malformed; returns (rows, field, message fragment)."""
    rows = _three_rows()
    if kind == "timestamp":
        rows[2]["usage_start_time"] = "yesterday"
        return rows, "usage_start_time", 'bad timestamp "yesterday": use 2026-11-01T10:00:00Z'
    if kind == "number":
        rows[2]["usage"]["amount"] = "abc"
        return rows, "usage.amount", 'expected a number, got "abc"'
    if kind == "missing":
        del rows[2]["cost"]
        return rows, "cost", "required, but missing or null"
    raise AssertionError(kind)


@pytest.mark.parametrize("fmt", ["ndjson", "ndjson.gz", "csv-json", "csv-repr"])
@pytest.mark.parametrize("kind", ["timestamp", "number", "missing"])
def test_malformed_row_names_file_line_field_and_commits_nothing(
    fmt: str, kind: str, tmp_path: Path, conn
) -> None:
    good = write_ndjson(tmp_path / "good.ndjson", _three_rows())
    load_billing([good], conn)
    rows, field, fragment = _bad_rows(kind)
    if fmt.startswith("csv") and kind == "missing":
        rows[2]["cost"] = None  # a CSV cannot lack a cell: the cell is empty
    sub = tmp_path / "bad"
    sub.mkdir()
    bad = WRITERS[fmt](sub, rows)
    with pytest.raises(InputError) as info:
        load_billing([good, bad], conn, again=True)
    e = info.value
    line = 4 if fmt.startswith("csv") else 3  # CSV line 1 is the header
    assert (e.path, e.line, e.field) == (str(bad), line, field)
    assert str(e).startswith(f"{bad}:{line}: {field}: ")
    assert fragment in str(e)
    assert _count(conn) == 3  # the good file of the failed call was rolled back too


def _line(**fields: object) -> str:
    return json.dumps({**export_row(), **fields})


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ('{"cost": 1', None, "not valid JSON (Expecting"),
        ("[1, 2]", None, "expected one export row object per line (NDJSON), got [1, 2]"),
        (f"[{_line()}]", None, "(a JSON array: `jq -c '.[]' billing.ndjson > rows.ndjson` converts it)"),
        ('{\n  "cost": 1\n}', None, "an object spans lines (pretty-printed JSON): write one export row object"),
        (_line(labels="team=ml"), "labels", "expected a list such as"),
        (_line(service="Compute Engine"), "service", "expected an object with fields id, description"),
        (_line(credits=[{"amount": "x"}]), "credits[0].amount", 'expected a number, got "x"'),
        (_line(tags=[None]), "tags[0]", "list element is null"),
    ],
)
def test_ndjson_structural_errors(text: str, field: str | None, fragment: str, tmp_path: Path, conn) -> None:
    path = tmp_path / "billing.ndjson"
    path.write_text(f"{_line()}\n\n{text}\n{_line()}\n")  # a blank line 2 still counts
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.line, info.value.field) == (3, field)
    assert fragment in str(info.value)
    assert _count(conn) == 0


def test_parquet_bad_value_is_located(tmp_path: Path, conn) -> None:
    rows = [export_row(cost="1.5"), export_row(cost="abc"), export_row(cost="2")]
    path = write_parquet(tmp_path / "export.parquet", rows)
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, "cost")
    assert 'expected a number, got "abc"' in str(info.value)
    assert _count(conn) == 0


def test_parquet_missing_required_column(tmp_path: Path, conn) -> None:
    path = write_parquet(tmp_path / "export.parquet", [without(export_row(), "export_time")])
    with pytest.raises(InputError, match=r'export\.parquet: missing required column "export_time"'):
        load_billing([path], conn)


@pytest.mark.parametrize(
    ("header_drop", "message"),
    [
        ("cost", 'export.csv: missing required column "cost": add it to the header'),
        ("service", 'missing required column "service.id" or "service.description"'),
    ],
)
def test_csv_missing_required_column(header_drop: str, message: str, tmp_path: Path, conn) -> None:
    path = write_csv(tmp_path / "export.csv", [without(export_row(), header_drop)])
    with pytest.raises(InputError, match=message) as info:
        load_billing([path], conn)
    assert info.value.line is None


@pytest.mark.parametrize(
    ("cell", "fragment"),
    [
        ("[{'key': 'a', 'value': }]", "cannot parse"),
        ("__import__('os').system('echo pwned')", "cannot parse"),
        ("{'key': 'a'}", "expected a list such as"),
    ],
)
def test_csv_bad_repeated_cell(cell: str, fragment: str, tmp_path: Path, conn) -> None:
    path = write_csv(tmp_path / "export.csv", [export_row(), export_row(labels="PLACEHOLDER")], "repr")
    quoted = '"' + cell.replace('"', '""') + '"'
    path.write_text(path.read_text().replace("PLACEHOLDER", quoted))
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.line, info.value.field) == (3, "labels")
    assert fragment in str(info.value)


def test_csv_wrong_field_count(tmp_path: Path, conn) -> None:
    path = write_csv(tmp_path / "export.csv", [export_row(), export_row()])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:2], lines[2] + ",extra"]) + "\n")
    with pytest.raises(InputError, match=r"export\.csv:3: expected \d+ fields like the header, got \d+"):
        load_billing([path], conn)


def test_load_rows_error_names_the_row_and_commits_nothing(conn) -> None:
    rows = [export_row(), export_row(usage_end_time=datetime(2026, 11, 1, 11, tzinfo=UTC)), export_row(cost=float("nan"))]
    with pytest.raises(InputError) as info:
        load_rows(conn, rows)
    assert str(info.value) == "<rows>:3: cost: expected a number, got nan"
    assert _count(conn) == 0


@pytest.mark.parametrize("name", ["export.xlsx", "export.parquet.gz", "export"])
def test_unknown_file_type(name: str, tmp_path: Path, conn) -> None:
    path = tmp_path / name
    path.write_text("x")
    with pytest.raises(InputError, match="unknown file type: name export files"):
        load_billing([path], conn)


def test_not_a_parquet_file(tmp_path: Path, conn) -> None:
    path = tmp_path / "export.parquet"
    path.write_text("not parquet")
    with pytest.raises(InputError, match=r"export\.parquet: not a readable Parquet file"):
        load_billing([path], conn)


def test_arrow_batches_span_many_rows(conn) -> None:
    """Rows beyond one batch land, and an error in a later batch rolls back the earlier ones."""
    rows = [export_row(cost=float(i)) for i in range(10)]
    assert load_rows(conn, rows, batch_rows=4) == 10
    assert conn.execute("SELECT sum(cost) FROM billing_export").fetchone()[0] == 45.0
    with pytest.raises(InputError, match=r"<rows>:10: cost"):
        load_rows(conn, [*rows[:9], export_row(cost="oops")], batch_rows=4)
    assert _count(conn) == 10


# --- real data ------------------------------------------------------------------------------------


def test_pretty_printed_json_is_refused_with_its_conversion(shared_data: Path, conn) -> None:
    """Google's professional-services test exports are pretty-printed objects, one after another:
    the error says how to make NDJSON of them."""
    path = shared_data / "gcp-billing-schema-psp" / "test_6_1_export.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    with pytest.raises(InputError, match=r":1: not valid JSON .*an object spans lines.*jq -c .* test_6_1_export.json"):
        load_billing([path], conn)


@pytest.mark.skipif(not KOKU.is_dir(), reason=f"real export samples not present at {KOKU}")
def test_koku_csv_exports_load(conn) -> None:
    files = {
        "202011_30c31bca571d9b7f3b2c8459dd8bc34a_2020-11-08_2020-11-11.csv": 25,
        "2022-08-01_5.csv": 9,
        "2024-03-01_5.csv": 6,
        "agpl/tmp_example.csv": 292,
    }
    report = load_billing([KOKU / f for f in files], conn)
    assert report.per_file == {str(KOKU / f): n for f, n in files.items()}
    promo, gce, machine = conn.execute(
        "SELECT"
        " (SELECT count(*) FROM billing_export, unnest(credits) AS t(c) WHERE c.type = 'PROMOTION'),"
        " (SELECT count(*) FROM billing_export WHERE service.description = 'Compute Engine'),"
        " (SELECT any_value(l.value) FROM billing_export, unnest(system_labels) AS t(l)"
        "   WHERE l.key = 'compute.googleapis.com/machine_spec')"
    ).fetchone()
    assert promo > 0 and gce > 0
    assert machine == "e2-medium"
    nulls = conn.execute(
        "SELECT count(*) FROM billing_export WHERE usage_start_time IS NULL OR export_time IS NULL"
        " OR cost IS NULL OR _PARTITIONTIME IS NULL"
    ).fetchone()[0]
    assert nulls == 0
    # koku's detailed export has resource.name; its standard export does not (-> NULL).
    assert (
        conn.execute("SELECT count(*) FROM billing_export WHERE resource.name = 'instance-1'").fetchone()[0]
        == 15
    )


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_load_prints_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_ndjson(tmp_path / "a.ndjson", _three_rows())
    b = write_parquet(tmp_path / "b.parquet", [export_row()])
    db_file = tmp_path / "g.duckdb"
    assert main(["load", "--billing", str(a), "--billing", str(b), "--db", str(db_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"loaded 4 rows from 2 files into {db_file}"
    assert f"  {a}: 3 rows" in out and f"  {b}: 1 rows" in out
    c = open_billing_db(db_file)
    assert _count(c) == 4
    c.close()


def test_cli_bad_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows, _, _ = _bad_rows("timestamp")
    bad = write_ndjson(tmp_path / "billing.ndjson", rows)
    db_file = tmp_path / "g.duckdb"
    assert main(["load", "--billing", str(bad), "--db", str(db_file)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f'gpucost: error: {bad}:3: usage_start_time: bad timestamp "yesterday"')
    c = open_billing_db(db_file)
    assert _count(c) == 0
    c.close()


def test_cli_unopenable_database_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_ndjson(tmp_path / "a.ndjson", [export_row()])
    not_db = tmp_path / "not.duckdb"
    not_db.write_text("this is not a duckdb file" * 100)
    assert main(["load", "--billing", str(good), "--db", str(not_db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot open the DuckDB database" in err[0]


def test_arrow_schema_matches_table(conn) -> None:
    """The Python path's Arrow schema and the DDL come from one schema: their columns agree."""
    from monitor.sources.duckdb_conn import ARROW_SCHEMA

    table_cols = [r[0] for r in conn.execute("DESCRIBE billing_export").fetchall()]
    assert table_cols == [*ARROW_SCHEMA.names, "_PARTITIONTIME"]
    assert isinstance(ARROW_SCHEMA.field("credits").type, pa.ListType)


# --- the typed fast path (rows already in Python types) --------------------------------------------


def _table(conn) -> list[tuple]:
    return conn.execute("SELECT * FROM billing_export ORDER BY ALL").fetchall()


def test_typed_rows_load_exactly_as_the_checked_path() -> None:
    from datetime import timedelta

    from monitor.simulate.simulator import DEFAULT_START, FleetSimulator

    sim = FleetSimulator(7, DEFAULT_START, 2)
    rows = list(sim.rows_exported_between(DEFAULT_START, DEFAULT_START + timedelta(hours=12)))
    slow, fast = open_billing_db(None), open_billing_db(None)
    assert load_rows(slow, rows) == load_rows(fast, iter(rows), typed=True, batch_rows=100) == len(rows)
    assert len(rows) > 100 and _table(fast) == _table(slow)


def test_typed_rows_in_string_shape_fall_back_to_the_per_row_path(conn) -> None:
    rows = [export_row(cost=1.5), export_row(cost="2.5")]  # bq-extract strings: not Arrow-typed
    assert load_rows(conn, rows, typed=True) == 2
    assert conn.execute("SELECT sum(cost) FROM billing_export").fetchone()[0] == 4.0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"cost": None}, "<rows>:2: cost: required, but missing or null: every export row must have it"),
        ({"labels": [None]}, "<rows>:2: labels[0]: list element is null: drop it or give an object"),
        ({"cost": "oops"}, '<rows>:2: cost: expected a number, got "oops"'),
    ],
)
def test_typed_rows_errors_name_the_row_and_commit_nothing(bad: dict, message: str, conn) -> None:
    good = {**export_row(), "usage_start_time": datetime(2026, 11, 1, 10, tzinfo=UTC)}
    good |= {
        "usage_end_time": datetime(2026, 11, 1, 11, tzinfo=UTC),
        "export_time": datetime(2026, 11, 2, tzinfo=UTC),
    }
    with pytest.raises(InputError) as info:
        load_rows(conn, [good, {**good, **bad}], typed=True)
    assert str(info.value) == message
    assert _count(conn) == 0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (_line(cost=float("nan")), "cost"),
        (_line(cost=float("inf")), "cost"),
        (_line(credits=[{"name": "x", "amount": float("-inf"), "type": "PROMOTION"}]), "credits[0].amount"),
        (_line(currency_conversion_rate=float("nan")), "currency_conversion_rate"),
    ],
)
def test_nan_and_infinite_amounts_are_refused_with_file_line_and_field(
    text: str, field: str, tmp_path: Path, conn
) -> None:
    """DuckDB reads NaN / Infinity (which Python's json writes) into DOUBLE without a word; the
    analysis then failed with a Conversion Error naming neither file nor line."""
    path = tmp_path / "billing.ndjson"
    path.write_text(f"{_line()}\n{text}\n")
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, field)
    assert "expected a number, got" in str(info.value)
    assert _count(conn) == 0


@pytest.mark.parametrize("fmt", ["ndjson", "ndjson.gz", "parquet"])
def test_an_empty_file_is_an_error_not_zero_dollars(fmt: str, tmp_path: Path, conn) -> None:
    if fmt == "parquet":  # an export with its schema and no row
        import pyarrow.parquet as pq

        from monitor.sources.duckdb_conn import ARROW_SCHEMA

        path = tmp_path / "export.parquet"
        pq.write_table(pa.Table.from_pylist([], schema=ARROW_SCHEMA), path)
    else:
        path = WRITERS[fmt](tmp_path, [])
    with pytest.raises(InputError, match="no export rows in the file"):
        load_billing([path], conn)


def test_the_cli_exits_2_on_an_empty_export(tmp_path: Path, capsys) -> None:
    path = tmp_path / "billing.ndjson"
    path.write_text("")
    assert main(["analyze", "--billing", str(path)]) == 2
    assert f"{path}: no export rows in the file" in capsys.readouterr().err


FOCUS_SAMPLE = EXTERNAL / "focus-1.0-sample" / "focus_sample.csv"


@pytest.mark.skipif(not FOCUS_SAMPLE.is_file(), reason=f"real data not present at {FOCUS_SAMPLE}")
def test_a_focus_file_is_named_as_such(conn) -> None:
    """The official FOCUS 1.0 sample (real headers): the error says what it is and what to pass."""
    with pytest.raises(InputError) as info:
        load_billing([FOCUS_SAMPLE], conn)
    assert "this looks like a FOCUS file, not a Google Cloud Billing export" in str(info.value)


@pytest.mark.parametrize(
    ("columns", "name"),
    [
        (
            ["identity/LineItemId", "lineItem/UsageStartDate", "lineItem/UnblendedCost"],
            "an AWS Cost and Usage Report",
        ),
        (["line_item_usage_start_date", "line_item_unblended_cost"], "an AWS Cost and Usage Report"),
        (["Date", "MeterCategory", "CostInBillingCurrency"], "an Azure cost details file"),
    ],
)
def test_other_clouds_billing_files_are_named(columns: list[str], name: str, tmp_path: Path, conn) -> None:
    csv = tmp_path / "bill.csv"
    csv.write_text(",".join(columns) + "\n" + ",".join("1" for _ in columns) + "\n")
    ndjson = tmp_path / "bill.ndjson"
    ndjson.write_text(json.dumps(dict.fromkeys(columns, "1")) + "\n")
    parquet = tmp_path / "bill.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({c: ["1"] for c in columns}), parquet)
    for path in (csv, ndjson, parquet):
        with pytest.raises(InputError) as info:
            load_billing([path], conn)
        assert f"this looks like {name}" in str(info.value), path


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"currency": "euro"}, "currency", 'expected an ISO 4217 code such as "USD" or "EUR", got "euro"'),
        (
            {"currency": "EUR", "currency_conversion_rate": 0},
            "currency_conversion_rate",
            "missing or not positive (0",
        ),
        ({"currency": "EUR", "currency_conversion_rate": None}, "currency_conversion_rate", "for a EUR row"),
    ],
)
@pytest.mark.parametrize("fmt", ["ndjson", "parquet"])
def test_a_currency_gpucost_cannot_convert_is_refused(
    fields: dict, field: str, fragment: str, fmt: str, tmp_path: Path, conn
) -> None:
    """Amounts are in the account's currency and divided by the rate to get USD: without a rate
    a EUR row would silently count as USD (the query's IFNULL(rate, 1))."""
    rows = [export_row(), {**export_row(), **fields}]
    path = WRITERS[fmt](tmp_path, rows)
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.line, info.value.field) == (2, field)
    assert fragment in str(info.value)
    assert _count(conn) == 0


def test_a_usd_row_needs_no_rate(tmp_path: Path, conn) -> None:
    path = WRITERS["ndjson"](
        tmp_path, [{**export_row(), "currency": "USD", "currency_conversion_rate": None}]
    )
    assert load_billing([path], conn).rows == 1


def test_a_value_duckdb_cannot_quote_still_names_the_line(tmp_path: Path, conn) -> None:
    """DuckDB's error quotes the bad value, cut to a length that can split a 4-byte character: its
    message then fails to decode and used to escape as a UnicodeDecodeError traceback (found by the
    property in tests/test_properties.py, this very value)."""
    value = {"000000": None, "000\x07\U00010000\U00010000": None, "\x80": "0\U00010000"}
    path = write_ndjson(tmp_path / "billing.ndjson", [export_row(), export_row(usage_start_time=value)])
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert (info.value.line, info.value.field) == (2, "usage_start_time")
    assert _count(conn) == 0


def test_real_standard_export_is_named_and_loads(conn) -> None:
    """koku's 2020 file is the standard export (no resource columns), its 2022 one the detailed."""
    standard, detailed = KOKU / "202011_30c31bca571d9b7f3b2c8459dd8bc34a_2020-11-08_2020-11-11.csv", KOKU / "2022-08-01_5.csv"
    if not (standard.is_file() and detailed.is_file()):
        pytest.skip(f"koku files not present in {KOKU}")
    report = load_billing([standard, detailed], conn)
    assert report.rows == 25 + 9 and report.standard == (str(standard),)
