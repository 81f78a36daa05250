"""Rows in the shapes the files carry: `bq extract` NDJSON and Parquet with the export's nested
types, both derived from `monitor.schema.EXPORT_SCHEMA`.

Output is byte-deterministic: gzip without a timestamp or file name, JSON keys in schema order,
Parquet without pandas metadata.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from monitor.schema import EXPORT_SCHEMA, arrow_schema, arrow_type

__all__ = [
    "ExportWriter",
    "LineEncoder",
    "arrow_schema",
    "arrow_type",
    "bq_timestamp",
    "open_gzip",
    "to_export_json",
]

_BATCH = 20_000
_LINES = 1_000
_GZIP_LEVEL = 3


def bq_timestamp(t: datetime) -> str:
    """A TIMESTAMP as `bq extract` writes it: `2026-11-01 10:00:00 UTC` (milliseconds when set)."""
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    return text + " UTC"


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return bq_timestamp(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def to_export_json(row: dict) -> dict:
    """A python row -> its `bq extract --destination_format=NEWLINE_DELIMITED_JSON` object: NULLs
    left out, REPEATED as arrays (empty ones kept), TIMESTAMPs as `... UTC` strings."""
    return _json_value(row)


def _gzip(raw: IO[bytes], level: int) -> gzip.GzipFile:
    """No mtime or file name in the header, so equal content gives equal bytes. A low level: gzip
    would dominate the run time at level 9 and these files are rewritten often."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=level)


@contextmanager
def open_gzip(path: Path, level: int = _GZIP_LEVEL) -> Iterator[IO[bytes]]:
    """Write a deterministic gzip file; both the gzip stream and the file are closed on exit."""
    with path.open("wb") as raw, _gzip(raw, level) as gz:
        yield gz


#: Record columns whose values the simulator shares between rows (serialized once per object).
_SHARED = frozenset(c.name for c in EXPORT_SCHEMA if c.type == "RECORD") - {
    "usage",
    "credits",
    "adjustment_info",
}
_CACHE_LIMIT = 200_000


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _dumps(value: Any) -> str:
    return _ENCODE(value)


class LineEncoder:
    """`json.dumps(to_export_json(row))` made fast for streams of rows that share nested records.

    Each shared record object is serialized once (keyed by identity, the object kept alive with
    its text so the key cannot be reused); the output is the same bytes either way.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, str]] = {}
        self._texts: dict[Any, str] = {}

    def _fragment(self, value: Any) -> str:
        hit = self._cache.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        text = _dumps(_json_value(value))
        self._cache[id(value)] = (value, text)
        return text

    def _value(self, value: Any) -> str:
        """A value's JSON text, dispatched on its exact type (cheaper than a chain of isinstance
        calls for every value of every row); strings and timestamps are cached: they repeat row
        after row. Any other type (a str or dict subclass, an int, NaN) goes through `json`."""
        kind = type(value)
        if kind is float and math.isfinite(value):
            return repr(value)
        if kind is str or kind is datetime:
            text = self._texts.get(value)
            if text is None:
                if len(self._texts) >= _CACHE_LIMIT:
                    self._texts.clear()
                text = self._texts[value] = _dumps(_json_value(value))
            return text
        if kind is dict:
            inner = ",".join([f'"{k}":{self._value(v)}' for k, v in value.items() if v is not None])
            return "{" + inner + "}"
        if kind is list:
            return "[" + ",".join([self._value(v) for v in value]) + "]"
        return _dumps(_json_value(value))

    def encode(self, row: dict) -> str:
        parts = []
        for name, value in row.items():
            if value is not None:
                parts.append(f'"{name}":{self._fragment(value) if name in _SHARED else self._value(value)}')
        return "{" + ",".join(parts) + "}"


class ExportWriter:
    """Streams rows to `export.ndjson.gz` and `export.parquet` together, in batches; to one of them
    when the other's path is None (the NDJSON's encoding is a quarter to a third of a simulation)."""

    def __init__(self, ndjson_path: Path | None, parquet_path: Path | None):
        if ndjson_path is None and parquet_path is None:
            raise ValueError("ExportWriter needs an NDJSON or a Parquet path")
        self._raw = ndjson_path.open("wb") if ndjson_path is not None else None
        self._gz = _gzip(self._raw, _GZIP_LEVEL) if self._raw is not None else None
        self._schema = arrow_schema()
        self._pq: pq.ParquetWriter | None = None
        if parquet_path is not None:
            self._pq = pq.ParquetWriter(parquet_path, self._schema, compression="zstd")
        self._batch: list[dict] = []
        self._encoder = LineEncoder()
        self._lines: list[str] = []
        self.rows = 0

    def write(self, row: dict) -> None:
        if self._gz is not None:
            self._lines.append(self._encoder.encode(row))
            if len(self._lines) >= _LINES:
                self._flush_lines()
        if self._pq is not None:
            self._batch.append(row)
            if len(self._batch) >= _BATCH:
                self._flush()
        self.rows += 1

    def _flush_lines(self) -> None:
        """Lines go to gzip a thousand at a time: a `GzipFile.write` per row cost half as much
        again as the compression. The bytes are the same (deflate's output does not depend on how
        its input is split)."""
        if self._lines and self._gz is not None:
            self._gz.write(("\n".join(self._lines) + "\n").encode())
            self._lines = []

    def write_all(self, rows: Iterable[dict]) -> None:
        for row in rows:
            self.write(row)

    def _flush(self) -> None:
        if self._batch and self._pq is not None:
            self._pq.write_table(pa.Table.from_pylist(self._batch, schema=self._schema))
            self._batch = []

    def close(self) -> None:
        self._flush_lines()
        self._flush()
        for stream in (self._pq, self._gz, self._raw):
            if stream is not None:
                stream.close()

    def __enter__(self) -> ExportWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
