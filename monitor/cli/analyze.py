"""`gpucost analyze`: attribute every dollar of a window and flag hidden costs with their impact.

stdout carries the report only (JSON, a table or Markdown); logs go to stderr.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from monitor.analysis import Analysis, analyze_once
from monitor.cli import cli
from monitor.cli._common import (
    format_option,
    load_optional_config,
    require_source,
    source_options,
    stderr_logging,
)
from monitor.clock import SystemClock
from monitor.config import Config
from monitor.model import usd
from monitor.render import (
    converted_note,
    findings_markdown,
    findings_tables,
    provisional_in_window,
    shown_attribution,
)

__all__ = ["analyze_cmd", "cli_analysis", "exact_attribution", "render_analysis_table"]


def cli_analysis(
    billing_paths: tuple[Path, ...],
    utilization_paths: tuple[Path, ...],
    config_path: Path | None,
    start: datetime | None,
    end: datetime | None,
    **kw: object,
) -> tuple[Config, Analysis]:
    """Shared by `analyze` and `gpus`: check the source flags, set up stderr logging, run once."""
    require_source(billing_paths, config_path)
    cfg = load_optional_config(config_path)
    with stderr_logging(cfg.logging.format, cfg.logging.level if config_path else "WARNING"):
        result = analyze_once(
            cfg,
            now=SystemClock().now(),
            billing_paths=billing_paths,
            utilization_paths=utilization_paths,
            start=start,
            end=end,
            with_budgets=config_path is not None,
            **kw,  # type: ignore[arg-type]
        )
    return cfg, result


def render_analysis_table(result: Analysis, console: Console) -> None:
    """Window and totals, the findings table, then spend by category."""
    d = result.to_dict()
    (net, cost, credits), lines = shown_attribution(d["totals"], exact_attribution(result))
    w = d["window"]
    console.print(
        f"[bold]{w['start']} → {w['end']}[/]  net {usd(net)} (cost {usd(cost)}, "
        f"credits {usd(credits)}) {d['currency']}{converted_note(d['converted_from'])}"
        # as the Markdown report: seed 11's table said "provisional from 2026-11-18" of a window
        # ending 11-15
        + (
            f"; provisional from {w['provisional_from']}"
            if provisional_in_window(w["provisional_from"], w["end"])
            else ""
        )
    )
    console.print(*findings_tables(result.findings))
    table = Table(title="Where the money went")
    for col in ("Category", "Pricing", "Cost", "Credits", "Net"):
        table.add_column(col, justify="left" if col in ("Category", "Pricing") else "right")
    for a, (net, cost, credits) in zip(d["attribution"], lines, strict=True):
        table.add_row(a["subcategory"], a["pricing_model"] or "-", usd(cost), usd(credits), usd(net))
    console.print(table)
    s = d["stats"]
    console.print(
        f"[dim]{s['engine']}: {s['queries']} queries, {s['rows_scanned']:,} rows scanned, "
        f"{s['rows_fetched']:,} fetched, {s['seconds']} s[/]"
    )


def exact_attribution(result: Analysis) -> list[dict[str, object]]:
    """The attribution lines with their exact figures (Decimals, where the JSON has cents), so the
    tables give each line its net to the cent with the lines adding up to the totals
    (`shown_attribution`)."""
    return [a.to_dict() | {"cost": a.cost, "credits": a.credits, "net_cost": a.net_cost} for a in result.attribution]


@cli.command("analyze")
@source_options
@format_option("json", "table", "markdown")
def analyze_cmd(billing_paths, utilization_paths, config_path, start, end, fmt) -> None:
    """Attribute spend and flag hidden costs with their dollar impact.

    From export files (--billing, with --utilization for GPU metrics) or from the sources a config
    names (--config alone: BigQuery and Cloud Monitoring in production). Window: --end defaults to
    the latest usage in the data (now for BigQuery), --start to 14 days before --end.
    """
    from monitor.progress import command_stages

    # stages (reading billing, detecting...) with the elapsed time; a heartbeat off a terminal
    with command_stages("analyze") as bar:
        _, result = cli_analysis(
            billing_paths, utilization_paths, config_path, start, end, progress=bar, keep_gpu_hours=False
        )
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    elif fmt == "markdown":
        d = result.to_dict()
        markdown = findings_markdown(
            result.findings, d["totals"], exact_attribution(result), d["window"], converted=d["converted_from"]
        )
        click.echo(markdown, nl=False)
    else:
        console = Console()
        render_analysis_table(result, console if console.is_terminal else Console(width=200))
