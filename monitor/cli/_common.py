"""Parameter types and options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from monitor.config import Config, load_config
from monitor.timeutil import parse_timestamp

__all__ = [
    "TIMESTAMP",
    "billing_option",
    "config_option",
    "format_option",
    "load_optional_config",
    "window_options",
]


class TimestampType(click.ParamType):
    name = "ISO-TIMESTAMP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_timestamp(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


TIMESTAMP = TimestampType()

_existing = click.Path(exists=True, dir_okay=False, path_type=Path)


def config_option(required: bool = False) -> Callable:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        required=required,
        help="gpucost TOML config (see deploy/config/).",
    )


def billing_option(required: bool = False) -> Callable:
    return click.option(
        "--billing",
        "billing_paths",
        multiple=True,
        type=_existing,
        required=required,
        help="Billing export file (NDJSON[.gz], Parquet or CSV in the export schema); repeatable.",
    )


def utilization_option() -> Callable:
    """`--utilization`: files or directories of Monitoring JSON (the simulator writes a directory
    of day files; a directory stands for every .json / .json.gz file in it)."""
    return click.option(
        "--utilization",
        "utilization_paths",
        multiple=True,
        type=click.Path(exists=True, path_type=Path),
        help="Cloud Monitoring timeSeries JSON[.gz] file, or a directory of them; repeatable.",
    )


def window_options(f: Callable) -> Callable:
    f = click.option("--end", type=TIMESTAMP, help="Window end (default: latest usage in the data).")(f)
    f = click.option("--start", type=TIMESTAMP, help="Window start (default: end - 14 days).")(f)
    return f


def format_option(*choices: str, default: str = "table") -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format.",
    )


def load_optional_config(path: Path | None) -> Config:
    return load_config(path) if path is not None else Config()
