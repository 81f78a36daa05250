"""`gpucost digest`: the daily digest from the state store the daemon keeps, on demand.

Reads the same stored hourly aggregates as the daemon (so the figures match `gpucost report` for the
day); before any daemon run the store is empty, and one billing poll fills it first. "Now" is the
time of the last billing poll (what the stored data is current as of: real time in production, the
simulated time in the demo), and the default day is the day before it in `digest.timezone`.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click

from monitor.attribution.compile import compile_rules
from monitor.billing_poll import last_poll
from monitor.cli import cli
from monitor.cli._common import EARLIEST, config_option, load_optional_config
from monitor.clock import FixedClock, SystemClock
from monitor.config import Config
from monitor.cycle import build_deps, run_billing_poll, run_digest
from monitor.errors import ConfigError, GpucostError
from monitor.sources.base import BillingSource, QueryResult
from monitor.state.analytics import AggregateStore, aggregates_path

__all__ = ["LazyBilling", "digest_now"]


class LazyBilling:
    """The configured billing source, opened on first use: a digest over a store the daemon filled
    never touches the export (nor waits for the DuckDB file the daemon holds open)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.engine = cfg.billing.source
        self._source: BillingSource | None = None

    def _open(self) -> BillingSource:
        if self._source is None:
            from monitor.sources.factory import billing_source_from_config

            rules = compile_rules(self.cfg.attribution.rules)
            self._source = billing_source_from_config(self.cfg.billing, google=self.cfg.google, rules=rules)
        return self._source

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult:
        return self._open().run(name, params, arrow=arrow)

    def dry_run(self, name: str, params: dict[str, Any]) -> int | None:
        return self._open().dry_run(name, params)


def digest_now(billing: BillingSource, real_now: datetime) -> datetime:
    """The instant a first poll is made as of: real time for BigQuery; for a local DuckDB copy, its
    latest export time (the copy is a snapshot, like `gpucost report` treats it)."""
    if billing.engine != "duckdb":
        return real_now
    from monitor.report import data_extent
    from monitor.sources.factory import search_range

    lo, hi = search_range("duckdb", real_now)
    _, _, last_export, rows = data_extent(billing, lo, hi)
    return last_export if rows and last_export is not None else real_now


@cli.command("digest")
@config_option()
@click.option(
    "--date",
    "day",
    type=click.DateTime(["%Y-%m-%d"]),
    help=(
        "Day to report (default: the day before the last billing poll, or before a local copy's"
        " latest load, in digest.timezone)."
    ),
)
@click.option(
    "--send", is_flag=True, help="Also post it to Slack (the digest is written to digest.out_dir either way)."
)
def digest_cmd(config_path: Path | None, day: datetime | None, send: bool) -> None:
    """Render the daily digest (Markdown + PNG chart) from the state store; --send posts it to Slack."""
    cfg = load_optional_config(config_path)
    billing = LazyBilling(cfg)
    path = aggregates_path(cfg.state.url, cfg.state.aggregates_path)
    now = None
    if path is None or path.exists():  # never polled: nothing to read, nor a file to leave behind
        aggregates = AggregateStore(path)
        try:
            now = last_poll(aggregates)
        finally:
            aggregates.close()
    clock = FixedClock(now or digest_now(billing, SystemClock().now()))
    the_day: date | None = day.date() if day is not None else None
    today = clock.now().astimezone(ZoneInfo(cfg.digest.timezone)).date()
    # before the state store and a poll: a refused --date wrote them (out/state.sqlite)
    if the_day is not None and the_day > today:  # it wrote a digest of a day to come, exit 0
        raise click.BadParameter(
            f"{the_day} is after the day gpucost's data reaches ({today}, {cfg.digest.timezone})",
            param_hint="'--date'",
        )
    if the_day is not None and the_day < EARLIEST.date():  # its chart's days overflowed
        raise click.BadParameter(f"{the_day} is before {EARLIEST.year}", param_hint="'--date'")
    deps = build_deps(cfg, clock, billing)
    try:
        if send and deps.notifier.name == "console":
            raise ConfigError("--send needs SLACK_BOT_TOKEN and slack.channel (or slack.webhook_url_env)")
        if now is None:
            run_billing_poll(deps, clock.now())
        result = run_digest(deps, clock.now(), the_day, send=send, force=True)
    finally:
        deps.store.close()
        deps.aggregates.close()
    click.echo(result["markdown"])
    click.echo(result["png"])
    if send and not result["sent"]:
        queued = " (queued in the outbox: the daemon retries it; `gpucost outbox` shows it)"
        raise GpucostError(
            f"digest written but not sent to Slack: {result['error']}{queued if result.get('queued') else ''}"
        )
    if send:
        already = "already " if result.get("already") else ""
        if deps.notifier.name == "webhook":  # it posts where it was made to: no channel of ours
            click.echo(
                f"{already}sent through the incoming webhook, to its own channel (without the chart:"
                " a webhook cannot upload files)"
            )
        else:
            click.echo(f"{already}sent to {deps.alert_deps.default_channel}")
