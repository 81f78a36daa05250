"""Parameter types, options and set-up shared by several commands (each declared once here, so
the commands that read the same data take the same flags with the same help)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from monitor.config import Config, load_config
from monitor.logs import configure_logging
from monitor.model import usd
from monitor.timeutil import parse_timestamp

__all__ = [
    "TIMESTAMP",
    "billing_option",
    "cell",
    "config_option",
    "format_option",
    "load_optional_config",
    "missing_sqlite",
    "require_source",
    "source_options",
    "stderr_logging",
    "utilization_option",
    "window_options",
]


#: The times a command accepts: windows are widened by days on both sides (late loads, partitions,
#: the default 14 days before `--end`), which overflows near the ends of `datetime`'s range.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


class TimestampType(click.ParamType):
    name = "ISO-TIMESTAMP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            dt = parse_timestamp(str(value))
        except (ValueError, OverflowError) as e:  # OverflowError: an offset past year 1 or 9999
            self.fail(str(e) if isinstance(e, ValueError) else f'bad timestamp "{value}": {e}', param, ctx)
        if not EARLIEST <= dt < LATEST:
            years = f"{EARLIEST.year} to {LATEST.year - 1}"
            self.fail(f'"{value}" is out of range: give a time in the years {years}', param, ctx)
        return dt


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


def source_options(f: Callable) -> Callable:
    """`--billing`, `--utilization`, `--config`, `--start`, `--end`, in that order: where the
    billing and GPU data come from and which window to read, the same for every command that
    analyses them (`analyze`, `jobs`); check them with `require_source`."""
    for option in (window_options, config_option(), utilization_option(), billing_option()):
        f = option(f)  # innermost first, as stacked decorators apply: --billing ends up listed first
    return f


def require_source(billing_paths: tuple[Path, ...], config_path: Path | None) -> None:
    """Billing data must come from somewhere: export files, or the sources a config names."""
    if not billing_paths and config_path is None:
        raise click.UsageError(
            "give the billing data: --billing FILE (export NDJSON/Parquet/CSV, repeatable) "
            "or --config PATH (reads the configured sources)"
        )


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


class _CurrentStderr:
    """Whatever `sys.stderr` is when a record is written (not when logging was set up)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


@contextmanager
def stderr_logging(fmt: str, level: str) -> Iterator[None]:
    """Logs to stderr (stdout carries the report) for the length of one command, then the root
    logger as it was: the command may run in-process (tests, a notebook), not only as a program."""
    root = logging.getLogger()
    handlers, saved_level = root.handlers[:], root.level
    configure_logging(fmt, level, stream=_CurrentStderr())  # type: ignore[arg-type]
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(saved_level)


def cell(key: str, value: Any) -> str:
    """A table cell for a figure of the JSON output, by its key: dollars (`*_usd`, a job's
    `by_subcategory.*`), a utilization percentage, other numbers to one decimal; absent: "-"."""
    if value is None:
        return "-"
    if key.endswith("_usd") or key.startswith("by_subcategory."):
        return usd(value)
    if key == "mean_utilization_pct":
        return f"{value:.1f}%"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def missing_sqlite(url: str) -> Path | None:
    """The SQLite file `state.url` names, if it does not exist yet (`check`; `outbox` refuses a
    relative one)."""
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url.removeprefix("sqlite:///"))
    return None if path.exists() else path
