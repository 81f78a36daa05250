"""`gpucost simulate`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from monitor.cli import cli
from monitor.cli._common import TIMESTAMP
from monitor.errors import InputError
from monitor.model import micros_to_decimal, usd


@cli.command("simulate")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write the fleet's billing export, utilization and ground truth.",
)
@click.option("--days", default=14, show_default=True, type=click.IntRange(1, 400), help="Days of usage.")
@click.option("--seed", default=7, show_default=True, type=int, help="Random seed (output is deterministic).")
@click.option(
    "--scale",
    default=1,
    show_default=True,
    type=click.IntRange(1, 10000),
    help="Multiply the fleet (for benchmarks).",
)
@click.option(
    "--start",
    type=TIMESTAMP,
    default="2026-11-01T00:00:00Z",
    show_default=True,
    help="First usage hour (UTC, on the hour).",
)
@click.option("--clean", is_flag=True, help="The same fleet without any injected hidden cost.")
@click.option(
    "--billing-format",
    type=click.Choice(["both", "parquet", "ndjson"]),
    default="both",
    show_default=True,
    help="The billing export's files: export.parquet, export.ndjson.gz or both (the same rows; the"
    " NDJSON takes about a third of the time).",
)
def simulate_cmd(
    out_dir: Path, days: int, seed: int, scale: int, start: datetime, clean: bool, billing_format: str
) -> None:
    """Write a simulated GPU fleet: billing export, utilization and injected hidden costs."""
    from monitor.progress import context_clock, progress
    from monitor.simulate import BILLING_FORMATS, write_fleet

    formats = BILLING_FORMATS if billing_format == "both" else (billing_format,)

    try:
        with progress("simulate", None, unit="rows", clock=context_clock()) as bar:
            summary = write_fleet(
                out_dir,
                seed=seed,
                days=days,
                scale=scale,
                start=start,
                inject=not clean,
                formats=formats,
                progress=bar,
            )
    except OSError as e:  # a read-only or full disk, a path under a file: one line, not a traceback
        where = e.filename or out_dir
        raise InputError(
            str(where), f"cannot write ({e.strerror}): pass a writable --out directory"
        ) from None
    totals = summary["totals"]
    click.echo(
        f"wrote {summary['rows']:,} billing rows, {days} days from {start:%Y-%m-%d %H:%M}Z, "
        f"seed {seed}, scale {scale} -> {out_dir}"
    )
    click.echo(
        f"total cost {_usd(totals['cost_micros'])}, credits {_usd(totals['credits_micros'])}, "
        f"net {_usd(totals['net_cost_micros'])}"
    )
    hidden = summary["hidden_costs"]
    if hidden:
        listed = ", ".join(f"{h['kind']}/{h['variant']} {usd(h['impact_usd'])}" for h in hidden)
        click.echo(f"hidden costs injected ({len(hidden)}): {listed}")
    else:
        click.echo("hidden costs injected: none (--clean)")
    billing = summary["files"][: len(formats)]
    # the same rows in two formats: a user passing both to --billing counted every dollar twice
    same = " (the same rows: read one)" if len(billing) > 1 else ""
    click.echo(f"files: {' or '.join(billing)}{same}, utilization/*.json.gz ({days}), ground_truth.json")


def _usd(micros: int) -> str:
    return usd(micros_to_decimal(micros))
