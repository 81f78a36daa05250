"""Config errors are part of the interface: they are pinned word for word."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import Config, load_config, parse_config, slack_token
from monitor.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["demo.toml", "production.example.toml"])
def test_shipped_example_configs_validate(name: str) -> None:
    cfg = load_config(REPO / "deploy" / "config" / name)
    assert isinstance(cfg, Config)


def test_demo_config_is_embedded_and_production_is_cloud() -> None:
    demo = load_config(REPO / "deploy/config/demo.toml")
    prod = load_config(REPO / "deploy/config/production.example.toml")
    assert (demo.billing.source, demo.utilization.source, demo.pricing.source) == (
        "duckdb",
        "files",
        "snapshot",
    )
    assert demo.demo.enabled and not prod.demo.enabled
    assert (prod.billing.source, prod.utilization.source, prod.pricing.source) == (
        "bigquery",
        "cloud_monitoring",
        "catalog",
    )
    assert prod.google.credentials == "default"


CASES = [
    (
        {"billing": {"table": "foo"}},
        'gpucost.toml: billing.table: expected "project.dataset.table", got "foo"',
    ),
    (
        {"billing": {"tabel": "a.b.c"}},
        "gpucost.toml: billing.tabel: unknown key (check the spelling; "
        "see deploy/config/production.example.toml)",
    ),
    (
        {"billing": {"source": "bigquery"}},
        'gpucost.toml: billing: source "bigquery" needs table = "project.dataset.table"',
    ),
    (
        {"billing": {"source": "redshift"}},
        "gpucost.toml: billing.source: Input should be 'duckdb' or 'bigquery', got 'redshift'",
    ),
    (
        {"billing": {"lookback_days": 0}},
        "gpucost.toml: billing.lookback_days: Input should be greater than or equal to 1",
    ),
    (
        {"slack": {"token": "xoxb-secret"}},
        "gpucost.toml: slack.token: secrets are not read from the config file; "
        "set SLACK_BOT_TOKEN (or slack.token_file / slack.webhook_url_env) instead",
    ),
    (
        {"digest": {"timezone": "Mars/Olympus"}},
        'gpucost.toml: digest.timezone: unknown time zone "Mars/Olympus"; use an IANA name like "Europe/Paris"',
    ),
    (
        {"digest": {"time": "9am"}},
        'gpucost.toml: digest.time: expected "HH:MM" (24 h), got "9am"',
    ),
    (
        {"utilization": {"source": "cloud_monitoring"}},
        'gpucost.toml: utilization: source "cloud_monitoring" needs projects = ["my-project", ...]',
    ),
    (
        {"utilization": {"api_endpoint": "not an endpoint"}},
        'gpucost.toml: utilization.api_endpoint: expected "host:port" or an https:// URL, got "not an endpoint"',
    ),
    (
        {"attribution": {"rules": [{"category": "compute.tpu", "sku_regex": "TPU"}]}},
        'gpucost.toml: attribution.rules.0.category: unknown category "compute.tpu"; use one of: '
        "compute.gpu, compute.cpu, compute.ram, compute.commitment_fee, compute.other, network.intra_zone, "
        "network.inter_zone, network.inter_region, network.internet, network.google, network.ingress, "
        "network.other, storage.gcs, storage.persistent_disk, storage.snapshot, storage.filestore, "
        "storage.bigquery, storage.other, orchestration.gke, orchestration.vertex_ai, orchestration.other, "
        "licensing.os, licensing.marketplace, support, tax, other",
    ),
    (
        {"state": {"url": "postgresql://gpucost@db:5432/state"}},
        "gpucost.toml: state: aggregates_path: with a PostgreSQL state store, set it to the DuckDB file the"
        ' daemon and every command share, on a local disk (e.g. "/var/lib/gpucost/aggregates.duckdb"): it has'
        " no state file to sit beside, and one in the working directory gave a command run elsewhere a store"
        " of its own",
    ),
    (
        {"state": {"url": "postgresql://gpucost:s3cret@db:5432/state"}},
        "gpucost.toml: state.url: a password does not belong in the config file; "
        "set PGPASSWORD or use ~/.pgpass",
    ),
    (
        {"state": {"url": "mysql://x"}},
        'gpucost.toml: state.url: expected "sqlite:///PATH" or "postgresql://...", got "mysql://x"',
    ),
    (
        {"budgets": {"items": [{"name": "x", "amount_usd": 5, "label": "team"}]}},
        'gpucost.toml: budgets.items.0.label: expected "key=value", got "team"',
    ),
    (
        {"detectors": {"idle_gpu": {"min_idle_hour": 2}}},
        "gpucost.toml: detectors.idle_gpu.min_idle_hour: unknown key; [detectors.idle_gpu] accepts: "
        "enabled, min_impact_usd, warning_usd, critical_usd, min_idle_hours, max_gap_hours, min_idle_share",
    ),
    (
        {"detectors": {"idle_gpus": {}}},
        "gpucost.toml: detectors.idle_gpus: unknown detector; known detectors: budget_forecast, "
        "commitment_opportunity, cross_region_egress, cross_zone_egress, idle_gpu, idle_orchestration, "
        "job_budget, spend_anomaly, spot_opportunity, unmonitored_gpu",
    ),
    (
        {"billing": {"duckdb_memory_limit": "lots"}},
        'gpucost.toml: billing.duckdb_memory_limit: expected a size such as "1GB", "512MB" or "2GiB", got "lots"',
    ),
    (
        {"google": {"credentials": "json"}},
        "gpucost.toml: google.credentials: Input should be 'default' or 'anonymous', got 'json'",
    ),
    (
        {"billing": {"job_timeout_seconds": 5}},
        "gpucost.toml: billing.job_timeout_seconds: Input should be greater than or equal to 30",
    ),
    (
        {"billing": {"job_timeout_seconds": 86400}},  # past BigQuery's own 6-hour limit
        "gpucost.toml: billing.job_timeout_seconds: Input should be less than or equal to 21600",
    ),
    (
        {"billing": {"job_timeout_seconds": "15m"}},
        "gpucost.toml: billing.job_timeout_seconds: Input should be a valid number, unable to parse "
        "string as a number",
    ),
]


@pytest.mark.parametrize(("data", "message"), CASES)
def test_config_errors_word_for_word(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data, "gpucost.toml")
    assert str(err.value) == message


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "nope.toml")
    assert str(err.value) == f"{tmp_path / 'nope.toml'}: config file not found (pass --config PATH)"
    bad = tmp_path / "bad.toml"
    bad.write_text("[billing\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value).startswith(f"{bad}: not valid TOML (")


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(Exception, match="frozen"):
        cfg.billing.lookback_days = 3  # type: ignore[misc]


def test_slack_token_from_env_or_file_never_printed(tmp_path: Path) -> None:
    cfg = Config().slack
    assert slack_token(cfg, {}) is None
    tok = slack_token(cfg, {"SLACK_BOT_TOKEN": "xoxb-123"})
    assert tok is not None and tok.get_secret_value() == "xoxb-123"
    assert "xoxb" not in repr(tok) and "xoxb" not in str(tok)
    f = tmp_path / "token"
    f.write_text("xoxb-file\n")
    cfg2 = parse_config({"slack": {"token_file": str(f)}}).slack
    got = slack_token(cfg2, {})
    assert got is not None and got.get_secret_value() == "xoxb-file"
    cfg3 = parse_config({"slack": {"token_file": str(tmp_path / "missing")}}).slack
    with pytest.raises(ConfigError, match=r"slack.token_file: cannot read .*missing"):
        slack_token(cfg3, {})
    # an empty file was "SLACK_BOT_TOKEN is not set"; one not in UTF-8 a traceback
    for data, says in ((b"\n", "is empty; write the bot token"), (b"xoxb-\xff\xfe", "is not UTF-8 text")):
        f.write_bytes(data)
        with pytest.raises(ConfigError, match=f"slack.token_file: {f} {says}") as e:
            slack_token(cfg2, {})
        assert "xoxb-" not in str(e.value).replace("(xoxb-...)", "")


def test_slack_api_base_url_is_a_url() -> None:
    # "slack.com/api" was a ValueError traceback at the first send
    with pytest.raises(ConfigError, match=r"slack.api_base_url: expected an http\(s\):// URL"):
        parse_config({"slack": {"api_base_url": "slack.com/api"}})
    assert parse_config({"slack": {"api_base_url": "http://127.0.0.1:9/api/"}}).slack.api_base_url


def test_duckdb_gets_the_configured_memory_limit() -> None:
    from monitor.sources.factory import billing_source_from_files

    src = billing_source_from_files([], memory_limit="300MB")
    limit = src.conn.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit == "286.1 MiB"  # DuckDB's own rendering of 300 MB
    assert parse_config({}).billing.duckdb_memory_limit == "1GB"


@pytest.mark.parametrize(("billing", "seconds"), [({}, 900.0), ({"job_timeout_seconds": 45}, 45.0)])
def test_bigquery_job_timeout_comes_from_the_config(billing: dict, seconds: float) -> None:
    """The source every command builds from `[billing]` waits `billing.job_timeout_seconds` for a job."""
    from monitor.sources.factory import billing_source_from_config

    cfg = parse_config(
        {
            "google": {"credentials": "anonymous"},
            "billing": {"source": "bigquery", "table": "p.d.t", "api_endpoint": "127.0.0.1:9", **billing},
        }
    )
    src = billing_source_from_config(cfg.billing, google=cfg.google)
    assert src.job_timeout == seconds  # type: ignore[attr-defined]
