"""CloudMonitoringSource through the real google-cloud-monitoring client against a local gRPC server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from prometheus_client import generate_latest

from monitor.config import GoogleConfig, UtilizationConfig
from monitor.errors import ConfigError, PermanentSourceError, RetryableSourceError
from monitor.metrics import Metrics
from monitor.sources.monitoring import CloudMonitoringSource, window_for
from monitor.state.store import SQLiteStore
from monitor.utilization import load_samples, read_watermark
from monitor.utilization.coverage import read_coverage
from tests.fakes.monitoring_server import FakeMonitoringServer, gauge_series

pytestmark = pytest.mark.integration

NVML = "agent.googleapis.com/gpu/utilization"
NVML_MEM = "agent.googleapis.com/gpu/memory/bytes_used"
DCGM_SM = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
M5 = timedelta(minutes=5)
GCE_GROUP_BY = [
    "resource.label.project_id",
    "resource.label.zone",
    "resource.label.instance_id",
    "metadata.system_labels.name",
    "metric.label.gpu_number",
    "metric.label.model",
]


def nvml(instance: int, points, gpu: str = "0", metric: str = NVML, **kw):
    return gauge_series(
        metric,
        "gce_instance",
        {"project_id": "p1", "instance_id": str(1000 + instance), "zone": "us-central1-a"},
        {"gpu_number": gpu, "model": "NVIDIA H100 80GB HBM3", **kw.pop("labels", {})},
        points,
        system_labels={"name": f"vm-{instance}"},
        **kw,
    )


def buckets(first_end: datetime, values) -> list[tuple[datetime, float]]:
    return [(first_end + i * M5, v) for i, v in enumerate(values)]


@pytest.fixture
def server():
    srv = FakeMonitoringServer(page_size=2).start()
    yield srv
    srv.stop()


@pytest.fixture
def make_source(server):
    made: list[CloudMonitoringSource] = []

    def make(presets=("ops_agent_nvml",), util=None, **kw):
        util = {"projects": ("p1",), **(util or {})}
        cfg = UtilizationConfig(
            source="cloud_monitoring", presets=presets, api_endpoint=server.address, insecure=True, **util
        )
        sleeps: list[float] = []
        src = CloudMonitoringSource(cfg, GoogleConfig(credentials="anonymous"), sleep=sleeps.append, **kw)
        made.append(src)
        return src, sleeps

    yield make
    for src in made:
        src.close()


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "state.sqlite")
    yield s
    s.close()


def test_one_aggregated_request_series_per_metric_with_pages(server, make_source):
    server.add(*(nvml(i, buckets(T0 + M5, [10.0 * i, 20.0, 30.0])) for i in range(5)))
    src, sleeps = make_source()

    result = src.fetch(T0, T0 + 3 * M5)

    util = [r for r in server.requests if NVML + '"' in r.filter]
    assert [r.page_token for r in util] == ["", "2", "4"]  # 5 series, 2 per page
    for r in server.requests:
        assert r.name == "projects/p1"
        assert r.interval.start_time == T0 and r.interval.end_time == T0 + 3 * M5
        assert r.aggregation.alignment_period.total_seconds() == 300
        assert r.aggregation.per_series_aligner.name == "ALIGN_MEAN"
        assert r.aggregation.cross_series_reducer.name == "REDUCE_MEAN"
        assert list(r.aggregation.group_by_fields) == GCE_GROUP_BY
    assert util[0].filter == f'metric.type = "{NVML}" AND resource.type = "gce_instance"'
    mem = [r for r in server.requests if NVML_MEM in r.filter]
    assert mem[0].filter.endswith('AND metric.label.memory_state = "used"')
    # 4 pages + 1 descriptor: the memory metric had no series, so its descriptor was never read
    assert result.requests == 5 and sleeps == []
    assert [d.filter for d in server.descriptor_requests] == [f'metric.type = "{NVML}"']
    assert len(result.samples) == 15
    s = next(x for x in result.samples if x.instance_id == "1003" and x.start == T0)
    assert (s.project, s.zone, s.instance_name, s.gpu, s.end) == ("p1", "us-central1-a", "vm-3", "0", T0 + M5)
    assert (s.utilization_pct, s.signal, s.memory_used_bytes) == (30.0, "gpu_utilization", None)


def test_transient_unavailable_mid_pagination_is_retried(server, make_source):
    server.add(*(nvml(i, buckets(T0 + M5, [50.0])) for i in range(3)))
    server.faults = [None, grpc.StatusCode.UNAVAILABLE]  # page 2 fails once
    src, sleeps = make_source()

    result = src.fetch(T0, T0 + M5)

    assert [r.page_token for r in server.requests[:3]] == ["", "2", "2"]
    assert sleeps == [1.0]
    assert result.requests == 5  # 4 time-series calls + 1 descriptor
    assert sorted(s.instance_id for s in result.samples) == ["1000", "1001", "1002"]


def test_quota_exhausted_raises_retryable_after_bounded_backoff(server, make_source):
    server.add(nvml(0, buckets(T0 + M5, [50.0])))
    server.faults = [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
    src, sleeps = make_source(max_attempts=4)

    with pytest.raises(RetryableSourceError, match="RESOURCE_EXHAUSTED after 4 attempts"):
        src.fetch(T0, T0 + M5)
    assert sleeps == [1.0, 2.0, 4.0]
    assert len(server.requests) == 4


def test_permanent_error_is_not_retried(server, make_source):
    server.faults = [grpc.StatusCode.PERMISSION_DENIED]
    src, sleeps = make_source()
    with pytest.raises(PermanentSourceError, match="PERMISSION_DENIED"):
        src.fetch(T0, T0 + M5)
    assert sleeps == [] and len(server.requests) == 1


def _stored_rows(store) -> list[tuple]:
    with store.transaction() as conn:
        return [tuple(r) for r in conn.execute("SELECT host, gpu, start FROM utilization_samples")]


def test_failed_poll_keeps_window_and_next_poll_rereads_it(server, make_source, store):
    server.add(nvml(0, buckets(T0 - timedelta(hours=1) + M5, [10.0] * 40)))
    server.add(nvml(1, buckets(T0 - 11 * M5, [20.0] * 20)))
    src, _ = make_source(max_attempts=3, initial_lookback=timedelta(hours=1))

    first = src.poll(store, T0 + timedelta(minutes=2))
    assert first.ok and read_watermark(store, "p1", "ops_agent_nvml") == T0
    assert first.windows[0].start == T0 - timedelta(hours=1)

    server.faults = [grpc.StatusCode.UNAVAILABLE] * 3
    failed = src.poll(store, T0 + timedelta(minutes=12))
    assert not failed.ok and isinstance(failed.failed["p1/ops_agent_nvml"], RetryableSourceError)
    assert read_watermark(store, "p1", "ops_agent_nvml") == T0  # not advanced
    with pytest.raises(RetryableSourceError):
        failed.raise_for_failures()

    third = src.poll(store, T0 + timedelta(minutes=17))
    assert third.ok and read_watermark(store, "p1", "ops_agent_nvml") == T0 + 3 * M5
    last = server.requests[-1]
    assert last.interval.start_time == T0 - M5  # watermark minus the late-point margin
    assert last.interval.end_time == T0 + 3 * M5

    rows = _stored_rows(store)
    assert len(rows) == len(set(rows))  # nothing doubled
    for host in ("1000", "1001"):  # nothing lost: every 5-minute window from the first poll's start
        starts = sorted(r[2] for r in rows if r[0] == host)
        have = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in starts]
        assert have == [T0 - timedelta(hours=1) + i * M5 for i in range(15)]


def test_late_points_are_reread_and_replace_stored_samples(server, make_source, store):
    server.add(nvml(0, buckets(T0, [40.0, 5.0])))  # windows 09:55 and 10:00, the last one partial
    src, _ = make_source(initial_lookback=timedelta(minutes=10))
    src.poll(store, T0 + timedelta(minutes=7))  # reads [09:55, 10:05)
    assert [s.utilization_pct for s in load_samples(store, T0 - M5, T0 + M5)] == [40.0, 5.0]

    server.series.clear()  # the late points arrived: 10:00-10:05 is really 50 %, and 10:05 exists
    server.add(nvml(0, buckets(T0, [40.0, 50.0, 60.0])))
    report = src.poll(store, T0 + timedelta(minutes=12))

    assert report.windows[0].start == T0 and report.windows[0].end == T0 + 2 * M5
    got = load_samples(store, T0 - M5, T0 + 2 * M5)
    assert [(s.start, s.utilization_pct) for s in got] == [(T0 - M5, 40.0), (T0, 50.0), (T0 + M5, 60.0)]
    assert len(_stored_rows(store)) == 3


def test_sm_activity_beats_nvml_and_memory_marks_idle_but_allocated(server, make_source, store):
    server.add(
        nvml(0, buckets(T0 + M5, [95.0]), gpu="0"),
        nvml(0, buckets(T0 + M5, [90.0]), gpu="1"),
        nvml(0, buckets(T0 + M5, [0.0]), gpu="0", metric=DCGM_SM),
        nvml(
            0,
            buckets(T0 + M5, [7e10]),
            gpu="0",
            metric=NVML_MEM,
            value_type="INT64",
            labels={"memory_state": "used"},
        ),
        nvml(0, buckets(T0 + M5, [1e10]), gpu="1", metric=NVML_MEM, labels={"memory_state": "free"}),
    )
    src, _ = make_source(presets=("ops_agent_nvml", "ops_agent_dcgm"))

    result = src.fetch(T0, T0 + M5)
    by_gpu = {s.gpu: s for s in result.samples}
    assert len(result.samples) == 2
    assert (by_gpu["0"].signal, by_gpu["0"].utilization_pct) == ("sm_active", 0.0)
    assert by_gpu["0"].memory_used_bytes == 7e10 and by_gpu["0"].idle_but_allocated
    assert (by_gpu["1"].signal, by_gpu["1"].memory_used_bytes) == ("gpu_utilization", None)
    assert not by_gpu["1"].idle_but_allocated

    src.poll(store, T0 + timedelta(minutes=6))  # presets are stored apart; reading picks the best
    stored = {s.gpu: s for s in load_samples(store, T0, T0 + M5)}
    assert stored["0"].signal == "sm_active" and stored["0"].memory_used_bytes == 7e10
    assert len(_stored_rows(store)) == 3  # nvml x2 + dcgm x1


def test_unusable_series_are_counted_not_fatal(server, make_source):
    server.add(
        nvml(0, buckets(T0 + M5, [30.0])),
        nvml(1, buckets(T0 + M5, [30.0, 40.0]), metric_kind="CUMULATIVE"),
        gauge_series(
            NVML,
            "gce_instance",
            {"project_id": "p1", "zone": "z"},
            {"gpu_number": "0"},
            buckets(T0 + M5, [1.0]),
        ),
    )
    src, _ = make_source()
    result = src.fetch(T0, T0 + 2 * M5)
    assert [s.instance_id for s in result.samples] == ["1000"]
    assert result.skipped == {"unexpected_metric_kind": 2, "missing_labels": 1}


def test_gke_and_managed_prometheus_presets(server, make_source):
    node = {"project_id": "p1", "location": "us-central1-a", "cluster_name": "train", "node_name": "gke-n1"}
    server.add(
        gauge_series(
            "kubernetes.io/node/accelerator/duty_cycle",
            "k8s_node",
            node,
            {"accelerator_id": "GPU-aa", "model": "nvidia-l4"},
            buckets(T0 + M5, [80.0]),
        ),
        gauge_series(
            "prometheus.googleapis.com/DCGM_FI_PROF_GR_ENGINE_ACTIVE/gauge",
            "prometheus_target",
            {"project_id": "p1", "location": "us-central1-a", "cluster": "train"},
            {"gpu": "3", "Hostname": "gke-n2", "modelName": "NVIDIA A100"},
            buckets(T0 + M5, [0.25]),
        ),
    )
    src, _ = make_source(presets=("gke", "managed_prometheus_dcgm"))
    result = src.fetch(T0, T0 + M5)
    got = {s.node_name: (s.cluster, s.gpu, s.signal, s.utilization_pct) for s in result.samples}
    assert got == {
        "gke-n1": ("train", "GPU-aa", "node_duty_cycle", 80.0),
        "gke-n2": ("train", "3", "gr_engine_active", 25.0),
    }
    container = next(r for r in server.requests if "container/accelerator/duty_cycle" in r.filter)
    assert "metadata.system_labels.node_name" in container.aggregation.group_by_fields


def test_insecure_needs_an_endpoint():
    cfg = UtilizationConfig(source="cloud_monitoring", projects=("p1",), insecure=True)
    with pytest.raises(ConfigError, match=r"utilization\.insecure: needs utilization\.api_endpoint"):
        CloudMonitoringSource(cfg, GoogleConfig(credentials="anonymous"))


@pytest.mark.parametrize(
    ("watermark", "now", "expected"),
    [
        (None, T0 + timedelta(minutes=7), (T0 - timedelta(hours=1) + M5, T0 + M5)),
        (T0, T0 + timedelta(minutes=12), (T0 - M5, T0 + 2 * M5)),
        (T0, T0 + timedelta(minutes=2), (T0 - M5, T0)),  # same window again: only the re-read
    ],
)
def test_window_for(watermark, now, expected):
    got = window_for(watermark, now, 300, reread=timedelta(minutes=4), initial=timedelta(hours=1))
    assert got == expected


def test_replace_window_swaps_exactly_the_window(store):
    from monitor.utilization import GpuSample, migrate, replace_window

    def sample(host: str, start: datetime, pct: float) -> GpuSample:
        return GpuSample(
            "p1", "z", host, None, None, None, "0", None, start, start + M5, pct, "sm_active", None
        )

    migrate(store)
    replace_window(store, "p1", "x", T0 - M5, T0 + M5, [sample("a", T0 - M5, 1), sample("b", T0, 2)], now=T0)
    replace_window(store, "p1", "x", T0, T0 + 2 * M5, [sample("a", T0 + M5, 3)], now=T0)

    got = [(s.instance_id, s.start, s.utilization_pct) for s in load_samples(store, T0 - M5, T0 + 2 * M5)]
    assert got == [("a", T0 - M5, 1.0), ("a", T0 + M5, 3.0)]  # "b" at T0 was re-read and is gone
    assert read_watermark(store, "p1", "x") == T0 + 2 * M5


# ------------------------------------------------------------------------ units from the API

DCGM_V2_UTIL = "workload.googleapis.com/gpu.dcgm.utilization"
DCGM_V2_MEM = "workload.googleapis.com/gpu.dcgm.memory.bytes_used"
PROM_FB = "prometheus.googleapis.com/DCGM_FI_DEV_FB_USED/gauge"
PROM_UTIL = "prometheus.googleapis.com/DCGM_FI_DEV_GPU_UTIL/gauge"


@pytest.mark.parametrize(
    ("metric", "preset", "raw", "pct", "signal"),
    [
        (DCGM_SM, "ops_agent_dcgm", 0.72, 72.0, "sm_active"),  # unit "1": a 72%-busy A100, not idle
        (DCGM_V2_UTIL, "ops_agent_dcgm", 0.5, 50.0, "gr_engine_active"),  # graphics engine, unit "1"
        (NVML, "ops_agent_nvml", 72.0, 72.0, "gpu_utilization"),  # unit "%": untouched
    ],
)
def test_values_are_converted_by_the_descriptor_unit(server, make_source, metric, preset, raw, pct, signal):
    server.add(nvml(0, buckets(T0 + M5, [raw]), metric=metric))
    src, _ = make_source(presets=(preset,))

    result = src.fetch(T0, T0 + M5)

    assert [(s.utilization_pct, s.signal) for s in result.samples] == [(pytest.approx(pct), signal)]
    assert [(d.name, d.filter) for d in server.descriptor_requests] == [
        ("projects/p1", f'metric.type = "{metric}"')
    ]
    assert result.skipped == {} and src.unknown_units == {}


def test_descriptor_is_read_once_per_metric_type(server, make_source, store):
    server.add(nvml(0, buckets(T0 + M5, [0.3, 0.4, 0.5]), metric=DCGM_SM), nvml(1, buckets(T0 + M5, [30.0])))
    src, _ = make_source(presets=("ops_agent_nvml", "ops_agent_dcgm"))

    src.fetch(T0, T0 + M5)
    src.fetch(T0 + M5, T0 + 2 * M5)
    src.poll(store, T0 + timedelta(minutes=16))

    asked = sorted(d.filter for d in server.descriptor_requests)
    assert asked == [f'metric.type = "{NVML}"', f'metric.type = "{DCGM_SM}"']


def test_unknown_unit_skips_the_metric_and_names_it(server, make_source, store, caplog):
    server.units[DCGM_SM] = "ms"  # a unit the table does not know: never guessed
    server.add(
        nvml(0, buckets(T0 + M5, [0.9, 0.9]), metric=DCGM_SM),
        nvml(0, buckets(T0 + M5, [40.0, 41.0])),
    )
    src, _ = make_source(presets=("ops_agent_nvml", "ops_agent_dcgm"))

    with caplog.at_level("WARNING", logger="monitor.sources"):
        first = src.fetch(T0, T0 + 2 * M5)
        src.fetch(T0, T0 + 2 * M5)
        report = src.poll(store, T0 + timedelta(minutes=11))

    assert [(s.signal, s.utilization_pct) for s in first.samples] == [
        ("gpu_utilization", 40.0),
        ("gpu_utilization", 41.0),
    ]
    assert first.skipped == {"unknown_unit": 2}
    assert src.unknown_units == {DCGM_SM: "ms"}
    assert report.unknown_units == {DCGM_SM: "ms"}
    warnings = [r.getMessage() for r in caplog.records if "unknown unit" in r.getMessage()]
    assert warnings == [f"metric skipped: unknown unit 'ms' for {DCGM_SM} (no conversion is guessed)"]
    assert [str(u) for u in src.unit_problems("p1", "ops_agent_dcgm")] == [f"{DCGM_SM} (unit 'ms')"]
    assert src.unit_problems("p1", "ops_agent_nvml") == []

    metrics = Metrics.create()  # what the daemon publishes on /metrics after a poll
    metrics.set_unknown_units(report.unknown_units)
    text = generate_latest(metrics.registry).decode()
    assert f'gpucost_metric_unit_unknown{{metric_type="{DCGM_SM}",unit="ms"}} 1.0' in text
    metrics.set_unknown_units({})  # fixed upstream: the series goes away
    assert "gpucost_metric_unit_unknown{" not in generate_latest(metrics.registry).decode()


def test_a_series_own_unit_is_more_specific_than_its_descriptor(server, make_source):
    server.units[DCGM_SM] = "ms"
    server.add(nvml(0, buckets(T0 + M5, [0.6]), metric=DCGM_SM, unit="1"))
    src, _ = make_source(presets=("ops_agent_dcgm",))

    result = src.fetch(T0, T0 + M5)

    assert [s.utilization_pct for s in result.samples] == [60.0] and src.unknown_units == {}


def test_a_missing_descriptor_is_not_an_error(server, make_source):
    del server.units[NVML]  # e.g. the metric was never written in this project: documented unit
    server.add(nvml(0, buckets(T0 + M5, [64.0])))
    src, _ = make_source()

    result = src.fetch(T0, T0 + M5)

    assert [s.utilization_pct for s in result.samples] == [64.0]
    assert src.descriptor_unit("p1", NVML) is None and src.unit_problems("p1", "ops_agent_nvml") == []


def test_descriptor_read_is_retried_on_transient_errors(server, make_source):
    server.descriptor_faults = [grpc.StatusCode.UNAVAILABLE]
    server.add(nvml(0, buckets(T0 + M5, [0.25]), metric=DCGM_SM))
    src, sleeps = make_source(presets=("ops_agent_dcgm",))

    result = src.fetch(T0, T0 + M5)

    assert [s.utilization_pct for s in result.samples] == [25.0]
    assert sleeps == [1.0] and len(server.descriptor_requests) == 2


def test_dcgm_v2_memory_reads_state_used_in_bytes(server, make_source):
    server.add(
        nvml(0, buckets(T0 + M5, [0.0]), metric=DCGM_V2_UTIL),
        nvml(0, buckets(T0 + M5, [6e10]), metric=DCGM_V2_MEM, value_type="INT64", labels={"state": "used"}),
        nvml(0, buckets(T0 + M5, [2e10]), metric=DCGM_V2_MEM, value_type="INT64", labels={"state": "free"}),
    )
    src, _ = make_source(presets=("ops_agent_dcgm",))

    result = src.fetch(T0, T0 + M5)

    mem = next(r for r in server.requests if DCGM_V2_MEM in r.filter)
    assert mem.filter.endswith('AND metric.label.state = "used"')
    assert "metric.label.state" not in mem.aggregation.group_by_fields  # one value: nothing to group
    [s] = result.samples
    assert (s.signal, s.memory_used_bytes, s.idle_but_allocated) == ("gr_engine_active", 6e10, True)


def test_gke_node_and_container_samples_carry_cluster_and_node(server, make_source):
    node = {"project_id": "p1", "location": "us-central1", "cluster_name": "train", "node_name": "gke-n1"}
    container = {
        "project_id": "p1",
        "location": "us-central1",
        "cluster_name": "train",
        "namespace_name": "ml",
        "pod_name": "job-0",
        "container_name": "trainer",
    }
    labels = {"accelerator_id": "GPU-aa", "make": "nvidia", "model": "nvidia-h100-80gb"}
    server.add(
        gauge_series(
            "kubernetes.io/node/accelerator/duty_cycle",
            "k8s_node",
            node,
            labels,
            buckets(T0 + M5, [80]),
            value_type="INT64",
        ),
        gauge_series(
            "kubernetes.io/container/accelerator/duty_cycle",
            "k8s_container",
            container,
            {**labels, "accelerator_id": "GPU-bb"},
            buckets(T0 + M5, [0]),
            system_labels={"node_name": "gke-n2"},
            value_type="INT64",
        ),
    )
    src, _ = make_source(presets=("gke",))

    result = src.fetch(T0, T0 + M5)

    got = {(s.project, s.cluster, s.node_name, s.gpu, s.signal, s.utilization_pct) for s in result.samples}
    assert got == {
        ("p1", "train", "gke-n1", "GPU-aa", "node_duty_cycle", 80.0),  # unit "%": untouched
        ("p1", "train", "gke-n2", "GPU-bb", "container_duty_cycle", 0.0),
    }
    node_req = next(r for r in server.requests if "node/accelerator/duty_cycle" in r.filter)
    assert {"resource.label.cluster_name", "resource.label.node_name"} <= set(
        node_req.aggregation.group_by_fields
    )


def test_dcgm_exporter_host_label_in_either_case(server, make_source):
    """dcgm-exporter named the host `Hostname` until its main branch renamed it `hostname` (2026-05)."""
    target = {"project_id": "p1", "location": "us-central1-a", "cluster": "train"}
    old = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": "gke-old"}
    new = {"gpu": "0", "UUID": "GPU-2", "modelName": "NVIDIA H100 80GB HBM3", "hostname": "gke-new"}
    server.add(
        gauge_series(PROM_UTIL, "prometheus_target", target, old, buckets(T0 + M5, [55.0])),
        gauge_series(PROM_UTIL, "prometheus_target", target, new, buckets(T0 + M5, [65.0])),
        gauge_series(PROM_FB, "prometheus_target", target, new, buckets(T0 + M5, [1024.0])),
    )
    src, _ = make_source(presets=("managed_prometheus_dcgm",))

    result = src.fetch(T0, T0 + M5)

    got = {s.node_name: (s.cluster, s.utilization_pct, s.memory_used_bytes) for s in result.samples}
    # the descriptors carry no unit (Prometheus has none): % and MiB from dcgm-exporter's csv
    assert got == {"gke-old": ("train", 55.0, None), "gke-new": ("train", 65.0, 1024.0 * 2**20)}
    req = next(r for r in server.requests if PROM_UTIL in r.filter)
    assert {"metric.label.hostname", "metric.label.Hostname"} <= set(req.aggregation.group_by_fields)


# --- backfill: coverage before judgement -----------------------------------------------------------


NOW = datetime(2026, 11, 20, 12, 2, tzinfo=UTC)
END = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # NOW floored to the 5-minute alignment
H = timedelta(hours=1)


def hourly(instance: int, first: datetime, last: datetime, value: float = 80.0):
    """One point per hour (end times), as a busy VM's aligned series would carry them."""
    n = int((last - first) / H)
    return nvml(instance, [(first + i * H + M5, value) for i in range(n)])


def intervals(server) -> list[tuple[datetime, datetime]]:
    """The distinct (start, end) asked for, in request order (two metrics per preset)."""
    out: list[tuple[datetime, datetime]] = []
    for r in server.requests:
        span = (r.interval.start_time, r.interval.end_time)
        if span not in out:
            out.append(span)
    return out


def test_first_poll_reads_live_then_backfills_newest_first_in_chunks(server, make_source, store):
    server.add(hourly(0, END - 10 * 24 * H, END))  # a VM busy for the whole billing window
    src, _ = make_source(util={"backfill_chunk_hours": 24, "backfill_chunks_per_run": 3})
    since = NOW - timedelta(days=10)

    first = src.poll(store, NOW, since=since)

    live = (END - 6 * H, END)
    assert intervals(server) == [
        live,  # the live window first, never delayed
        (END - 30 * H, END - 6 * H),
        (END - 54 * H, END - 30 * H),
        (END - 78 * H, END - 54 * H),
    ]
    assert [w.backfill for w in first.windows] == [False, True, True, True] and first.ok
    assert read_watermark(store, "p1", "ops_agent_nvml") == END  # backfill never moves it
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 78 * H, END)]  # merged

    for minutes in (5, 10, 15):  # the next polls: a short live window, then the rest of history
        src.poll(store, NOW + timedelta(minutes=minutes), since=since)
    start = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(start, END + 3 * M5)]
    hours = {s.start for s in load_samples(store, start, END)}
    assert len(hours) == 10 * 24  # every billed hour of the window has its utilization


def test_restart_after_downtime_backfills_the_gap_newest_first(server, make_source, store):
    server.add(hourly(0, END - 5 * 24 * H, END + 3 * 24 * H))
    src, _ = make_source(util={"backfill_chunk_hours": 12, "backfill_chunks_per_run": 2})
    src.poll(store, NOW, since=NOW - 6 * H)  # ran once, then down for three days
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 6 * H, END)]

    server.requests.clear()
    back = NOW + 3 * 24 * H
    restart = src.poll(store, back, since=back - 4 * 24 * H)

    new_end = END + 3 * 24 * H
    assert intervals(server) == [
        (new_end - 6 * H, new_end),  # live: no further back than 6 h, not the whole downtime
        (END - M5, END),  # the window read last before the gap, read again for its late points
        (new_end - 18 * H, new_end - 6 * H),
        (new_end - 30 * H, new_end - 18 * H),
    ]
    assert restart.ok and read_watermark(store, "p1", "ops_agent_nvml") == new_end
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 6 * H, END), (new_end - 30 * H, new_end)]
    for i in range(1, 6):  # the rest of the gap, then the day before the first start
        src.poll(store, back + i * M5, since=back - 4 * 24 * H)
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(new_end - 4 * 24 * H, new_end + 5 * M5)]


def test_backfill_failure_keeps_live_data_and_is_retried_next_poll(server, make_source, store):
    server.add(hourly(0, END - 2 * 24 * H, END))
    src, sleeps = make_source(max_attempts=2, util={"backfill_chunk_hours": 12, "backfill_chunks_per_run": 2})
    # the live window's two metrics answer (descriptors have their own fault queue); then the
    # first backfill chunk hits the quota twice
    server.faults = [None, None, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.RESOURCE_EXHAUSTED]

    report = src.poll(store, NOW, since=NOW - 24 * H)

    assert report.ok and list(report.backfill_failed) == ["p1/ops_agent_nvml"]
    assert len(report.windows) == 1 and sleeps == [1.0]  # retried once, then the backfill stopped
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 6 * H, END)]
    again = src.poll(store, NOW + M5, since=NOW - 24 * H)
    assert [w.start for w in again.windows if w.backfill] == [END - 18 * H, END - 24 * H]
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 24 * H, END + M5)]


def test_backfill_goes_newest_first_across_projects(server, make_source, store):
    server.add(hourly(0, END - 24 * H, END))
    src, _ = make_source(
        util={"projects": ("p1", "p2"), "backfill_chunk_hours": 12, "backfill_chunks_per_run": 3}
    )

    report = src.poll(store, NOW, since=NOW - 24 * H)

    read = [(w.scope, w.start, w.backfill) for w in report.windows]
    assert read == [
        ("p1", END - 6 * H, False),
        ("p2", END - 6 * H, False),
        ("p1", END - 18 * H, True),
        ("p2", END - 18 * H, True),  # the newest unread hours of any project before older ones
        ("p1", END - 24 * H, True),
    ]


def test_the_daemons_live_poll_leaves_history_to_its_backfill_job(server, make_source, store):
    """`poll(backfill=False)` reads the live windows only (detection follows it at once); `backfill`
    then reads the history in paced steps, and `backfill_pending` says when nothing is left."""
    server.add(hourly(0, END - 2 * 24 * H, END))
    src, _ = make_source(util={"backfill_chunk_hours": 12, "backfill_chunks_per_run": 2})
    since = NOW - 2 * 24 * H

    live = src.poll(store, NOW, since=since, backfill=False)
    assert [w.backfill for w in live.windows] == [False] and intervals(server) == [(END - 6 * H, END)]
    assert src.backfill_pending(store, since, NOW) == 1

    step = src.backfill(store, since, NOW)
    assert [(w.start, w.end) for w in step.windows] == [
        (END - 18 * H, END - 6 * H),
        (END - 30 * H, END - 18 * H),
    ]
    assert src.backfill_pending(store, since, NOW) == 1
    src.backfill(store, since, NOW)
    assert src.backfill_pending(store, since, NOW) == 0
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 48 * H, END)]
    assert src.backfill(store, since, NOW).windows == []  # nothing left: no request
    assert len(intervals(server)) == 5


def test_a_backfill_step_stops_between_chunks_on_shutdown(server, make_source, store):
    server.add(hourly(0, END - 2 * 24 * H, END))
    src, _ = make_source(util={"backfill_chunk_hours": 12, "backfill_chunks_per_run": 4})
    src.poll(store, NOW, since=NOW - 2 * 24 * H, backfill=False)
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 1  # the signal arrives while the first chunk is read

    step = src.backfill(store, NOW - 2 * 24 * H, NOW, cancelled=cancelled)
    assert len(step.windows) == 1  # the chunk read was committed; the rest waits for the next start
    assert read_coverage(store, "p1", "ops_agent_nvml") == [(END - 18 * H, END)]


def test_the_stand_in_answers_points_in_the_interval_newest_first_page_by_page(server) -> None:
    """What every test here relies on, read with the real client: of each series, its points in
    (start, end] newest first (stored out of order; two at one end time come in reverse stored
    order), the series `page_size` at a time. The stand-in serves them from bytes it indexed once."""
    from google.cloud import monitoring_v3
    from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

    steps = (3, 0, 5, 1, 4, 2, 2, 6)
    server.add(*(nvml(i, [(T0 + k * M5, 10.0 * i + n) for n, k in enumerate(steps)]) for i in range(3)))
    channel = grpc.insecure_channel(server.address)
    client = monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(channel=channel))
    request = {
        "name": "projects/p1",
        "filter": f'metric.type = "{NVML}"',
        "interval": {"start_time": T0 + M5, "end_time": T0 + 3 * M5},
    }
    try:
        pages = [list(page.time_series) for page in client.list_time_series(request=request).pages]
    finally:
        channel.close()
    assert [len(p) for p in pages] == [2, 1]
    got = [[(p.interval.end_time, p.value.double_value) for p in ts.points] for page in pages for ts in page]
    # (T0 + M5, T0 + 3 M5]: step 3, then the two at step 2 (stored 6th and 7th: the 7th first)
    assert got == [
        [(T0 + 3 * M5, 10.0 * i), (T0 + 2 * M5, 10.0 * i + 6), (T0 + 2 * M5, 10.0 * i + 5)] for i in range(3)
    ]


def test_a_page_over_grpcs_default_4_mib_is_read_on_the_plaintext_channel(make_source) -> None:
    """The generated transport lifts gRPC's 4 MiB receive limit; the plaintext channel built for an
    `api_endpoint` (emulators, a local proxy) kept it, so a large page failed with
    RESOURCE_EXHAUSTED ("Received message larger than max"), retried as if it were a quota
    (a helper's run of seed 11's fleet through the stand-in: 5,300,508 bytes)."""
    srv = FakeMonitoringServer(page_size=1000).start()
    try:
        # 50 series with a 110 kB label each: a 5.5 MB page, without building 5 MB of points
        wide = {"model": "NVIDIA H100 80GB HBM3 " + "x" * 110_000}
        srv.add(*(nvml(i, buckets(T0 + M5, [float(i)] * 12), labels=wide) for i in range(50)))
        cfg = UtilizationConfig(
            source="cloud_monitoring", presets=("ops_agent_nvml",), api_endpoint=srv.address, insecure=True,
            projects=("p1",),
        )  # fmt: skip
        src = CloudMonitoringSource(cfg, GoogleConfig(credentials="anonymous"), sleep=lambda s: None)
        try:
            result = src.fetch(T0, T0 + 12 * M5)
        finally:
            src.close()
    finally:
        srv.stop()
    assert len(result.samples) == 50 * 12
    assert result.requests == 3  # one page of series, the memory metric, one descriptor


def test_the_backfill_never_reads_what_the_live_poll_will(server, make_source, store):
    """The backfill looked for unread ranges up to the clock: run after a 5-minute boundary and
    before the next live poll, it read the newest window (seconds after it closed) and the live
    poll read it again (helper 64's audit). History ends at the watermark."""
    server.add(nvml(0, buckets(END - 30 * H + M5, [50.0] * (12 * 31))))
    src, _ = make_source(util={"backfill_chunk_hours": 12, "backfill_chunks_per_run": 4})
    since = NOW - 24 * H
    src.poll(store, NOW, since=since, backfill=False)
    while src.backfill(store, since, NOW).windows:
        pass
    assert src.backfill_pending(store, since, NOW) == 0
    later = NOW + M5 + timedelta(seconds=5)  # past the next boundary, before the next live poll
    assert src.backfill_pending(store, since, later) == 0
    server.requests.clear()
    assert src.backfill(store, since, later).windows == []
    src.poll(store, later + timedelta(seconds=5), since=since, backfill=False)
    assert intervals(server) == [(END - M5, END + M5)]  # the live poll's, with its re-read margin


def test_a_restart_after_the_cap_reads_the_last_window_before_the_gap_again(server, make_source, store):
    """The live poll re-reads the window before its watermark for points that land late; after a
    gap longer than the live cap (6 h down) it started at the cap, and the backfill never reads
    again what was read: a point landing after the last poll before the gap was lost, its hour's
    mean kept without it (0 % where 8.3 %: helper 64's audit)."""
    server.add(nvml(0, buckets(END - 30 * H + M5, [0.0] * (12 * 30 - 1))))  # up to END - 5 min
    src, _ = make_source()
    src.poll(store, NOW, since=NOW - 24 * H)
    assert not [s for s in load_samples(store, END - M5, END)]
    server.add(nvml(0, [(END, 100.0)]))  # the window ending at END lands after that poll
    back = NOW + 8 * H
    src.poll(store, back, since=back - 24 * H)
    assert [s.utilization_pct for s in load_samples(store, END - M5, END)] == [100.0]


def test_a_failing_reread_before_the_gap_does_not_cost_the_live_window(server, make_source, store):
    """The re-read of the window before a gap was fetched with the live window, in one try: its
    failure dropped a live read that had succeeded, and as it was asked for again from the same
    watermark, a window that kept failing held the present back for good (helper 67's review)."""
    server.add(hourly(0, END - 5 * 24 * H, END + 3 * 24 * H))
    src, _ = make_source(max_attempts=2)
    src.poll(store, NOW, since=NOW - 6 * H)  # ran once, then down for three days
    back, new_end = NOW + 3 * 24 * H, END + 3 * 24 * H
    # the live window's two metrics answer; the re-read's first request hits the quota twice
    server.faults = [None, None, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.RESOURCE_EXHAUSTED]
    report = src.poll(store, back, since=back - 4 * 24 * H, backfill=False)
    assert report.ok and list(report.backfill_failed) == ["p1/ops_agent_nvml"]
    assert read_watermark(store, "p1", "ops_agent_nvml") == new_end
