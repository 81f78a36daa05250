"""The daemon's estimates read only the utilization hours billing does not cover
(`monitor.assemble._unbilled`, `monitor.utilization.mirror.util_hours`' `select`): the same
estimated GPU hours as reading every hour, whatever the hosts, their identities and what billed.

`_estimates` judges an hour billed by the identities of the first host it sees with the hour's
primary identity, so the hours of hosts that share a primary identity but answer to different
others (an instance id seen with two names) are read whole."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal as D

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monitor.assemble import _unbilled, assemble_inputs, gpu_hours, gpu_node_hours
from monitor.gpus import GpuCostHour, GpuNodeHours
from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from monitor.utilization import GpuSample, load_util_hours, migrate, mirror, replace_window
from tests.aggregates import stored
from tests.test_analyze import hourly
from tests.test_detectors_common import FakePrices
from tests.test_utilization_hourly import M5, T0, H

#: Monitored hosts (project, zone, instance_id, instance_name, cluster, node_name): `a` and `b`
#: are one instance id seen under two names, `d` a GKE node.
HOSTS = {
    "a": ("p1", "z1", "42", "vm-a", None, None),
    "b": ("p1", "z1", "42", "vm-b", None, None),
    "c": ("p1", "z1", "7", "vm-c", None, None),
    "d": ("p1", "z1", None, None, "c1", "gke-c1-pool-1a2b3c4d-x"),
    "e": ("p1", "z1", "9", None, None, None),
}
#: Billed nodes (instance, instance_id, cluster): by id and name, by name alone, a GKE node.
NODES = {
    "a": ("vm-a", "42", None),
    "b": ("vm-b", None, None),
    "c": ("vm-c", "7", None),
    "d": ("gke-c1-pool-1a2b3c4d-x", None, "c1"),
    "e": ("vm-e", "9", None),
}
HOURS = 4
END = T0 + HOURS * H
#: H100 on demand, as billing names it and as the Monitoring label does.
PRICES = FakePrices(table={("H100", "on_demand"): D(11), ("H100 80GB", "on_demand"): D(11)})


def _sample(host: str, gpu: str, k: int, pct: float) -> GpuSample:
    signal = "node_duty_cycle" if HOSTS[host][4] else "gpu_utilization"
    start = T0 + k * M5
    return GpuSample(*HOSTS[host], gpu, "H100", start, start + M5, pct, signal, None)


def _billed(node: str, hour: int) -> GpuCostHour:
    instance, iid, cluster = NODES[node]
    return GpuCostHour(
        hour=T0 + hour * H, project="p1", zone="z1", region="us-central1", instance=instance, instance_id=iid,
        cluster=cluster, machine_type=None, gpu_model="H100", pricing_model="on_demand", gpu_hours=D(2),
        cost_micros=22_000_000,
    )  # fmt: skip


def _estimated(state, aggregates, samples, billed) -> tuple[list, list, int, int]:
    """(estimated hours from every utilization hour, from the unbilled ones; hours read each way)."""
    gce = [s for s in samples if not s.cluster]
    gke = [s for s in samples if s.cluster]
    for preset, got in (("gce_gpu_agent", gce), ("gke", gke)):
        replace_window(state, "p1", preset, T0, END, got, now=END)
    mirror.sync(state, aggregates)
    nodes = GpuNodeHours.from_rows(
        sorted({(r.hour, r.instance): r for r in billed}.values(), key=lambda r: (r.hour, r.instance))
    )
    every = load_util_hours(state, T0, END)
    unbilled = mirror.util_hours(state, aggregates, T0, END, _unbilled(nodes, T0, END))
    want, got = (
        [g for g in gpu_hours(nodes, util, 10.0, PRICES, END, T0) if g.estimated]
        for util in (every, unbilled)
    )
    return want, got, len(every), len(unbilled)


def test_the_unbilled_hours_give_the_estimates_every_hour_gives(stores) -> None:
    state, aggregates = stores
    samples = [_sample(h, g, k, pct) for h, pct in (("c", 2.0), ("e", 60.0)) for g in "01" for k in range(48)]
    billed = [_billed("c", 0), _billed("c", 1), _billed("e", 2)]
    want, got, every, read = _estimated(state, aggregates, samples, billed)
    assert got == want
    assert [(g.instance_id, (g.hour - T0) // H) for g in got] == [
        ("7", 2),
        ("7", 3),
        ("9", 0),
        ("9", 1),
        ("9", 3),
    ]
    assert (every, read) == (16, 10)  # c's hours 0 and 1, e's hour 2: two GPUs each, not read


def test_hosts_of_one_instance_id_under_two_names_are_read_whole(stores) -> None:
    """vm-b is billed by name alone in hour 0. `_estimates` judges the id's hours by the names of
    the host it sees first; reading only what each host's own names leave unbilled would drop vm-b's
    hour 0 and judge vm-a's alone, one GPU of the two."""
    state, aggregates = stores
    samples = [_sample(h, g, k, 1.0) for h, g in (("a", "0"), ("b", "1")) for k in range(12)]
    nodes = GpuNodeHours.from_rows([_billed("b", 0)])
    select = _unbilled(nodes, T0, END)
    assert select([HOSTS["a"], HOSTS["b"]]) == {}  # read whole
    assert select([HOSTS["b"]]) == {HOSTS["b"]: [int((T0 + k * H).timestamp()) for k in (1, 2, 3)]}
    want, got, every, read = _estimated(state, aggregates, samples, [_billed("b", 0)])
    assert got == want
    assert (every, read) == (2, 2)


#: A sample: host, GPU, 5-minute window, utilization (idle, busy, very busy).
_DRAWN = st.tuples(
    st.sampled_from(sorted(HOSTS)),
    st.sampled_from("01"),
    st.integers(0, HOURS * 12 - 1),
    st.sampled_from([1.0, 50.0, 95.0]),
)
#: A billed node-hour: node, hour.
_BILLED = st.tuples(st.sampled_from(sorted(NODES)), st.integers(0, HOURS - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_DRAWN, max_size=60), st.lists(_BILLED, max_size=12))
@example([("a", "0", 0, 1.0), ("b", "1", 0, 1.0)], [("b", 0)])  # one id, two names: always tried
def test_any_hosts_and_billing_give_the_same_estimates(tmp_path_factory, drawn, billed) -> None:
    tmp = tmp_path_factory.mktemp("u")
    state, aggregates = SQLiteStore(tmp / "state.sqlite"), AggregateStore(None)
    try:
        migrate(state)
        samples = list({(h, g, k): _sample(h, g, k, pct) for h, g, k, pct in drawn}.values())
        want, got, every, read = _estimated(state, aggregates, samples, [_billed(n, h) for n, h in billed])
        assert got == want
        assert read <= every
    finally:
        state.close()
        aggregates.close()


def test_the_daemons_detection_reads_the_unbilled_hours(stores) -> None:
    """Wired: the daemon's inputs estimate from the copy's unbilled hours (vm-c's late hour, the GKE
    node never billed) what every stored hour gives."""
    state, aggregates = stores
    samples = [_sample(h, g, k, 2.0) for h in "cd" for g in "01" for k in range(48)]
    rows = [hourly(0, gross=22_000_000, gpu_hours=2.0, instance="vm-c", iid="7") for _ in range(3)]
    stored(
        [replace(r, usage_hour=T0 + h * H, keys={**r.keys, "project_id": "p1", "zone": "z1"})
         for h, r in enumerate(rows)],
        into=aggregates,
    )  # fmt: skip
    for preset, got in (("gce_gpu_agent", samples[:96]), ("gke", samples[96:])):
        replace_window(state, "p1", preset, T0, END, got, now=END)
    inputs = assemble_inputs(
        state, T0, END, END + H, aggregates=aggregates, provisional_days=3, idle_threshold_pct=10.0,
        prices=PRICES,
    )  # fmt: skip
    try:
        got = [g for g in inputs.gpu_hours if g.estimated]
        every = gpu_hours(gpu_node_hours(aggregates, T0, END, T0), load_util_hours(state, T0, END), 10.0,
                          PRICES, END, T0)  # fmt: skip
    finally:
        inputs.hourly.close()
    assert sorted({(g.instance, (g.hour - T0) // H) for g in got}) == [
        ("gke-c1-pool-1a2b3c4d-x", 0), ("gke-c1-pool-1a2b3c4d-x", 1), ("gke-c1-pool-1a2b3c4d-x", 2),
        ("gke-c1-pool-1a2b3c4d-x", 3), ("vm-c", 3),
    ]  # fmt: skip
    assert got == [g for g in every if g.estimated]
