"""`monitor.detectors.costs`: the detectors' cost rows kept in the engine.

Detectors used to sum `CostHour`s in Python, each amount rounded to the micro (`q6`); `Costs.sums`
must give those sums exactly, group for group, and `rows` must give back the rows a filter selects
in the readers' order. The store path (`monitor.assemble.stored_costs`) must read what the list path
holds for the same rows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor import month
from monitor.assemble import stored_costs
from monitor.billing_poll import HourlyCost
from monitor.detectors.base import q6
from monitor.detectors.costs import Costs, one_of
from monitor.detectors.inputs import CostHour, DetectorInputs
from monitor.state.analytics import AggregateStore
from tests.aggregates import cost_rows, stored

T0 = datetime(2026, 10, 31, 20, tzinfo=UTC)  # 13:00 in Los Angeles: the billing month turns at 07:00 UTC
H = timedelta(hours=1)
D = Decimal


def _row(hour: int, sub: str = "compute.gpu", cost: str = "1", credits: str = "0", **kw: object) -> CostHour:
    return CostHour(hour=T0 + hour * H, project=kw.pop("project", "ml"), subcategory=sub, cost=D(cost),
                    credits=D(credits), **kw)  # type: ignore[arg-type]  # fmt: skip


_rows = st.lists(
    st.builds(
        lambda h, sub, p, cost, credit, prov, lab, inv: _row(
            h, sub, str(cost), str(credit), project=p, provisional=prov, labels=lab, invoice_month=inv
        ),
        st.integers(0, 30),
        st.sampled_from(["compute.gpu", "compute.cpu", "network.inter_zone", "storage.gcs", "tax"]),
        st.sampled_from(["ml", "web", None]),
        st.decimals(D("-50"), D("500"), places=8, allow_nan=False, allow_infinity=False),
        st.decimals(D("-20"), D("0"), places=7, allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.sampled_from([{}, {"team": "ml"}, {"team": "ml", "job": "llm"}, {"job": "llm"}]),
        st.sampled_from([None, "202610", "202611", "bad"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows)
def test_sums_equal_the_rows_summed_one_by_one_at_the_micro(rows: list[CostHour]) -> None:
    want: dict[tuple, list] = defaultdict(lambda: [D(0), D(0), False, 0])
    for r in rows:
        acc = want[(r.project, r.category, r.hour)]
        acc[0] += q6(r.cost)
        acc[1] += q6(r.credits)
        acc[2] = acc[2] or r.provisional
        acc[3] += 1
    got = Costs.from_rows(rows).sums(("project", "category", "hour"))
    assert {k: [s.cost, s.credits, s.provisional, s.rows] for k, s in got.items()} == dict(want)
    assert list(got) == sorted(got, key=lambda k: (k[0] is not None, k[0] or "", k[1], k[2]))  # None first


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows, st.sampled_from(["202610", "202611"]))
def test_the_month_filter_is_row_month(rows: list[CostHour], m: str) -> None:
    """An invoice month when the row has a valid one, else the usage hour's (Los Angeles) month."""
    want = [r for r in rows if month.row_month(r.invoice_month, r.hour) == m]
    assert Costs.from_rows(rows).rows(month_of=m) == want


def test_rows_are_the_originals_in_order_under_every_filter() -> None:
    rows = [
        _row(0, "orchestration.gke", "2", cluster="c1"),
        _row(0, "compute.gpu", "0", zone="us-central1-a", labels={"job": "a"}),
        _row(1, "compute.commitment_fee", "5"),
        _row(2, "compute.cpu", "3", project="web", zone="", labels={"job": "b"}),
        _row(3, "storage.filestore", "1"),
    ]
    costs = Costs.from_rows(rows)
    assert costs.rows() == rows
    assert costs.rows(start=T0 + H, end=T0 + 3 * H) == rows[2:4]
    assert costs.rows(categories=("compute",), exclude=("compute.commitment_fee",)) == [rows[1], rows[3]]
    assert costs.rows(categories=("compute",), positive=True) == rows[2:4]
    assert costs.rows(subcategories=("orchestration.gke", "storage.filestore")) == [rows[0], rows[4]]
    assert costs.rows(project="web") == [rows[3]]
    assert costs.rows(has_zone=True) == [rows[1]]
    jobs = costs.labels_where(lambda labels: "job" in labels)
    assert costs.rows(labels=jobs) == [rows[1], rows[3]]
    assert costs.rows(labels=[]) == []


def test_an_unknown_grouping_is_named() -> None:
    with pytest.raises(ValueError, match=r"cannot group by \['team'\]; choose from .*'project'"):
        Costs.from_rows([_row(0)]).sums(("project", "team"))


def test_two_engines_alive_at_once_each_sum_their_own_rows() -> None:
    """An engine over rows loads them into a DuckDB session's TEMP table (`monitor.scratch`): two
    alive at once each sum their own (a plain table in the shared database is one `costs` for both)."""
    first = Costs.from_rows([_row(0, cost="1.5")])
    second = Costs.from_rows([_row(0, cost="2.25"), _row(1, cost="0.25")])
    try:
        assert first.sums(())[()].cost == D("1.5")
        assert second.sums(())[()].cost == D("2.5")
        assert first.sums(())[()].rows == 1
    finally:
        first.close()
        second.close()


def test_empty_costs_answer_without_an_engine() -> None:
    costs = Costs.from_rows([])
    assert (len(costs), costs.sums(("project",)), costs.rows(), costs.fetched) == (0, {}, [], 0)


def test_detector_inputs_take_rows_into_the_engine() -> None:
    rows = [_row(0), _row(1, "network.inter_zone", "2.5")]
    inputs = DetectorInputs(window_start=T0, window_end=T0 + 2 * H, provisional_from=T0 + 2 * H, hourly=rows)
    assert isinstance(inputs.hourly, Costs) and inputs.hourly.rows() == rows
    assert inputs.hourly.sums(("category",))[("network",)].net == D("2.5")


def _hourly(
    hour: int, sub: str, gross: int, credit: int, labels: str | None, invoice: str | None
) -> HourlyCost:
    return HourlyCost(
        usage_hour=T0 + hour * H, subcategory=sub, gross_micros=gross, cud_micros=0, sud_micros=0,
        other_credit_micros=credit, credit_micros=credit, net_micros=gross + credit, row_count=1,
        provisional=False, usage_amount=1.5,
        keys={"project_id": "ml", "zone": "us-central1-a", "user_labels": labels, "invoice_month": invoice,
              "sku_description": "Nvidia H100 80GB GPU running in Americas", "pricing_model": "on_demand"},
    )  # fmt: skip


def test_the_store_reads_what_the_rows_hold() -> None:
    """`stored_costs` (Arrow from the aggregate store) against the same rows read one by one
    (`cost_hours`): the same `CostHour`s, the same sums, provisional from `since` on."""
    raw = [
        _hourly(0, "compute.gpu", 88_000_000, -8_000_000, "job=llm,team=ml", "202610"),
        _hourly(0, "network.inter_zone", 333_333, 0, None, "202610"),
        _hourly(12, "compute.gpu", 88_000_000, 0, "job=llm,team=ml", "202611"),
        _hourly(13, "storage.gcs", 1_000_001, -1, "team=ml", None),
    ]
    store = stored(raw)
    end = T0 + 14 * H
    costs = stored_costs(store, T0, end, end)
    rows = cost_rows(raw)
    assert costs.rows() == rows and len(costs) == 4
    by = ("project", "subcategory", "day", "compute")
    assert costs.sums(by) == Costs.from_rows(rows).sums(by)
    assert costs.label_sets["job=llm,team=ml"] == {"job": "llm", "team": "ml"}
    assert costs.sums(("category",), month_of="202611")[("compute",)].cost == D(88)
    assert costs.fetched > 0
    later = stored_costs(store, T0, end, T0 + 12 * H)
    assert [r.provisional for r in later.rows()] == [False, False, True, True]


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local time zone 5:30 east of UTC (DuckDB sessions start in it)."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_store_reads_the_same_whatever_the_machines_time_zone(far_from_utc: None, tmp_path: Path) -> None:
    """Every connection of the aggregate store runs in UTC, a cursor of the in-memory store too (it
    started in the machine's zone and the window's hours moved by 5:30: 2 of these 4 rows read)."""
    test_the_store_reads_what_the_rows_hold()
    for store in (AggregateStore(), AggregateStore(tmp_path / "aggregates.duckdb")):
        conn = store.connect()
        try:
            assert conn.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
        finally:
            conn.close()


def test_a_stored_window_is_read_in_place_in_one_snapshot_until_closed(tmp_path: Path) -> None:
    """`stored_costs` is a view on the aggregate store, not a copy of the window: every query of a
    detection run reads the snapshot it opened with (a poll landing meanwhile does not split its
    sums), the file is held until `close` (another process waits for it, as for any read) and let go
    then; a closed engine says so rather than answering nothing."""
    import subprocess
    import sys

    raw = [
        _hourly(0, "compute.gpu", 88_000_000, -8_000_000, "job=llm,team=ml", "202610"),
        _hourly(1, "compute.gpu", 88_000_000, 0, "job=llm,team=ml", "202610"),
        _hourly(2, "network.inter_zone", 333_333, 0, None, "202610"),
    ]
    path = tmp_path / "aggregates.duckdb"
    store = stored(raw[:2], into=AggregateStore(path))
    end = T0 + 14 * H
    costs = stored_costs(store, T0, end, end)
    before = costs.sums(("subcategory",))
    stored(raw[2:], into=store)  # a billing poll writes while the run reads
    assert costs.sums(("subcategory",)) == before and len(costs.rows()) == 2
    fresh = stored_costs(store, T0, end, end)
    assert len(fresh.rows()) == 3
    fresh.close()

    def other_process_opens() -> bool:
        probe = f"import duckdb; duckdb.connect({str(path)!r}).close()"
        return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0

    assert not other_process_opens()
    costs.close()
    assert other_process_opens()
    with pytest.raises(RuntimeError, match="closed"):
        costs.sums(("project",))


def test_one_of_matches_keys_null_safely_and_nothing_for_no_keys() -> None:
    """`one_of`: a row is kept when its values equal one key's, a None in a key matching a NULL
    (a fee row without a cluster), and no key keeps no row."""
    h = T0
    rows = [
        CostHour(hour=h, project="a", subcategory="orchestration.gke", cost=D(1), cluster="c1"),
        CostHour(hour=h, project="a", subcategory="orchestration.gke", cost=D(2), cluster=None),
        CostHour(hour=h, project="b", subcategory="orchestration.gke", cost=D(4), cluster="c1"),
    ]
    costs = Costs.from_rows(rows)
    pick = one_of(("project", "cluster"), [("a", None), ("b", "c1")])
    assert [r.cost for r in costs.rows(condition=pick)] == [D(2), D(4)]
    assert costs.rows(condition=one_of(("project", "cluster"), [])) == []


def test_egress_reads_the_same_from_the_store_as_from_rows() -> None:
    """The egress detectors' SQL (workloads by `workload_label` through the label sets, sums per
    sender, the readers' order for ties) on the aggregate store's view gives the findings it gives
    on the same rows in a list: the store's label-set keys are its raw label strings."""
    from monitor.detectors.egress import CrossZoneEgress, EgressConfig

    def traffic(hour: int, vm: str, zone: str, labels: str | None) -> HourlyCost:
        return HourlyCost(
            usage_hour=T0 + hour * H, subcategory="network.inter_zone", gross_micros=2_500_000,
            cud_micros=0, sud_micros=0, other_credit_micros=0, credit_micros=0, net_micros=2_500_000,
            row_count=1, provisional=False, usage_amount=250.1,
            keys={"project_id": "ml", "zone": zone, "region": "us-central1", "resource_name": vm,
                  "instance_id": f"id-{vm}", "user_labels": labels, "invoice_month": "202611",
                  "sku_description": "Network Inter Zone Data Transfer Out", "sku_id": "DE9E-AFBF-A0F4"},
        )  # fmt: skip

    raw = [traffic(h, "w-0", "us-central1-a", "job=llm,team=ml") for h in range(24)]
    raw += [traffic(h, "w-1", "us-central1-c", "job=llm,team=ml") for h in range(24)]
    raw += [traffic(h, "lone", "us-central1-b", "team=ml") for h in range(24)]
    end = T0 + 24 * H
    detector = CrossZoneEgress(EgressConfig(workload_label="job"))
    found = []
    for hourly in (stored_costs(stored(raw), T0, end, end), cost_rows(raw)):
        inp = DetectorInputs(window_start=T0, window_end=end, provisional_from=end, hourly=hourly)
        found.append([f.to_dict() for f in detector.evaluate(inp, end)])
    assert found[0] == found[1]
    assert [(f["scope"]["labels"], f["scope"]["instance"]) for f in found[0]] == [
        ({}, "lone"),  # ("instance", ...) sorts before ("label", ...)
        ({"job": "llm"}, None),
    ]
