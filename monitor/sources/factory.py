"""The `BillingSource` named by `[billing]` config, built in one place for every command."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.attribution.rules import Rule
from monitor.config import BillingConfig, GoogleConfig
from monitor.errors import ConfigError
from monitor.sources.base import BillingSource

__all__ = ["billing_source_from_config", "billing_source_from_files", "search_range"]


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
    from monitor.sources.duckdb_conn import open_billing_db

    if not cfg.db.is_file():
        raise ConfigError(
            f"billing.db: {cfg.db} does not exist; load export files into it with "
            f"`gpucost load --billing FILE --db {cfg.db}`, or pass --billing FILE"
        )
    return DuckDBBillingSource(open_billing_db(cfg.db, memory_limit=cfg.duckdb_memory_limit), rules=rules)


def billing_source_from_files(
    paths: Sequence[Path], *, rules: Sequence[Rule] | None = None, memory_limit: str | None = None
) -> BillingSource:
    """Export files (NDJSON, Parquet, CSV) loaded into an in-memory DuckDB table."""
    from monitor.sources.billing_duckdb import DuckDBBillingSource
    from monitor.sources.duckdb_conn import open_billing_db
    from monitor.sources.loader import load_billing

    conn = open_billing_db(None, memory_limit=memory_limit)
    load_billing(list(paths), conn)
    return DuckDBBillingSource(conn, rules=rules)


def search_range(engine: str, now: datetime) -> tuple[datetime, datetime]:
    """Where to look for data when the user gave no window: the whole local copy (scanning it is
    free), or the last 62 days of BigQuery (each scanned byte is billed)."""
    if engine == "bigquery":
        return now - timedelta(days=62), now + timedelta(days=1)
    return datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
