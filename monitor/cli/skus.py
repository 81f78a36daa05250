"""`gpucost skus`."""

from __future__ import annotations

from monitor.cli import cli
from monitor.cli._common import billing_option, config_option, format_option, load_optional_config
from monitor.errors import NotAvailableYet


@cli.command("skus")
@billing_option()
@config_option()
@format_option("table", "json")
def skus_cmd(billing_paths, config_path, fmt) -> None:
    """List every (service, SKU) with its category: audit and override classification."""
    load_optional_config(config_path)
    raise NotAvailableYet("gpucost skus lands with the billing pipeline issue")
