"""`gpucost gpus`: per GPU node (and per project, GKE cluster / node pool, namespace or label), what
its GPU-hours cost and how many of them were idle or unmonitored."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from monitor.cli import cli
from monitor.cli._common import cell, format_option, source_options
from monitor.cli.analyze import cli_analysis
from monitor.gpu_rollups import GpuRollup, InstanceGpus, RollupBy, rollups, summarize_instances

__all__ = ["gpus_cmd", "gpus_report"]

_NUM = ("gpu_hours", "mean_utilization_pct", "gpu_cost_usd", "idle_gpu_hours", "idle_cost_usd")
_NUM2 = ("unmonitored_cost_usd", "cost_per_busy_gpu_hour_usd")


def gpus_report(instances: list[InstanceGpus], rolled: list[GpuRollup]) -> dict[str, Any]:
    """The JSON document: `{"instances": [...], "rollups": [...]}` (issue 4, item 4)."""
    return {"instances": [i.to_dict() for i in instances], "rollups": [r.to_dict() for r in rolled]}


def _table(title: str, first: list[str], rows: list[dict[str, Any]], keys: list[str]) -> Table:
    table = Table(title=title)
    for col in first:
        table.add_column(col)
    heads = {
        "gpu_hours": "GPU-h",
        "mean_utilization_pct": "util",
        "gpu_cost_usd": "GPU cost (gross)",  # before credits: a committed GPU at its on-demand price
        "idle_gpu_hours": "idle GPU-h",
        "idle_cost_usd": "idle $",
        "unmonitored_cost_usd": "unmonitored $",
        "cost_per_busy_gpu_hour_usd": "gross GPU $/busy GPU-h",  # not `jobs`' whole net
    }
    for k in (*_NUM, *_NUM2):
        table.add_column(heads[k], justify="right")
    for row in rows:
        names = [str(row.get(c) if row.get(c) is not None else "-") for c in keys]
        if row.get("estimated_cost_usd"):
            names[0] = f"*{names[0]}"  # one word: a long name is cut, not wrapped from its mark
        table.add_row(*names, *(cell(k, row[k]) for k in (*_NUM, *_NUM2)))
    if any(row.get("estimated_cost_usd") for row in rows):
        table.caption = (
            "*: includes GPU hours not billed yet, priced from the price list (estimated_cost_usd in"
            " the JSON; `gpucost jobs` shows them apart)"
        )
    return table


@cli.command("gpus")
@source_options
@format_option("table", "json")
@click.option(
    "--by",
    "by",
    multiple=True,
    type=click.Choice([b.value for b in RollupBy]),
    help="Roll up by this (repeatable). Default: project, plus node_pool for GKE nodes and namespace "
    "with GKE cost allocation; billing.labels are always added.",
)
def gpus_cmd(billing_paths, utilization_paths, config_path, start, end, fmt, by) -> None:
    """GPU-hours, utilization, idle dollars and unmonitored GPU spend per GPU node.

    Rolled up per project (GKE: per cluster/node pool, and per namespace when GKE cost allocation
    labels the rows) and per configured billing label (billing.labels). Idle: a GPU-hour whose mean
    utilization is below utilization.idle_threshold_pct, priced at the effective price after
    commitment / sustained-use credits; unmonitored: GPU spend with no utilization data (never
    counted as busy or idle).
    """
    from monitor.progress import command_stages

    with command_stages("gpus") as bar:
        cfg, result = cli_analysis(
            billing_paths,
            utilization_paths,
            config_path,
            start,
            end,
            detectors=[],
            month_to_date=False,
            progress=bar,
        )
    instances = summarize_instances(result.gpu_hours)
    doc = gpus_report(instances, rollups(instances, cfg.billing.labels, by or None))
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    console = Console()
    console = console if console.is_terminal else Console(width=200)
    w = result.window_dict()
    console.print(f"[bold]GPU spend and utilization, {w['start']} → {w['end']}[/]")
    if not doc["instances"]:
        console.print("No GPU spend in this window: no billing row is a GPU (see `gpucost skus`).")
        return
    keys = ["instance", "project", "zone", "gpu_model", "gpus"]
    heads = ["Instance", "Project", "Zone", "GPU", "GPUs"]
    if any(i.get("cluster") for i in doc["instances"]):
        keys[3:3], heads[3:3] = ["cluster", "node_pool"], ["Cluster", "Node pool"]
    console.print(_table("Per instance", heads, doc["instances"], keys))
    console.print(
        _table("Rolled up", ["Group", "Key", "Instances"], doc["rollups"], ["group", "key", "instances"])
    )
