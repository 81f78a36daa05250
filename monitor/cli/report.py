"""`gpucost report`."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console

from monitor.attribution import compile_rules
from monitor.cli import cli
from monitor.cli._common import (
    billing_option,
    config_option,
    format_option,
    load_optional_config,
    window_options,
)
from monitor.clock import SystemClock
from monitor.config import Config
from monitor.focus import focus_rows, write_focus_csv
from monitor.report import (
    GROUPINGS,
    build_report,
    data_window,
    parse_by,
    render_csv,
    render_json,
    render_table,
)
from monitor.sources.base import BillingSource
from monitor.sources.factory import billing_source_from_config, billing_source_from_files


def make_console() -> Console:
    """Rich output sized to the terminal; when piped, wide enough that nothing is truncated."""
    console = Console()
    return console if console.is_terminal else Console(width=240)


def open_billing(billing_paths: tuple[Path, ...], cfg: Config) -> BillingSource:
    """`--billing` files in an in-memory DuckDB, else the source `[billing]` configures."""
    rules = compile_rules(cfg.attribution.rules)
    if billing_paths:
        return billing_source_from_files(
            billing_paths, rules=rules, memory_limit=cfg.billing.duckdb_memory_limit
        )
    return billing_source_from_config(cfg.billing, google=cfg.google, rules=rules)


def resolve_window(
    source: BillingSource, start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime, datetime]:
    """`data_window`, a reversed window reported against `--start`."""
    try:
        return data_window(source, start, end, now)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--start'") from None


@cli.command("report")
@billing_option()
@config_option()
@window_options
@click.option(
    "--by",
    "bys",
    multiple=True,  # given twice, click kept the last one without a word
    help=f"Group by {', '.join(GROUPINGS)} or label:KEY (one of them; default: category).",
)
@format_option("table", "json", "csv", "focus")
def report_cmd(billing_paths, config_path, start, end, bys, fmt) -> None:
    """Attributed gross / credits / net cost, provisional days marked."""
    if len(bys) > 1:
        raise click.BadParameter(
            f"one grouping per report, got {', '.join(bys)} (run report once for each)", param_hint="'--by'"
        )
    if bys and fmt == "focus":
        raise click.BadParameter(
            "FOCUS rows are not grouped: drop --by with --format focus", param_hint="'--by'"
        )
    by = bys[0] if bys else "category"
    cfg = load_optional_config(config_path)
    try:
        parse_by(by)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--by'") from None
    source = open_billing(billing_paths, cfg)
    start, end, as_of = resolve_window(source, start, end, SystemClock().now())
    days = cfg.billing.provisional_days
    if fmt == "focus":
        rows = focus_rows(source, start=start, end=end, now=as_of, provisional_days=days)
        write_focus_csv(rows, sys.stdout)
        return
    report = build_report(source, start=start, end=end, by=by, now=as_of, provisional_days=days)
    if fmt == "json":
        click.echo(render_json(report))
    elif fmt == "csv":
        click.echo(render_csv(report), nl=False)
    else:
        render_table(report, make_console())
