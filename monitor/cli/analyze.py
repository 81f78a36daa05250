"""`gpucost analyze`."""

from __future__ import annotations

from monitor.cli import cli
from monitor.cli._common import (
    billing_option,
    config_option,
    format_option,
    load_optional_config,
    utilization_option,
    window_options,
)
from monitor.errors import NotAvailableYet


@cli.command("analyze")
@billing_option()
@utilization_option()
@config_option()
@window_options
@format_option("json", "table", "markdown")
def analyze_cmd(billing_paths, utilization_paths, config_path, start, end, fmt) -> None:
    """Attribute spend and flag hidden costs with their dollar impact."""
    load_optional_config(config_path)
    raise NotAvailableYet("gpucost analyze lands with the detectors issue")
