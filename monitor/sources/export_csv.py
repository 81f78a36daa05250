"""Billing export rows flattened to CSV, turned back into nested export-shaped dicts.

CSV exports (BigQuery's console download, koku's test data) name nested fields with dots
(`service.description`, `usage.amount`) and write REPEATED fields (`labels`, `credits`,
`project.labels`, ...) as one cell holding a JSON array or a Python-repr list
(`[{'key': 'a', 'value': 'b'}]`). Python reprs are read with `ast.literal_eval`, which accepts
literals only, never code. Values stay strings here; `loader.normalize_row` types them, so CSV and
NDJSON follow the same rules. Columns outside the export schema (koku's `partition_date`) are ignored.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.errors import InputError
from monitor.schema import EXPORT_SCHEMA, Column
from monitor.sources.duckdb_conn import REQUIRED_COLUMNS
from monitor.sources.foreign import foreign_hint

__all__ = ["CellError", "iter_csv_records", "parse_cell_list"]

_BY_NAME = {c.name: c for c in EXPORT_SCHEMA}


class CellError(ValueError):
    """A cell that cannot be read; `field` (the column name) is set by the row reader."""

    field: str | None = None


@dataclass(frozen=True)
class _Slot:
    """Where one CSV column goes: `top` or `top.sub`, and how its text is read (None: as is)."""

    index: int
    top: str
    sub: str | None
    read: Callable[[str], Any] | None


def _cached(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """Memoise a cell parser for one file: label and credit cells repeat on thousands of rows.

    Parsed values are shared between rows; that is safe because `normalize_row` builds new objects.
    """
    cache: dict[str, Any] = {}

    def parse(text: str) -> Any:
        try:
            return cache[text]
        except KeyError:
            value = read(text)
            if len(cache) < 65_536:
                cache[text] = value
            return value

    return parse


def parse_cell_list(text: str) -> list[Any] | None:
    """A REPEATED cell: JSON array or Python-repr list; empty cell -> None (loads as [])."""
    value = _parse_literal(text)
    if value is None or isinstance(value, list | tuple):
        return None if value is None else list(value)
    raise CellError(f'expected a list such as [{{"key": "team", "value": "ml"}}], got {_clip(text)}')


def _parse_object(text: str) -> dict[str, Any] | None:
    value = _parse_literal(text)
    if value is None or isinstance(value, dict):
        return value
    raise CellError(f'expected an object such as {{"id": "...", "description": "..."}}, got {_clip(text)}')


def _parse_literal(text: str) -> Any:
    s = text.strip()
    if not s:
        return None
    try:
        return json.loads(s)
    except ValueError:
        pass
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise CellError(
            f"cannot parse {_clip(text)}: write a JSON array/object or a Python-repr list "
            "such as [{'key': 'team', 'value': 'ml'}]"
        ) from None


def _clip(text: str) -> str:
    return json.dumps(text if len(text) <= 60 else text[:57] + "...")


def _reader_for(col: Column) -> Callable[[str], Any] | None:
    if col.mode == "REPEATED":
        return _cached(parse_cell_list)
    return _cached(_parse_object) if col.type == "RECORD" else None


def _plan(path: Path, header: list[str]) -> list[_Slot]:
    """Map header columns onto the schema; reject a file lacking a required column."""
    slots = []
    for i, name in enumerate(header):
        top, _, sub = name.partition(".")
        col = _BY_NAME.get(top)
        if col is None:
            continue  # not an export column (koku's partition_date, a spreadsheet index, ...)
        if not sub:
            slots.append(_Slot(i, top, None, _reader_for(col)))
            continue
        inner = next((f for f in col.fields if f.name == sub), None)
        if col.type == "RECORD" and col.mode != "REPEATED" and inner is not None:
            slots.append(_Slot(i, top, sub, _reader_for(inner)))
    present = {s.top for s in slots}
    for name in REQUIRED_COLUMNS:
        if name not in present:
            col = _BY_NAME[name]
            hint = " or ".join(f'"{name}.{f.name}"' for f in col.fields) if col.fields else f'"{name}"'
            raise InputError(
                str(path), f"missing required column {hint}: add it to the header{foreign_hint(header)}"
            )
    return slots


def _record(slots: list[_Slot], row: list[str]) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    for s in slots:
        text = row[s.index]
        if s.read is None:
            value = text if text != "" else None
        else:
            try:
                value = s.read(text)
            except CellError as e:
                e.field = s.top if s.sub is None else f"{s.top}.{s.sub}"
                raise
        if s.sub is None:
            rec[s.top] = value
        else:
            rec.setdefault(s.top, {})[s.sub] = value
    for name, value in rec.items():
        # A RECORD whose cells are all empty is a NULL record (how BigQuery writes one to CSV).
        if isinstance(value, dict) and all(v is None or v == [] for v in value.values()):
            rec[name] = None
    return rec


def iter_csv_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(first line number of the record, export-shaped dict with string values) per CSV row."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    line = 1
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise InputError(str(path), "empty file: expected a header row naming the export columns")
            slots = _plan(path, header)
            line = reader.line_num + 1
            for row in reader:
                start, line = line, reader.line_num + 1
                if not row:
                    continue
                if len(row) != len(header):
                    raise InputError(
                        str(path),
                        f"expected {len(header)} fields like the header, got {len(row)}: quote cells "
                        "containing commas",
                        line=start,
                    )
                try:
                    yield start, _record(slots, row)
                except CellError as e:
                    raise InputError(str(path), str(e), line=start, field=e.field) from None
    except (UnicodeDecodeError, OSError, EOFError, csv.Error) as e:
        raise InputError(str(path), f"cannot read the CSV ({e}): expected UTF-8 CSV", line=line) from None
