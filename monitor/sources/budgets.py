"""Budgets to forecast against: from `[budgets]` in the config or from the Cloud Billing Budget API.

The `budget_forecast` detector compares month-to-date spend plus a forecast with each `Budget`. A
team that already keeps budgets in Cloud Billing should not have to copy them into gpucost, so
`source = "api"` reads them with google-cloud-billing-budgets (`BudgetServiceClient.list_budgets`
for `billingAccounts/<id>`). The API names projects by NUMBER (`projects/123`); those are kept as
`project_numbers`, and the aggregates keep project ids, so the billing export's own `project` record
(`id` and `number`) maps one to the other (`ProjectIds`, `queries/project_ids.sql`): a budget of one
project is forecast against that project's spend, as the same budget written in the config with
the project id is. Budgets of several projects, and of a number the export has no row of in the
invoice month read, are not evaluated (`monitor.cycle.budget_specs` says which budgets are, and why
not the others). The daemon's detection and `gpucost analyze` map them alike.

Budgets the forecast cannot use are skipped with a warning and listed in `skipped`: an amount of
"last period's spend" (no fixed figure) and amounts in a currency other than USD.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol

from monitor.config import Budget as BudgetItem
from monitor.config import BudgetsConfig, GoogleConfig
from monitor.errors import SourceError
from monitor.sources._google import call_google, grpc_target
from monitor.sources.base import BillingSource
from monitor.sources.pricing import money_to_decimal

__all__ = [
    "Budget",
    "BudgetApiSource",
    "BudgetScope",
    "BudgetSource",
    "ConfigBudgetSource",
    "IdLookup",
    "ProjectIds",
    "budget_from_api",
    "budget_from_config",
    "budget_source_from_config",
    "read_project_ids",
]

log = logging.getLogger(__name__)


class BudgetScope(StrEnum):
    PROJECT = "project"
    LABEL = "label"
    TOTAL = "total"


@dataclass(frozen=True)
class Budget:
    """One budget. Spend counts toward it when it matches every filter that is set: `projects`
    (ids, from config) or `project_numbers` (from the API), `labels` (key, value), `services`
    (service ids; empty = all), `resource_ancestors` (folders, organizations) and `subaccounts`.
    `credits` says whether spend is net of credits (`include_specified`: of some credit types only)."""

    name: str
    amount_usd: Decimal
    scope: BudgetScope
    period: str = "month"  # month | quarter | year | custom
    projects: tuple[str, ...] = ()
    project_numbers: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    services: tuple[str, ...] = ()
    resource_ancestors: tuple[str, ...] = ()  # folders/123, organizations/456
    subaccounts: tuple[str, ...] = ()
    credits: str = "include_all"  # include_all | exclude_all | include_specified
    source: str = "config"  # config | api
    resource_name: str | None = None  # billingAccounts/X/budgets/Y for API budgets


def _scope(projects: Sequence[str], labels: Sequence[tuple[str, str]]) -> BudgetScope:
    if projects:
        return BudgetScope.PROJECT
    return BudgetScope.LABEL if labels else BudgetScope.TOTAL


def budget_from_config(item: BudgetItem) -> Budget:
    """A `[[budgets.items]]` entry; the float amount goes through `str` so 1500.1 stays 1500.1."""
    projects = (item.project,) if item.project else ()
    labels: tuple[tuple[str, str], ...] = ()
    if item.label:
        key, value = item.label.split("=", 1)
        labels = ((key.strip(), value.strip()),)
    return Budget(
        name=item.name,
        amount_usd=Decimal(str(item.amount_usd)),
        scope=_scope(projects, labels),
        projects=projects,
        labels=labels,
    )


_CREDITS = {0: "include_all", 1: "include_all", 2: "exclude_all", 3: "include_specified"}
_PERIODS = {0: "month", 1: "month", 2: "quarter", 3: "year"}


def budget_from_api(msg: Any) -> Budget | str:
    """A `budgets_v1.Budget` -> `Budget`, or the reason it cannot be used (a string)."""
    label = msg.display_name or msg.name.rsplit("/", 1)[-1]
    if "specified_amount" not in msg.amount:
        return f'budget "{label}": amount is last period\'s spend, not a fixed figure; skipped'
    money = msg.amount.specified_amount
    if money.currency_code not in ("", "USD"):
        return f'budget "{label}": amount is in {money.currency_code}, not USD; skipped'
    flt = msg.budget_filter
    numbers = tuple(p.rsplit("/", 1)[-1] for p in flt.projects)
    labels = tuple((k, str(v)) for k, values in sorted(flt.labels.items()) for v in values)
    return Budget(
        name=label,
        amount_usd=money_to_decimal(money),
        scope=_scope(numbers, labels),
        period="custom" if "custom_period" in flt else _PERIODS.get(int(flt.calendar_period), "month"),
        project_numbers=numbers,
        labels=labels,
        services=tuple(s.rsplit("/", 1)[-1] for s in flt.services),
        resource_ancestors=tuple(flt.resource_ancestors),
        subaccounts=tuple(flt.subaccounts),
        credits=_CREDITS.get(int(flt.credit_types_treatment), "include_all"),
        source="api",
        resource_name=msg.name,
    )


class BudgetSource(Protocol):
    skipped: list[str]

    def budgets(self) -> list[Budget]:
        """Raises `SourceError` (retryable or permanent) when a remote read fails."""
        ...


class ConfigBudgetSource:
    def __init__(self, items: Sequence[BudgetItem]):
        self._items = tuple(items)
        self.skipped: list[str] = []

    def budgets(self) -> list[Budget]:
        return [budget_from_config(i) for i in self._items]


def _budget_client(cfg: BudgetsConfig, google: GoogleConfig, insecure: bool) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.billing import budgets_v1

    if cfg.api_endpoint and insecure:
        import grpc
        from google.cloud.billing.budgets_v1.services.budget_service.transports import (
            BudgetServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(grpc_target(cfg.api_endpoint))
        return budgets_v1.BudgetServiceClient(transport=BudgetServiceGrpcTransport(channel=channel))
    creds = AnonymousCredentials() if google.credentials == "anonymous" else None
    opts = ClientOptions(api_endpoint=cfg.api_endpoint) if cfg.api_endpoint else None
    return budgets_v1.BudgetServiceClient(credentials=creds, client_options=opts)


class BudgetApiSource:
    """Budgets of one billing account, read with the real BudgetServiceClient (all pages).

    `insecure` (plaintext gRPC to `api_endpoint`, for a local server) is a constructor argument
    because `BudgetsConfig` has no such key yet; `budget_source_from_config` passes it when it does.
    """

    def __init__(
        self,
        cfg: BudgetsConfig,
        google: GoogleConfig,
        client: Any = None,
        *,
        insecure: bool = False,
        retry_deadline_s: float = 60.0,
    ):
        assert cfg.billing_account, "BudgetsConfig requires it with source = api"
        self.parent = "billingAccounts/" + cfg.billing_account.removeprefix("billingAccounts/")
        self.cfg, self.google = cfg, google
        self._client = client
        self._insecure = insecure
        self._deadline = retry_deadline_s
        self.skipped: list[str] = []

    def budgets(self) -> list[Budget]:
        return call_google("budget API", self._read)

    def _read(self) -> list[Budget]:
        from google.api_core import retry as retries
        from google.cloud.billing import budgets_v1

        if self._client is None:
            self._client = _budget_client(self.cfg, self.google, self._insecure)
        retry = retries.Retry(
            initial=min(1.0, self._deadline / 4), maximum=10.0, multiplier=2.0, timeout=self._deadline
        )
        request = budgets_v1.ListBudgetsRequest(parent=self.parent, page_size=100)
        out: list[Budget] = []
        skipped: list[str] = []
        for msg in self._client.list_budgets(request=request, retry=retry, timeout=max(self._deadline, 1.0)):
            parsed = budget_from_api(msg)
            if isinstance(parsed, str):
                skipped.append(parsed)
                log.warning(parsed)
            else:
                out.append(parsed)
        self.skipped = skipped
        return out


def budget_source_from_config(cfg: BudgetsConfig, google: GoogleConfig) -> BudgetSource:
    """`[budgets] source = "config"` (the `items`) or `"api"` (the billing account's budgets)."""
    if cfg.source == "api":
        return BudgetApiSource(cfg, google, insecure=bool(getattr(cfg, "insecure", False)))
    return ConfigBudgetSource(cfg.items)


def read_project_ids(billing: BillingSource, start: datetime, end: datetime) -> dict[str, str]:
    """Project number -> project id of every project with usage in [start, end), as the billing
    export's `project` record pairs them (`queries/project_ids.sql`). Raises `SourceError`."""
    params = {"usage_start": start, "usage_end": end, "partition_end": end}
    rows = billing.run("project_ids", params).rows
    return {str(r["project_number"]): str(r["project_id"]) for r in rows if r["project_id"] is not None}


#: Maps the project numbers of API budgets to project ids: their ids, and why a number has none
#: (`ProjectIds.over`; `monitor.cycle.budget_specs` calls it).
IdLookup = Callable[[Collection[str]], tuple[Mapping[str, str], str]]


def _utc(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass
class ProjectIds:
    """The project ids of the project numbers API budgets name, kept for the process's life.

    A project's id never changes ("After the project has been created, the project ID is
    permanent", https://cloud.google.com/resource-manager/docs/creating-managing-projects), so a
    number once read is never read again, and a number the export had no row of is looked for again
    only once the export loaded rows since (`loaded`: its latest `export_time` the polls saw, which
    grows with every load): detection runs after every utilization poll (288 times a day by
    default), and on BigQuery each read bills three columns (about 40 bytes a row) over up to two
    months of partitions, more a day than all the daemon's polls if read at every run.
    """

    known: dict[str, str] = field(default_factory=dict)
    #: the last read's usage range and the export's latest load as of it (None: never read)
    last: tuple[datetime, datetime, datetime | None] | None = None

    def lookup(
        self,
        billing: BillingSource,
        numbers: Collection[str],
        start: datetime,
        end: datetime,
        loaded: Callable[[], datetime | None],
    ) -> tuple[dict[str, str], str]:
        """The ids of `numbers` (at most one read of [start, end)), and why the others have none.
        A failed read (`SourceError`) is that reason, not an error: the other budgets and detectors
        do not wait on it, as a failed price catalog refresh keeps the book it has."""
        if not set(numbers) <= self.known.keys():
            latest = loaded()
            if self.last is None or self.last[2] != latest:
                try:
                    self.known.update(read_project_ids(billing, start, end))
                except SourceError as e:
                    why = f"its project id could not be read from the billing export ({e})"
                    return self._ids(numbers), why
                self.last = (start, end, latest)
        lo, hi = self.last[:2] if self.last is not None else (start, end)
        why = f"the billing export has no row of it with usage from {_utc(lo)} to {_utc(hi)}"
        return self._ids(numbers), why

    def over(
        self, billing: BillingSource, start: datetime, end: datetime, loaded: Callable[[], datetime | None]
    ) -> IdLookup:
        """`lookup` of one billing source and usage range, as `monitor.cycle.budget_specs` calls it
        (the daemon's detection and `gpucost analyze` alike)."""
        return functools.partial(self.lookup, billing, start=start, end=end, loaded=loaded)

    def _ids(self, numbers: Collection[str]) -> dict[str, str]:
        return {n: self.known[n] for n in numbers if n in self.known}
