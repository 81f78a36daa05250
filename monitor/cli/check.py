"""`gpucost check`: is this deployment able to do its job? One line per component, exit 1 if not.

Checks what an operator would otherwise find out from a silent daemon: the billing source answers
(a local DuckDB file exists and holds rows, or a BigQuery dry run of the `partitions` query succeeds
and says how many bytes it would bill), utilization is readable (files exist, or one small Cloud
Monitoring request) and every metric's unit is one we can convert (a metric with an unknown unit is
skipped, never guessed: the check fails and names it with its unit), which prices are used and how
old they are, the state store opens with its migrations, the outbox has no permanently failed
message (`invalid_auth`, `channel_not_found` show here), the Slack token is valid (`auth.test`),
and the HTTP port can be listened on (or a running gpucost answers on it). `--offline` skips
everything that needs the network. Details pass through `monitor.logs.redact`, so a token can never
be printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click

from monitor.cli import cli
from monitor.cli._common import config_option, missing_sqlite
from monitor.clock import SystemClock
from monitor.config import Config, load_config, slack_token
from monitor.errors import ConfigError
from monitor.logs import redact
from monitor.model import counted
from monitor.state.store import StateStoreError, redact_url

__all__ = ["Check", "run_checks"]


@dataclass(frozen=True)
class Check:
    """One line of the report; `ok` None means skipped (never unhealthy)."""

    name: str
    ok: bool | None
    detail: str

    def line(self) -> str:
        word = "skip" if self.ok is None else ("ok" if self.ok else "FAIL")
        return f"{self.name:<12} {word:<5} {redact(self.detail)}"


def _age(then: datetime, now: datetime) -> str:
    hours = (now - then) / timedelta(hours=1)
    return f"{hours:.1f} h old" if hours < 48 else f"{hours / 24:.0f} days old"


def check_billing(cfg: Config, offline: bool, now: datetime) -> Check:
    b = cfg.billing
    if b.source == "duckdb":
        return _check_duckdb(cfg)
    if offline:
        return Check("billing", None, f"BigQuery {b.table}: dry run skipped (--offline)")
    from monitor.billing_poll import poll_scope
    from monitor.sources.factory import billing_source_from_config

    start, end = poll_scope(now, b.lookback_days)
    source = billing_source_from_config(b, google=cfg.google)
    window = {"usage_start": start, "usage_end": end, "partition_end": end + timedelta(days=1)}
    nbytes = source.dry_run("partitions", window)
    # and of the poll's aggregation, which reads the detailed export's columns: a standard export
    # table (no `resource`) passed `partitions` and then failed every poll (a helper's real exports)
    hourly = source.dry_run("hourly", window | {"label_keys": list(cfg.stored_label_keys())})
    return Check(
        "billing",
        True,
        f"BigQuery {b.table}: dry runs of `partitions` and `hourly` would process {nbytes or 0:,} and"
        f" {hourly or 0:,} bytes",
    )


def _check_duckdb(cfg: Config) -> Check:
    import duckdb

    from monitor.sources.factory import billing_db_directory

    db = cfg.billing.db
    if (directory := billing_db_directory(db)) is not None:
        return Check("billing", False, directory)
    if not db.is_file():
        if cfg.demo.enabled:
            return Check("billing", True, f"DuckDB {db}: not created yet (the demo creates it on first run)")
        return Check("billing", False, f"DuckDB {db}: file not found; load exports with `gpucost load`")
    from monitor.errors import InputError
    from monitor.sources.duckdb_conn import DatabaseLockedError, open_billing_db

    try:  # the shared opener: it names an export file given as the database, and reads read-only
        conn = open_billing_db(db, read_only=True, table=False)
    except InputError as e:
        if isinstance(e, DatabaseLockedError):
            return Check("billing", True, f"DuckDB {db}: present, held open by a running daemon")
        return Check("billing", False, str(e))
    try:
        rows, last = conn.execute("SELECT COUNT(*), MAX(export_time) FROM billing_export").fetchone()
        files = _loaded_files(conn)
    except duckdb.Error as e:
        return Check("billing", False, f"DuckDB {db}: no billing_export table ({str(e).splitlines()[0]})")
    finally:
        conn.close()
    from monitor.timeutil import to_iso

    if not rows:
        return Check("billing", False, f"DuckDB {db}: no export rows yet; load exports with `gpucost load`")
    return Check("billing", True, f"DuckDB {db}: {rows:,} export rows{files}, last exported {to_iso(last)}")


def _loaded_files(conn: Any) -> str:
    """", from N files (the last loaded at T)" when `gpucost load` filled the database (its ledger,
    `loader.LOADS_TABLE`); nothing for one the demo or a test filled row by row."""
    import duckdb

    from monitor.sources.loader import LOADS_TABLE
    from monitor.timeutil import to_iso

    try:
        n, at = conn.execute(f"SELECT count(*), max(loaded_at) FROM {LOADS_TABLE}").fetchone()
    except duckdb.CatalogException:
        return ""
    return f", from {n:,} file{'' if n == 1 else 's'} (the last loaded at {to_iso(at)})" if n else ""


def check_utilization(cfg: Config, offline: bool, now: datetime) -> Check:
    u = cfg.utilization
    if u.source == "files":
        # a missing directory, or (the demo's) one without a file yet: the demo writes them
        missing = [
            str(p)
            for p in u.files
            if not Path(p).exists() or (cfg.demo.enabled and Path(p).is_dir() and not any(Path(p).iterdir()))
        ]
        if not u.files:
            return Check("utilization", False, "utilization.files is empty")
        if missing and cfg.demo.enabled:
            return Check(
                "utilization", True, f"files: {', '.join(missing)} not created yet (the demo writes them)"
            )
        if missing:
            return Check("utilization", False, f"files not found: {', '.join(missing)}")
        count = sum(
            sum(1 for f in Path(p).rglob("*") if f.is_file()) if Path(p).is_dir() else 1 for p in u.files
        )
        from monitor.sources.utilization_files import FileUtilizationSource

        unknown = FileUtilizationSource(u.files).scan_units()
        detail = f"files: {counted(count, 'file')} under {counted(len(u.files), 'path')}"
        return Check("utilization", not unknown, detail + _unknown_units(unknown))
    if offline:
        return Check(
            "utilization", None, f"Cloud Monitoring {', '.join(u.projects)}: request skipped (--offline)"
        )
    from monitor.sources.monitoring import CloudMonitoringSource

    source = CloudMonitoringSource(u, cfg.google)
    project = u.projects[0]
    try:
        result = source.fetch_preset(project, u.presets[0], now - timedelta(minutes=10), now)
        unknown = dict(source.unknown_units)
        for preset in u.presets:
            unknown |= {p.metric_type: p.unit for p in source.unit_problems(project, preset)}
    finally:
        source.close()
    detail = f"Cloud Monitoring {project} ({u.presets[0]}): {len(result.samples)} samples in the last 10 min"
    return Check("utilization", not unknown, detail + _unknown_units(unknown))


def _unknown_units(unknown: Mapping[str, str]) -> str:
    """The metrics skipped for their unit, named with it, for the check's detail."""
    if not unknown:
        return ""
    named = ", ".join(f"{t} (unit {u!r})" for t, u in sorted(unknown.items()))
    return f"; skipped, unit unknown (never guessed): {named}"


def check_prices(cfg: Config, store_open: Callable[[], object] | None, now: datetime) -> Check:
    from monitor.sources.pricing import CatalogPriceSource, SnapshotPriceSource

    if cfg.pricing.source == "snapshot":
        book = SnapshotPriceSource().price_book(now)
        return Check(
            "prices", True, f"bundled snapshot as of {book.as_of:%Y-%m-%d} ({_age(book.as_of, now)})"
        )
    if store_open is None:
        return Check(
            "prices", True, "Catalog API: nothing cached yet (fetched by the daemon; snapshot meanwhile)"
        )
    cached = CatalogPriceSource(cfg.pricing, cfg.google, store=store_open()).cached()  # type: ignore[arg-type]
    if cached is None:
        return Check(
            "prices", True, "Catalog API: nothing cached yet (fetched by the daemon; snapshot meanwhile)"
        )
    stale = now - cached.as_of > timedelta(hours=2 * cfg.pricing.cache_hours)
    return Check(
        "prices",
        not stale,
        f"Catalog API cache from {cached.as_of:%Y-%m-%d %H:%M} ({_age(cached.as_of, now)})",
    )


def check_store(cfg: Config, store: object) -> Check:
    with store.transaction() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            "SELECT component, MAX(version) FROM schema_migrations GROUP BY component"
        ).fetchall()
    parts = ", ".join(f"{c} v{v}" for c, v in sorted(tuple(r) for r in rows)) or "no migrations yet"
    return Check("state", True, f"{redact_url(cfg.state.url)}: {parts}")


def check_aggregates(cfg: Config) -> Check:
    """The aggregate store (`monitor.state.analytics`): how much it holds and when billing was last
    polled into it. Never created by the check; a daemon holding it open is not a failure."""
    from monitor.billing_poll import aggregate_summary
    from monitor.state.analytics import AggregateStore, aggregates_path

    path = aggregates_path(cfg.state.url, cfg.state.aggregates_path)
    if path is None:
        return Check("aggregates", True, "in memory (rebuilt by each run)")
    if not path.exists():
        return Check("aggregates", True, f"{path}: not created yet (the first billing poll creates it)")
    try:
        rows, last, covered = aggregate_summary(AggregateStore(path, lock_timeout_s=2))
    except StateStoreError as e:
        if "lock" in str(e).replace(str(path), "").lower():  # not in the path ("/srv/blocks/")
            return Check("aggregates", True, f"{path}: present, held by a running daemon")
        return Check("aggregates", False, str(e))
    polled = f"last billing poll {last:%Y-%m-%d %H:%M} UTC" if last else "no billing poll yet"
    since = f" of usage from {covered:%Y-%m-%d %H:%M} UTC" if covered else ""
    return Check("aggregates", True, f"{path}: {rows:,} hourly aggregates{since}, {polled}")


def check_outbox(store: object) -> Check:
    from alerts.outbox import status

    st = status(store)  # type: ignore[arg-type]
    text = f"pending {st.pending}, failed {st.failed}, sent {st.sent}"
    if st.last_error:
        text += f"; last error: {st.last_error}"
    return Check("outbox", st.healthy, text)


def check_slack(cfg: Config, offline: bool, environ: Mapping[str, str]) -> Check:
    from alerts.notifier import Outcome
    from alerts.slack import SlackNotifier

    token = slack_token(cfg.slack, dict(environ))
    if token is not None and not cfg.slack.channel:
        return Check(
            "slack", False, "SLACK_BOT_TOKEN is set but slack.channel is not; alerts go to the console"
        )
    if token is None:
        if cfg.slack.webhook_url_env:
            set_ = bool(environ.get(cfg.slack.webhook_url_env, "").strip())
            what = "set (not tested: a test would post)" if set_ else "NOT SET"
            return Check("slack", set_, f"incoming webhook from ${cfg.slack.webhook_url_env}: {what}")
        where = f"the console and {cfg.alerts.console_dir}"
        if cfg.slack.channel:
            # A channel with no token is a deployment whose Secret is missing: the daemon would
            # write every alert to files nobody reads instead of Slack.
            return Check(
                "slack",
                False,
                f"slack.channel is {cfg.slack.channel} but SLACK_BOT_TOKEN is not set: alerts would go to "
                f"{where}; set SLACK_BOT_TOKEN (or slack.token_file), or remove slack.channel",
            )
        return Check("slack", True, f"no SLACK_BOT_TOKEN: alerts go to {where}")
    if offline:
        return Check(
            "slack", None, f"bot token set, channel {cfg.slack.channel}: auth.test skipped (--offline)"
        )
    notifier = SlackNotifier(token, cfg.slack.api_base_url, timeout=10)
    result = notifier.auth_test()
    if result.outcome is not Outcome.SENT:
        return Check("slack", False, result.error or "auth.test failed")
    # Every channel alerts may go to must resolve to an id: crash recovery searches history by id.
    channels = dict.fromkeys([cfg.slack.channel, *(r.channel for r in cfg.slack.routes)])
    seen, problems = [], []
    for ch in channels:
        got = notifier.check_channel(ch)
        if got.outcome is Outcome.SENT:
            seen.append(f"{ch} = {got.channel}")
        else:
            problems.append(f"{ch}: {got.error}")
    detail = f"auth.test ok (team {result.channel}); channels " + ", ".join(seen + problems)
    return Check("slack", not problems, detail)


def check_outputs(cfg: Config) -> Check:
    """`alerts.console_dir` and `digest.out_dir` can hold files (missing ones are created on first
    use): one that is a file would leave every console alert pending and fail each digest."""
    from alerts.console import unusable_dir

    dirs = {"alerts.console_dir": cfg.alerts.console_dir, "digest.out_dir": cfg.digest.out_dir}
    problems = [str(p) for k, v in dirs.items() if (p := unusable_dir(Path(v), k)) is not None]
    if problems:
        return Check("outputs", False, "; ".join(problems))
    return Check("outputs", True, ", ".join(f"{k} {v}" for k, v in dirs.items()))


def check_http(cfg: Config) -> Check:
    """`http.host` / `http.port` can be listened on, as `run` will (`monitor.http.HealthServer`). A
    port held by a running gpucost (its `/healthz` answers) is fine: `check` is often run beside
    the daemon. Anything else that holds it, or a host that is not this machine's, fails with the
    message `run` would stop with."""
    import errno
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from monitor.http import bind_error

    h = cfg.http
    if not h.enabled:
        return Check("http", None, "http.enabled = false: no /healthz, /readyz or /metrics")
    try:
        ThreadingHTTPServer((h.host, h.port), BaseHTTPRequestHandler).server_close()  # as `run` binds
    except OSError as e:
        if e.errno == errno.EADDRINUSE and _answers_healthz(h.host, h.port):
            return Check("http", True, f"{h.host}:{h.port}: a running gpucost answers /healthz there")
        return Check("http", False, str(bind_error(h.host, h.port, e)))
    return Check("http", True, f"{h.host}:{h.port}: free for /healthz, /readyz and /metrics")


def _answers_healthz(host: str, port: int) -> bool:
    """Whether gpucost's `/healthz` answers on `host:port` (a wildcard host: on loopback)."""
    import urllib.request

    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://[{target}]:{port}/healthz" if ":" in target else f"http://{target}:{port}/healthz"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy
    try:
        with direct.open(url, timeout=3) as r:
            return r.status == 200 and json.loads(r.read()) == {"status": "ok"}
    except (OSError, ValueError):
        return False


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    """A check that raises is a failed check with the error's first line, never a traceback."""
    try:
        return fn()
    except Exception as e:
        first = (str(e).splitlines() or [""])[0]
        return Check(name, False, f"{type(e).__name__}: {first}")


def _missing_store_check(path: Path) -> Check:
    from monitor.state.store import unusable_sqlite_path

    try:
        unusable_sqlite_path(path)
    except ConfigError as e:
        return Check("state", False, str(e))
    parent = next((p for p in (path.parent, *path.parents) if p.exists()), Path("."))
    if os.access(parent, os.W_OK):
        return Check("state", True, f"{path}: not created yet (created on first run)")
    return Check("state", False, f"{path}: does not exist and {parent} is not writable")


def run_checks(cfg: Config, *, offline: bool, environ: Mapping[str, str], now: datetime) -> list[Check]:
    from monitor.state.store import open_store

    opened: list[object] = []

    def store() -> object:
        if not opened:
            opened.append(open_store(cfg.state.url))
        return opened[0]

    checks = [
        _guard("billing", lambda: check_billing(cfg, offline, now)),
        _guard("utilization", lambda: check_utilization(cfg, offline, now)),
    ]
    missing = missing_sqlite(cfg.state.url)
    try:
        if missing is not None:  # a check must not create the store as a side effect
            checks.append(_guard("prices", lambda: check_prices(cfg, None, now)))
            checks.append(_missing_store_check(missing))
            checks.append(_guard("aggregates", lambda: check_aggregates(cfg)))
            checks.append(Check("outbox", True, "pending 0, failed 0, sent 0 (no state store yet)"))
        else:
            checks += [
                _guard("prices", lambda: check_prices(cfg, store, now)),
                _guard("state", lambda: check_store(cfg, store())),
                _guard("aggregates", lambda: check_aggregates(cfg)),
                _guard("outbox", lambda: check_outbox(store())),
            ]
        checks.append(_guard("slack", lambda: check_slack(cfg, offline, environ)))
        checks.append(_guard("outputs", lambda: check_outputs(cfg)))
        checks.append(_guard("http", lambda: check_http(cfg)))
        return checks
    finally:
        for s in opened:
            s.close()  # type: ignore[attr-defined]


@cli.command("check")
@config_option(required=True)
@click.option(
    "--offline", is_flag=True, help="Skip checks that need the network (BigQuery, Monitoring, Slack)."
)
def check_cmd(config_path: Path, offline: bool) -> None:
    """Validate the config and report the health of sources and alert delivery (exit 1 if unhealthy)."""
    cfg = load_config(config_path)
    click.echo(f"{config_path}: config OK")
    checks = run_checks(cfg, offline=offline, environ=os.environ, now=SystemClock().now())
    for c in checks:
        click.echo(c.line())
    if any(c.ok is False for c in checks):
        sys.exit(1)
