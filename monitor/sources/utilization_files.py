"""GPU utilization from Cloud Monitoring REST JSON files (the embedded default and offline analysis).

Accepted shapes, camelCase exactly as `projects.timeSeries.list` returns them, as `.json` or
`.json.gz`: one page ``{"timeSeries": [...], "nextPageToken": ...}`` (``{}`` is an empty page), an
array of such pages, or an array of TimeSeries. A directory stands for every such file in it, in name
order. A file that is not JSON or not one of these shapes is an `InputError` naming the file (and the
line for JSON syntax errors); a bad series or point inside a good file is a counted skip (series
without host or GPU labels, points without an interval or a zoned end time, values that are not
numbers: `monitor.utilization.parse`), logged with its counts by the analysis, unless no point of
the file is usable for one of those reasons: then the file is an `InputError` naming the first bad
series, since an analysis without any of its data would look like an idle or absent fleet.

Raw points (e.g. 60 s Ops Agent samples) are averaged into alignment windows the way Cloud Monitoring's
ALIGN_MEAN would. Files named after a day (``2026-11-01.json.gz``, as the simulator writes them) are
only opened when that day can hold points of the requested window; parsed files are cached by
(path, mtime, size), so a daemon polling a growing directory re-reads only what changed, and a file
rewritten with the same bytes (a new mtime, e.g. from a sync tool) is read but not parsed again.

Files carry no metric descriptors: a value's unit is the series' own `unit`, else its page's
`unit`, else the documented unit of its metric type (`monitor.sources.units`). A metric whose unit
is unknown is skipped, counted (`unknown_unit`), kept in `unknown_units` and logged once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import ijson
import msgspec

from monitor.errors import InputError
from monitor.sources.presets import METRICS
from monitor.sources.units import NO_UNIT, UnknownUnitWarnings, declared, factor, resolve_unit
from monitor.timeutil import floor_day
from monitor.utilization import FetchResult, ParsedSeries, assemble, parse_series
from monitor.utilization.records import SkipReason

__all__ = ["FileUtilizationSource", "read_time_series"]

log = logging.getLogger(__name__)

_SHAPE = (
    'expected a Cloud Monitoring timeSeries page ({"timeSeries": [...]}), an array of pages, '
    "or an array of TimeSeries"
)
_PAGE_KEYS = frozenset({"timeSeries", "nextPageToken", "unit", "executionErrors"})
_SUFFIXES = (".json.gz", ".json")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except OSError as e:
        raise InputError(str(path), f"cannot read ({e.strerror})") from None


def _decode(path: Path, data: bytes) -> Any:
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            raise InputError(str(path), "not a valid gzip file (truncated?): copy or export it again") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(str(path), "not UTF-8 text (is it gzip without a .gz name?)") from None
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"not valid JSON ({e.msg}, column {e.colno})", line=e.lineno) from None


def _page(doc: dict[str, Any], path: Path, where: str) -> list[Any]:
    if "timeSeries" not in doc and not doc.keys() <= _PAGE_KEYS:
        raise InputError(str(path), _SHAPE, field=where or None)
    series = doc.get("timeSeries", [])
    if not isinstance(series, list):
        raise InputError(str(path), "expected an array", field=f"{where}timeSeries")
    page_unit = declared(doc.get("unit"))
    if page_unit is not None:  # "the unit in which all time_series point values are reported"
        for ts in series:
            if isinstance(ts, dict) and declared(ts.get("unit")) is None:
                ts["unit"] = page_unit
    return series


def read_time_series(path: Path, data: bytes | None = None) -> list[Any]:
    """The TimeSeries objects of one file, whatever its accepted shape (validated only as a container).

    `data` is the file's content when the caller has read it already.
    """
    doc = _decode(path, _read(path) if data is None else data)
    if isinstance(doc, dict):
        return _page(doc, path, "")
    if not isinstance(doc, list):
        raise InputError(str(path), _SHAPE)
    out: list[Any] = []
    for i, item in enumerate(doc):
        if isinstance(item, dict) and ("timeSeries" in item or item.keys() <= _PAGE_KEYS):
            out += _page(item, path, f"[{i}].")
        elif isinstance(item, dict) and ("points" in item or "metric" in item):
            out.append(item)
        else:
            raise InputError(str(path), _SHAPE, field=f"[{i}]")
    return out


def _day_of(path: Path) -> date | None:
    stem = next((path.name[: -len(s)] for s in _SUFFIXES if path.name.endswith(s)), path.name)
    try:
        return date.fromisoformat(stem)
    except ValueError:
        return None


def _files_for(files: Iterable[Path], start: datetime, end: datetime) -> list[Path]:
    """Of `files`, those that can hold samples starting in [start, end): day files of the day
    before through the day of `end`, and every file whose name is not a day."""
    first, last = (start - timedelta(days=1)).date(), end.date()
    return [f for f in files if (d := _day_of(f)) is None or first <= d <= last]


#: `fetch_pieces`' question to its caller: whether it holds [start, end) as read from `inputs`.
Unchanged = Callable[[datetime, datetime, bytes], bool]

#: How much of a read is assembled and stored at once (`fetch_pieces`): a day of bench scale 48
#: (1.38 M samples) peaked at 1,060 MB in the daemon's first file poll, six hours at 469 MB; the
#: daemon's regular polls (three days re-read) take as long either way.
PIECE = timedelta(hours=6)


class FileUtilizationSource:
    """`UtilizationSource` over exported or simulated Cloud Monitoring JSON."""

    def __init__(self, paths: Iterable[str | Path], *, alignment_seconds: int = 300):
        self.paths = [Path(p) for p in paths]
        self.alignment_seconds = alignment_seconds
        #: Files parsed so far (cache misses), for tests and benchmarks.
        self.parsed_files = 0
        #: Metric type -> unit of the metrics skipped for their unit in the last `fetch`.
        self.unknown_units: dict[str, str] = {}
        self._cache: dict[Path, _Parsed] = {}
        self._warnings = UnknownUnitWarnings()

    def files(self) -> list[Path]:
        """Explicit files in the order given; a directory's `.json` / `.json.gz` files by name."""
        out: list[Path] = []
        for p in self.paths:
            if p.is_dir():
                found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_SUFFIXES))
                if not found:  # read as no utilization at all: every GPU "agent missing" ($45k)
                    raise InputError(
                        str(p),
                        f"no {' or '.join(_SUFFIXES)} file in this directory (files in its"
                        " subdirectories are not read; check utilization.files / --utilization)",
                    )
                out += found
            elif p.exists():
                out.append(p)
            else:
                raise InputError(
                    str(p), "no such file or directory (check utilization.files / --utilization)"
                )
        return out

    def fetch(self, start: datetime, end: datetime) -> FetchResult:
        """Samples starting in ``[start, end)``; `requests` counts the files read."""
        [(_, _, result)] = self._pieces(start, end, [(start, end)])
        return result

    def fetch_pieces(
        self, start: datetime, end: datetime, *, unchanged: Unchanged | None = None
    ) -> Iterator[tuple[datetime, datetime, FetchResult]]:
        """`fetch(start, end)` cut every `PIECE` from UTC midnight: (piece start, piece end, its
        samples), a piece at a time, so the caller can store each piece before the next is read
        (the daemon's first read at bench scale 48, three days of files, peaked at 2.6 GB read at
        once). Each file is parsed once for the whole read, and its skipped points count in the
        first piece that reads it.

        `unchanged(start, end, inputs)`: whether the caller holds that piece as read from these
        very `inputs` (`FetchResult.inputs`: its files' names and contents, and the alignment); such
        a piece is neither assembled nor yielded. The daemon re-reads its last three days every
        poll for files that grow or are rewritten late; most pieces come from files no poll since
        has changed."""
        pieces, lo = [], start
        while lo < end:
            day = floor_day(lo)
            hi = min(day + PIECE * ((lo - day) // PIECE + 1), end)
            pieces.append((lo, hi))
            lo = hi
        return self._pieces(start, end, pieces, unchanged)

    def _pieces(
        self,
        start: datetime,
        end: datetime,
        pieces: Sequence[tuple[datetime, datetime]],
        unchanged: Unchanged | None = None,
    ) -> Iterator[tuple[datetime, datetime, FetchResult]]:
        # Only this read's files stay parsed: the daemon re-reads its last days every poll (hits),
        # while older days leave its window for good; caching every file ever read grew the
        # process by a day of parsed series per simulated day (tests/test_soak.py).
        files = _files_for(self.files(), start, end)  # listed once for the whole read
        self._cache = {f: self._cache[f] for f in files if f in self._cache}
        counted: set[Path] = set()
        unknown: dict[str, str] = {}
        for lo, hi in pieces:
            mine = [(f, self._parsed(f)) for f in _files_for(files, lo, hi)]
            for _, hit in mine:
                for metric_type, unit in hit.unknown.items():
                    unknown.setdefault(metric_type, unit)
            inputs = _inputs(self.alignment_seconds, mine)
            if unchanged is not None and unchanged(lo, hi, inputs):
                counted.update(f for f, _ in mine)  # their skips were counted when it was read
                continue
            skips: Counter[str] = Counter()
            parsed: list[ParsedSeries] = []
            for f, hit in mine:
                parsed += hit.series
                if f not in counted:
                    counted.add(f)
                    skips.update(hit.skips)
            samples = assemble(parsed, self.alignment_seconds, skips, window=(lo, hi))
            skipped = {str(k): v for k, v in skips.items() if v}
            yield lo, hi, FetchResult(samples, skipped, len(mine), inputs)
            del samples, parsed
        self.unknown_units = unknown
        self._warnings.warn(unknown)

    def scan_units(self) -> dict[str, str]:
        """Metric type -> unit of every preset metric in the files whose unit cannot be converted.

        For `gpucost check`: reads each file's series (not their points) without touching the cache.
        """
        unknown: dict[str, str] = {}
        for f in self.files():
            for ts in read_time_series(f):
                metric = ts.get("metric") if isinstance(ts, dict) else None
                spec = METRICS.get(metric.get("type")) if isinstance(metric, dict) else None
                if spec is None or spec.metric_type in unknown:
                    continue
                code = resolve_unit(spec.metric_type, ts.get("unit"))
                if code is None or factor(code, spec.role) is None:
                    unknown[spec.metric_type] = code or NO_UNIT
        return unknown

    def _parsed(self, path: Path) -> _Parsed:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        hit = self._cache.get(path)
        if hit is not None and hit.stamp == stamp:
            return hit
        data = _read(path)
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if hit is not None and hit.digest == digest:  # rewritten, same bytes
            self._cache[path] = _Parsed(stamp, digest, hit.series, hit.skips, hit.unknown)
            return self._cache[path]
        try:
            series, skips, unknown = _parse_all(path, _series(path, data))
        except _Unstreamable:  # read whole: the exact error, or what json takes beyond the standard (NaN)
            series, skips, unknown = _parse_all(path, read_time_series(path, data))
        self.parsed_files += 1
        self._cache[path] = _Parsed(stamp, digest, series, skips, unknown)
        return self._cache[path]


def _parse_all(path: Path, items: Iterable[Any]) -> tuple[list[ParsedSeries], Counter[str], dict[str, str]]:
    """Each TimeSeries parsed as it comes; a file with no usable point is refused (`_reject`)."""
    skips: Counter[str] = Counter()
    unknown: dict[str, str] = {}
    series: list[ParsedSeries] = []
    first_bad: tuple[int, str] | None = None
    for i, ts in enumerate(items):
        before = {r: skips[r] for r in _UNUSABLE}
        if (ps := parse_series(ts, skips, unknown=unknown)) is not None:
            series.append(ps)
        if first_bad is None and (grew := [r for r in _UNUSABLE if skips[r] > before[r]]):
            first_bad = (i, grew[0])
    if first_bad is not None and not any(ps.points for ps in series):
        _reject(path, first_bad, skips)
    return series, skips, unknown


class _Unstreamable(Exception):
    """The stream parser stopped: the file is read whole instead (`read_time_series`)."""


class _Page(msgspec.Struct):
    """A page as `_series` decodes it: each series left as its JSON text until it is read."""

    timeSeries: list[msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET  # the API's camelCase key
    unit: Any = None


_PAGE = msgspec.json.Decoder(_Page)
_ANY = msgspec.json.Decoder()
#: The largest file, uncompressed, that `_series` holds whole: a day of bench scale 5 is 17 MB
#: (one of scale 48, 8.8 times the points, about 150 MB); larger ones are streamed (`_streamed`),
#: in far less memory.
_WHOLE_MAX = 64 << 20


def _series(path: Path, data: bytes) -> Iterator[Any]:
    """`read_time_series(path, data)`, one TimeSeries at a time: a page of a file up to
    `_WHOLE_MAX` split into its series' texts and each decoded as it is read (msgspec), any other
    file through the stream parser (`_streamed`). The fourteen day files of the tests' seed-7 fleet
    (463,610 points) parse in 0.82-0.85 s so, 1.47-1.63 s streamed (ijson building the series is
    most of the difference; 2026-12-06). Raises `_Unstreamable` as `_streamed` does: whatever
    msgspec refuses (NaN, a number out of range) is read whole."""
    whole = _whole(path, data)
    page = None
    if whole is not None:
        try:
            page = _PAGE.decode(whole)
        except msgspec.ValidationError:  # not a page with a series array: the stream parser judges
            pass
        except msgspec.DecodeError as e:  # not JSON msgspec takes (NaN, a lone surrogate...): read whole
            raise _Unstreamable from e
    if page is None or page.timeSeries is msgspec.UNSET:
        yield from _streamed(path, data)
        return
    page_unit = declared(page.unit)
    for raw in page.timeSeries:
        try:
            ts = _ANY.decode(raw)
        except msgspec.MsgspecError as e:  # e.g. a number out of range: read whole
            raise _Unstreamable from e
        if page_unit is not None and isinstance(ts, dict) and declared(ts.get("unit")) is None:
            ts["unit"] = page_unit
        yield ts


def _whole(path: Path, data: bytes) -> bytes | None:
    """The file's JSON text, when it is at most `_WHOLE_MAX` bytes and (gzip) one whole member;
    None otherwise (the stream parser reads it, or names what is wrong with it)."""
    if not path.name.endswith(".gz"):
        return data if len(data) <= _WHOLE_MAX else None
    inflate = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
    try:
        text = inflate.decompress(data, _WHOLE_MAX)
    except zlib.error:
        return None
    return text if inflate.eof and not inflate.unconsumed_tail and not inflate.unused_data else None


def _streamed(path: Path, data: bytes) -> Iterator[Any]:
    """`read_time_series(path, data)`, one TimeSeries at a time (ijson): a day file of a large fleet
    (bench scale 48: 4,895 series, 1.38 M points) held 1.2 GB as one `json.loads` document, and
    about 14 MB streamed. A page's `unit` may come after its `timeSeries` (a JSON object's keys
    have no order), so a page whose series lack a unit of their own is read twice: its unit (1.7 s
    of such a file, in C), then its series (2.1 s; `json.loads` took 3.4 s). Series that carry their
    unit (TimeSeries `unit`; the simulator writes one on each) spare that pass: six day files of
    bench scale 5 parsed in 2.41 s instead of 3.47. Raises `_Unstreamable` where the stream parser stops
    (bad gzip, UTF-8 or JSON; NaN, which `json` takes) or the shape is not a page with a list of
    series or a list (a page without series is small: read whole)."""

    def stream() -> Any:
        raw = io.BytesIO(data)
        return gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw

    try:
        events = ijson.parse(stream())
        _, first, _ = next(events)
        if first == "start_map":
            # the value of "timeSeries" starts a list (the keys before it are few and small);
            # anything else (no series, another type) is for the whole read to judge
            if next((event for prefix, event, _ in events if prefix == "timeSeries"), None) != "start_array":
                raise InputError(str(path), _SHAPE)
            page_unit: str | None = None
            unread = True  # the page's unit is read when a series first lacks its own
            for ts in ijson.items(stream(), "timeSeries.item", use_float=True):
                if isinstance(ts, dict) and declared(ts.get("unit")) is None:
                    if unread:
                        units = list(ijson.items(stream(), "unit"))  # a pass in C, no objects built
                        page_unit = declared(units[-1]) if units else None  # json keeps a repeated key's last
                        unread = False
                    if page_unit is not None:
                        ts["unit"] = page_unit
                yield ts
        elif first == "start_array":
            for i, item in enumerate(ijson.items(stream(), "item", use_float=True)):
                if isinstance(item, dict) and ("timeSeries" in item or item.keys() <= _PAGE_KEYS):
                    yield from _page(item, path, f"[{i}].")
                elif isinstance(item, dict) and ("points" in item or "metric" in item):
                    yield item
                else:
                    raise InputError(str(path), _SHAPE, field=f"[{i}]")
        else:
            raise InputError(str(path), _SHAPE)
    except (
        ijson.JSONError,
        OSError,
        EOFError,
        zlib.error,
        UnicodeDecodeError,
        StopIteration,
        InputError,
    ) as e:
        # the whole read names the problem exactly as before, in the same order (a shape error
        # found early here may come after a JSON error further on)
        raise _Unstreamable from e


#: Skip reasons that mean the file is malformed (not merely holding metrics we do not read).
_UNUSABLE = (
    SkipReason.MALFORMED_SERIES,
    SkipReason.MISSING_LABELS,
    SkipReason.BAD_TIMESTAMP,
    SkipReason.NON_NUMERIC,
    SkipReason.OUT_OF_RANGE,
)
_FIXES = {
    SkipReason.MALFORMED_SERIES: "each series must be an object with a points array",
    SkipReason.MISSING_LABELS: "each series needs the labels naming its project, host"
    " (resource.labels.instance_id, or a node name) and GPU (metric.labels.gpu_number or the preset's)",
    SkipReason.BAD_TIMESTAMP: "each point needs interval.endTime in RFC 3339 with a zone"
    ' ("2026-11-01T10:00:00Z")',
    SkipReason.NON_NUMERIC: 'each point needs value.doubleValue (a number) or value.int64Value (an integer string)',
    SkipReason.OUT_OF_RANGE: "a utilization is 0 to 100 % once read in its metric's unit (a ratio metric's, unit"
    ' "1", is 0 to 1): check that each series names the metric type and unit its values are in',
}


def _reject(path: Path, first_bad: tuple[int, str], skips: Counter[str]) -> None:
    index, reason = first_bad
    counts = ", ".join(f"{r} {skips[r]}" for r in _UNUSABLE if skips[r])
    raise InputError(
        str(path),
        f"no usable point in the file ({counts} skipped; the first here): {_FIXES[SkipReason(reason)]}",
        field=f"series #{index}",
    )


def _inputs(alignment_seconds: int, files: Sequence[tuple[Path, _Parsed]]) -> bytes:
    """What a piece's samples are made of: the alignment, and its files' names and contents."""
    h = hashlib.blake2b(str(alignment_seconds).encode(), digest_size=16)
    for f, hit in files:
        h.update(str(f).encode() + b"\0" + hit.digest)
    return h.digest()


@dataclass(frozen=True)
class _Parsed:
    """One file's parse, valid while its (mtime, size) stamp or its content digest is unchanged."""

    stamp: tuple[int, int]
    digest: bytes
    series: list[ParsedSeries]
    skips: Counter[str]
    unknown: dict[str, str]
