"""The embedded DuckDB copy of the billing export: one file, one table, BigQuery's shape.

Everything that reads or writes the local copy opens it here, so the session settings that make
DuckDB agree with BigQuery (UTC day and hour boundaries) are applied in exactly one place, and the
table is always created from `monitor.schema` (never hand-written DDL).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from monitor.errors import InputError
from monitor.schema import EXPORT_SCHEMA, TABLE_NAME, Column, arrow_schema, duckdb_create_table, duckdb_type
from monitor.sources.foreign import foreign_hint

__all__ = [
    "ARROW_SCHEMA",
    "DEFAULT_MEMORY_LIMIT",
    "PARTITION_COLUMN",
    "REQUIRED_COLUMNS",
    "insert_arrow",
    "insert_ndjson",
    "insert_parquet",
    "open_billing_db",
]

#: BigQuery's ingestion-time pseudo-column, a real column in the embedded table.
PARTITION_COLUMN = "_PARTITIONTIME"

#: Columns every export row has; a row without one is rejected (everything else may be NULL).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "usage_start_time",
    "usage_end_time",
    "export_time",
    "cost",
    "service",
    "sku",
)

#: The export schema as Arrow, the shape `insert_arrow` expects (timestamps are UTC microseconds).
ARROW_SCHEMA = arrow_schema()
#: DuckDB's own default is 80% of RAM, and it keeps what it was allowed: one attribution query over
#: 52k export rows held 1.1 GB with the default and 190 MB under a 300 MB limit, in the same time
#: (measured; bench/). Past the limit DuckDB spills to disk ("Memory Management in DuckDB",
#: https://duckdb.org/2024/07/09/memory-management.html), beside a database file or in a
#: temporary directory for an in-memory one.
DEFAULT_MEMORY_LIMIT = "1GB"

#: Name the Arrow batch is registered under for the length of one INSERT (then unregistered).
_BATCH_VIEW = "_gpucost_batch"


def open_billing_db(path: Path | str | None, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """Open (or create) the DuckDB file holding `billing_export`; None opens an in-memory database.

    The session time zone is UTC so that `TIMESTAMP_TRUNC(.., DAY)`, `DATE(..)` and the
    `_PARTITIONTIME` day match BigQuery, whose timestamps are UTC. A file that cannot be opened (not
    a DuckDB file, locked by another process, unwritable directory) is an `InputError`.
    `memory_limit` (`billing.duckdb_memory_limit`; None: `DEFAULT_MEMORY_LIMIT`) bounds DuckDB's
    memory; beyond it, it spills.
    """
    target = ":memory:" if path is None else str(path)
    try:
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = duckdb.connect(target)
    except (duckdb.Error, OSError) as e:
        raise InputError(
            target,
            f"cannot open the DuckDB database ({_first_line(e)}): pass a DuckDB file that no other "
            "process holds open, or a new path",
        ) from None
    try:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET memory_limit = ?", [memory_limit or DEFAULT_MEMORY_LIMIT])
        if path is None:  # an in-memory database would spill to ./.tmp: a private directory instead
            spill = tempfile.mkdtemp(prefix="gpucost-duckdb-")
            atexit.register(shutil.rmtree, spill, ignore_errors=True)
            conn.execute("SET temp_directory = ?", [spill])
        conn.execute(duckdb_create_table())
    except duckdb.Error as e:
        conn.close()
        raise InputError(target, f"cannot create table {TABLE_NAME} ({_first_line(e)})") from None
    return conn


def insert_arrow(conn: duckdb.DuckDBPyConnection, table: pa.Table, *, checked: bool = False) -> int:
    """Append rows shaped as `ARROW_SCHEMA`; returns the row count.

    With `checked`, DuckDB applies the loader's row rules (required fields present, no NULL list
    element, REPEATED NULL -> []) as it does for NDJSON and Parquet, raising `duckdb.Error` on a
    violation; without, the rows must have been validated already (`normalize_row`).
    """
    conn.register(_BATCH_VIEW, table)
    try:
        select = [_checked(f'"{c.name}"', c) if checked else f'"{c.name}"' for c in EXPORT_SCHEMA]
        return _insert(conn, ", ".join(select), f'"{_BATCH_VIEW}"', [])
    finally:
        conn.unregister(_BATCH_VIEW)


def insert_ndjson(conn: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Append an NDJSON[.gz] export file parsed natively by DuckDB (no Python per row).

    Columns are declared with their exact types, so DuckDB rejects a bad timestamp or number
    instead of guessing; unknown keys are ignored, missing ones are NULL. Any rejection raises
    `duckdb.Error` (the caller locates the bad line with a Python scan).
    """
    spec = "{" + ", ".join(f"'{c.name}': '{duckdb_type(c)}'" for c in EXPORT_SCHEMA) + "}"
    source = f"read_json($1, format = 'newline_delimited', columns = {spec})"
    select = [_checked(f'"{c.name}"', c) for c in EXPORT_SCHEMA]
    return _insert(conn, ", ".join(select), source, [str(path)])


def insert_parquet(conn: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Append a Parquet export file, casting each present column to the table type.

    Struct casts match fields by name, so files lacking newer sub-fields (`credits.type`) load with
    NULLs; missing optional columns load as NULL (empty list when REPEATED). A missing required
    column is an `InputError`; a value DuckDB cannot cast raises `duckdb.Error`.
    """
    probe = conn.execute("SELECT * FROM read_parquet($1) LIMIT 0", [str(path)])
    present = {d[0] for d in probe.description}
    missing = [name for name in REQUIRED_COLUMNS if name not in present]
    if missing:
        raise InputError(str(path), f'missing required column "{missing[0]}"{foreign_hint(present)}')
    select = []
    for c in EXPORT_SCHEMA:
        source = f'"{c.name}"' if c.name in present else "NULL"
        select.append(_checked(f"CAST({source} AS {duckdb_type(c)})", c))
    return _insert(conn, ", ".join(select), "read_parquet($1)", [str(path)])


def _checked(expr: str, col: Column) -> str:
    """`expr` with the loader's row rules: REPEATED NULL -> [], required NULL -> error().

    A NULL list element is rejected like the Python path does (BigQuery arrays cannot hold NULL).
    """
    if col.mode == "REPEATED":
        expr = (
            f"CASE WHEN list_position({expr}, NULL) IS NOT NULL THEN error('{col.name}: null element') "
            f"ELSE COALESCE({expr}, CAST([] AS {duckdb_type(col)})) END"
        )
    if col.name in REQUIRED_COLUMNS:
        expr = f"CASE WHEN {expr} IS NULL THEN error('{col.name}: required field is missing') ELSE {expr} END"
    return f'{expr} AS "{col.name}"'


def _insert(conn: duckdb.DuckDBPyConnection, select: str, source: str, params: list) -> int:
    names = [c.name for c in EXPORT_SCHEMA] + [PARTITION_COLUMN]
    columns = ", ".join(f'"{n}"' for n in names)
    sql = (
        f'INSERT INTO "{TABLE_NAME}" ({columns}) '
        f"SELECT *, date_trunc('day', \"export_time\") FROM (SELECT {select} FROM {source})"
    )
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
