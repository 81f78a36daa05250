"""`gpucost simulate`."""

from __future__ import annotations

from pathlib import Path

import click

from monitor.cli import cli
from monitor.errors import NotAvailableYet


@cli.command("simulate")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write the fleet's billing export, utilization and ground truth.",
)
@click.option("--days", default=14, show_default=True, type=click.IntRange(1, 400), help="Days of usage.")
@click.option("--seed", default=7, show_default=True, type=int, help="Random seed (output is deterministic).")
@click.option(
    "--scale",
    default=1,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="Multiply the fleet (for benchmarks).",
)
def simulate_cmd(out_dir, days, seed, scale) -> None:
    """Write a simulated GPU fleet: billing export, utilization and injected hidden costs."""
    raise NotAvailableYet("gpucost simulate is being built")
