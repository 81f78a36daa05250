"""The `gpucost` command line: thin commands over the same functions the daemon schedules.

Each command lives in its own module and registers itself on `cli`. User mistakes (bad config,
missing file, bad timestamp, bad flag) print one line and exit 2; never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from monitor import __version__
from monitor.errors import GpucostError, NotAvailableYet, UserError

__all__ = ["COMMANDS", "SUMMARIES", "cli", "main"]

#: The commands, each in the module of its name under `monitor.cli`, which registers it on `cli`.
COMMANDS = (
    "analyze",
    "check",
    "digest",
    "gpus",
    "jobs",
    "load",
    "outbox",
    "report",
    "run",
    "simulate",
    "skus",
)


#: Each command's summary (the first paragraph of its help), which `gpucost --help` lists without
#: importing the commands: 0.86 s with every command module imported, against 0.05 s.
#: tests/test_cli.py pins each to its command's own help.
SUMMARIES = {
    "analyze": "Attribute spend and flag hidden costs with their dollar impact.",
    "check": "Validate the config and report the health of sources and alert delivery (exit 1 if unhealthy).",
    "digest": "Render the daily digest (Markdown + PNG chart) from the state store; --send posts it to Slack.",
    "gpus": "GPU-hours, utilization, idle dollars and unmonitored GPU spend per GPU node.",
    "jobs": "What each training job cost, where its money went and what it wasted.",
    "load": "Load billing export files into the embedded DuckDB table.",
    "outbox": "List pending / failed alert messages; re-queue failed ones once their cause is fixed.",
    "report": "Attributed gross / credits / net cost, provisional days marked.",
    "run": "Run the always-on daemon (or one cycle with --once).",
    "simulate": "Write a simulated GPU fleet: billing export, utilization and injected hidden costs.",
    "skus": "List every (service, SKU) with its category: audit and override classification.",
}


class _Commands(click.Group):
    """`gpucost`'s group, whose commands are imported when named: `gpucost simulate` loads what
    simulating needs, not the detectors, DuckDB, sqlglot and the Slack client the other commands
    bring (all of them were 1.2 s of imports before any command ran). `--help` lists their
    summaries (`SUMMARIES`) as click would, without importing them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing (`click.Group.format_commands`), each summary shortened to the
        terminal's width by click, as a command of that help (never run) shortens it."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            importlib.import_module(f"monitor.cli.{cmd_name}")
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="gpucost")
def cli() -> None:
    """gpucost: watch what multi-GPU training really costs on Google Cloud.

    Reads the Cloud Billing export (BigQuery, or a local DuckDB copy), GPU utilization (Cloud
    Monitoring, or files), attributes every dollar, flags hidden costs with their dollar impact,
    and alerts to Slack or the console.
    """


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; maps errors to one line on stderr and an exit code."""
    try:
        cli.main(args=argv, prog_name="gpucost", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("gpucost: aborted", err=True)
        return 130
    except click.ClickException as e:
        ctx = getattr(e, "ctx", None)
        name = ctx.command_path if ctx is not None else "gpucost"
        click.echo(f"{name}: error: {e.format_message()}", err=True)
        return 2
    except NotAvailableYet as e:
        click.echo(f"gpucost: not available yet: {e}", err=True)
        return NotAvailableYet.exit_code
    except UserError as e:
        click.echo(f"gpucost: error: {e}", err=True)
        return e.exit_code
    except GpucostError as e:
        click.echo(f"gpucost: failed: {e}", err=True)
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
