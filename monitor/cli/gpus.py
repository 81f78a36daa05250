"""`gpucost gpus`."""

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


@cli.command("gpus")
@billing_option()
@utilization_option()
@config_option()
@window_options
@format_option("table", "json")
def gpus_cmd(billing_paths, utilization_paths, config_path, start, end, fmt) -> None:
    """GPU-hours, utilization, idle dollars and unmonitored GPU spend per instance."""
    load_optional_config(config_path)
    raise NotAvailableYet("gpucost gpus lands with the GPU utilization issue")
