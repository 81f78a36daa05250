"""`gpucost load`."""

from __future__ import annotations

from pathlib import Path

import click

from monitor.cli import cli
from monitor.cli._common import billing_option
from monitor.errors import NotAvailableYet


@cli.command("load")
@billing_option(required=True)
@click.option(
    "--db",
    "db_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="DuckDB file to load into (created if missing).",
)
def load_cmd(billing_paths, db_path) -> None:
    """Load billing export files into the embedded DuckDB table."""
    raise NotAvailableYet("gpucost load is being built")
