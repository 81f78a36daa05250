"""assemble / select_signals / parse_series against a plain reference written from the rules.

The production code keys everything by integers for speed; the reference below follows the rules
literally (ALIGN_MEAN buckets, memory joined by host, precedence with gaps filled, host aliases), and
seeded random fleets (several metrics, GKE nodes seen by name and by id, raw minute points, repeated
files) must give identical samples and skip counts.
"""

from __future__ import annotations

import importlib
import math
import random
from collections import Counter, defaultdict
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from monitor.sources.presets import Role, Signal
from monitor.utilization import GpuSample, assemble, parse_series, select_signals
from monitor.utilization.records import Points

# the module itself (the package exports its `assemble` function under the same name)
assemble_module = importlib.import_module("monitor.utilization.assemble")

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
ALIGN = 300
IDENT = ("project", "zone", "instance_id", "instance_name", "cluster", "node_name", "gpu", "model")


# --------------------------------------------------------------------------------------- reference


def _windows(start: float, end: float) -> list[int]:
    """Ends of the windows (b - ALIGN, b] a point covers; an instant covers the one holding it."""
    last = math.ceil(math.ceil(end) / ALIGN) * ALIGN
    if start == end or int(start) >= math.ceil(end):
        return [last]
    return list(range((int(start) // ALIGN + 1) * ALIGN, last + 1, ALIGN))


def _host(items: list[GpuSample]):
    alias: dict = {}
    for s in items:
        for name in (s.instance_name, s.node_name):
            if s.instance_id and name:
                alias.setdefault((s.project, name), s.instance_id)
    return lambda s: (
        s.project,
        s.instance_id
        or alias.get((s.project, s.node_name or s.instance_name))
        or s.node_name
        or s.instance_name,
        s.gpu,
    )


def _rank(signal: str) -> int:
    return list(Signal).index(Signal(signal)) if signal in set(Signal) else len(Signal)


def reference_select(items: list[GpuSample]) -> list[GpuSample]:
    key = _host(items)
    groups: dict = defaultdict(list)
    for s in items:
        groups[(*key(s), s.start)].append(s)
    out = []
    for k in sorted(groups):
        group = sorted(groups[k], key=lambda s: _rank(s.signal))
        fill = {
            f.name: next((getattr(g, f.name) for g in group if getattr(g, f.name) is not None), None)
            for f in fields(GpuSample)
            if getattr(group[0], f.name) is None
        }
        out.append(replace(group[0], **fill))
        if group[0].signal == "node_duty_cycle":  # the duty-cycle pair is kept until the join
            out += [g for g in group if g.signal == "container_duty_cycle"][:1]
    return out


def reference_assemble(parsed, window, skips: Counter) -> list[GpuSample]:
    lo, hi = window[0].timestamp(), window[1].timestamp()
    acc: dict = {}
    for s in parsed:
        for start, end, value in s.points:
            for b in _windows(start, end):
                if lo <= b - ALIGN < hi:
                    k = (s.spec.metric_type, tuple(s.ident[f] for f in IDENT), b)
                    acc.setdefault(k, [s.spec, 0.0, 0])[1:] = [
                        acc.get(k, [0, 0.0, 0])[1] + value,
                        acc.get(k, [0, 0.0, 0])[2] + 1,
                    ]
    util, memory = [], []
    for (_, ident, b), (spec, total, n) in acc.items():
        t0, t1 = (datetime.fromtimestamp(t, UTC) for t in (b - ALIGN, b))
        if spec.role is Role.MEMORY:
            memory.append(GpuSample(*ident, t0, t1, 0.0, "memory", total / n))
        else:
            util.append(GpuSample(*ident, t0, t1, total / n, str(spec.signal), None))
    if memory:
        key = _host(util + memory)
        mem = {(key(m), m.start): m.memory_used_bytes for m in memory}
        skips["memory_without_utilization"] += len(mem.keys() - {(key(u), u.start) for u in util})
        util = [replace(u, memory_used_bytes=mem.get((key(u), u.start))) for u in util]
    return reference_select(util)


# --------------------------------------------------------------------------------------- fleets

GCE = [
    "agent.googleapis.com/gpu/utilization",
    "agent.googleapis.com/gpu/memory/bytes_used",
    "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization",
]
K8S = [
    "kubernetes.io/node/accelerator/duty_cycle",
    "kubernetes.io/container/accelerator/duty_cycle",
    "kubernetes.io/container/accelerator/memory_used",
]


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def random_series(r: random.Random) -> dict:
    host = r.choice(["n1", "n2", "n3"])
    if r.random() < 0.6:
        mtype = r.choice(GCE)
        ts = {
            "metric": {
                "type": mtype,
                "labels": {"gpu_number": r.choice("01"), "model": "L4", "memory_state": "used"},
            },
            "resource": {"labels": {"project_id": "p", "instance_id": f"id-{host}", "zone": "z"}},
            "metadata": {"systemLabels": {"name": host}},
        }
    else:
        ts = {
            "metric": {"type": r.choice(K8S), "labels": {"accelerator_id": r.choice("01"), "model": "L4"}},
            "resource": {
                "labels": {"project_id": "p", "node_name": host, "location": "z", "cluster_name": "c"}
            },
            "metadata": {"systemLabels": {"node_name": host}},
        }
    points = []
    step = r.choice([60, 300, 150])
    for i in range(r.randint(0, 15)):
        end = T0 + timedelta(seconds=step * i + r.choice([0, 0, 0, -600]))
        shape = r.random()
        if shape < 0.5:
            interval = {"startTime": _iso(end), "endTime": _iso(end)}
        elif shape < 0.8:
            interval = {"startTime": _iso(end - timedelta(minutes=5)), "endTime": _iso(end)}
        elif shape < 0.9:
            interval = {
                "startTime": _iso(end - timedelta(minutes=13)),
                "endTime": _iso(end + timedelta(seconds=7)),
            }
        else:
            interval = {"endTime": r.choice([_iso(end), "later"])}
        value = r.choice(
            [
                {"doubleValue": round(r.uniform(-1, 101), 2)},
                {"int64Value": str(r.randint(0, 99))},
                {"doubleValue": "NaN"},
            ]
        )
        points.append({"interval": interval, "value": value})
    ts["points"] = points[::-1] if r.random() < 0.7 else points
    return ts


@pytest.mark.parametrize("seed", range(40))
def test_assemble_matches_the_reference(seed):
    """Every series with points in the window tries numpy's path first (`_by_window`); those with
    a point over several windows go through the loop (see the next test but one)."""
    r = random.Random(seed)
    raw = [random_series(r) for _ in range(r.randint(1, 30))]
    skips: Counter = Counter()
    parsed = [p for ts in raw if (p := parse_series(ts, skips)) is not None]
    window = (T0 - timedelta(minutes=r.choice([0, 10])), T0 + timedelta(minutes=r.choice([20, 90])))

    want_skips, got_skips = Counter(skips), Counter(skips)
    want = reference_assemble(parsed, window, want_skips)
    got = assemble(parsed, ALIGN, got_skips, window=window)

    assert got == want
    assert got_skips == want_skips
    shuffled = list(got) + list(got[:5])
    r.shuffle(shuffled)
    assert select_signals(shuffled) == reference_select(shuffled)


def test_the_random_fleets_exercise_collisions_memory_and_aliases():
    """Guard against a generator that stops producing the hard cases the comparison relies on."""
    seen = Counter()
    for seed in range(40):
        r = random.Random(seed)
        parsed = [
            p
            for ts in (random_series(r) for _ in range(r.randint(1, 30)))
            if (p := parse_series(ts, Counter()))
        ]
        samples = assemble(
            parsed, ALIGN, Counter(), window=(T0 - timedelta(hours=1), T0 + timedelta(hours=2))
        )
        seen["memory"] += sum(s.memory_used_bytes is not None for s in samples)
        seen["filled"] += sum(s.instance_id is not None and s.cluster is not None for s in samples)
        seen["duty"] += sum(s.signal == "node_duty_cycle" for s in samples)
        seen["container"] += sum(s.signal == "container_duty_cycle" for s in samples)
        starts = Counter((s.node_name, s.gpu, s.start) for s in samples if s.node_name and not s.instance_id)
        seen["pair"] += sum(n == 2 for n in starts.values())
    assert min(seen.values()) > 10, seen


def test_the_random_fleets_take_and_decline_the_vectored_path(monkeypatch):
    """The comparison above tests both paths only if numpy's serves series (each point in one
    window, one or several to a window) and hands some back to the loop (points over several)."""
    seen: Counter = Counter()
    real = assemble_module._by_window

    def counted(spans, *args):
        out = real(spans, *args)
        for (_, i, j), got in zip(spans, out, strict=True):
            seen["loop" if j - i < 1 else "declined" if got is None else "taken" if got[0] else "empty"] += 1
        return out

    monkeypatch.setattr(assemble_module, "_by_window", counted)
    for seed in range(40):
        r = random.Random(seed)
        parsed = [
            p
            for ts in (random_series(r) for _ in range(r.randint(1, 30)))
            if (p := parse_series(ts, Counter()))
        ]
        assemble(parsed, ALIGN, Counter(), window=(T0 - timedelta(hours=1), T0 + timedelta(hours=2)))
    assert seen["taken"] > 50 and seen["declined"] > 50, seen


def nvml(points: list) -> dict:
    return {
        "metric": {"type": GCE[0], "labels": {"gpu_number": "0"}},
        "resource": {"labels": {"project_id": "p", "instance_id": "1"}},
        "points": points,
    }


@pytest.mark.parametrize(
    ("point", "skip"),
    [
        (
            {
                "interval": {"startTime": "2026-11-01T10:06:00Z", "endTime": "2026-11-01T10:05:00Z"},
                "value": {"doubleValue": 1.0},
            },
            "bad_timestamp",
        ),
        ({"interval": {"endTime": "2026-11-01T10:05:00Z"}, "value": {"doubleValue": True}}, "non_numeric"),
        (
            {"interval": {"endTime": "2026-11-01T10:05:00Z"}, "value": {"doubleValue": "Infinity"}},
            "non_numeric",
        ),
        ({"interval": {"endTime": 1762000000}, "value": {"doubleValue": 1.0}}, "bad_timestamp"),
        ({"interval": {"endTime": "2026-11-01T10:05:00Z"}, "value": {"doubleValue": 100.7}}, "out_of_range"),
        ({"interval": ["2026-11-01T10:05:00Z"], "value": {"doubleValue": 1.0}}, "bad_timestamp"),
        ("not a point", "bad_timestamp"),
    ],
)
def test_unusual_points_take_the_general_checks(point, skip):
    skips: Counter = Counter()
    parsed = parse_series(nvml([point]), skips)
    assert parsed is not None and parsed.points == [] and skips == {skip: 1}


def test_whole_numbers_and_missing_start_times_are_instants():
    points = [
        {"interval": {"endTime": "2026-11-01T10:05:00Z"}, "value": {"doubleValue": 50}},
        {"interval": {"endTime": "2026-11-01T10:00:00Z", "startTime": None}, "value": {"doubleValue": 100.3}},
    ]
    parsed = parse_series(nvml(points), Counter())
    end = T0.timestamp()
    assert parsed.points == [(end, end, 100.0), (end + 300, end + 300, 50.0)]


def test_parsed_points_read_as_the_list_of_tuples_they_were_built_from():
    """`Points` (three arrays, a quarter of a tuple list's memory) stands for a list of (start, end,
    value) tuples wherever parsed points are read: iterated, indexed, compared, sliced for a window."""
    pts = [(0.0, 300.0, 12.5), (300.0, 600.0, 0.0), (600.0, 600.0, 99.9), (900.0, 1200.0, 50.0)]
    points = Points(pts)
    assert len(points) == 4 and points == pts and list(points) == pts and points != pts[:3]
    assert [points[i] for i in range(4)] == pts and points[-1] == pts[-1]
    assert list(points.between(1, 3)) == pts[1:3] and list(points.between(3, 3)) == []
    assert list(points.ends) == [300.0, 600.0, 600.0, 1200.0] and not Points()
