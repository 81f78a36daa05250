"""`gpucost skus`."""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from monitor.cli import cli
from monitor.cli._common import billing_option, config_option, format_option, load_optional_config
from monitor.cli.report import make_console, open_billing
from monitor.clock import SystemClock
from monitor.model import category_of, micros_to_decimal, plain_cents
from monitor.sources.factory import search_range

COLUMNS = (
    "service_id",
    "service",
    "sku_id",
    "sku",
    "category",
    "subcategory",
    "pricing_model",
    "rows",
    "committed_rows",
    "cost",
    "currency",
)


def _line(row: dict) -> dict:
    sub = row["subcategory"]
    return {
        "service_id": row["service_id"],
        "service": row["service_description"],
        "sku_id": row["sku_id"],
        "sku": row["sku_description"],
        "category": category_of(sub),
        "subcategory": sub,
        "pricing_model": row["pricing_model"],
        "rows": row["row_count"],
        "cost": float(micros_to_decimal(row["gross_micros"])),
        "currency": row["currency"],
        "cost_micros": row["gross_micros"],
        "net_micros": row["net_micros"],
        "committed_rows": row["committed_rows"],
        "rule": row["rule"],
    }


@cli.command("skus")
@billing_option()
@config_option()
@format_option("table", "json")
def skus_cmd(billing_paths, config_path, fmt) -> None:
    """List every (service, SKU) with its category: audit and override classification.

    Costs are gross, in the currency each line was invoiced in: a SKU billed to accounts in two
    currencies is two lines. The pricing model is the one the SKU names; "committed rows" counts
    its rows a commitment's credits cover, which `report` shows as committed."""
    cfg = load_optional_config(config_path)
    source = open_billing(billing_paths, cfg)
    lo, hi = search_range(source.engine, SystemClock().now())
    params = {"usage_start": lo, "usage_end": hi, "partition_end": hi}
    lines = [_line(r) for r in source.run("skus", params).rows]
    if fmt == "json":
        click.echo(json.dumps(lines, indent=2))
        return
    table = Table(title="SKUs and their attribution", caption=r"override with \[attribution] rules in config")
    for col in COLUMNS:
        head = "committed rows" if col == "committed_rows" else col
        table.add_column(head, justify="right" if col in ("rows", "committed_rows", "cost") else "left")
    table.add_column("rule")
    for line in lines:
        cost = plain_cents(micros_to_decimal(line["cost_micros"]))
        cells = [line[c] for c in COLUMNS[:-2]] + [cost, line["currency"]]
        table.add_row(*("" if v is None else escape(str(v)) for v in cells), line["rule"] or "(default)")
    make_console().print(table)
