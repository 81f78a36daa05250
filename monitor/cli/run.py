"""`gpucost run`."""

from __future__ import annotations

from pathlib import Path

import click

from monitor.cli import cli
from monitor.cli._common import config_option
from monitor.config import load_config
from monitor.errors import NotAvailableYet


@cli.command("run")
@config_option(required=True)
@click.option("--once", is_flag=True, help="Run one full cycle (poll, detect, deliver, digest) and exit.")
def run_cmd(config_path: Path, once: bool) -> None:
    """Run the always-on daemon (or one cycle with --once)."""
    load_config(config_path)
    raise NotAvailableYet("gpucost run (the daemon) lands with the daemon issue")
