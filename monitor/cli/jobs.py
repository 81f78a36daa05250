"""`gpucost jobs`: per training job, what it cost, where the money went and what it wasted.

stdout carries the report only (JSON, a table or Markdown); logs go to stderr.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from monitor.cli import cli
from monitor.cli._common import (
    cell,
    format_option,
    load_optional_config,
    require_source,
    source_options,
    stderr_logging,
)
from monitor.clock import SystemClock
from monitor.jobs.run import jobs_config, jobs_once
from monitor.model import idle_usd, usd

__all__ = ["jobs_cmd", "jobs_markdown"]

#: (JSON key, column head) of the summary columns, in order.
_COLUMNS = (
    ("gpu_model", "GPU"),
    ("gpus", "GPUs"),
    ("gpu_hours", "GPU-h"),
    ("mean_utilization_pct", "util"),
    ("cost_usd", "cost"),
    ("net_cost_usd", "net"),
    ("idle_cost_usd", "idle $"),
    ("by_subcategory.network.inter_zone", "inter-zone $"),
    ("cost_per_busy_gpu_hour_usd", "net $/busy GPU-h"),  # all its spend: not `gpus`' GPU cost
    ("single_zone_savings_usd", "1-zone saves"),
    ("spot_savings_usd", "Spot saves"),
)


def _get(doc: dict[str, Any], key: str) -> Any:
    if key.startswith("by_subcategory."):
        return doc["by_subcategory"].get(key.split(".", 1)[1], 0.0)
    return doc.get(key)


def _cell(doc: dict[str, Any], key: str) -> str:
    """`cell`, but idle dollars as far as utilization tells them (`idle_usd`, as the digest says
    them): a job's `mean_utilization_pct` is None when none of its GPU-hours had utilization."""
    if key != "idle_cost_usd":
        return cell(key, _get(doc, key))
    return idle_usd(
        doc[key],
        doc.get("unmonitored_cost_usd") or 0,
        doc.get("mean_utilization_pct") is not None,
        doc.get("gpu_hours") or 0,
    )


def _name(doc: dict[str, Any]) -> str:
    name = doc["job"] if doc["job"] is not None else "(no job label)"
    flags = [f for f, on in (("running", doc["running"]), ("estimated", doc["estimated"])) if on]
    return f"{name} ({', '.join(flags)})" if flags else name


def _when(doc: dict[str, Any]) -> str:
    return f"{doc['first_hour'] or '-'} → {doc['last_hour'] or '-'}"


def jobs_markdown(doc: dict[str, Any]) -> str:
    """The report as a Markdown table (for a PR comment or a wiki page)."""
    w, t = doc["window"], doc["totals"]
    lines = [
        f"**Jobs, {w['start']} → {w['end']}**: cost {usd(t['cost_usd'])}, net {usd(t['net_cost_usd'])} "
        f"{doc['currency']}",
        "",
        "| job | hours | " + " | ".join(h for _, h in _COLUMNS) + " |",
        "|---|---|" + "---:|" * len(_COLUMNS),
    ]
    for j in doc["jobs"]:
        cells = [_cell(j, k) for k, _ in _COLUMNS]
        lines.append(f"| {_name(j)} | {_when(j)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _hours_table(job: dict[str, Any]) -> Table:
    table = Table(title=f"{_name(job)} by hour")
    heads = ("hour", "cost", "net", "GPU-h", "busy GPU-h", "idle $", "estimated $")
    keys = (
        "hour",
        "cost_usd",
        "net_cost_usd",
        "gpu_hours",
        "busy_gpu_hours",
        "idle_cost_usd",
        "estimated_cost_usd",
    )
    for h in heads:
        table.add_column(h, justify="left" if h == "hour" else "right")
    for row in job["hours"]:
        table.add_row(*(cell(k, row[k]) if k != "hour" else row[k] for k in keys))
    return table


def _print_table(doc: dict[str, Any]) -> None:
    console = Console()
    console = console if console.is_terminal else Console(width=220)
    w, t = doc["window"], doc["totals"]
    console.print(
        f"[bold]Jobs, {w['start']} → {w['end']}[/]  cost {usd(t['cost_usd'])}, net {usd(t['net_cost_usd'])} "
        f"{doc['currency']}"
    )
    table = Table(title="Per job")
    table.add_column("Job")
    table.add_column("Hours")
    for _, head in _COLUMNS:
        table.add_column(head, justify="right")
    for j in doc["jobs"]:
        table.add_row(_name(j), _when(j), *(_cell(j, k) for k, _ in _COLUMNS))
    console.print(table)
    for j in doc["jobs"]:
        if "hours" in j:
            console.print(_hours_table(j))


@cli.command("jobs")
@source_options
@format_option("table", "json", "markdown")
@click.option("--job", "job", metavar="NAME", help="Only this job, with an hourly breakdown.")
def jobs_cmd(billing_paths, utilization_paths, config_path, start, end, fmt, job) -> None:
    """What each training job cost, where its money went and what it wasted.

    A job is named by its labels ([jobs] labels, default `job` then `run`; then GKE cost allocation's
    k8s-label/<pod label>, e.g. a JobSet's name; then Vertex AI's run label). Spend without one is
    the `job: null` row, so jobs add up to the total. Per job: GPU-hours, utilization, idle dollars,
    cost by subcategory (cluster fees shared by node-hours), and what one zone or Spot would save.
    """
    from monitor.progress import command_stages

    require_source(billing_paths, config_path)
    cfg = load_optional_config(config_path)
    # stages with the elapsed time, as `analyze` shows them: minutes at 5 M export rows a month
    with (
        command_stages("jobs") as bar,
        stderr_logging(cfg.logging.format, cfg.logging.level if config_path else "WARNING"),
    ):
        report = jobs_once(
            cfg,
            jobs_config(cfg),
            now=SystemClock().now(),
            billing_paths=billing_paths,
            utilization_paths=utilization_paths,
            start=start,
            end=end,
            progress=bar,
        )
    doc = report.to_dict(job=job)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
    elif fmt == "markdown":
        click.echo(jobs_markdown(doc), nl=False)
    else:
        _print_table(doc)
