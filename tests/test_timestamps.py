"""Timestamps as exports write them: one instant, whichever form and whichever loader path."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitor.errors import InputError
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_billing, load_rows
from monitor.timeutil import parse_timestamp
from tests.export_rows import export_row, write_csv, write_ndjson, write_parquet

TEN = datetime(2026, 11, 1, 10, tzinfo=UTC)
TEN_QUARTER = datetime(2026, 11, 1, 10, 0, 0, 250_000, tzinfo=UTC)

FORMS = [
    # bq extract (NDJSON / CSV)
    ("2026-11-01 10:00:00 UTC", TEN),
    ("2026-11-01 10:00:00.250 UTC", TEN_QUARTER),
    ("2026-11-01 10:00:00.25 utc", TEN_QUARTER),
    # pandas / koku CSV
    ("2026-11-01 10:00:00+00:00", TEN),
    ("2026-11-01 10:00:00.250000+00:00", TEN_QUARTER),
    # RFC 3339
    ("2026-11-01T10:00:00Z", TEN),
    ("2026-11-01T10:00:00.25Z", TEN_QUARTER),
    ("2026-11-01T12:00:00+02:00", TEN),
    ("2026-11-01T12:00:00.250+02:00", TEN_QUARTER),
    ("2026-11-01T05:00:00-05:00", TEN),
    ("2026-11-01T10:00:00.2500001Z", TEN_QUARTER),  # beyond microseconds: truncated, like DuckDB
    # naive: what a user types for --start is UTC (export files refuse it: NAIVE below)
    ("2026-11-01 10:00:00", TEN),
]
#: The forms an export file may use: every one but the naive one.
ZONED = FORMS[:-1]

#: Timestamps without a zone: the export always writes one, so a file holding these was written by
#: another tool; taking them as UTC could shift every hour by that tool's offset.
NAIVE = ["2026-11-01 10:00:00", "2026-11-01T10:00:00", "2026-11-01 10:00:00.250", "2026-11-01"]

BAD = [
    "yesterday",
    "2026-13-01 10:00:00 UTC",
    "2026-11-01 25:00:00",
    "11/01/2026 10:00",
    "2026-11-01 10:00:00 Mars/Olympus",
]


@pytest.mark.parametrize(("text", "expected"), FORMS)
def test_parse_timestamp_forms(text: str, expected: datetime) -> None:
    got = parse_timestamp(text)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize("text", [*BAD, ""])
def test_parse_timestamp_rejects_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_timestamp(text)
    assert str(info.value) == (
        f'bad timestamp "{text}": use 2026-11-01T10:00:00Z, "2026-11-01 10:00:00 UTC" '
        "or 2026-11-01 10:00:00+00:00"
    )


def _write(fmt: str, tmp: Path, rows: list[dict]) -> Path:
    if fmt == "ndjson":
        return write_ndjson(tmp / "b.ndjson", rows)
    if fmt == "csv":
        return write_csv(tmp / "b.csv", rows, "repr")
    return write_parquet(tmp / "b.parquet", rows)  # string timestamps, cast by DuckDB


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "parquet", "rows"])
def test_every_form_is_the_same_instant_on_every_path(fmt: str, tmp_path: Path) -> None:
    rows = [export_row(usage_start_time=text, export_time=text) for text, _ in ZONED]
    conn = open_billing_db(None)
    if fmt == "rows":
        load_rows(conn, rows)
    else:
        load_billing([_write(fmt, tmp_path, rows)], conn)
    got = conn.execute("SELECT usage_start_time, _PARTITIONTIME FROM billing_export").fetchall()
    assert got == [(expected, datetime(2026, 11, 1, tzinfo=UTC)) for _, expected in ZONED]
    assert conn.execute("SELECT typeof(usage_start_time) FROM billing_export LIMIT 1").fetchone() == (
        "TIMESTAMP WITH TIME ZONE",
    )
    conn.close()


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "parquet", "rows"])
@pytest.mark.parametrize("text", BAD)
def test_bad_timestamp_is_rejected_on_every_path(fmt: str, text: str, tmp_path: Path) -> None:
    rows = [export_row(), export_row(usage_end_time=text)]
    conn = open_billing_db(None)
    with pytest.raises(InputError) as info:
        if fmt == "rows":
            load_rows(conn, rows)
        else:
            load_billing([_write(fmt, tmp_path, rows)], conn)
    assert info.value.field == "usage_end_time"
    assert info.value.line == (3 if fmt == "csv" else 2)
    assert f'bad timestamp "{text}"' in str(info.value)
    assert conn.execute("SELECT count(*) FROM billing_export").fetchone() == (0,)
    conn.close()


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "parquet", "rows"])
@pytest.mark.parametrize("text", NAIVE)
def test_naive_timestamp_is_rejected_on_every_path(fmt: str, text: str, tmp_path: Path) -> None:
    rows = [export_row(), export_row(export_time=text)]
    conn = open_billing_db(None)
    with pytest.raises(InputError) as info:
        if fmt == "rows":
            load_rows(conn, rows)
        else:
            load_billing([_write(fmt, tmp_path, rows)], conn)
    assert (info.value.field, info.value.line) == ("export_time", 3 if fmt == "csv" else 2)
    assert f'no time zone in "{text}"' in str(info.value) and 'end each with " UTC"' in str(info.value)
    assert conn.execute("SELECT count(*) FROM billing_export").fetchone() == (0,)
    conn.close()


def test_naive_parquet_timestamp_column_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = write_parquet(tmp_path / "b.parquet", [export_row()])
    table = pq.read_table(path)
    naive = pa.array([datetime(2026, 11, 2, 3)], pa.timestamp("us"))
    pq.write_table(table.set_column(table.schema.get_field_index("export_time"), "export_time", naive), path)
    conn = open_billing_db(None)
    with pytest.raises(InputError) as info:
        load_billing([path], conn)
    assert info.value.field == "export_time" and "without a time zone" in str(info.value)
    assert conn.execute("SELECT count(*) FROM billing_export").fetchone() == (0,)
    conn.close()


def test_naive_datetime_rows_are_refused() -> None:
    conn = open_billing_db(None)
    with pytest.raises(InputError, match=r"<rows>:1: export_time: no time zone in 2026-11-02 03:00:00"):
        load_rows(conn, [export_row(export_time=datetime(2026, 11, 2, 3))])
    conn.close()


def test_partition_is_the_utc_day_of_export_time() -> None:
    conn = open_billing_db(None)
    load_rows(
        conn,
        [
            export_row(export_time="2026-11-01T23:59:59.999Z"),
            export_row(export_time="2026-11-01T22:30:00-03:00"),  # 01:30 UTC on the 2nd
        ],
    )
    got = conn.execute("SELECT _PARTITIONTIME FROM billing_export").fetchall()
    assert got == [(datetime(2026, 11, 1, tzinfo=UTC),), (datetime(2026, 11, 2, tzinfo=UTC),)]
    conn.close()


def test_partition_is_never_before_the_usage_day() -> None:
    """A row exported before its usage (koku's real `2024-03-01_5.csv`: exported in 2022 for usage in
    2024) is loaded on its usage day, where the window's queries read it."""
    conn = open_billing_db(None)
    load_rows(conn, [export_row(export_time="2024-08-02T01:11:12Z")])  # used 2026-11-01 10:00 UTC
    got = conn.execute("SELECT _PARTITIONTIME FROM billing_export").fetchall()
    assert got == [(datetime(2026, 11, 1, tzinfo=UTC),)]
    conn.close()
