"""Load billing export files (NDJSON[.gz], Parquet, CSV) or Python rows into the embedded table.

Two paths, one set of rules:

- NDJSON and Parquet are parsed natively by DuckDB with every column declared (fast: no Python per
  row). When DuckDB rejects a file, the file is re-read in Python only to *locate* the bad line and
  name the field, so the user gets `billing.ndjson:17: cost: expected a number, got "abc"` rather
  than a DuckDB message.
- CSV (nested fields flattened to dotted columns, REPEATED fields as JSON or Python-repr lists) and
  Python dicts go through `normalize_row` and are appended in Arrow batches.

A call loads everything or nothing: one transaction for all files, rolled back on the first bad row.
Rows are appended as they are, never de-duplicated: corrections are separate export rows by design.
A file is loaded once: its bytes' SHA-256 is recorded with the rows (`LOADS_TABLE`), and the same
contents again, in the same call or a later one, are refused (their costs would count twice).

What a row must be, beyond its types (each rule names the field and the fix when broken):

- Timestamps carry a zone. `bq extract` writes `2026-11-01 10:00:00 UTC`; a naive time means
  another tool wrote the file, and taking it as UTC could shift every hour by the writer's offset.
- Not checked: `usage_end_time` before `usage_start_time` (9 rows of koku's real
  `agpl/tmp_example.csv` have it, as does a start after `export_time`): the rows load as they are,
  a row exported before its usage as loaded on its usage day (`duckdb_conn._LOAD_DAY`).
- Amounts are finite and at most `MAX_ABS_AMOUNT` in the row's currency and in USD: the queries
  turn each into integer micros (INT64, at most 9.2e18, so 9.2e12 units); 1e12 keeps a 9x margin
  and is far beyond any real row (one SKU, one project, one hour).
- A negative `cost`, `usage.amount` or `usage.amount_in_pricing_units` only on a correction: the
  export writes money going back as rows with `cost_type` "adjustment" (with `adjustment_info`),
  "tax" or "rounding_error", and discounts as negative `credits[].amount` on top of a non-negative
  `cost` ("before credits"), so a credit never explains a negative cost.
- `currency` is an ISO 4217 code; `currency_conversion_rate`, when present, is positive, and a
  non-USD row has one (amounts / rate = USD).

A file without any `resource` is the standard (not detailed) export: it loads, with a warning and
`LoadReport.standard`, because every dollar is still attributed by project, SKU and label; only the
per-VM split (idle-GPU dollars) needs the detailed export.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from itertools import islice
from math import isfinite
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from monitor.errors import InputError
from monitor.schema import EXPORT_SCHEMA, Column
from monitor.sources import duckdb_conn as db
from monitor.sources.export_csv import iter_csv_records
from monitor.sources.foreign import foreign_hint
from monitor.timeutil import parse_timestamp, to_iso

if TYPE_CHECKING:
    from monitor.progress import Progress

__all__ = [
    "BATCH_ROWS",
    "MAX_ABS_AMOUNT",
    "FieldError",
    "FileFormat",
    "LoadReport",
    "detect_format",
    "load_billing",
    "load_rows",
    "normalize_row",
    "view_billing",
]

log = logging.getLogger(__name__)

#: Rows per Arrow batch on the Python path: large enough to amortise the insert, small enough to
#: keep memory flat on multi-million-row files.
BATCH_ROWS = 50_000


@dataclass(frozen=True)
class LoadReport:
    """What one `load_billing` call appended: file count, total rows, rows per file path, and the
    files that are the standard export (no `resource` in any row: loaded with reduced detail)."""

    files: int
    rows: int
    per_file: dict[str, int] = field(default_factory=dict)
    standard: tuple[str, ...] = ()


class FileFormat(Enum):
    NDJSON = "ndjson"
    PARQUET = "parquet"
    CSV = "csv"


_SUFFIXES = {
    ".ndjson": FileFormat.NDJSON,
    ".jsonl": FileFormat.NDJSON,
    ".json": FileFormat.NDJSON,
    ".parquet": FileFormat.PARQUET,
    ".pq": FileFormat.PARQUET,
    ".csv": FileFormat.CSV,
}


def detect_format(path: Path) -> FileFormat:
    """Format from the file name (`.ndjson`/`.jsonl`/`.json`[.gz], `.parquet`, `.csv`[.gz])."""
    suffixes = [s.lower() for s in path.suffixes]
    gz = bool(suffixes) and suffixes[-1] == ".gz"
    ext = suffixes[-2] if gz and len(suffixes) > 1 else (suffixes[-1] if suffixes else "")
    fmt = _SUFFIXES.get(ext)
    if fmt is None or (gz and fmt is FileFormat.PARQUET):
        raise InputError(
            str(path),
            "unknown file type: name export files *.ndjson / *.jsonl / *.json (optionally .gz), "
            "*.parquet or *.csv (optionally .gz)",
        )
    return fmt


# --- row normalisation (CSV, Python rows, and locating DuckDB rejections) ------------------------


class FieldError(ValueError):
    """A value that does not fit the export schema; `field` is its dotted path (`credits[0].amount`)."""

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.message, self.field = message, field

    def within(self, name: str) -> FieldError:
        if not self.field:
            self.field = name
        elif not self.field.startswith("["):
            self.field = f"{name}.{self.field}"
        else:
            self.field = name + self.field
        return self


#: ISO 4217 alphabetic codes are three capital letters (the export's `currency`, e.g. "USD", "EUR").
_CURRENCY = re.compile(r"[A-Z]{3}")

Converter = Callable[[Any], Any]


def _show(v: Any) -> str:
    text = "null" if v is None else json.dumps(v) if isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _to_str(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return str(v)
    raise FieldError(f"expected a string, got {_show(v)}")


def _to_float(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, str | int | float | Decimal) and not isinstance(v, bool):
        try:
            f = float(v)
        except ValueError:
            f = None
        if f is not None and isfinite(f):
            return f
    raise FieldError(f"expected a number, got {_show(v)}")


def _to_bool(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise FieldError(f"expected true or false, got {_show(v)}")


def _to_timestamp(v: Any) -> datetime | None:
    """Aware datetimes and zoned strings, converted to UTC; a naive one is refused (see the module)."""
    if v is None:
        return None
    if isinstance(v, datetime):
        if v.tzinfo is None:
            raise FieldError(
                f"no time zone in {v.isoformat(sep=' ')}: give an aware datetime (tzinfo=UTC if the time is UTC)"
            )
        return v.astimezone(UTC)
    if isinstance(v, str):
        try:
            return _parse_cached(v)
        except ValueError as e:
            raise FieldError(str(e)) from None
    raise FieldError(f'expected a timestamp such as "2026-11-01 10:00:00 UTC", got {_show(v)}')


#: Exports repeat the same few timestamps (hour windows, one export_time per load) on many rows.
_parse_cached = functools.lru_cache(maxsize=8192)(functools.partial(parse_timestamp, require_zone=True))

_SCALARS: dict[str, Converter] = {
    "STRING": _to_str,
    "FLOAT": _to_float,
    "BOOLEAN": _to_bool,
    "TIMESTAMP": _to_timestamp,
}


def _record(fields: tuple[Column, ...]) -> Converter:
    # Hot loop (millions of calls): STRING fields already holding str/None skip the call.
    convs = [(f.name, _converter(f), f.type == "STRING" and f.mode != "REPEATED") for f in fields]
    names = ", ".join(f.name for f in fields)

    def conv(v: Any) -> dict[str, Any] | None:
        if v is None:
            return None
        if not isinstance(v, dict) and not isinstance(v, Mapping):
            raise FieldError(f"expected an object with fields {names}, got {_show(v)}")
        out = {}
        get = v.get
        for name, c, plain in convs:
            x = get(name)
            if plain and (x is None or x.__class__ is str):
                out[name] = x
                continue
            try:
                out[name] = c(x)
            except FieldError as e:
                raise e.within(name) from None
        return out

    return conv


def _repeated(element: Converter) -> Converter:
    def conv(v: Any) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, list | tuple):
            raise FieldError(f'expected a list such as [{{"key": "team", "value": "ml"}}], got {_show(v)}')
        out = []
        for i, x in enumerate(v):
            if x is None:
                raise FieldError("list element is null: drop it or give an object", f"[{i}]")
            try:
                out.append(element(x))
            except FieldError as e:
                raise e.within(f"[{i}]") from None
        return out

    return conv


def _converter(col: Column) -> Converter:
    base = _record(col.fields) if col.type == "RECORD" else _SCALARS[col.type]
    return _repeated(base) if col.mode == "REPEATED" else base


_ROW = _record(EXPORT_SCHEMA)


def normalize_row(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One export row in the canonical Python shape (`ARROW_SCHEMA`), or `FieldError`.

    Accepts the bq-extract JSON shape (timestamps and numbers as strings) and Python values (aware
    datetimes, floats, Decimals). Unknown keys are ignored; missing optional fields become NULL (an
    empty list for REPEATED ones); a missing required field is an error.
    """
    if not isinstance(raw, Mapping):
        raise FieldError(f"expected one export row object, got {_show(raw)}")
    row = _ROW(raw)
    currency, rate = row["currency"], row["currency_conversion_rate"]
    if currency is not None and not _CURRENCY.fullmatch(currency):
        raise FieldError(f'expected an ISO 4217 code such as "USD" or "EUR", got {_show(currency)}', "currency")
    if currency not in (None, "USD") and (rate is None or rate <= 0):
        raise FieldError(
            f"missing or not positive ({_show(rate)}) for a {currency} row: the export's amounts are in"
            " the billing account's currency and gpucost divides them by this rate to get USD",
            "currency_conversion_rate",
        )
    for name in db.REQUIRED_COLUMNS:
        if row[name] is None:
            raise FieldError(
                "required, but missing or null: every export row must have it" + foreign_hint(raw.keys()), name
            )
    _check_rules(row)
    return row


#: Absolute bound of any amount, in the row's currency and in USD (see the module docstring).
MAX_ABS_AMOUNT = 1e12

#: `cost_type` values whose rows may carry negative amounts (refunds, corrections, rounding).
_CORRECTION_TYPES = ("adjustment", "tax", "rounding_error")

_NEGATIVE_FIX = (
    "the export writes negative amounts only on corrections (cost_type \"adjustment\" with adjustment_info,"
    " \"tax\" or \"rounding_error\") and discounts as negative credits[].amount: fix the row, or mark it as the"
    " correction it is"
)


def _is_correction(row: Mapping[str, Any]) -> bool:
    info = row["adjustment_info"]
    return (row["cost_type"] or "").lower() in _CORRECTION_TYPES or bool(info and any(info.values()))


def _check_rules(row: dict[str, Any]) -> None:
    """The rules beyond types (module docstring), in the order `_REFUSED` checks them."""
    rate = row["currency_conversion_rate"]
    if rate is not None and rate <= 0:
        raise FieldError(
            f"must be positive, got {_show(rate)}: it is the number of {row['currency']} per USD"
            " (1.0 on USD rows); fix the value or drop the field on USD rows",
            "currency_conversion_rate",
        )
    to_usd = rate or 1.0
    amounts = [("cost", row["cost"]), ("cost_at_list", row["cost_at_list"])]
    amounts += [(f"credits[{i}].amount", c["amount"]) for i, c in enumerate(row["credits"])]
    for name, x in amounts:
        if x is not None and (abs(x) > MAX_ABS_AMOUNT or abs(x / to_usd) > MAX_ABS_AMOUNT):
            raise FieldError(
                f"{_show(x)} is beyond any real export row (more than 1e12): check the column's scale"
                " (micros? cents?) and its decimal separator",
                name,
            )
    if _is_correction(row):
        return
    usage = row["usage"] or {}
    for name, x in (
        ("cost", row["cost"]),
        ("usage.amount", usage.get("amount")),
        ("usage.amount_in_pricing_units", usage.get("amount_in_pricing_units")),
    ):
        if x is not None and x < 0:
            raise FieldError(f"negative ({_show(x)}) on a row that is not a correction: {_NEGATIVE_FIX}", name)


# --- loading ------------------------------------------------------------------------------------


def load_billing(
    paths: Sequence[Path],
    conn: duckdb.DuckDBPyConnection,
    *,
    progress: Progress | None = None,
    again: bool = False,
) -> LoadReport:
    """Append every file to `billing_export` in one transaction; `InputError` leaves it untouched.

    The format follows the file name (see `detect_format`). The export never repeats a row, so
    rows are appended as they are, and a file is loaded once: the same contents twice in one call,
    or contents this database already holds (`LOADS_TABLE`, written in the same transaction), are
    an `InputError`, since their costs would count twice; `again` loads the latter anyway.
    `progress` hears the name of the file being loaded and the count of files done.
    """
    per_file: dict[str, int] = {}
    standard: list[str] = []
    digests = _distinct_contents([Path(p) for p in paths])
    signatures: dict[str, Path] = {}
    ledger: list[tuple[Path, int, str]] = []
    with _transaction(conn):
        conn.execute(_LOADS_DDL)
        conn.execute(f"ALTER TABLE {LOADS_TABLE} ADD COLUMN IF NOT EXISTS rows_signature VARCHAR")
        if not again:
            _refuse_loaded(conn, digests)
        for i, p in enumerate(paths):
            path = Path(p)
            if progress is not None:
                progress.describe(path.name)
                progress.update(i, total=len(paths), unit="files")
            before = _resources(conn)
            first_row = conn.execute("SELECT coalesce(max(rowid) + 1, 0) FROM billing_export").fetchall()[0][0]
            loaded = _load_file(conn, path)
            per_file[str(path)] = per_file.get(str(path), 0) + loaded
            if _resources(conn) == before and str(path) not in standard:
                standard.append(str(path))
            ledger.append((path, loaded, _signature(conn, "billing_export WHERE rowid >= ?", [first_row])))
        native = [Path(p) for p in paths if detect_format(Path(p)) is not FileFormat.CSV]
        _check_text(conn, native)
        _check_native(conn, native)
        for path, loaded, signature in ledger:  # after the rows' own checks: a bad row is told first
            _refuse_same_rows(conn, path, signature, signatures, again=again)
            conn.execute(
                f"INSERT INTO {LOADS_TABLE} VALUES (?, ?, ?, current_timestamp, ?)",
                [digests[path], str(path), loaded, signature],
            )
    return _report(len(paths), per_file, standard, progress)


def view_billing(
    paths: Sequence[Path], conn: duckdb.DuckDBPyConnection, *, progress: Progress | None = None
) -> LoadReport:
    """Parquet export files as the `billing_export` view (`create_parquet_view`), read in place by
    every query instead of copied: copying the bench's scale-5 export (521k rows) took 2.4 s into
    memory and 3.8 s into a file, longer than all of `analyze`'s queries over it, and held 615 MB.

    The files are checked as `load_billing` checks them, each rule once over every row (required
    fields, list elements, time zones, refused amounts), with the same errors; `conn` must not hold
    the table (`open_billing_db(..., table=False)`).
    """
    files = [Path(p) for p in paths]
    for path in files:
        if detect_format(path) is not FileFormat.PARQUET:
            raise ValueError(f"view_billing reads Parquet files only: {path}")
        if not path.is_file():
            raise InputError(str(path), "no such file")
    if len(files) > 1:  # one file cannot repeat itself: it is not read for its digest
        _distinct_contents(files)
    if progress is not None:
        progress.describe(", ".join(p.name for p in files))
    per_file: dict[str, int] = {}
    standard: list[str] = []
    try:
        present = db.parquet_columns(conn, files)
        for path, has in zip(files, present, strict=True):
            rows, resources = db.parquet_counts(conn, path, has)
            per_file[str(path)] = per_file.get(str(path), 0) + _nonempty(rows, path)
            if resources == 0 and str(path) not in standard:
                standard.append(str(path))
        refused = db.parquet_row_rules(conn, files, present, refused=_REFUSED_ROW)
        signatures = [_signature(conn, "read_parquet(?)", [str(p)]) for p in files] if len(files) > 1 else []
        db.create_parquet_view(conn, files, present)  # every row passed: the view does not check again
    except (duckdb.Error, UnicodeDecodeError) as e:
        for path in files:
            _locate(path)
        first = db.first_line(e)
        raise InputError(", ".join(map(str, files)), f"DuckDB could not read the file ({first})") from None
    _check_text(conn, files)
    if refused:  # after the text checks, as `load_billing` runs them
        _refuse(files)
    seen: dict[str, Path] = {}
    for path, signature in zip(files, signatures, strict=False):  # after the rows' own checks
        _refuse_same_rows(conn, path, signature, seen, again=True)
    return _report(len(files), per_file, standard, progress)


def _report(files: int, per_file: dict[str, int], standard: list[str], progress: Progress | None) -> LoadReport:
    """The load's report, once its files are in: a warning per standard-export file, progress done."""
    for name in standard:
        log.warning(
            "%s: no row has resource.name / resource.global_name: this is the standard usage cost export,"
            " loaded with reduced detail (costs by project, SKU and label; no per-VM or idle-GPU dollars):"
            " for those, export the detailed table gcp_billing_export_resource_v1_<ACCOUNT>",
            name,
            extra={"file": name},
        )
    if progress is not None:
        progress.describe("")
        progress.update(files, total=files, unit="files")
    return LoadReport(files=files, rows=sum(per_file.values()), per_file=per_file, standard=tuple(standard))


def _resources(conn: duckdb.DuckDBPyConnection) -> int:
    """Rows with a resource so far: a file adding none is the standard export (or has no VM rows)."""
    return conn.execute("SELECT count(resource) FROM billing_export").fetchall()[0][0]


def load_rows(
    conn: duckdb.DuckDBPyConnection,
    rows: Iterable[Mapping[str, Any]],
    source: str = "<rows>",
    *,
    batch_rows: int = BATCH_ROWS,
    typed: bool = False,
) -> int:
    """Append Python rows in export shape in one transaction; returns the count.

    Rows may carry aware datetimes and floats/Decimals, or the bq-extract JSON shape (strings).
    Errors name `source` and the 1-based position of the bad row.

    `typed=True` is the fast path for producers whose rows already hold the schema's Python types
    (aware datetimes, floats, str, nested dicts and lists, e.g. the fleet simulator): each batch
    goes straight to Arrow and DuckDB checks the row rules, about five times faster. A batch Arrow
    cannot convert takes the per-row path, so strings still load and errors read the same; what
    Arrow accepts is trusted as is (a bool or NaN in a FLOAT field is not rejected there).
    """
    with _transaction(conn):
        if typed:
            return _insert_typed(conn, enumerate(rows, 1), source, batch_rows)
        return _insert_records(conn, enumerate(rows, 1), source, batch_rows)


#: The files a database holds, by the SHA-256 of their bytes (`load_billing`): one row per load.
LOADS_TABLE = "gpucost_loaded_files"
_LOADS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {LOADS_TABLE} (sha256 VARCHAR NOT NULL, name VARCHAR NOT NULL,"
    " rows BIGINT NOT NULL, loaded_at TIMESTAMPTZ NOT NULL)"
)


def _distinct_contents(paths: Sequence[Path]) -> dict[Path, str]:
    """Each file's SHA-256; a file with the same bytes as one before it is an `InputError` (its
    rows would count twice). A missing file is the loader's to report: it has no digest."""
    digests: dict[Path, str] = {}
    first: dict[str, Path] = {}
    for path in paths:
        if not path.is_file():
            continue
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest in first:
            same = "given twice" if first[digest] == path else f"the same bytes as {first[digest]}"
            raise InputError(str(path), f"{same}: its costs would count twice; give each export file once")
        first[digest], digests[path] = path, digest
    return digests


def _signature(conn: duckdb.DuckDBPyConnection, rows_from: str, params: list[Any]) -> str:
    """What tells a file's rows apart from another's whatever its format: their count, cost in
    micro-dollars summed exactly (in any order), first and last usage hour and latest export time.
    The same rows as NDJSON and gzipped NDJSON, or as Parquet, differ in bytes, so only this catches
    them (`simulate` writes both side by side; both passed to --billing counted every dollar twice).
    """
    # TRY_CAST: a NaN or infinite cost is refused later, naming its line (`_check_native`)
    (row,) = conn.execute(
        "SELECT count(*), sum(TRY_CAST(round(cost * 1000000) AS HUGEINT)), min(usage_start_time),"
        f" max(usage_start_time), max(export_time) FROM {rows_from}",
        params,
    ).fetchall()
    return "|".join("" if v is None else str(v) for v in row)


def _refuse_same_rows(
    conn: duckdb.DuckDBPyConnection, path: Path, signature: str, seen: dict[str, Path], *, again: bool
) -> None:
    """An `InputError` when `path`'s rows are those of a file before it in this call (`seen`), or,
    unless `again`, of a file this database already holds (`LOADS_TABLE`); else note them."""
    if signature in seen:
        raise InputError(
            str(path),
            f"the same rows as {seen[signature]} ({_described(signature)}): its costs would count"
            " twice; give one of them",
        )
    seen[signature] = path
    if again:
        return
    found = conn.execute(
        f"SELECT name, loaded_at FROM {LOADS_TABLE} WHERE rows_signature = ? ORDER BY loaded_at DESC LIMIT 1",
        [signature],
    ).fetchall()
    if found:
        row = found[0]
        raise InputError(
            str(path),
            f"the same rows as {row[0]}, loaded at {to_iso(row[1])} ({_described(signature)}): loading"
            " them again would count their costs twice; `gpucost load --again` loads them anyway",
        )


def _described(signature: str) -> str:
    """Not the cost: summed over the export's currencies, it was no figure of any (a helper's run)."""
    rows, _, first, last, _ = signature.split("|")
    return f"{int(rows):,} rows, usage {first} to {last}"


def _refuse_loaded(conn: duckdb.DuckDBPyConnection, digests: Mapping[Path, str]) -> None:
    """An `InputError` for the first file whose bytes this database already holds."""
    for path, digest in digests.items():
        row = conn.execute(
            f"SELECT name, rows, loaded_at FROM {LOADS_TABLE} WHERE sha256 = ? ORDER BY loaded_at DESC LIMIT 1",
            [digest],
        ).fetchone()
        if row is not None:
            name, rows, at = row
            raise InputError(
                str(path),
                f"already loaded ({rows} rows, as {name}, at {to_iso(at)}): loading it again would count"
                " its costs twice; a new export file holds new rows, and `gpucost load --again` loads"
                " this one anyway",
            )


@contextmanager
def _transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (a DuckDB error has already aborted it).

    The caller's connection must not be inside a transaction of its own (DuckDB has no nesting).
    """
    conn.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except duckdb.Error as e:  # writing the database failed (its directory, the disk): nothing loaded
        raise InputError(
            _database(conn),
            f"cannot write the loaded rows ({db.first_line(e)}); nothing was loaded: load into a new path",
        ) from None


def _database(conn: duckdb.DuckDBPyConnection) -> str:
    """The file of the connection's database (its name when in memory)."""
    row = conn.execute(
        "SELECT coalesce(path, database_name) FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return str(row[0]) if row else "the database"


def _load_file(conn: duckdb.DuckDBPyConnection, path: Path) -> int:
    fmt = detect_format(path)
    if not path.is_file():
        raise InputError(str(path), "no such file")
    if fmt is FileFormat.CSV:
        return _nonempty(_insert_records(conn, iter_csv_records(path), str(path)), path)
    native = db.insert_ndjson if fmt is FileFormat.NDJSON else db.insert_parquet
    try:
        rows = native(conn, path)
    except (duckdb.Error, UnicodeDecodeError) as e:
        # The transaction is now aborted; find the bad row in Python for a precise message. (A
        # DuckDB message quoting a value that is not valid UTF-8 fails to decode on its way here.)
        _locate(path)
        first = db.first_line(e)
        raise InputError(str(path), f"DuckDB could not load the file ({first})") from None
    return _nonempty(rows, path)


def _locate(path: Path) -> None:
    """Re-read a natively loaded file row by row: `normalize_row` names the first bad line."""
    scan = _scan_ndjson if detect_format(path) is FileFormat.NDJSON else _scan_parquet
    for line, raw in scan(path):
        _normalize_at(raw, str(path), line)


def _check_native(conn: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> None:
    """One scan, after all files loaded, for what DuckDB accepts and `normalize_row` refuses (NaN
    or absurd amounts, bad currencies, unexplained negatives); the files DuckDB read natively are
    then re-read to name the line."""
    if paths and conn.execute(_REFUSED).fetchone() is not None:
        _refuse(paths)


def _refuse(paths: Sequence[Path]) -> NoReturn:
    """Name the line of the first row the loader refuses in `paths`, which hold one."""
    for path in paths:
        _locate(path)
    raise InputError(
        ", ".join(map(str, paths)), "a row the loader refuses (a NaN amount, a bad currency or conversion rate)"
    )


_CORRECTION_SQL = (
    "(lower(cost_type) IN ('adjustment', 'tax', 'rounding_error') OR coalesce(adjustment_info.id,"
    " adjustment_info.description, adjustment_info.mode, adjustment_info.type) IS NOT NULL)"
)


def _too_big(x: str) -> str:
    return f"(abs({x}) > {MAX_ABS_AMOUNT} OR abs({x} / coalesce(currency_conversion_rate, 1)) > {MAX_ABS_AMOUNT})"


#: A row DuckDB loaded that `normalize_row` would refuse (`_check_rules` and the types): an amount
#: that is not a finite number or beyond `MAX_ABS_AMOUNT`, a currency that is not an ISO 4217 code,
#: a rate that is not positive (or missing on a non-USD row), a negative
#: cost or usage on a row that is not a correction. A NULL comparison is not a refusal.
#: `view_billing` asks it in the row rules' scan, one scan of a Parquet export fewer (opening bench
#: scale 48's 7.4 M rows: 3.24 to 3.43 s before, 2.86 to 2.93 s; medians of 3, alternated twice).
_REFUSED_ROW = (
    "NOT isfinite(cost) OR NOT isfinite(currency_conversion_rate)"
    " OR NOT isfinite(usage.amount) OR NOT isfinite(usage.amount_in_pricing_units)"
    " OR NOT isfinite(cost_at_list)"
    " OR list_bool_or(list_transform(credits, lambda c: NOT isfinite(c.amount)))"
    " OR NOT regexp_full_match(currency, '[A-Z]{3}')"
    " OR (currency <> 'USD' AND currency_conversion_rate IS NULL) OR currency_conversion_rate <= 0"
    f" OR {_too_big('cost')} OR {_too_big('cost_at_list')}"
    f" OR list_bool_or(list_transform(credits, lambda c: {_too_big('c.amount')}))"
    f" OR (NOT {_CORRECTION_SQL} AND (cost < 0 OR usage.amount < 0 OR usage.amount_in_pricing_units < 0))"
)
_REFUSED = f"SELECT 1 FROM billing_export WHERE {_REFUSED_ROW} LIMIT 1"

#: The export's timestamp columns, and what ends one that carries a zone (after a time of day):
#: `UTC`, `Z` or an offset. A bare date or a naive time does not match.
_TIMESTAMPS = ("usage_start_time", "usage_end_time", "export_time")
_ZONED = r"(?i)\d{2}:\d{2}(:\d{2}(\.\d*)?)?\s*(utc|z|[+-]\d{2}(:?\d{2})?)\s*$"


#: An NDJSON amount written as true / false: DuckDB reads it into a number as 1 / 0 (`cost: true` was
#: a silent $1), where `normalize_row` refuses it. Read as text (a JSON string "true" too, which
#: `normalize_row` refuses as well), and nested ones by their JSON type.
_NDJSON_AMOUNTS = ("cost", "cost_at_list", "currency_conversion_rate")
_BOOLEAN_AMOUNT = " OR ".join(
    [
        *(f"\"{c}\" IN ('true', 'false')" for c in _NDJSON_AMOUNTS),
        *(f"json_type(usage, '$.{f}') = 'BOOLEAN'" for f in ("amount", "amount_in_pricing_units")),
        "list_contains(json_type(credits, '$[*].amount'), 'BOOLEAN')",
    ]
)


def _check_text(conn: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> None:
    """Refuse naive timestamps in natively read files: DuckDB would take them as UTC; and in NDJSON,
    amounts written as booleans, which DuckDB would take as 1 and 0 (`_BOOLEAN_AMOUNT`).

    NDJSON and string Parquet columns are re-read as text (one more scan of the file: about half
    an NDJSON load with the amounts' JSON); a Parquet TIMESTAMP column without a zone is named from
    the schema.
    A hit is located (file, line, field) by `_locate`, whose `normalize_row` refuses the same.
    """
    for path in paths:
        booleans = ""
        if detect_format(path) is FileFormat.NDJSON:
            text = dict.fromkeys((*_TIMESTAMPS, *_NDJSON_AMOUNTS), "VARCHAR")
            types = {**text, "usage": "JSON", "credits": "JSON"}
            spec = "{" + ", ".join(f"'{c}': '{t}'" for c, t in types.items()) + "}"
            source, cols = f"read_json($1, format = 'newline_delimited', columns = {spec})", _TIMESTAMPS
            booleans = f" OR {_BOOLEAN_AMOUNT}"
        else:
            cols = _parquet_text_timestamps(path)
            source = "read_parquet($1)"
        if not cols:
            continue
        naive = " OR ".join(f"NOT regexp_matches(\"{c}\", $2)" for c in cols)
        hit = conn.execute(
            f"SELECT {naive} FROM {source} WHERE {naive}{booleans} LIMIT 1", [str(path), _ZONED]
        ).fetchall()
        if hit:
            _locate(path)
            if hit[0][0]:
                raise InputError(
                    str(path), 'a timestamp without a time zone: end each with " UTC" or "+00:00"'
                )
            raise InputError(str(path), "an amount written as true or false: write the number")


def _parquet_text_timestamps(path: Path) -> tuple[str, ...]:
    """The timestamp columns a Parquet file stores as text; a naive TIMESTAMP column is an error."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(str(path), f"not a readable Parquet file ({e}): re-export it") from None
    text = []
    for name in _TIMESTAMPS:
        if name not in schema.names:
            continue
        t = schema.field(name).type
        if pa.types.is_timestamp(t) and t.tz is None:
            raise InputError(
                str(path),
                "a TIMESTAMP column without a time zone (Parquet isAdjustedToUTC=false): the export"
                " writes UTC instants; write the column as timestamp with tz=UTC",
                field=name,
            )
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            text.append(name)
    return tuple(text)


def _nonempty(rows: int, path: Path) -> int:
    if rows == 0:
        raise InputError(
            str(path), "no export rows in the file: pass a Cloud Billing export (NDJSON, Parquet or CSV) with rows"
        )
    return rows


def _normalize_at(raw: Any, path: str, line: int) -> dict[str, Any]:
    try:
        return normalize_row(raw)
    except FieldError as e:
        raise InputError(path, e.message, line=line, field=e.field or None) from None


def _insert_records(
    conn: duckdb.DuckDBPyConnection,
    records: Iterable[tuple[int, Any]],
    path: str,
    batch_rows: int = BATCH_ROWS,
) -> int:
    total = 0
    batch: list[dict[str, Any]] = []
    for line, raw in records:
        batch.append(_normalize_at(raw, path, line))
        if len(batch) >= batch_rows:
            total += db.insert_arrow(conn, pa.Table.from_pylist(batch, schema=db.ARROW_SCHEMA))
            batch = []
    if batch:
        total += db.insert_arrow(conn, pa.Table.from_pylist(batch, schema=db.ARROW_SCHEMA))
    return total


def _insert_typed(
    conn: duckdb.DuckDBPyConnection,
    records: Iterable[tuple[int, Any]],
    path: str,
    batch_rows: int = BATCH_ROWS,
) -> int:
    """`_insert_records` for rows already in Python types: Arrow directly, rules checked by DuckDB."""
    total = 0
    it = iter(records)
    while batch := list(islice(it, batch_rows)):
        try:
            table = pa.Table.from_pylist([raw for _, raw in batch], schema=db.ARROW_SCHEMA)
        except (pa.ArrowException, TypeError, ValueError):
            total += _insert_records(conn, batch, path, batch_rows)  # strings, Decimals, or an error
            continue
        try:
            total += db.insert_arrow(conn, table, checked=True)
        except duckdb.Error as e:
            for line, raw in batch:  # the transaction is aborted: name the first bad row
                _normalize_at(raw, path, line)
            first = db.first_line(e)
            raise InputError(path, f"DuckDB could not load the rows ({first})") from None
    return total


def _scan_ndjson(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) per non-blank line; malformed JSON is an `InputError`."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    n = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    if not text.endswith("\n") and e.pos >= len(text.rstrip()) - 1:
                        fix = "the last line is cut off, so the file looks truncated: copy or export it again"
                    elif text.strip() in ("{", "["):  # pretty-printed: an object spans lines
                        fix = (
                            "an object spans lines (pretty-printed JSON): write one export row object per line,"
                            f" as `bq extract --destination_format NEWLINE_DELIMITED_JSON` does (`jq -c {_JQ_ROWS}"
                            f" {path.name} > rows.ndjson` converts this file)"
                        )
                    else:
                        fix = "write one export row object per line"
                    raise InputError(str(path), f"not valid JSON ({e.msg} at column {e.colno}): {fix}", line=n) from None
                if not isinstance(obj, dict):
                    hint = (
                        f" (a JSON array: `jq -c '.[]' {path.name} > rows.ndjson` converts it)"
                        if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj)
                        else ""
                    )
                    raise InputError(
                        str(path),
                        f"expected one export row object per line (NDJSON), got {_show(obj)}{hint}",
                        line=n,
                    )
                yield n, obj
    except EOFError as e:  # gzip: the stream ends before its end marker
        raise InputError(
            str(path), f"the gzip stream ends early ({e}): the file is truncated; copy or export it again", line=n + 1
        ) from None
    except (UnicodeDecodeError, OSError) as e:
        raise InputError(
            str(path), f"cannot read the file ({e}): expected UTF-8 NDJSON, gzipped only when named .gz", line=n + 1
        ) from None


#: jq's program printing each row object of a file of pretty-printed objects or of arrays of them,
#: one compact object per line. NEWLINE_DELIMITED_JSON is `bq extract`'s JSON format ("Export table
#: data to Cloud Storage", https://cloud.google.com/bigquery/docs/exporting-data).
_JQ_ROWS = "'if type == \"array\" then .[] else . end'"


def _scan_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, row dict) per Parquet row, for locating a value DuckDB could not cast."""
    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(
            str(path), f"not a readable Parquet file ({e}): truncated or not Parquet; copy or export it again"
        ) from None
    n = 0
    for batch in reader.iter_batches(batch_size=BATCH_ROWS):
        for row in batch.to_pylist():
            n += 1
            yield n, row
