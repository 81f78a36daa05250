"""FileUtilizationSource: Cloud Monitoring REST JSON in every accepted shape, and every kind of bad input."""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.errors import InputError
from monitor.sources.utilization_files import FileUtilizationSource

NVML = "agent.googleapis.com/gpu/utilization"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
M1, M5 = timedelta(minutes=1), timedelta(minutes=5)


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def point(end: datetime, value, key: str = "doubleValue") -> dict:
    return {"interval": {"startTime": iso(end), "endTime": iso(end)}, "value": {key: value}}


def series(instance: str = "1001", points=None, *, gpu: str = "0", metric_type: str = NVML, **over) -> dict:
    """A TimeSeries as projects.timeSeries.list returns it (newest point first), as the simulator writes."""
    ts = {
        "metric": {
            "type": metric_type,
            "labels": {"gpu_number": gpu, "model": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{instance}-{gpu}"},
        },
        "resource": {
            "type": "gce_instance",
            "labels": {"project_id": "ml-prod", "instance_id": instance, "zone": "us-central1-a"},
        },
        "metadata": {"systemLabels": {"name": f"vm-{instance}"}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "points": points if points is not None else [point(T0 + M5, 40.0), point(T0, 20.0)],
    }
    ts.update(over)
    return ts


def write(path, doc, *, gz: bool = False):
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def fetch(paths, start=T0 - M5, end=T0 + timedelta(hours=1)):
    return FileUtilizationSource(paths).fetch(start, end)


SHAPES = {
    "page": lambda ts: {"timeSeries": ts, "unit": "%"},
    "array of pages": lambda ts: [{"timeSeries": ts[:1], "nextPageToken": "x"}, {"timeSeries": ts[1:]}, {}],
    "array of series": lambda ts: ts,
}


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_gives_the_same_samples(tmp_path, shape, gz):
    doc = SHAPES[shape]([series("1001"), series("1002", gpu="3")])
    path = write(tmp_path / ("u.json.gz" if gz else "u.json"), doc, gz=gz)

    result = fetch([path])

    got = [(s.instance_id, s.instance_name, s.gpu, s.start, s.end, s.utilization_pct) for s in result.samples]
    assert got == [
        ("1001", "vm-1001", "0", T0 - M5, T0, 20.0),
        ("1001", "vm-1001", "0", T0, T0 + M5, 40.0),
        ("1002", "vm-1002", "3", T0 - M5, T0, 20.0),
        ("1002", "vm-1002", "3", T0, T0 + M5, 40.0),
    ]
    s = result.samples[0]
    assert (s.project, s.zone, s.model, s.signal) == (
        "ml-prod",
        "us-central1-a",
        "NVIDIA A100-SXM4-40GB",
        "gpu_utilization",
    )
    assert result.skipped == {} and result.requests == 1


def test_raw_minute_points_average_into_alignment_windows(tmp_path):
    values = [0, 10, 20, 30, 40, 100, 100, 100, 100, 100]
    pts = [  # int64 arrives as a string in REST JSON
        point(T0 + i * M1, str(v), "int64Value") if i % 2 else point(T0 + i * M1, float(v))
        for i, v in zip(range(1, 11), values, strict=True)
    ]
    path = write(tmp_path / "u.json", {"timeSeries": [series(points=pts[::-1])]})

    result = fetch([path])

    assert [(s.start, s.utilization_pct) for s in result.samples] == [(T0, 20.0), (T0 + M5, 100.0)]
    assert result.skipped == {}


def test_directory_is_read_in_name_order_and_day_files_outside_the_window_are_skipped(tmp_path):
    day = tmp_path / "utilization"
    day.mkdir()
    write(day / "2026-10-20.json.gz", {"timeSeries": [series("9")]}, gz=True)  # far outside: not opened
    write(day / "2026-11-01.json.gz", {"timeSeries": [series("1001")]}, gz=True)
    write(day / "2026-10-31.json", {"timeSeries": [series("1002")]})
    (day / "notes.txt").write_text("ignored")

    result = fetch([day])

    assert {s.instance_id for s in result.samples} == {"1001", "1002"}
    assert result.requests == 2


def test_window_bounds_are_start_inclusive_end_exclusive(tmp_path):
    path = write(tmp_path / "u.json", [series()])
    assert [s.start for s in fetch([path], T0, T0 + M5).samples] == [T0]


def test_changed_file_is_read_again(tmp_path):
    path = write(tmp_path / "u.json", [series()])
    src = FileUtilizationSource([path])
    assert len(src.fetch(T0 - M5, T0 + M5).samples) == 2
    write(path, [series(points=[point(T0, 99.0)])])
    os.utime(path, ns=(1, 1))  # a new mtime even on coarse-clock filesystems
    assert [s.utilization_pct for s in src.fetch(T0 - M5, T0 + M5).samples] == [99.0]


BAD = {
    "non-numeric double": ([point(T0 + M5, "abc"), point(T0, 20.0)], {}, {"non_numeric": 1}),
    "NaN": ([point(T0 + M5, "NaN"), point(T0, 20.0)], {}, {"non_numeric": 1}),
    "string value": ([point(T0 + M5, "busy", "stringValue"), point(T0, 20.0)], {}, {"non_numeric": 1}),
    "int64 not an integer": ([point(T0 + M5, "4.5x", "int64Value"), point(T0, 20.0)], {}, {"non_numeric": 1}),
    "cumulative kind": (None, {"metricKind": "CUMULATIVE"}, {"unexpected_metric_kind": 2}),
    "distribution value": (None, {"valueType": "DISTRIBUTION"}, {"unexpected_metric_kind": 2}),
    "unknown metric": (None, {"metric": {"type": "custom.googleapis.com/x"}}, {"unknown_metric": 2}),
    "metric type not a string": (None, {"metric": {"type": {"a": 1}}}, {"unknown_metric": 2}),
    "missing instance labels": (
        None,
        {"resource": {"type": "gce_instance", "labels": {"project_id": "p"}}, "metadata": {}},
        {"missing_labels": 2},
    ),
    "out of order": (
        [point(T0 + M5, 1.0), point(T0 + 2 * M5, 2.0), point(T0, 3.0), point(T0 - M5, 4.0)],
        {},
        {"out_of_order": 1},
    ),
    "duplicate time": ([point(T0, 1.0), point(T0, 2.0)], {}, {"out_of_order": 1}),
    "bad timestamp": (
        [{"interval": {"endTime": "yesterday"}, "value": {"doubleValue": 1}}, point(T0, 20.0)],
        {},
        {"bad_timestamp": 1},
    ),
    "out of range": ([point(T0 + M5, 150.0), point(T0, 20.0)], {}, {"out_of_range": 1}),
    "points not a list": ("nope", {}, {"malformed_series": 1}),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_a_counted_skip_and_good_series_survive(tmp_path, case):
    pts, over, skipped = BAD[case]
    bad = series("6666", pts, **over) if pts is not None else series("6666", **over)
    path = write(tmp_path / "u.json", {"timeSeries": [bad, series("1001")]})

    result = fetch([path])

    assert result.skipped == skipped
    assert {(s.instance_id, s.start) for s in result.samples} >= {("1001", T0 - M5), ("1001", T0)}
    bad_points = len(pts) if isinstance(pts, list) else 2 if pts is None else 0
    kept = [s for s in result.samples if s.instance_id == "6666"]
    assert len(kept) <= max(0, bad_points - sum(skipped.values()))


def test_out_of_order_keeps_the_longest_ordered_run(tmp_path):
    ends = [T0 + 2 * M5, T0 + M5, T0 + 3 * M5, T0, T0 - M5]  # newest first, one stray point
    pts = [point(e, v) for e, v in zip(ends, [1.0, 2.0, 9.0, 3.0, 4.0], strict=True)]
    result = fetch([write(tmp_path / "u.json", [series(points=pts)])], start=T0 - timedelta(hours=1))
    assert result.skipped == {"out_of_order": 1}
    got = [(s.end, s.utilization_pct) for s in result.samples]
    assert got == [(T0 - M5, 4.0), (T0, 3.0), (T0 + M5, 2.0), (T0 + 2 * M5, 1.0)]


def test_memory_without_utilization_is_counted(tmp_path):
    mem = series(
        "1001",
        metric_type="agent.googleapis.com/gpu/memory/bytes_used",
        valueType="INT64",
        points=[point(T0, "1000", "int64Value")],
    )
    mem["metric"]["labels"]["memory_state"] = "used"
    util = series("1001", points=[point(T0 + M5, 0.0)])
    used = fetch([write(tmp_path / "u.json", [mem, util])])
    assert used.skipped == {"memory_without_utilization": 1}
    assert [s.memory_used_bytes for s in used.samples] == [None]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("u.json", b'{"timeSeries": [\n  {"metric": }\n]}', r"u\.json:2: not valid JSON"),
        ("u.json", b'{"foo": 1}', r"u\.json: expected a Cloud Monitoring timeSeries page"),
        ("u.json", b"[1, 2]", r"u\.json: \[0\]: expected a Cloud Monitoring timeSeries page"),
        ("u.json", b'"text"', r"u\.json: expected a Cloud Monitoring timeSeries page"),
        ("u.json", b'{"timeSeries": {"a": 1}}', r"u\.json: timeSeries: expected an array"),
        ("u.json.gz", b"not gzip", r"u\.json\.gz: not a valid gzip file"),
        ("u.json", gzip.compress(b"{}", mtime=0), r"u\.json: not UTF-8 text"),
    ],
)
def test_files_that_are_not_monitoring_json_are_input_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        fetch([path])


def test_missing_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"nope\.json: no such file or directory"):
        fetch([tmp_path / "nope.json"])


def test_reads_the_fleet_simulator_output_exactly(tmp_path):
    """The contract with `gpucost simulate`: its aligned points come back one sample each, in percent.

    The simulator writes each series with its unit ("%" for NVML and GKE duty cycle, "1" for the
    DCGM v1 ratio); the expected percent is computed here from that unit's documented meaning.
    """
    from monitor.simulate.compute import Monitoring
    from monitor.simulate.simulator import FleetSimulator

    start = datetime(2026, 11, 1, tzinfo=UTC)
    sim = FleetSimulator(7, start, 2)
    series_list = sim.utilization_series(start, start + timedelta(hours=6))
    write(tmp_path / "2026-11-01.json.gz", {"timeSeries": series_list}, gz=True)

    result = fetch([tmp_path], start, start + timedelta(days=1))

    percent = {"%": 1.0, "1": 100.0}
    expected = {}
    for ts in series_list:
        res, met = ts["resource"]["labels"], ts["metric"]["labels"]
        host = res.get("instance_id") or res["node_name"]
        gpu = met.get("gpu_number") or met["accelerator_id"]
        for p in ts["points"]:
            value = p["value"]["doubleValue"] * percent[ts["unit"]]
            expected[(host, gpu, p["interval"]["startTime"])] = value
    got = {(s.host, s.gpu, iso(s.start)): s.utilization_pct for s in result.samples}
    assert result.skipped == {} and len(expected) > 1000
    assert got == pytest.approx(expected)
    assert {ts["unit"] for ts in series_list} == {"%", "1"}  # the DCGM v1 ratio is in the mix
    unmonitored = {v.name for v in sim.fleet.vms if v.machine.gpus and v.monitoring is Monitoring.NONE}
    assert unmonitored and not unmonitored & {s.instance_name or s.node_name for s in result.samples}


def test_a_file_rewritten_with_the_same_bytes_is_not_parsed_again(tmp_path):
    path = write(tmp_path / "u.json.gz", [series()], gz=True)
    src = FileUtilizationSource([path])
    first = src.fetch(T0 - M5, T0 + M5).samples
    path.write_bytes(path.read_bytes())
    os.utime(path, ns=(1, 1))  # a new stamp, same content: read, not parsed
    assert src.fetch(T0 - M5, T0 + M5).samples == first and src.parsed_files == 1
    write(path, [series(points=[point(T0, 99.0)])], gz=True)
    os.utime(path, ns=(2, 2))
    assert [s.utilization_pct for s in src.fetch(T0 - M5, T0 + M5).samples] == [99.0]
    assert src.parsed_files == 2


# ------------------------------------------------------------------------------------- units

DCGM_V1 = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"


def test_dcgm_v1_ratio_file_reads_as_percent(tmp_path):
    """Ops Agent DCGM v1 writes SM activity as a 0-1 ratio (unit "1"): 0.72 is 72% busy, not idle."""
    pts = [point(T0 + M5, 0.72), point(T0, 0.72)]
    path = write(tmp_path / "u.json", {"timeSeries": [series(points=pts, metric_type=DCGM_V1)]})

    result = fetch([path])

    assert [(s.signal, s.utilization_pct) for s in result.samples] == [("sm_active", 72.0)] * 2
    assert result.skipped == {}


@pytest.mark.parametrize(
    ("page_unit", "series_unit", "raw", "pct"),
    [
        (None, None, 0.72, 72.0),  # documented unit of the metric type: "1"
        ("1", None, 0.72, 72.0),  # the page's unit
        ("{not_a_unit}", None, 0.72, 72.0),  # a page of mixed units says nothing: documented
        ("%", None, 72.0, 72.0),  # a declared unit wins over the documentation
        ("1", "%", 72.0, 72.0),  # the series' own unit wins over its page's
        ("", "10^2.%", 0.72, 72.0),  # the grammar's explicit ratio-as-percent
    ],
)
def test_the_most_specific_declared_unit_wins(tmp_path, page_unit, series_unit, raw, pct):
    ts = series(points=[point(T0, raw)], metric_type=DCGM_V1)
    if series_unit is not None:
        ts["unit"] = series_unit
    page = {"timeSeries": [ts]} | ({"unit": page_unit} if page_unit is not None else {})

    result = fetch([write(tmp_path / "u.json", page)])

    assert [s.utilization_pct for s in result.samples] == [pytest.approx(pct)]


def test_unknown_unit_is_skipped_counted_named_and_logged_once(tmp_path, caplog):
    odd = series("7777", points=[point(T0 + M5, 0.5), point(T0, 0.5)], metric_type=DCGM_V1, unit="ms")
    path = write(tmp_path / "u.json", {"timeSeries": [odd, series("1001")]})
    src = FileUtilizationSource([path])

    with caplog.at_level("WARNING", logger="monitor.sources"):
        result = src.fetch(T0 - M5, T0 + timedelta(hours=1))
        src.fetch(T0 - M5, T0 + timedelta(hours=1))

    assert result.skipped == {"unknown_unit": 2}
    assert {s.instance_id for s in result.samples} == {"1001"}
    assert src.unknown_units == {DCGM_V1: "ms"}
    warnings = [r.getMessage() for r in caplog.records if "unknown unit" in r.getMessage()]
    assert warnings == [f"metric skipped: unknown unit 'ms' for {DCGM_V1} (no conversion is guessed)"]


@pytest.mark.parametrize(
    ("unit", "role", "expected"),
    [
        ("1", "utilization", 100.0),
        ("10^2.%", "utilization", 100.0),
        ("%", "utilization", 1.0),
        ("%{busy}", "utilization", 1.0),  # an annotation after a unit is a comment
        ("{fraction}", "utilization", 100.0),  # an annotation alone means "1"
        ("By", "memory_used", 1.0),
        ("kBy", "memory_used", 1e3),
        ("KiBy", "memory_used", 1024.0),
        ("MiBy", "memory_used", 2.0**20),
        ("GiBy", "memory_used", 2.0**30),
        ("By{used}", "memory_used", 1.0),
        ("ms", "utilization", None),
        ("By/s", "memory_used", None),
        ("bit", "memory_used", None),
        ("By", "utilization", None),  # bytes are no utilization
        ("1", "memory_used", None),  # nor a ratio a memory size
        ("%", "memory_used", None),
    ],
)
def test_unit_table(unit, role, expected):
    from monitor.sources.presets import Role
    from monitor.sources.units import factor

    assert factor(unit, Role(role)) == expected


def test_every_preset_metric_has_a_documented_unit_that_fits_its_role():
    from monitor.sources.presets import METRICS
    from monitor.sources.units import DOCUMENTED_UNITS, factor

    assert set(DOCUMENTED_UNITS) == set(METRICS)
    assert {t: factor(DOCUMENTED_UNITS[t], m.role) is not None for t, m in METRICS.items()} == dict.fromkeys(
        METRICS, True
    )


def test_a_window_read_in_pieces_gives_what_one_read_gives_points_with_intervals_too(tmp_path):
    """`fetch_pieces` (the daemon's file poll) against `fetch` over the same window across midnight:
    the same samples, each file's skipped point counted once, though both days read both files.
    Points with intervals (start before end: the parser takes them) reach into windows before
    their end, so a day uses points that end after it (`ParsedSeries.span`)."""
    midnight = datetime(2026, 11, 2, tzinfo=UTC)
    ends = [midnight + i * M5 for i in range(-24, 25)]  # 22:00 to 02:00, every 5 minutes

    def spanning(end: datetime, value: float) -> dict:
        return {
            "interval": {"startTime": iso(end - 30 * M1), "endTime": iso(end)},
            "value": {"doubleValue": value},
        }

    for day, pts in (
        ("2026-11-01", [e for e in ends if e < midnight]),
        ("2026-11-02", [e for e in ends if e >= midnight]),
    ):
        points = [spanning(e, 10.0 + i) for i, e in enumerate(pts)][::-1]
        points[3] = point(pts[-4], 150.0)  # out of range: one skipped point per file
        write(tmp_path / f"{day}.json", {"timeSeries": [series("1001", points)]})
    start, end = midnight - timedelta(hours=2), midnight + timedelta(hours=2)

    whole = FileUtilizationSource([tmp_path]).fetch(start, end)
    days = list(FileUtilizationSource([tmp_path]).fetch_pieces(start, end))

    assert [(lo, hi) for lo, hi, _ in days] == [(start, midnight), (midnight, end)]
    H = timedelta(hours=1)
    later = midnight + 7 * H  # pieces of six hours from midnight (`PIECE`), the last one cut short
    assert [(lo, hi) for lo, hi, _ in FileUtilizationSource([tmp_path]).fetch_pieces(start, later)] == [
        (start, midnight),
        (midnight, midnight + 6 * H),
        (midnight + 6 * H, later),
    ]
    assert [s for _, _, r in days for s in r.samples] == whole.samples and len(whole.samples) > 40
    assert (
        whole.skipped == {"out_of_range": 2} == dict(sum((Counter(r.skipped) for _, _, r in days), Counter()))
    )
    before = [s for s in days[0][2].samples if s.start >= midnight - 30 * M1]
    assert len(before) == 6  # the last half hour of the first day: points ending after midnight reach it


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
@pytest.mark.parametrize(
    "doc",
    [
        *SHAPES.values(),
        lambda ts: {"unit": "10^2.%", "timeSeries": ts},  # the page's unit before its series
        lambda ts: {"timeSeries": ts, "unit": "1", "nextPageToken": "x", "unit ": "%"},
    ],
    ids=[*SHAPES, "page, unit first", "page, unit among other keys"],
)
@pytest.mark.parametrize("reader", ["_series", "_streamed"])
def test_files_are_streamed_a_series_at_a_time_as_read_whole(tmp_path, doc, gz, reader):
    """A file's TimeSeries come one at a time (a large fleet's day file held 1.2 GB as one
    document), from a page's series texts (`_series`) or the stream parser (`_streamed`), the same
    as the whole document gives them, page units included."""
    from monitor.sources import utilization_files

    ts = [series("1001"), {k: v for k, v in series("1002", gpu="3").items() if k != "valueType"}]
    path = write(tmp_path / ("u.json.gz" if gz else "u.json"), doc(ts), gz=gz)
    data = path.read_bytes()
    read = getattr(utilization_files, reader)
    assert list(read(path, data)) == utilization_files.read_time_series(path, data)


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
def test_a_file_over_the_whole_read_limit_is_streamed(tmp_path, monkeypatch, gz):
    """A page over `_WHOLE_MAX` bytes (uncompressed) is not held whole: the stream parser reads it,
    with the same series; so does a gzip file of two members (`zcat` reads both)."""
    from monitor.sources import utilization_files

    doc = {"unit": "%", "timeSeries": [series("1001"), series("1002", gpu="3")]}
    path = write(tmp_path / ("u.json.gz" if gz else "u.json"), doc, gz=gz)
    data = path.read_bytes()
    whole = utilization_files.read_time_series(path, data)
    streamed: list[bytes] = []
    real = utilization_files._streamed

    def spy(p: Path, d: bytes) -> Any:
        streamed.append(d)
        return real(p, d)

    monkeypatch.setattr(utilization_files, "_streamed", spy)
    assert list(utilization_files._series(path, data)) == whole and streamed == []
    monkeypatch.setattr(utilization_files, "_WHOLE_MAX", len(json.dumps(doc)) - 1)
    assert list(utilization_files._series(path, data)) == whole and streamed == [data]
    if gz:
        monkeypatch.undo()
        monkeypatch.setattr(utilization_files, "_streamed", spy)
        rest = json.dumps(doc["timeSeries"])[1:].encode() + b"}"
        two = gzip.compress(b'{"timeSeries": [') + gzip.compress(rest)
        path.write_bytes(two)
        got = list(utilization_files._series(path, two))
        assert [s["points"] for s in got] == [s["points"] for s in doc["timeSeries"]] and streamed[-1] == two


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"timeSeries": [{"points": [NaN]}]}', {"unknown_metric": 1}),  # json takes NaN, ijson does not
        # msgspec takes the page, not the number in the series (json reads inf)
        ('{"timeSeries": [{"points": [1e400]}]}', {"unknown_metric": 1}),
        (
            '{"timeSeries": [], "x": 1',
            "u.json:1: not valid JSON (Expecting ',' delimiter, column 26)",
        ),  # truncated
        ('{"timeSeries": {}}', "expected an array"),
        ('{"nextPageToken": "x"}', {}),  # a page without series: nothing, read whole
        (
            '[{"timeSeries": []}, 3, {"timeSeries": [}',
            "u.json:1: not valid JSON (Expecting value, column 41)",
        ),
    ],
    ids=["NaN", "out of range", "truncated", "not an array", "no series", "JSON error after a shape error"],
)
@pytest.mark.parametrize("reader", ["_series", "_streamed"])
def test_what_the_stream_parser_stops_at_is_read_whole(tmp_path, text, expected, reader):
    """Where the series reader or the stream parser stops (or the shape is wrong), the file is read
    whole: the same series, or the same error as before streaming (a JSON error anywhere before a
    shape error)."""
    from monitor.sources import utilization_files

    path = tmp_path / "u.json"
    path.write_text(text)
    with pytest.raises(utilization_files._Unstreamable):
        list(getattr(utilization_files, reader)(path, path.read_bytes()))
    if isinstance(expected, dict):
        assert FileUtilizationSource([path]).fetch(T0, T0 + M5).skipped == expected
    else:
        with pytest.raises(InputError, match=re.escape(expected)):
            FileUtilizationSource([path]).fetch(T0, T0 + M5)


def test_a_directory_without_utilization_files_is_an_input_error(tmp_path) -> None:
    # read as no utilization, every GPU was "agent missing" ($45k of unmonitored_gpu findings); the
    # files one level down are not read
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "2026-11-01.json").write_text("[]")
    with pytest.raises(
        InputError, match=r"no \.json\.gz or \.json file in this directory \(files in its subdirectories"
    ):
        FileUtilizationSource([tmp_path]).files()
    assert FileUtilizationSource([tmp_path / "nested"]).files() == [tmp_path / "nested" / "2026-11-01.json"]
