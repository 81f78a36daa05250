"""`gpucost run`: the daemon, or one full cycle with --once."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import click

from monitor.billing_poll import hourly_costs
from monitor.cli import cli
from monitor.cli._common import config_option, stderr_logging
from monitor.config import load_config
from monitor.daemon import install_signal_handlers
from monitor.logs import configure_logging
from monitor.model import counted, usd
from monitor.render import findings_text
from monitor.timeutil import floor_hour, to_iso


def _summary(service) -> str:
    """What the cycle attributed (last 14 days, by category) and found, for a person reading."""
    deps = service.deps
    now = deps.clock.now()
    end = floor_hour(now) + timedelta(hours=1)
    start = end - timedelta(days=14)
    rows = hourly_costs(deps.aggregates, start, end, now=now, provisional_days=deps.cfg.billing.provisional_days)
    gross: dict[str, Decimal] = defaultdict(Decimal)
    net: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        gross[r.subcategory] += r.gross
        net[r.subcategory] += r.net
    clock = "simulated now" if service.feeder is not None else "now"  # the demo's clock is its own
    lines = [f"gpucost: attributed spend {to_iso(start)} .. {to_iso(end)} ({clock} {to_iso(now)})"]
    for sub in sorted(gross, key=lambda s: -gross[s]):
        lines.append(f"  {sub:<26} gross {usd(gross[sub]):>15}   net {usd(net[sub]):>15}")
    lines.append(f"  {'TOTAL':<26} gross {usd(sum(gross.values())):>15}   net {usd(sum(net.values())):>15}")
    lines.append("")
    lines.append(f"gpucost: {counted(len(deps.findings), 'finding')}")
    if deps.findings:
        lines.append(findings_text(deps.findings))
    return "\n".join(lines)


@cli.command("run")
@config_option(required=True)
@click.option("--once", is_flag=True, help="Run one full cycle (poll, detect, deliver, digest) and exit.")
def run_cmd(config_path: Path, once: bool) -> None:
    """Run the always-on daemon (or one cycle with --once)."""
    from monitor.service import Service

    cfg = load_config(config_path)
    if once:  # one cycle, as the other commands: the root logger as it was afterwards (in-process runs)
        with stderr_logging(cfg.logging.format, cfg.logging.level):
            service = Service(cfg, stream=sys.stdout)
            try:
                result = service.once()
                click.echo(_summary(service))
                click.echo(f"gpucost: digest written to {result['digest']['markdown']}")
            finally:
                service.close()
        return
    configure_logging(cfg.logging.format, cfg.logging.level)
    stop = threading.Event()
    install_signal_handlers(stop)  # before the slow start-up: a SIGTERM during it still exits 0
    service = Service(cfg, stream=sys.stdout)
    code = service.serve(stop)
    if service.abandoned:
        # A job thread is still running (a slow query, a hung request): waiting for it at interpreter
        # exit could break the 10 s promise, and closing the stores under it is unsafe. Every write
        # is transactional, so leaving now is safe; the next start redoes the job.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    service.close()
    raise SystemExit(code)
