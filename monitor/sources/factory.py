"""The `BillingSource` named by `[billing]` config, built in one place for every command."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from monitor.attribution.rules import Rule
from monitor.config import BillingConfig, GoogleConfig
from monitor.errors import ConfigError, InputError
from monitor.sources.base import BillingSource

__all__ = [
    "IN_MEMORY_MAX_BYTES",
    "billing_db_directory",
    "billing_source_from_config",
    "billing_source_from_files",
    "search_range",
]

#: Export files up to this size (all of them together) load into memory, larger into a temp file:
#: about 250k rows of Parquet, or 20k of gzipped NDJSON, as the simulator writes them.
IN_MEMORY_MAX_BYTES = 2 * 1024 * 1024


def billing_source_from_config(
    cfg: BillingConfig,
    *,
    google: GoogleConfig | None = None,
    rules: Sequence[Rule] | None = None,
) -> BillingSource:
    """DuckDB on `billing.db` (which must exist) or BigQuery on `billing.table`.

    The BigQuery client library is imported only when it is used, so the embedded path starts fast.
    """
    if cfg.source == "bigquery":
        from monitor.sources.billing_bigquery import BigQueryBillingSource

        return BigQueryBillingSource(cfg, google or GoogleConfig(), rules=rules)
    from monitor.sources.billing_duckdb import DuckDBBillingSource
    from monitor.sources.duckdb_conn import DatabaseFileError, open_billing_db

    if (directory := billing_db_directory(cfg.db)) is not None:
        raise ConfigError(directory)
    if not cfg.db.is_file():
        raise ConfigError(
            f"billing.db: {cfg.db} does not exist; load export files into it with "
            f"`gpucost load --billing FILE --db {cfg.db}` (report, analyze, jobs and gpus also read"
            " export files: --billing FILE)"
        )
    try:  # read-only: every query only reads, and the file may be another user's (mode 644)
        conn = open_billing_db(cfg.db, memory_limit=cfg.duckdb_memory_limit, read_only=True)
    except InputError as e:
        then = ", then set billing.db to new.duckdb" if isinstance(e, DatabaseFileError) and e.export else ""
        raise ConfigError(f"billing.db: {e}{then}") from None
    return DuckDBBillingSource(conn, rules=rules)


def billing_db_directory(db: Path) -> str | None:
    """What is wrong with `billing.db` naming a directory (None when it does not): "does not exist;
    load into it" gave a fix that fails, `load --db` refuses a directory. For `check` too."""
    if not db.is_dir():
        return None
    return f'billing.db: {db} is a directory; name the DuckDB file, e.g. billing.db = "{db / "billing.duckdb"}"'


def billing_source_from_files(
    paths: Sequence[Path], *, rules: Sequence[Rule] | None = None, memory_limit: str | None = None
) -> BillingSource:
    """Export files in DuckDB. Parquet files are read in place, through a view (`view_billing`);
    NDJSON and CSV, which are slow to parse again for every query, are loaded: up to
    `IN_MEMORY_MAX_BYTES` into an in-memory database, larger ones into a temporary file, removed
    when the source is collected or the process exits.

    A file because DuckDB compresses a file's columns and keeps only what its memory limit allows in
    memory: the bench's scale-5 export (521k rows, a 4.4 MB Parquet file) takes 28 MB on disk
    against 615 MB as an in-memory table, which grows with the export until it does not fit. Memory
    for small files because loading a file costs its writes (0.35 s more on the 50k rows of a
    ground-truth fleet)."""
    from monitor.sources.billing_duckdb import DuckDBBillingSource
    from monitor.sources.duckdb_conn import open_billing_db
    from monitor.sources.loader import FileFormat, detect_format, load_billing, view_billing

    if paths and all(detect_format(Path(p)) is FileFormat.PARQUET for p in paths):
        conn = open_billing_db(None, memory_limit=memory_limit, table=False)
        view_billing(list(paths), conn)
        return DuckDBBillingSource(conn, rules=rules)
    if sum(_size(p) for p in paths) <= IN_MEMORY_MAX_BYTES:
        conn = open_billing_db(None, memory_limit=memory_limit)
        load_billing(list(paths), conn)
        return DuckDBBillingSource(conn, rules=rules)
    scratch = tempfile.mkdtemp(prefix="gpucost-export-")
    try:
        conn = open_billing_db(Path(scratch) / "export.duckdb", memory_limit=memory_limit)
        conn.execute("PRAGMA disable_checkpoint_on_shutdown")  # the file is removed after
        load_billing(list(paths), conn)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    source = DuckDBBillingSource(conn, rules=rules)
    weakref.finalize(source, _remove, conn, scratch)
    return source


def _size(path: Path) -> int:
    """Bytes of an export file (a missing one is the loader's error to report: 0 here)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _remove(conn: Any, scratch: str) -> None:
    conn.close()
    shutil.rmtree(scratch, ignore_errors=True)


def search_range(engine: str, now: datetime) -> tuple[datetime, datetime]:
    """Where to look for data when the user gave no window: the whole local copy (scanning it is
    free), or the last 62 days of BigQuery (each scanned byte is billed)."""
    if engine == "bigquery":
        return now - timedelta(days=62), now + timedelta(days=1)
    return datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
