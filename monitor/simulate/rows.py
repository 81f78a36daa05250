"""Build one export row (a python dict in the export's shape) from a SKU and a usage amount.

Money is computed in integer micros from integer usage amounts and Decimal prices, then stored as
the float the export carries; `Decimal(repr(cost))` gives the micros back exactly, so totals in the
ground truth are exact to the cent (and to the micro).

A billing account may be invoiced in another currency: its rows carry `currency` and
`currency_conversion_rate` (units of that currency per US dollar) and every amount in that currency,
as the export defines them (gcp.md section 1: `cost / currency_conversion_rate` = USD).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache

from monitor.simulate.catalog import Region, Sku

__all__ = [
    "BILLING_ACCOUNT",
    "USD_ACCOUNT",
    "Account",
    "Credit",
    "Place",
    "Project",
    "RowMaker",
    "cost_micros",
    "labels_of",
    "make_row",
    "money",
]

BILLING_ACCOUNT = "01A7C3-5E92D4-B81F06"
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Account:
    """A billing account and the currency it is invoiced in (`rate` = units of it per USD)."""

    id: str
    currency: str = "USD"
    rate: Decimal = Decimal(1)

    def local_micros(self, usd_micros: int) -> int:
        """A USD amount in this account's currency, in micros (how the invoice states it)."""
        if self.rate == 1:
            return usd_micros
        return int((Decimal(usd_micros) * self.rate).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


USD_ACCOUNT = Account(BILLING_ACCOUNT)


@dataclass(frozen=True)
class Project:
    id: str
    number: str
    name: str
    labels: tuple[tuple[str, str], ...]
    folder: tuple[str, str]  # (number, display name)
    org: tuple[str, str]
    tags: tuple[tuple[str, str], ...] = ()
    account: Account = USD_ACCOUNT

    def record(self) -> dict:
        return {
            "id": self.id,
            "number": self.number,
            "name": self.name,
            "labels": labels_of(self.labels),
            "ancestry_numbers": f"/{self.org[0]}/{self.folder[0]}/",
            "ancestors": [
                {"resource_name": f"projects/{self.number}", "display_name": self.name},
                {"resource_name": f"folders/{self.folder[0]}", "display_name": self.folder[1]},
                {"resource_name": f"organizations/{self.org[0]}", "display_name": self.org[1]},
            ],
        }

    def tag_records(self) -> list[dict]:
        return [{"key": k, "value": v, "inherited": True, "namespace": self.org[0]} for k, v in self.tags]


@dataclass(frozen=True)
class Place:
    """Where a resource lives: a zone, a region, or a multi-region (`region` None)."""

    location: str
    country: str
    region: Region | None
    zone: str | None = None

    @classmethod
    def zonal(cls, region: Region, zone: str) -> Place:
        return cls(zone, region.country, region, zone)

    @classmethod
    def regional(cls, region: Region) -> Place:
        return cls(region.name, region.country, region)

    def record(self) -> dict:
        return {
            "location": self.location,
            "country": self.country,
            "region": self.region.name if self.region else None,
            "zone": self.zone,
        }


@dataclass(frozen=True)
class Credit:
    """A credit applied to a row: `fraction` of the row's cost, negated."""

    name: str
    type: str
    fraction: Decimal
    id: str | None = None
    full_name: str | None = None


def labels_of(pairs: Iterable[tuple[str, str]]) -> list[dict]:
    return [{"key": k, "value": v} for k, v in pairs]


def money(micros: int) -> float:
    """Micros as the export's FLOAT (correctly rounded, so repr() gives the decimal back)."""
    return micros / 1_000_000


def cost_micros(sku: Sku, amount: int) -> int:
    exact = Decimal(amount) * sku.price * 1_000_000 / sku.per_pricing_unit
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def _credit_records(credits: Sequence[Credit], micros: int) -> list[dict]:
    out = []
    for c in credits:
        amount = -int((Decimal(micros) * c.fraction).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        out.append(
            {"name": c.name, "amount": money(amount), "full_name": c.full_name, "id": c.id, "type": c.type}
        )
    return out


def _usage_record(sku: Sku, amount: int) -> dict:
    return {
        "amount": float(amount),
        "unit": sku.usage_unit,
        "amount_in_pricing_units": amount / sku.per_pricing_unit,
        "pricing_unit": sku.pricing_unit,
    }


def _price_record(sku: Sku, account: Account) -> dict:
    return {
        "effective_price": float(sku.price * account.rate),
        "tier_start_amount": 0.0,
        "unit": sku.pricing_unit,
        "pricing_unit_quantity": 1.0,
    }


@lru_cache(maxsize=1 << 16)
def _static(
    project: Project,
    place: Place | None,
    sku: Sku,
    labels: tuple[tuple[str, str], ...],
    system_labels: tuple[tuple[str, str], ...],
    resource: tuple[str, str] | None,
    subscription: str | None,
) -> dict:
    """The columns that do not change from hour to hour, in schema order (per-row ones None).

    Rows share these nested records (cheap to build, and the writer serializes each once):
    copy a row's nested record before changing it.
    """
    return {
        "billing_account_id": project.account.id,
        "service": {"id": sku.service.id, "description": sku.service.description},
        "sku": {"id": sku.id, "description": sku.description},
        "usage_start_time": None,
        "usage_end_time": None,
        "project": project.record(),
        "labels": labels_of(labels),
        "system_labels": labels_of(system_labels),
        "location": place.record() if place else None,
        "resource": {"name": resource[0], "global_name": resource[1]} if resource else None,
        "tags": project.tag_records(),
        "export_time": None,
        "cost": None,
        "currency": project.account.currency,
        "currency_conversion_rate": float(project.account.rate),
        "usage": None,
        "credits": None,
        "invoice": None,
        "cost_type": "regular",
        "adjustment_info": None,
        "cost_at_list": None,
        "price": _price_record(sku, project.account) if sku.usage_unit else None,
        "transaction_type": "GOOGLE",
        "seller_name": "Google",
        "subscription": {"instance_id": subscription} if subscription else None,
        "consumption_model": {"id": "357F-6CAD-E8B1", "description": "Default"},
    }


@lru_cache(maxsize=256)
def _invoice(year: int, month: int) -> dict:
    """Keyed by numbers: a `strftime` per row was a tenth of rendering the rows."""
    return {"month": date(year, month, 1).strftime("%Y%m"), "publisher_type": "Google"}


class RowMaker:
    """The rows of one SKU of one resource, hour after hour: the columns that never change are
    looked up once, not per row (hashing the project, place and SKU dataclasses for the cache key,
    and building the place and labels, were a sixth of rendering a row)."""

    def __init__(
        self,
        *,
        project: Project,
        place: Place | None,
        sku: Sku,
        labels: tuple[tuple[str, str], ...] = (),
        system_labels: tuple[tuple[str, str], ...] = (),
        resource: tuple[str, str] | None = None,
        subscription: str | None = None,
    ):
        self._account, self._sku = project.account, sku
        self._static = _static(project, place, sku, labels, system_labels, resource, subscription)

    def row(
        self, amount: int, start: datetime, credits: Sequence[Credit] = (), micros: int | None = None
    ) -> dict:
        """One regular hourly row; `micros` (USD) overrides the priced cost (tax rows, corrections).
        Amounts are in the project's billing currency."""
        sku = self._sku
        cost = self._account.local_micros(cost_micros(sku, amount) if micros is None else micros)
        row = dict(self._static)
        row["usage_start_time"] = start
        row["usage_end_time"] = start + HOUR
        row["cost"] = row["cost_at_list"] = money(cost)
        row["usage"] = _usage_record(sku, amount) if sku.usage_unit else None
        row["credits"] = _credit_records(credits, cost)
        row["invoice"] = _invoice(start.year, start.month)
        return row


def make_row(
    *,
    project: Project,
    place: Place | None,
    sku: Sku,
    amount: int,
    start: datetime,
    labels: tuple[tuple[str, str], ...] = (),
    system_labels: tuple[tuple[str, str], ...] = (),
    resource: tuple[str, str] | None = None,
    credits: Sequence[Credit] = (),
    subscription: str | None = None,
    micros: int | None = None,
) -> dict:
    """One regular hourly row (`RowMaker.row`), for resources that render few."""
    maker = RowMaker(
        project=project,
        place=place,
        sku=sku,
        labels=labels,
        system_labels=system_labels,
        resource=resource,
        subscription=subscription,
    )
    return maker.row(amount, start, credits, micros)
