"""`gpucost outbox`: what is waiting to be delivered or failed for good, and re-queue failed ones."""

from __future__ import annotations

from pathlib import Path

import click

from monitor.cli import cli
from monitor.cli._common import config_option, load_optional_config, missing_sqlite
from monitor.clock import SystemClock
from monitor.errors import ConfigError
from monitor.logs import redact
from monitor.model import counted
from monitor.state.store import open_store


@cli.command("outbox")
@config_option(required=True)
@click.option(
    "--status",
    "statuses",
    type=click.Choice(["pending", "failed", "sent"]),
    multiple=True,
    help="Rows in this state (repeatable; default: pending and failed).",
)
@click.option("--requeue-failed", is_flag=True, help="Put every failed message back in the queue.")
@click.option(
    "--requeue", "ids", type=int, multiple=True, help="Put this failed message back (its id; repeatable)."
)
def outbox_cmd(
    config_path: Path, statuses: tuple[str, ...], requeue_failed: bool, ids: tuple[int, ...]
) -> None:
    """List pending / failed alert messages; re-queue failed ones once their cause is fixed.

    A message fails for good when Slack refuses it (channel_not_found, is_archived, invalid_auth):
    nothing was posted, so after fixing the cause a re-queued message is delivered once by the
    running daemon (or the next `gpucost run`).
    """
    from alerts.outbox_admin import list_outbox
    from alerts.outbox_admin import requeue_failed as requeue

    cfg = load_optional_config(config_path)
    _require_sqlite_file(cfg.state.url)
    store = open_store(cfg.state.url)
    try:
        if requeue_failed or ids:
            done = requeue(store, SystemClock().now(), ids)
            missing = sorted(set(ids) - set(done))
            click.echo(
                f"re-queued {counted(len(done), 'failed message')}{': ' + ', '.join(map(str, done)) if done else ''}"
            )
            if missing:
                raise click.UsageError(
                    f"not a failed message: {', '.join(map(str, missing))} (see `gpucost outbox`)"
                )
            return
        rows = list_outbox(store, statuses or ("pending", "failed"))
        if not rows:
            click.echo("no messages in " + " / ".join(statuses or ("pending", "failed")))
            return
        for r in rows:
            first = r.text.splitlines()[0] if r.text else ""
            error = f"  [{redact(r.last_error)}]" if r.last_error else ""
            click.echo(
                f"{r.id:>6}  {r.status:<8} {r.attempts:>2}x  {r.channel:<20} {r.created_at}  {_cut(first)}{error}"
            )
    finally:
        store.close()


def _cut(text: str, width: int = 60) -> str:
    """A message's first line to `width` characters, marked where cut: a figure cut short read as
    another ("forecast $549,6" for $549,669.22)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _require_sqlite_file(url: str) -> None:
    """A relative SQLite `state.url` is read from the current directory: run from another one than
    the daemon's, the command created an empty store there and said "no messages in pending /
    failed" while the daemon's store held failed ones."""
    path = missing_sqlite(url)
    if path is not None and not path.is_absolute() and str(path) != ":memory:":
        raise ConfigError(
            f"state.url: {path} does not exist in the current directory ({Path.cwd()}), which a"
            " relative path is read from; run gpucost outbox from the directory the daemon runs in,"
            " or give state.url an absolute path"
        )
