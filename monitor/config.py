"""Configuration, declared once: frozen pydantic models loaded from one TOML file.

Every model forbids unknown keys, so a typo is an error at start-up rather than a silently ignored
setting. Errors name the file, the key path and the fix, e.g.::

    gpucost.toml: billing.table: expected "project.dataset.table", got "foo"

Secrets never come from the TOML: the Slack bot token is read from `SLACK_BOT_TOKEN` or from the file
named by `slack.token_file`, and is held as a `SecretStr` so it never prints.
Relative paths are relative to the working directory the daemon was started in.
"""

from __future__ import annotations

import codecs
import os
import re
import tomllib
from datetime import datetime
from datetime import time as dt_time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from monitor.errors import ConfigError
from monitor.jobs.config import JobsConfig, check_label_keys
from monitor.model import JOB_FINISHED, SUBCATEGORIES, PricingModel, Severity

#: The billing engine's DuckDB memory limit unless `billing.duckdb_memory_limit` sets one.
DUCKDB_MEMORY_LIMIT = "1GB"

__all__ = [
    "AlertsConfig",
    "BillingConfig",
    "Config",
    "Regex",
    "load_config",
    "parse_config",
    "slack_token",
]

_MEMORY_RE = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
_TABLE_RE = re.compile(r"^[A-Za-z0-9_\-]+\.[A-Za-z0-9_]+\.[A-Za-z0-9_\-*$]+$")
_HOSTPORT_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d+$|^https?://\S+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _endpoint(v: str | None) -> str | None:
    if v is not None and not _HOSTPORT_RE.match(v):
        raise ValueError(f'expected "host:port" or an https:// URL, got "{v}"')
    return v


Endpoint = Annotated[str | None, AfterValidator(_endpoint)]


def _http_url(v: str | None) -> str | None:
    if v is not None and not re.match(r"^https?://[^/\s]+", v):  # "slack.com/api": ValueError at send
        raise ValueError(f'expected an http(s):// URL such as "https://slack.com/api/", got "{v}"')
    return v


def _regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e})") from None
    return v


#: A regular expression, checked when the config loads (shared by config models and detectors).
Regex = Annotated[str, AfterValidator(_regex)]


class GoogleConfig(_Strict):
    credentials: Literal["default", "anonymous"] = "default"


class BillingConfig(_Strict):
    source: Literal["duckdb", "bigquery"] = "duckdb"
    table: str | None = None
    project: str | None = None
    location: str = "US"
    api_endpoint: Endpoint = None
    maximum_bytes_billed: int = Field(default=50 * 2**30, gt=0)
    # How long one BigQuery query job may run before the poll gives up on it (the client then asks
    # BigQuery to cancel it; monitor/sources/billing_bigquery.py): 15 minutes by default, at least
    # 30 s (a busy reservation queues jobs), at most 6 hours, where BigQuery fails the job itself
    # ("Query execution-time limit", https://cloud.google.com/bigquery/quotas).
    job_timeout_seconds: float = Field(default=900, ge=30, le=6 * 3600)
    lookback_days: int = Field(default=10, ge=1, le=62)
    provisional_days: int = Field(default=3, ge=0, le=31)
    # Hours without a new load of the export (its latest export_time) before the daemon tells the
    # channel it stopped arriving, or, with no load at all, after this long since gpucost first
    # started (alerts/export_stale.py; 0: never). Loads come with no latency guarantee and cost
    # has been seen 1.6 days late, hence two days.
    stale_after_hours: int = Field(default=48, ge=0, le=24 * 31)
    db: Path = Path("out/gpucost.duckdb")
    labels: tuple[str, ...] = ("team", "job")
    # DuckDB's memory bound (it spills to disk beyond it); its own default is 80% of RAM, all of
    # which it would keep (monitor/sources/duckdb_conn.py).
    duckdb_memory_limit: str = DUCKDB_MEMORY_LIMIT

    @field_validator("table")
    @classmethod
    def _table(cls, v: str | None) -> str | None:
        if v is not None and not _TABLE_RE.match(v):
            raise ValueError(f'expected "project.dataset.table", got "{v}"')
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return check_label_keys(v)

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not _MEMORY_RE.match(v):
            raise ValueError(f'expected a size such as "1GB", "512MB" or "2GiB", got "{v}"')
        return v

    @model_validator(mode="after")
    def _bigquery_needs_table(self) -> BillingConfig:
        if self.source == "bigquery" and self.table is None:
            raise ValueError('source "bigquery" needs table = "project.dataset.table"')
        return self


class AttributionRule(_Strict):
    """An override prepended to the built-in rules; the first matching rule wins."""

    category: str
    pricing_model: PricingModel | None = None
    service: str | None = None
    sku_regex: Regex | None = None
    sku_id: str | None = None

    @field_validator("category")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in SUBCATEGORIES:
            raise ValueError(f'unknown category "{v}"; use one of: {", ".join(SUBCATEGORIES)}')
        return v

    @model_validator(mode="after")
    def _conditioned(self) -> AttributionRule:
        if self.service is None and self.sku_regex is None and self.sku_id is None:
            raise ValueError(
                "give at least one of service, sku_regex or sku_id (a rule without a condition would"
                " claim every row)"
            )
        return self


class AttributionConfig(_Strict):
    rules: tuple[AttributionRule, ...] = ()


class UtilizationConfig(_Strict):
    source: Literal["files", "cloud_monitoring"] = "files"
    projects: tuple[str, ...] = ()
    presets: tuple[Literal["ops_agent_nvml", "ops_agent_dcgm", "gke", "managed_prometheus_dcgm"], ...] = (
        "ops_agent_nvml",
    )
    alignment_seconds: int = Field(default=300, ge=60, le=3600)
    api_endpoint: Endpoint = None
    insecure: bool = False
    files: tuple[Path, ...] = ()
    idle_threshold_pct: float = Field(default=10.0, ge=0, le=100)
    # The daemon's backfill of what it has not read yet (first start, downtime): its own job, every
    # `backfill_interval_seconds` reading at most `backfill_chunks_per_run` chunks of
    # `backfill_chunk_hours`, never inside a live poll (0 chunks: no backfill). The defaults read 14
    # days of one (project, preset) in about 3.5 minutes at 8 chunk reads a minute (each a few
    # pages), a small share of the per-minute "time series queries" quota
    # (https://cloud.google.com/monitoring/quotas). The chunks are shared by every (project,
    # preset): 6 projects x 3 presets take about an hour; raise `backfill_chunks_per_run` for more.
    backfill_chunk_hours: int = Field(default=12, ge=1, le=24)
    backfill_chunks_per_run: int = Field(default=4, ge=0, le=100)
    backfill_interval_seconds: float = Field(default=30, gt=0)

    @model_validator(mode="after")
    def _needs_projects(self) -> UtilizationConfig:
        if self.source == "cloud_monitoring" and not self.projects:
            raise ValueError('source "cloud_monitoring" needs projects = ["my-project", ...]')
        return self


class PricingConfig(_Strict):
    source: Literal["snapshot", "catalog"] = "snapshot"
    api_endpoint: Endpoint = None
    insecure: bool = False
    cache_hours: int = Field(default=24, ge=1)


class Budget(_Strict):
    name: str = Field(min_length=1)
    amount_usd: float = Field(gt=0, allow_inf_nan=False)
    project: str | None = None
    label: str | None = Field(default=None, description='"key=value"')

    @field_validator("label")
    @classmethod
    def _kv(cls, v: str | None) -> str | None:
        key, eq, value = (v or "").partition("=")
        if v is not None and not (eq and key.strip() and value.strip()):
            raise ValueError(f'expected "key=value", got "{v}"')
        return v


class BudgetsConfig(_Strict):
    source: Literal["config", "api"] = "config"
    billing_account: str | None = Field(default=None, validate_default=True)
    api_endpoint: Endpoint = None
    insecure: bool = False
    items: tuple[Budget, ...] = ()

    @field_validator("billing_account")
    @classmethod
    def _api_needs_account(cls, v: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("source") == "api" and not v:
            raise ValueError(
                'required when budgets.source = "api" (the id shown in Cloud Billing, e.g.'
                ' "012345-6789AB-CDEF01")'
            )
        return v

    @field_validator("items")
    @classmethod
    def _named_once(cls, v: tuple[Budget, ...]) -> tuple[Budget, ...]:
        # a budget's alerts are told apart by its name: two of one name crashed every detection
        # run (a UNIQUE constraint on the findings' fingerprints)
        seen: dict[str, int] = {}
        for i, b in enumerate(v):
            if b.name in seen:
                raise ValueError(
                    f'"{b.name}" names two budgets (items {seen[b.name]} and {i}); give each its own name'
                )
            seen[b.name] = i
        return v


#: Keys a matcher (`[[slack.routes]]`, `[[alerts.silences]]`) or `alerts.group_by` may use besides
#: `label.<key>`.
MATCH_KEYS: tuple[str, ...] = ("kind", "severity", "project", "zone", "region", "cluster", "instance")
_SEVERITIES = tuple(s.value for s in Severity)


def _match_key(key: str) -> str:
    if key in MATCH_KEYS or (key.startswith("label.") and len(key) > len("label.")):
        return key
    raise ValueError(f'unknown key "{key}"; use one of {", ".join(MATCH_KEYS)} or label.<key>')


def _matcher(match: dict[str, str]) -> dict[str, str]:
    """A matcher's keys and severity, checked as the config loads (`gpucost check` passed matchers
    `gpucost run` then refused); its kinds are checked against the detectors in `parse_config`."""
    if not match:
        raise ValueError("empty matcher would match every finding; name at least one key")
    for key, value in match.items():
        _match_key(key)
        if key == "severity" and value not in _SEVERITIES:
            raise ValueError(f'severity "{value}": use one of {", ".join(_SEVERITIES)} (lower case)')
    return match


Matcher = Annotated[dict[str, str], AfterValidator(_matcher)]


class Route(_Strict):
    match: Matcher
    channel: str


class SlackConfig(_Strict):
    channel: str | None = None
    api_base_url: Annotated[str | None, AfterValidator(_http_url)] = None
    webhook_url_env: str | None = None
    token_file: Path | None = None
    routes: tuple[Route, ...] = ()

    @field_validator("webhook_url_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        # the variable's name, not the URL (a secret, never in the config file)
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(
                "the name of an environment variable holding the webhook URL (e.g. SLACK_WEBHOOK_URL),"
                " not the URL itself"
            )
        return v


class Silence(_Strict):
    match: Matcher
    until: str
    comment: str = ""

    @field_validator("until", mode="before")
    @classmethod
    def _toml_datetime(cls, v: Any) -> Any:
        # an unquoted TOML date-time (until = 2027-01-01T00:00:00Z) arrives as a datetime
        return v.isoformat() if isinstance(v, datetime) else v

    @field_validator("until")
    @classmethod
    def _instant(cls, v: str) -> str:
        from monitor.timeutil import parse_timestamp

        parse_timestamp(v)  # its ValueError names the accepted forms
        return v


class AlertsConfig(_Strict):
    group_by: tuple[Annotated[str, AfterValidator(_match_key)], ...] = ("kind", "project")
    group_wait_seconds: int = Field(default=30, ge=0)
    group_interval_seconds: int = Field(default=300, ge=0)
    repeat_interval_hours: float = Field(default=24.0, gt=0)
    send_resolved: bool = True
    min_severity: Literal["info", "warning", "critical"] = "warning"
    silences: tuple[Silence, ...] = ()
    console_dir: Path = Path("out/alerts")
    # First start is not a flood: a finding that ended more than `first_start_grace_hours` before
    # gpucost first started (billing lands up to about a day late, so "ended" needs that margin) is
    # history, posted once per channel in one summary as soon as the utilization backfill has read
    # the whole window, or `first_start_summary_wait_minutes` after the first start if that comes
    # first (then what is found later goes in a follow-up); `first_start_summary = false` alerts it
    # as news.
    first_start_summary: bool = True
    first_start_grace_hours: float = Field(default=24, ge=0)
    first_start_summary_wait_minutes: float = Field(default=60, ge=0)
    # A finding whose waste is over (an idle run that stopped inside the detection window) is told
    # when new and not reminded every `repeat_interval_hours` while the window slides over it (up
    # to 14 days); `remind_ended = true` reminds it as long as it fires, as Alertmanager repeats
    # any firing alert. A group with a finding still going is reminded whole, as before.
    remind_ended: bool = False

    @field_validator("repeat_interval_hours")
    @classmethod
    def _repeat_after_group(cls, v: float, info: ValidationInfo) -> float:
        # A group is re-sent at most every group interval (Alertmanager's model), so a shorter
        # repeat interval could never be honoured.
        group = info.data.get("group_interval_seconds")
        if group is not None and v * 3600 < group:
            raise ValueError(
                f"{v:g} h is shorter than group_interval_seconds ({group} s): a group is re-sent at most once"
                " per group interval; raise repeat_interval_hours or lower group_interval_seconds"
            )
        return v


class DigestConfig(_Strict):
    time: str = "09:00"
    timezone: str = "UTC"
    out_dir: Path = Path("out")

    @field_validator("time", mode="before")
    @classmethod
    def _toml_time(cls, v: Any) -> Any:
        # an unquoted TOML time (time = 09:00:00) arrives as a datetime.time
        return v.strftime("%H:%M") if isinstance(v, dt_time) and not v.second else v

    @field_validator("time")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if not re.match(r"^([01]\d|2[0-3]):[0-5]\d$", v):
            raise ValueError(f'expected "HH:MM" (24 h), got "{v}"')
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f'unknown time zone "{v}"; use an IANA name like "Europe/Paris"') from None
        return v

    @property
    def hour_minute(self) -> tuple[int, int]:
        """`time` as (hour, minute), in `timezone`."""
        hh, mm = self.time.split(":")
        return int(hh), int(mm)


class StateConfig(_Strict):
    url: str = "sqlite:///out/state.sqlite"
    # Pruned once a day past this many days (never less than the detectors read: see
    # monitor/state/retention.py); 62 keeps two invoice months for month-to-date figures.
    retention_days: int = Field(default=90, ge=62)
    # The billing aggregates' DuckDB file (monitor/state/analytics.py); default: aggregates.duckdb
    # beside a SQLite state file. With PostgreSQL it must be set: a default in the working directory
    # gave every command run elsewhere a store of its own, which polled the export again. A cache
    # of the export: keep it on a local disk; lost, the next poll rebuilds it.
    aggregates_path: str | None = None

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError(f'expected "sqlite:///PATH" or "postgresql://...", got "{v}"')
        if v.removeprefix("sqlite:///") in ("", ":memory:"):  # a store gone at exit: alerts repeat
            raise ValueError(f'"{v}" names no file; the state must outlive the process: "sqlite:///PATH"')
        from urllib.parse import urlsplit

        if urlsplit(v).password is not None:  # a secret: never in the config file (nor in errors)
            raise ValueError("a password does not belong in the config file; set PGPASSWORD or use ~/.pgpass")
        return v

    @model_validator(mode="after")
    def _aggregates_beside_postgres(self) -> StateConfig:
        if self.url.startswith(("postgresql://", "postgres://")) and not self.aggregates_path:
            raise ValueError(
                "aggregates_path: with a PostgreSQL state store, set it to the DuckDB file the daemon and"
                ' every command share, on a local disk (e.g. "/var/lib/gpucost/aggregates.duckdb"): it'
                " has no state file to sit beside, and one in the working directory gave a command run"
                " elsewhere a store of its own"
            )
        return self


class DaemonConfig(_Strict):
    billing_poll_minutes: float = Field(default=30, gt=0)
    utilization_poll_minutes: float = Field(default=5, gt=0)
    outbox_seconds: float = Field(default=30, gt=0)
    price_refresh_hours: float = Field(default=24, gt=0)
    jitter_seconds: int = Field(default=10, ge=0)
    misfire_grace_seconds: int = Field(default=300, ge=1)

    @field_validator("jitter_seconds")
    @classmethod
    def _jitter_below_intervals(cls, v: int, info: ValidationInfo) -> int:
        # Jitter delays each run by up to that long: as long as an interval, a run could land after
        # the next one was due, and the job would run less often than configured.
        d = info.data
        intervals = [
            d.get("outbox_seconds"),
            d.get("billing_poll_minutes"),
            d.get("utilization_poll_minutes"),
        ]
        if v and None not in intervals:
            shortest = min(intervals[0], intervals[1] * 60, intervals[2] * 60)
            if v >= shortest:
                raise ValueError(
                    f"{v} s is not below the shortest job interval ({shortest:g} s): a run could slip past the"
                    " next one; lower jitter_seconds (0 turns it off)"
                )
        return v


class HttpConfig(_Strict):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=9464, ge=0, le=65535)
    ready_max_age_minutes: float = Field(default=90, gt=0)


class LoggingConfig(_Strict):
    format: Literal["auto", "json", "text"] = "auto"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class DemoConfig(_Strict):
    """The embedded default: a simulated fleet that keeps producing hours on a fast clock."""

    enabled: bool = False
    data_dir: Path = Path("out/demo")
    seed: int = 7
    days: int = Field(default=14, ge=2, le=120)
    scale: int = Field(default=1, ge=1)
    hours_per_cycle: int = Field(default=1, ge=1, le=48)


class Config(_Strict):
    google: GoogleConfig = GoogleConfig()
    billing: BillingConfig = BillingConfig()
    attribution: AttributionConfig = AttributionConfig()
    utilization: UtilizationConfig = UtilizationConfig()
    pricing: PricingConfig = PricingConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    jobs: JobsConfig = JobsConfig()
    detectors: dict[str, dict[str, Any]] = Field(default_factory=dict)
    slack: SlackConfig = SlackConfig()
    alerts: AlertsConfig = AlertsConfig()
    digest: DigestConfig = DigestConfig()
    state: StateConfig = StateConfig()
    daemon: DaemonConfig = DaemonConfig()
    http: HttpConfig = HttpConfig()
    logging: LoggingConfig = LoggingConfig()
    demo: DemoConfig = DemoConfig()

    def stored_label_keys(self) -> tuple[str, ...]:
        """The label keys the daemon's hourly aggregates keep: `[billing] labels`, then every key
        that names a job (`[jobs]`), then the keys of `[budgets]` labels (a budget's key not kept
        read $0.00 of spend and never fired), so budgets, reports and jobs all read one store."""
        budgets = (b.label.partition("=")[0].strip() for b in self.budgets.items if b.label)
        return tuple(dict.fromkeys((*self.billing.labels, *self.jobs.label_keys(), *budgets)))

    @model_validator(mode="after")
    def _ready_outlasts_polls(self) -> Config:
        # /readyz is ready while each poll succeeded within ready_max_age_minutes: shorter than a
        # poll interval, it would turn not-ready between every two healthy polls (a flapping probe).
        longest = max(self.daemon.billing_poll_minutes, self.daemon.utilization_poll_minutes)
        if self.http.enabled and self.http.ready_max_age_minutes < longest:
            raise ValueError(
                f"http.ready_max_age_minutes ({self.http.ready_max_age_minutes:g}) is shorter than the longest"
                f" poll interval ({longest:g} min): /readyz would fail between two healthy polls; set it to at"
                " least that (twice leaves room for one failed poll)"
            )
        return self


_SECRET_KEYS = {"token", "bot_token", "slack_bot_token", "webhook_url", "password", "secret"}


def _secret_key_error(data: dict[str, Any]) -> str | None:
    for section, body in data.items():
        if isinstance(body, dict):
            for key in body:
                if key.lower() in _SECRET_KEYS:
                    return (
                        f"{section}.{key}: secrets are not read from the config file; "
                        "set SLACK_BOT_TOKEN (or slack.token_file / slack.webhook_url_env) instead"
                    )
    return None


def _format_error(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{loc}: unknown key (check the spelling; see deploy/config/production.example.toml)"
    if kind == "missing":
        return f"{loc}: required key is missing"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if kind.startswith("literal_error"):
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{loc}: {msg}" if loc else msg


def parse_config(data: dict[str, Any], source: str = "<config>") -> Config:
    """Validate an already-parsed TOML document; errors are `ConfigError`s naming `source`."""
    if (secret := _secret_key_error(data)) is not None:
        raise ConfigError(f"{source}: {secret}")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        # One line, whatever the count: the CLI prints every error as a single line.
        raise ConfigError(f"{source}: " + "; ".join(_format_error(err) for err in e.errors())) from None
    # Detector sections are declared by each registered detector; validate them at start-up too.
    from monitor.detectors import build_detectors, registered

    build_detectors(cfg.detectors, source)
    if cfg.attribution.rules:  # their patterns as the engines read them (RE2), not as Python's re does
        from monitor.attribution.compile import compile_rules

        try:
            compile_rules(cfg.attribution.rules)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    kinds = (*registered(), JOB_FINISHED)
    matchers = [(f"slack.routes.{i}", r.match) for i, r in enumerate(cfg.slack.routes)]
    matchers += [(f"alerts.silences.{i}", s.match) for i, s in enumerate(cfg.alerts.silences)]
    for where, match in matchers:
        if "kind" in match and match["kind"] not in kinds:
            raise ConfigError(
                f'{source}: {where}.match: unknown kind "{match["kind"]}"; use one of {", ".join(kinds)}'
            )
    return cfg


def load_config(path: str | Path) -> Config:
    p = Path(path)
    try:
        # a byte-order mark (Windows editors) is not TOML; not the "utf-8-sig" codec: imported on
        # first use, it fails where the Python install cannot be read (a test run as nobody)
        text = p.read_bytes().removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found (pass --config PATH)") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{p}: not UTF-8 text (byte {e.start}); TOML is UTF-8: save the file as UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    return parse_config(data, str(p))


def slack_token(cfg: SlackConfig, environ: dict[str, str] | None = None) -> SecretStr | None:
    """The bot token from `SLACK_BOT_TOKEN`, else from `slack.token_file`; never from the TOML."""
    env = os.environ if environ is None else environ
    if tok := env.get("SLACK_BOT_TOKEN", "").strip():
        return SecretStr(tok)
    if cfg.token_file is not None:
        try:
            tok = cfg.token_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"slack.token_file: cannot read {cfg.token_file} ({e.strerror})") from None
        except UnicodeDecodeError:  # never quote it: a secret
            raise ConfigError(
                f"slack.token_file: {cfg.token_file} is not UTF-8 text; it holds the bot token (xoxb-...) alone"
            ) from None
        if not tok:  # said "SLACK_BOT_TOKEN is not set", of a file given and empty
            raise ConfigError(
                f"slack.token_file: {cfg.token_file} is empty; write the bot token (xoxb-...) in it"
            )
        return SecretStr(tok)
    return None
