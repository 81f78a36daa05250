"""The embedded DuckDB copy of the billing export: one file, one table, BigQuery's shape.

Everything that reads or writes the local copy opens it here, so the session settings that make
DuckDB agree with BigQuery (UTC day and hour boundaries) are applied in exactly one place, and the
table is always created from `monitor.schema` (never hand-written DDL).
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from monitor.config import DUCKDB_MEMORY_LIMIT
from monitor.errors import InputError, UserError, first_line
from monitor.schema import EXPORT_SCHEMA, TABLE_NAME, Column, arrow_schema, duckdb_create_table, duckdb_type
from monitor.sources.foreign import foreign_hint

__all__ = [
    "ARROW_SCHEMA",
    "DEFAULT_MEMORY_LIMIT",
    "PARTITION_COLUMN",
    "REQUIRED_COLUMNS",
    "DatabaseFileError",
    "DatabaseLockedError",
    "create_parquet_view",
    "first_line",
    "insert_arrow",
    "insert_ndjson",
    "insert_parquet",
    "open_billing_db",
    "parquet_columns",
    "parquet_counts",
    "parquet_row_rules",
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
DEFAULT_MEMORY_LIMIT = DUCKDB_MEMORY_LIMIT

#: A row's `_PARTITIONTIME`, loaded or viewed: its load day, `export_time` truncated to the UTC day,
#: and never before its usage day. BigQuery partitions the export by ingestion time, and Cloud
#: Billing exports usage "at regular intervals", "in chronological order" after services report it
#: ("Understand the Cloud Billing data tables in BigQuery",
#: https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables): a real row lands on
#: or after the day of its usage, and the queries read a usage window's rows from the
#: partitions of its first day - 1 on (`GPUCOST_LOAD_DAYS()`). A file whose `export_time` precedes
#: its usage (6 of 6 rows of koku's `2024-03-01_5.csv`, exported in 2022 for usage in 2024; 96 of
#: 292 of its `agpl/tmp_example.csv`, by up to 3.5 days) would put rows where no window's query
#: reads them: $6.00 of such a file was analysed as $0.00, 0 rows scanned.
#: Truncated once, after `greatest` (the day of the later is the later day): each `date_trunc` of
#: a TIMESTAMPTZ is a calendar computation, and two made the Parquet view's watermark query at bench
#: scale 48 take 0.90 s instead of 0.48.
_LOAD_DAY = "date_trunc('day', greatest(\"export_time\", \"usage_start_time\"))"

#: Name the Arrow batch is registered under for the length of one INSERT (then unregistered).
_BATCH_VIEW = "_gpucost_batch"


def open_billing_db(
    path: Path | str | None,
    *,
    memory_limit: str | None = None,
    table: bool = True,
    read_only: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Open (or create) the DuckDB file holding `billing_export`; None opens an in-memory database.

    The session time zone is UTC so that `TIMESTAMP_TRUNC(.., DAY)`, `DATE(..)` and the
    `_PARTITIONTIME` day match BigQuery, whose timestamps are UTC. A file that cannot be opened (not
    a DuckDB file, locked by another process, not writable, not readable) is an `InputError` saying
    which and the fix. An export file (Parquet, NDJSON, CSV) is refused by its header: DuckDB would
    open it as an empty in-memory database, into which a load vanishes and from which reports read $0.
    `memory_limit` (`billing.duckdb_memory_limit`; None: `DEFAULT_MEMORY_LIMIT`) bounds DuckDB's
    memory; beyond it, it spills. `table=False` leaves `billing_export` to the caller (a view:
    `create_parquet_view`). `read_only`, for readers of an existing file (one the user may read but
    not write, or one other readers hold open), checks that `billing_export` is there instead.
    """
    target = ":memory:" if path is None else str(path)
    if path is not None:
        _refuse_foreign(Path(path), read_only=read_only)
    if path is not None and not read_only:
        _check_writable(Path(path))
    try:
        if path is not None and not read_only:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = _connect(target, read_only=read_only and path is not None)
    except (duckdb.Error, OSError) as e:
        raise _cannot_open(target, e, read_only=read_only) from None
    try:
        conn.execute("SET TimeZone = 'UTC'")
        # DuckDB draws its progress bar on stdout, terminal or not, for any query past 2 s: into
        # `analyze --format json > file` and the daemon's output; gpucost reports its own progress
        conn.execute("SET enable_progress_bar = false")
        conn.execute("SET memory_limit = ?", [memory_limit or DEFAULT_MEMORY_LIMIT])
        if path is None or read_only:  # it would spill to ./.tmp, or beside a file it may not write
            spill = tempfile.mkdtemp(prefix="gpucost-duckdb-")
            atexit.register(shutil.rmtree, spill, ignore_errors=True)
            conn.execute("SET temp_directory = ?", [spill])
        if table:
            conn.execute(f'SELECT * FROM "{TABLE_NAME}" LIMIT 0' if read_only else duckdb_create_table())
    except duckdb.Error as e:
        conn.close()
        if read_only:
            raise InputError(
                target,
                f"no {TABLE_NAME} table ({first_line(e)}): not a billing database made by `gpucost load`;"
                " load export files with `gpucost load --billing FILE --db new.duckdb`",
            ) from None
        raise InputError(target, f"cannot create table {TABLE_NAME} ({first_line(e)})") from None
    return conn


class DatabaseFileError(InputError):
    """A database path gpucost cannot use (an export file, a file it may not write), as a sentence
    naming it: "out/export.parquet is a Parquet file, not a DuckDB database: ..." (an `InputError`
    whose message is not prefixed with the path). `export`: the file is an export file, to load."""

    def __init__(self, path: str, sentence: str, *, export: bool = False):
        UserError.__init__(self, sentence)
        self.path, self.line, self.field = path, None, None
        self.export = export


class DatabaseLockedError(InputError):
    """A database file another process holds open (a running daemon, a load): `gpucost check`
    reports it present, not broken."""


#: What a DuckDB database file starts with: an 8-byte checksum, then these bytes (DuckDB's storage
#: header, as `gpucost load` writes it: b"f\xcb\x06\x01`\x03\xe8\xd2DUCK" with DuckDB 2.0).
_DUCKDB_MAGIC = b"DUCK"


def _refuse_foreign(path: Path, *, read_only: bool) -> None:
    """A `DatabaseFileError` for an existing file without DuckDB's header, naming an export file
    as such; a missing path (a new database) and a directory (DuckDB's error names it) pass."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return
    except OSError as e:
        raise _cannot_open(str(path), e, read_only=True) from None
    if head[8:12] == _DUCKDB_MAGIC:
        return
    kind = _export_kind(path, head)
    if kind:
        raise DatabaseFileError(
            str(path),
            f"{path} is {kind} file, not a DuckDB database: load it with"
            f" `gpucost load --billing {path} --db new.duckdb`",
            export=True,
        )
    what = "is empty" if not head else "is not a DuckDB database"
    fix = "pass one made by `gpucost load`" + ("" if read_only else ", or a new path")
    raise InputError(str(path), f"cannot open the DuckDB database: the file {what}; {fix}")


def _export_kind(path: Path, head: bytes) -> str:
    """The export format `head` (a file's first bytes) looks like, with its article ("a Parquet",
    "an NDJSON", "a CSV", gzipped or not), else ""."""
    suffixes = [s.lower() for s in path.suffixes]
    if head.startswith(b"PAR1"):
        return "a Parquet"
    if head.startswith(b"\x1f\x8b"):  # gzip: only the name tells what it holds, as `load` reads it
        from monitor.sources.loader import FileFormat, detect_format  # it imports this module

        try:
            fmt = detect_format(path)
        except InputError:
            return ""
        return {FileFormat.NDJSON: "a gzipped NDJSON", FileFormat.CSV: "a gzipped CSV"}.get(fmt, "")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith((b"{", b"[")):
        return "an NDJSON"
    first = text.split(b"\n", 1)[0]
    if (suffixes[-1:] == [".csv"] or first.count(b",") >= 2) and first.isascii():
        return "a CSV"
    return ""


def _check_writable(path: Path) -> None:
    """A `DatabaseFileError` for an existing database whose directory the user may not write: DuckDB
    opens it, then fails at the first commit, creating its write-ahead log `<name>.wal` beside it."""
    effective = os.access in os.supports_effective_ids  # the ids DuckDB's open is checked with
    parent = path.absolute().parent
    if (
        path.is_file()
        and os.access(path, os.W_OK, effective_ids=effective)
        and not os.access(parent, os.W_OK, effective_ids=effective)
    ):
        raise DatabaseFileError(
            str(path),
            f"cannot write {path} (permission denied in {parent}, where DuckDB writes"
            f" {path.name}.wal): run as a user who may write that directory, or load into a new path",
        )


def _connect(target: str, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(target, read_only=read_only)
    except duckdb.ConnectionException as e:
        if read_only and "different configuration" in str(e):
            return duckdb.connect(target)  # this process has it open for writing already
        raise


def _cannot_open(target: str, e: BaseException, *, read_only: bool) -> InputError:
    """Why `target` could not be opened, and the fix, as one line."""
    why = first_line(e)
    path = Path(target)
    denied = "permission denied" in why.lower() or getattr(e, "errno", None) in (errno.EACCES, errno.EPERM)
    if denied and read_only:
        return DatabaseFileError(
            target,
            f"cannot read {target} (permission denied): run as a user who may read it, or have its"
            " owner make it readable",
        )
    if denied and path.exists():
        return DatabaseFileError(
            target, f"cannot write {target} (permission denied): run as its owner or load into a new path"
        )
    if denied:
        where = next((d for d in path.absolute().parents if d.exists()), path.parent)
        return DatabaseFileError(
            target,
            f"cannot create {target} (permission denied in {where}): load into a path in a"
            " directory you may write",
        )
    if "read-only file system" in why.lower() or getattr(e, "errno", None) == errno.EROFS:
        return InputError(
            target, f"cannot write the DuckDB database ({why}): load into a path on a writable volume"
        )
    # DuckDB's own words for a file another process holds (not the path: "/srv/blocks/" is no lock)
    locked = "could not set lock" in why.lower() or "conflicting lock" in why.lower()
    return (DatabaseLockedError if locked else InputError)(
        target,
        f"cannot open the DuckDB database ({why}): pass a DuckDB file that no other process holds open"
        + ("" if read_only else ", or a new path"),
    )


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
    return _insert(conn, ", ".join(_parquet_columns(conn, path)), "read_parquet($1)", [str(path)])


def parquet_columns(conn: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> list[set[str]]:
    """The columns each Parquet file has (its metadata, read once per file for the steps below);
    a file without a required column is an `InputError` naming it."""
    out = []
    for path in paths:
        present = _present(conn, path)
        missing = [name for name in REQUIRED_COLUMNS if name not in present]
        if missing:
            raise InputError(str(path), f'missing required column "{missing[0]}"{foreign_hint(present)}')
        out.append(present)
    return out


def parquet_row_rules(
    conn: duckdb.DuckDBPyConnection, paths: Sequence[Path], present: Sequence[set[str]], *, refused: str
) -> bool:
    """Apply the loader's row rules (`_checked`) of every checked column to every row of the files
    (`present`: `parquet_columns`), in one scan: raises `duckdb.Error` on the first violation, as
    loading the files would. The view (`create_parquet_view`) then reads them without the rules.

    Returns whether a row meets `refused` (a predicate over the export's columns) in the same scan:
    the loader's own refusals, which are not errors to DuckDB."""
    checked = [c.name for c in EXPORT_SCHEMA if c.mode == "REPEATED" or c.name in REQUIRED_COLUMNS]
    rows = _parquet_union(paths, present, rules=True)
    counts = ", ".join(f"count({_quote(n)})" for n in checked)
    row = conn.execute(f"SELECT coalesce(bool_or({refused}), FALSE), {counts} FROM ({rows})").fetchone()
    return bool(row and row[0])


def create_parquet_view(
    conn: duckdb.DuckDBPyConnection, paths: Sequence[Path], present: Sequence[set[str]]
) -> None:
    """`billing_export` as a view over Parquet export files that passed `parquet_row_rules`, read in
    place by every query: columns cast as `insert_parquet` casts them and a NULL list read as [],
    without the rules' checks on every read (checked in the view, they were 1.6 s of the hourly
    query's 15 s at bench scale 48, 7.4 M rows). The connection must not hold the table
    (`open_billing_db(..., table=False)`)."""
    names = ", ".join(_quote(c.name) for c in EXPORT_SCHEMA)
    conn.execute(
        f'CREATE OR REPLACE VIEW "{TABLE_NAME}" AS SELECT {names}, {_LOAD_DAY} AS "{PARTITION_COLUMN}"'
        f" FROM ({_parquet_union(paths, present, rules=False)})"
    )


def parquet_counts(conn: duckdb.DuckDBPyConnection, path: Path, present: set[str]) -> tuple[int, int]:
    """(rows, rows with a resource) of a Parquet export file (`present`: its columns): its metadata
    and one column."""
    counted = "count(resource)" if "resource" in present else "0"
    ((rows, resources),) = conn.execute(
        f"SELECT count(*), {counted} FROM read_parquet($1)", [str(path)]
    ).fetchall()
    return int(rows), int(resources)


def _present(conn: duckdb.DuckDBPyConnection, path: Path) -> set[str]:
    probe = conn.execute("SELECT * FROM read_parquet($1) LIMIT 0", [str(path)])
    return {d[0] for d in probe.description}


def _parquet_union(paths: Sequence[Path], present: Sequence[set[str]], *, rules: bool) -> str:
    return " UNION ALL ".join(
        f"SELECT {', '.join(_parquet_select(has, rules))} FROM read_parquet({_literal(p)})"
        for p, has in zip(paths, present, strict=True)
    )


def _parquet_columns(conn: duckdb.DuckDBPyConnection, path: Path) -> list[str]:
    """The checked, cast select list of a Parquet file's export columns (NULL where absent)."""
    return _parquet_select(parquet_columns(conn, [path])[0], rules=True)


def _parquet_select(present: set[str], rules: bool) -> list[str]:
    """The cast select list of a file's export columns (`present`; NULL where absent), under the row
    rules (`_checked`) or, for files that passed them, without them."""
    return [
        _checked(
            f"CAST({_quote(c.name) if c.name in present else 'NULL'} AS {duckdb_type(c)})", c, rules=rules
        )
        for c in EXPORT_SCHEMA
    ]


def _quote(name: str) -> str:
    return f'"{name}"'


def _literal(path: Path) -> str:
    """A path as an SQL string literal (a view cannot take parameters)."""
    return "'" + str(path).replace("'", "''") + "'"


def _checked(expr: str, col: Column, rules: bool = True) -> str:
    """`expr` with the loader's row rules: REPEATED NULL -> [], required NULL -> error(); with
    `rules=False` (rows that passed them already) only the first, which is a value, not a check.

    A NULL list element is rejected like the Python path does (BigQuery arrays cannot hold NULL):
    a list with fewer non-NULL elements than elements (`list_position(x, NULL)` found the same and
    took twice as long: 1.7 s against 1.0 s for the labels of 7.4 M rows on one core).
    """
    value = f"COALESCE({expr}, CAST([] AS {duckdb_type(col)}))" if col.mode == "REPEATED" else expr
    if rules and col.mode == "REPEATED":
        value = f"CASE WHEN len({expr}) <> list_count({expr}) THEN error('{col.name}: null element') ELSE {value} END"
    if rules and col.name in REQUIRED_COLUMNS:
        value = (
            f"CASE WHEN {value} IS NULL THEN error('{col.name}: required field is missing') ELSE {value} END"
        )
    return f'{value} AS "{col.name}"'


def _insert(conn: duckdb.DuckDBPyConnection, select: str, source: str, params: list) -> int:
    names = [c.name for c in EXPORT_SCHEMA] + [PARTITION_COLUMN]
    columns = ", ".join(f'"{n}"' for n in names)
    sql = f'INSERT INTO "{TABLE_NAME}" ({columns}) SELECT *, {_LOAD_DAY} FROM (SELECT {select} FROM {source})'
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else 0
