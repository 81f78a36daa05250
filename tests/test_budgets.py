"""Budgets from config and from the Cloud Billing Budget API, the latter through the real
`BudgetServiceClient` against a local gRPC server serving `google.cloud.billing.budgets.v1`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud.billing import budgets_v1
from google.protobuf import struct_pb2

from monitor.config import BudgetsConfig, GoogleConfig, parse_config
from monitor.cycle import Deps, budget_specs, detection_inputs, run_billing_poll
from monitor.detectors.budget_forecast import BudgetForecast
from monitor.detectors.inputs import BudgetSpec
from monitor.errors import ConfigError, PermanentSourceError, RetryableSourceError
from monitor.metrics import Metrics
from monitor.sources.base import MeteredSource
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.budgets import (
    Budget,
    BudgetApiSource,
    BudgetScope,
    ConfigBudgetSource,
    budget_from_api,
    budget_source_from_config,
)
from monitor.sources.duckdb_conn import open_billing_db
from monitor.state.analytics import AggregateStore
from monitor.state.store import SQLiteStore
from tests.fakes.budget_server import FakeBudgets
from tests.test_queries import export_row as qrow
from tests.test_queries import load_rows, project_number

ACCOUNT = "012345-6789AB-CDEF01"


def _usd(units: int, nanos: int = 0, currency: str = "USD") -> budgets_v1.BudgetAmount:
    return budgets_v1.BudgetAmount(
        specified_amount={"currency_code": currency, "units": units, "nanos": nanos}
    )


def _labels(**kv: str) -> dict[str, struct_pb2.ListValue]:
    return {k: struct_pb2.ListValue(values=[struct_pb2.Value(string_value=v)]) for k, v in kv.items()}


API_BUDGETS = [
    budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-train",
        display_name="training projects",
        amount=_usd(25_000, 500_000_000),
        budget_filter=budgets_v1.Filter(
            projects=["projects/441570621172", "projects/99"],
            services=["services/6F81-5844-456A"],
            calendar_period=budgets_v1.CalendarPeriod.MONTH,
            credit_types_treatment=budgets_v1.Filter.CreditTypesTreatment.EXCLUDE_ALL_CREDITS,
        ),
    ),
    budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-team",
        display_name="team ml",
        amount=_usd(8_000, 10_000_000),
        budget_filter=budgets_v1.Filter(
            labels=_labels(team="ml"), calendar_period=budgets_v1.CalendarPeriod.QUARTER
        ),
    ),
    budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-last",
        display_name="same as last month",
        amount=budgets_v1.BudgetAmount(last_period_amount={}),
    ),
    budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-eur",
        display_name="euro budget",
        amount=_usd(1_000, currency="EUR"),
    ),
    budgets_v1.Budget(name=f"billingAccounts/{ACCOUNT}/budgets/b-all", amount=_usd(100_000)),
]


@pytest.fixture
def fake() -> Iterator[FakeBudgets]:
    with FakeBudgets(ACCOUNT, API_BUDGETS, page_size=2) as server:
        yield server  # type: ignore[misc]


def _source(fake: FakeBudgets, account: str = ACCOUNT, **kw) -> BudgetApiSource:
    cfg = BudgetsConfig(source="api", billing_account=account, api_endpoint=fake.address)
    return BudgetApiSource(
        cfg, GoogleConfig(credentials="anonymous"), insecure=True, retry_deadline_s=0.5, **kw
    )


def test_api_budgets_all_pages_parsed_exactly(fake: FakeBudgets) -> None:
    src = _source(fake, account=f"billingAccounts/{ACCOUNT}")
    budgets = src.budgets()

    assert [r.parent for r in fake.requests] == [f"billingAccounts/{ACCOUNT}"] * 3
    assert [r.page_token for r in fake.requests] == ["", "2", "4"]
    assert budgets == [
        Budget(
            name="training projects",
            amount_usd=Decimal("25000.5"),
            scope=BudgetScope.PROJECT,
            period="month",
            project_numbers=("441570621172", "99"),
            services=("6F81-5844-456A",),
            credits="exclude_all",
            source="api",
            resource_name=f"billingAccounts/{ACCOUNT}/budgets/b-train",
        ),
        Budget(
            name="team ml",
            amount_usd=Decimal("8000.01"),
            scope=BudgetScope.LABEL,
            period="quarter",
            labels=(("team", "ml"),),
            source="api",
            resource_name=f"billingAccounts/{ACCOUNT}/budgets/b-team",
        ),
        Budget(
            name="b-all",
            amount_usd=Decimal("100000"),
            scope=BudgetScope.TOTAL,
            source="api",
            resource_name=f"billingAccounts/{ACCOUNT}/budgets/b-all",
        ),
    ]
    assert len(src.skipped) == 2
    assert "same as last month" in src.skipped[0] and "last period" in src.skipped[0]
    assert "euro budget" in src.skipped[1] and "EUR" in src.skipped[1]


def test_api_errors_are_classified(fake: FakeBudgets) -> None:
    with pytest.raises(PermanentSourceError, match="PERMISSION_DENIED"):
        _source(fake, account="other-account").budgets()
    fake.fail_always = grpc.StatusCode.UNAVAILABLE
    with pytest.raises(RetryableSourceError, match="budget API"):
        _source(fake).budgets()


def test_api_needs_a_billing_account() -> None:
    # as the config loads, so `gpucost check` says it too (it passed, and `run` refused)
    with pytest.raises(
        ConfigError, match=r'^<config>: budgets\.billing_account: required when budgets\.source = "api"'
    ):
        parse_config({"budgets": {"source": "api"}})


def test_budgets_are_named_once_with_finite_amounts() -> None:
    # two of one name crashed every detection run (UNIQUE constraint on findings.fingerprint)
    two = [{"name": "fleet", "amount_usd": 100.0}, {"name": "fleet", "amount_usd": 200.0}]
    with pytest.raises(ConfigError, match=r'budgets\.items: "fleet" names two budgets \(items 0 and 1\)'):
        parse_config({"budgets": {"items": two}})
    with pytest.raises(ConfigError, match=r"budgets\.items\.0\.amount_usd: Input should be a finite number"):
        parse_config({"budgets": {"items": [{"name": "fleet", "amount_usd": float("inf")}]}})
    for label in ("=research", "team=", "team"):
        with pytest.raises(ConfigError, match=r'budgets\.items\.0\.label: expected "key=value"'):
            parse_config({"budgets": {"items": [{"name": "x", "amount_usd": 1.0, "label": label}]}})


def test_config_budgets() -> None:
    cfg = parse_config(
        {
            "budgets": {
                "items": [
                    {"name": "total", "amount_usd": 50000},
                    {"name": "train", "amount_usd": 1500.1, "project": "ml-train"},
                    {"name": "team", "amount_usd": 900.25, "label": "team = ml"},
                ]
            }
        }
    ).budgets
    src = budget_source_from_config(cfg, GoogleConfig())
    assert isinstance(src, ConfigBudgetSource)
    assert src.budgets() == [
        Budget(name="total", amount_usd=Decimal("50000"), scope=BudgetScope.TOTAL),
        Budget(name="train", amount_usd=Decimal("1500.1"), scope=BudgetScope.PROJECT, projects=("ml-train",)),
        Budget(name="team", amount_usd=Decimal("900.25"), scope=BudgetScope.LABEL, labels=(("team", "ml"),)),
    ]


def test_factory_builds_the_api_source() -> None:
    cfg = BudgetsConfig(source="api", billing_account=ACCOUNT)
    src = budget_source_from_config(cfg, GoogleConfig(credentials="anonymous"))
    assert isinstance(src, BudgetApiSource) and src.parent == f"billingAccounts/{ACCOUNT}"


def _api(**flt) -> Budget:
    msg = budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b", display_name="b", amount=_usd(8_000),
        budget_filter=budgets_v1.Filter(**flt),
    )  # fmt: skip
    parsed = budget_from_api(msg)
    assert isinstance(parsed, Budget)
    return parsed


def test_only_budgets_the_forecast_measures_are_evaluated() -> None:
    """The forecast is of this invoice month's spend, net of every credit, of the account, one
    project or one kept label. A quarter's or a year's amount, a folder's budget and one net of
    some credit types only were each forecast as that: a team's $8,000 quarterly budget was "$8,000
    for 2026-11", a folder's budget was set against the whole account's spend."""
    treatment = budgets_v1.Filter.CreditTypesTreatment
    unevaluable = [
        _api(calendar_period=budgets_v1.CalendarPeriod.QUARTER),
        _api(calendar_period=budgets_v1.CalendarPeriod.YEAR),
        _api(custom_period={"start_date": {"year": 2026, "month": 1, "day": 1}}),
        _api(resource_ancestors=["folders/952552315250"]),
        _api(subaccounts=["billingAccounts/00AAAA-BBBBBB-CCCCCC"]),
        _api(credit_types_treatment=treatment.INCLUDE_SPECIFIED_CREDITS, credit_types=["PROMOTION"]),
        _api(labels=_labels(**{"cost-center": "ml"})),  # a key the aggregates do not keep: $0 spent
    ]
    assert budget_specs(unevaluable, kept_labels=("team", "job")) == []
    evaluable = [
        _api(calendar_period=budgets_v1.CalendarPeriod.MONTH, labels=_labels(team="ml")),
        _api(credit_types_treatment=treatment.EXCLUDE_ALL_CREDITS),  # gross: before credits
    ]
    assert budget_specs(evaluable, kept_labels=("team", "job")) == [
        BudgetSpec(name="b", amount=Decimal(8000), label=("team", "ml")),
        BudgetSpec(name="b", amount=Decimal(8000), gross=True),
    ]


def test_a_config_budgets_label_key_is_kept() -> None:
    """A `[budgets]` label whose key `[billing] labels` did not name was never stored: its budget
    read $0.00 of spend and never fired ("k8s-namespace=llm-pretrain" on a simulated fleet)."""
    item = {"name": "ns", "amount_usd": 1.0, "label": "k8s-namespace = llm-pretrain"}
    cfg = parse_config({"budgets": {"items": [item]}})
    assert cfg.stored_label_keys()[-1] == "k8s-namespace"


# --- API budgets of one project: the number mapped to its id from the billing export --------------

NOW = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
H = timedelta(hours=1)
TRAIN, RESEARCH = project_number("ml-train"), project_number("ml-research")


class _Budgets:
    """A `BudgetSource` of fixed budgets (those `budget_from_api` made of the fake server's)."""

    def __init__(self, budgets: list[Budget]):
        self.skipped: list[str] = []
        self._budgets = budgets

    def budgets(self) -> list[Budget]:
        return list(self._budgets)


class _NoPrices:
    def price_book(self, now: datetime) -> None:
        return None


@pytest.fixture
def polled(tmp_path: Path) -> Iterator[Callable[[list[Budget]], tuple[Deps, MeteredSource]]]:
    """Deps of a daemon with `budgets`, after one billing poll of an export holding two projects'
    November spend: ml-train $75.125/h, ml-research $40/h, hourly from Nov 10."""
    with ExitStack() as stack:

        def make(budgets: list[Budget]) -> tuple[Deps, MeteredSource]:
            conn = stack.enter_context(open_billing_db(None))
            hours = [datetime(2026, 11, 10, tzinfo=UTC) + h * H for h in range(10 * 24)]
            core = "A3 Instance Core running in Americas"
            load_rows(
                conn,
                [qrow(core, 75.125, hour=t, project="ml-train") for t in hours]
                + [qrow(core, 40.0, hour=t, project="ml-research") for t in hours],
            )
            billing = MeteredSource(DuckDBBillingSource(conn))
            deps = Deps(
                cfg=parse_config({}),
                clock=None,  # type: ignore[arg-type]  (steps get `now` injected)
                store=stack.enter_context(closing(SQLiteStore(tmp_path / "state.sqlite"))),
                aggregates=stack.enter_context(closing(AggregateStore(None))),
                billing=billing,
                utilization=None,
                prices=_NoPrices(),
                budgets=_Budgets(budgets),
                detectors=[],
                notifier=None,  # type: ignore[arg-type]
                metrics=Metrics.create(),
            )
            run_billing_poll(deps, NOW)
            return deps, billing

        yield make


def _forecast(deps: Deps) -> list[Any]:
    inputs = detection_inputs(deps, NOW)
    try:
        return [(f.fingerprint, f.summary, f.evidence) for f in BudgetForecast().evaluate(inputs, NOW)]
    finally:
        inputs.hourly.close()


def _evaluated(deps: Deps) -> list[str | None]:
    """The projects of the budgets a detection run forecasts."""
    inputs = detection_inputs(deps, NOW)
    inputs.hourly.close()
    return [b.project for b in inputs.budgets]


def _api_budgets(*budgets: budgets_v1.Budget) -> list[Budget]:
    with FakeBudgets(ACCOUNT, list(budgets), page_size=10) as server:
        return _source(server).budgets()  # type: ignore[arg-type]


def test_an_api_budget_of_one_project_is_forecast_as_its_config_twin(polled) -> None:
    """The Budget API names a budget's project by number (`projects/<number>`), the aggregates by
    id: every such budget was skipped ("multi-project / service filters"), so a team whose Cloud
    Billing budgets are per project got no forecast at all. The export's `project` record maps the
    number to the id: the budget is forecast on ml-train's spend ($18,030.00 to Nov 20 12:00), as
    the same budget written in the config with the project id is, and never on the account's."""
    api = budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-train",
        display_name="ml-train",
        amount=_usd(30_000),
        budget_filter=budgets_v1.Filter(projects=[f"projects/{TRAIN}"]),
    )
    (budget,) = _api_budgets(api)
    assert budget.project_numbers == (TRAIN,) and budget.projects == ()
    deps, billing = polled([budget])
    by_api = _forecast(deps)
    twin = {"name": "ml-train", "amount_usd": 30000, "project": "ml-train"}
    deps.budgets = ConfigBudgetSource(parse_config({"budgets": {"items": [twin]}}).budgets.items)
    assert by_api == _forecast(deps)
    (_, summary, evidence) = by_api[0]
    assert evidence["month_to_date_usd"] == 18030.0  # 240 h x $75.125: ml-train's alone
    assert "$18,030.00" in summary
    # the export was read for the numbers once; a detection run after it reads nothing again
    assert [r.name for _, r in billing.runs].count("project_ids") == 1
    _forecast(replace(deps, budgets=_Budgets([budget])))
    assert [r.name for _, r in billing.runs].count("project_ids") == 1


def test_a_project_number_the_export_never_saw_is_named(polled, caplog) -> None:
    """A budget of a number the export has no row of in the invoice month read, and one of two
    projects, are skipped, each with a warning saying why, while the others are forecast. A read
    that fails is named in the warning, not a failed detection run, and is tried again next run."""
    numbered = [
        budgets_v1.Budget(
            name=f"billingAccounts/{ACCOUNT}/budgets/{n}",
            display_name=n,
            amount=_usd(10),
            budget_filter=budgets_v1.Filter(projects=[f"projects/{p}" for p in numbers]),
        )
        for n, numbers in (("gone", ["123456789012"]), ("both", [TRAIN, RESEARCH]), ("research", [RESEARCH]))
    ]
    deps, billing = polled(_api_budgets(*numbered))
    closed = open_billing_db(None)
    closed.close()
    deps.billing = DuckDBBillingSource(closed)  # the read fails (a BigQuery outage, revoked access)
    with caplog.at_level("WARNING", logger="gpucost.cycle"):
        assert _evaluated(deps) == []
    assert caplog.records[0].message.startswith(
        "budget not evaluated: project number 123456789012: its project id could not be read from the"
        " billing export (DuckDB query 'project_ids' failed:"
    )
    deps.billing = billing
    caplog.clear()
    with caplog.at_level("WARNING", logger="gpucost.cycle"):
        assert _evaluated(deps) == ["ml-research"]
    assert [(r.budget, r.message) for r in caplog.records] == [  # type: ignore[attr-defined]
        (
            "gone",
            "budget not evaluated: project number 123456789012: the billing export has no row of it"
            " with usage from 2026-10-01 07:00 UTC to 2026-11-20 13:00 UTC",
        ),
        ("both", "budget not evaluated: multi-project / service filters"),
    ]
    reads = lambda: [r.name for _, r in billing.runs].count("project_ids")  # noqa: E731
    assert _evaluated(deps) == ["ml-research"]
    assert reads() == 1  # no load since: the number cannot have appeared
    late = qrow(
        "A3 Instance Core running in Americas", 1.0, hour=NOW - 6 * H, project="new", export_lag=5 * H
    )
    late["project"]["number"] = "123456789012"
    load_rows(billing.inner.conn, [late])
    run_billing_poll(deps, NOW)
    assert _evaluated(deps) == ["new", "ml-research"]
    assert reads() == 2


def test_analyze_forecasts_an_api_budget_of_one_project_as_the_daemon_does(tmp_path: Path) -> None:
    """`gpucost analyze` builds its budgets as the daemon's detection does: an API budget's project
    number is mapped to the id from the export and gives the finding its config twin gives (it was
    skipped there, "mapped to a project id only by the daemon's detection")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from monitor.analysis import analyze_once
    from monitor.sources.duckdb_conn import ARROW_SCHEMA

    hours = [datetime(2026, 11, 10, tzinfo=UTC) + h * H for h in range(10 * 24)]
    core = "A3 Instance Core running in Americas"
    rows = [qrow(core, 75.125, hour=t, project="ml-train") for t in hours]
    rows += [qrow(core, 40.0, hour=t, project="ml-research") for t in hours]
    export = tmp_path / "export.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), export)
    api = budgets_v1.Budget(
        name=f"billingAccounts/{ACCOUNT}/budgets/b-train",
        display_name="ml-train",
        amount=_usd(30_000),
        budget_filter=budgets_v1.Filter(projects=[f"projects/{TRAIN}"]),
    )
    twin = {"items": [{"name": "ml-train", "amount_usd": 30000, "project": "ml-train"}]}
    found = []
    with FakeBudgets(ACCOUNT, [api], page_size=10) as server:
        by_api = {
            "source": "api",
            "billing_account": ACCOUNT,
            "api_endpoint": server.address,
            "insecure": True,
        }
        for budgets in (by_api, twin):
            cfg = parse_config({"budgets": budgets, "google": {"credentials": "anonymous"}})
            result = analyze_once(cfg, now=NOW, billing_paths=[export], detectors=[BudgetForecast()])
            found.append([(f.fingerprint, f.summary, f.evidence) for f in result.findings])
    assert found[0] == found[1] != []
    assert found[0][0][2]["month_to_date_usd"] == 18030.0  # ml-train's alone
