"""`gpucost load`."""

from __future__ import annotations

from pathlib import Path

import click

from monitor.cli import cli
from monitor.cli._common import billing_option


@cli.command("load")
@billing_option(required=True)
@click.option(
    "--db",
    "db_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="DuckDB file to load into (created if missing).",
)
@click.option(
    "--again",
    is_flag=True,
    help="Load files whose contents the database already holds (their rows then count twice).",
)
def load_cmd(billing_paths, db_path, again) -> None:
    """Load billing export files into the embedded DuckDB table.

    All files load in one transaction: a malformed row anywhere leaves the database unchanged.
    Rows are appended as the export writes them. A file whose contents the database already holds
    is refused, since its costs would count twice (--again loads it anyway).
    """
    from monitor.progress import context_clock, progress
    from monitor.sources.duckdb_conn import open_billing_db
    from monitor.sources.loader import load_billing

    paths = [Path(p) for p in billing_paths]
    created = not db_path.exists()
    conn = open_billing_db(db_path)
    try:
        # heartbeat: one file is one DuckDB statement, silent for as long as it runs
        with progress("load", len(paths), unit="files", clock=context_clock(), heartbeat=1.0) as bar:
            report = load_billing(paths, conn, progress=bar, again=again)
    except BaseException:
        conn.close()
        if created:  # nothing was loaded: leave no empty database behind
            for leftover in (db_path, db_path.with_name(db_path.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise
    conn.close()
    for name, rows in report.per_file.items():
        click.echo(f"  {name}: {rows} rows")
    files = "file" if report.files == 1 else "files"
    click.echo(f"loaded {report.rows} rows from {report.files} {files} into {db_path}")
