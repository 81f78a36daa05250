"""The billing export read where it lives: `queries/*.sql` run as BigQuery query jobs.

Every query is rendered by `monitor.attribution.compile.render_query` (that is `monitor.sql.
for_bigquery`, where the validated table name is the only substituted identifier, with the
attribution rules filled into the query's slots exactly as for DuckDB, so both engines attribute
identically) and sent with typed query parameters, never formatted into the text. Each job carries
`maximum_bytes_billed` from config, so a mistaken query fails instead of scanning a whole export, and
labels `{app: gpucost, query: <name>}`, so its cost shows up per query in the billing export itself.

Retries are the library's own (`DEFAULT_RETRY` for API calls, `DEFAULT_JOB_RETRY` to re-run jobs
that failed with `backendError` / `rateLimitExceeded`); they are injectable only so tests can bound
them. A job still RUNNING after `billing.job_timeout_seconds` (the client's `wait_timeout`, after
which it asks BigQuery to cancel the job) is a retryable failure: without it a stuck job would
hold the billing poll, and with it every later poll, forever. Whatever is still failing afterwards
is classified once, here:

- transient (5xx, `backendError`, `rateLimitExceeded`, `quotaExceeded`, connection failures, retry
  deadline exceeded) -> `RetryableSourceError`: the poller keeps its window and tries again later;
- anything else (400, 401, 403, 404) -> `PermanentSourceError`, whose message names the table and
  the fix (the IAM role to grant, the config key to change).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.api_core.retry import Retry
from google.auth import exceptions as auth_exc
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

from monitor.attribution.compile import query_params, render_query
from monitor.attribution.rules import Rule
from monitor.config import BillingConfig, GoogleConfig
from monitor.errors import ConfigError, PermanentSourceError, RetryableSourceError, SourceError
from monitor.sources._google import credentials_failure
from monitor.sources.base import QueryResult

__all__ = ["BigQueryBillingSource", "classify_error", "make_client", "to_bigquery_params"]

QueryParameter = bigquery.ScalarQueryParameter | bigquery.ArrayQueryParameter

#: Error reasons that say "try again later" even after the library's own retries gave up.
_TRANSIENT_REASONS = frozenset(
    {"backendError", "rateLimitExceeded", "internalError", "badGateway", "quotaExceeded"}
)
#: What the client can raise while talking to the service (everything else is a bug of ours).
_CLIENT_ERRORS = (
    gexc.GoogleAPIError,
    requests.exceptions.RequestException,
    auth_exc.TransportError,
    FutureTimeoutError,
    ConnectionError,
)
_LABEL_VALUE = re.compile(r"[^a-z0-9_-]")


def _scalar_type(value: Any) -> str:
    """BigQuery type of one Python value; bool before int (bool is an int), datetime before date."""
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "INT64"
    if isinstance(value, float):
        return "FLOAT64"
    if isinstance(value, Decimal):
        return "NUMERIC"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, datetime):
        return "TIMESTAMP"
    if isinstance(value, date):
        return "DATE"
    raise TypeError(f"unsupported type {type(value).__name__}")


def _wire_value(name: str, value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"query parameter @{name}: naive datetime {value}; pass a UTC-aware datetime")
        return value.astimezone(UTC)
    return value


def to_bigquery_params(params: Mapping[str, Any]) -> list[QueryParameter]:
    """Typed BigQuery query parameters from plain Python values (pure; no I/O).

    datetime -> TIMESTAMP (must be timezone-aware), date -> DATE, int -> INT64, float -> FLOAT64,
    Decimal -> NUMERIC, str -> STRING, bool -> BOOL, a list/tuple of one of those -> ARRAY of it
    (an empty list is ARRAY<STRING>). A ready `ScalarQueryParameter`/`ArrayQueryParameter` passes
    through. None is refused: BigQuery needs a type for NULL, and guessing one breaks comparisons.

    >>> [p.to_api_repr()["parameterType"] for p in to_bigquery_params({"n": 3, "p": ["a"]})]
    [{'type': 'INT64'}, {'type': 'ARRAY', 'arrayType': {'type': 'STRING'}}]
    """
    out: list[QueryParameter] = []
    for name, value in params.items():
        if isinstance(value, bigquery.ScalarQueryParameter | bigquery.ArrayQueryParameter):
            out.append(value)
            continue
        try:
            if isinstance(value, list | tuple):
                types = {_scalar_type(v) for v in value} or {"STRING"}
                if len(types) != 1:
                    raise TypeError(f"mixed element types {sorted(types)}")
                items = [_wire_value(name, v) for v in value]
                out.append(bigquery.ArrayQueryParameter(name, types.pop(), items))
            elif value is None:
                raise TypeError("None has no BigQuery type; pass a typed value or leave it out")
            else:
                out.append(bigquery.ScalarQueryParameter(name, _scalar_type(value), _wire_value(name, value)))
        except TypeError as e:
            raise TypeError(f"query parameter @{name}: {e}") from None
    return out


def _endpoint_url(endpoint: str) -> str:
    """Config accepts "host:port" (a local emulator, plain HTTP) or a full http(s):// URL."""
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def make_client(cfg: BillingConfig, google: GoogleConfig) -> bigquery.Client:
    """A client for `cfg`: jobs run in `billing.project` (default: the table's project)."""
    project = cfg.project or (cfg.table or "").split(".")[0] or None
    kwargs: dict[str, Any] = {"project": project, "location": cfg.location}
    if google.credentials == "anonymous":
        kwargs["credentials"] = AnonymousCredentials()
    if cfg.api_endpoint:
        kwargs["client_options"] = ClientOptions(api_endpoint=_endpoint_url(cfg.api_endpoint))
    try:
        return bigquery.Client(**kwargs)
    except (auth_exc.DefaultCredentialsError, OSError) as e:
        raise credentials_failure(
            e,
            lambda reason: ConfigError(f'google.credentials = "default": {reason}'),
            ConfigError(
                'google.credentials = "default" found no Application Default Credentials: run '
                "`gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a "
                "service-account key file, or run on a VM/GKE node with a service account"
            ),
        ) from None


def _reason(exc: BaseException) -> str | None:
    try:
        return exc.errors[0]["reason"]  # type: ignore[attr-defined]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None


def _message(exc: BaseException) -> str:
    """The service's own words (`errors[0].message`), without the request URL the client adds."""
    try:
        text = exc.errors[0]["message"]  # type: ignore[attr-defined]
    except (AttributeError, IndexError, KeyError, TypeError):
        text = None
    text = text or getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0]


def classify_error(
    exc: BaseException, *, name: str, table: str, project: str, cfg: BillingConfig
) -> SourceError:
    """The `SourceError` for what the client raised once its retries were exhausted."""
    if isinstance(exc, gexc.RetryError):
        if exc.cause is None:
            return RetryableSourceError(
                f"BigQuery query {name} on {table}: retries exhausted ({exc.message})"
            )
        cause = classify_error(exc.cause, name=name, table=table, project=project, cfg=cfg)
        return RetryableSourceError(f"{cause} (still failing after retries)")
    reason, msg = _reason(exc), _message(exc)
    where = f"BigQuery query {name} on {table}"
    if reason in _TRANSIENT_REASONS or isinstance(
        exc, gexc.ServerError | gexc.TooManyRequests | FutureTimeoutError | TimeoutError
    ):
        return RetryableSourceError(f"{where}: {reason or type(exc).__name__}: {msg}; will retry later")
    if isinstance(exc, requests.exceptions.RequestException | auth_exc.TransportError | ConnectionError):
        endpoint = cfg.api_endpoint or "bigquery.googleapis.com"
        return RetryableSourceError(f"{where}: cannot reach {endpoint} ({msg}); will retry later")
    dataset = ".".join(table.split(".")[:2])
    if reason == "bytesBilledLimitExceeded":
        fix = (
            f"raise billing.maximum_bytes_billed (now {cfg.maximum_bytes_billed}) or shorten "
            "billing.lookback_days"
        )
    elif isinstance(exc, gexc.Unauthorized) or reason == "authError":
        fix = "the credentials were rejected: refresh them (`gcloud auth application-default login`)"
    elif isinstance(exc, gexc.Forbidden) or reason == "accessDenied":
        fix = (
            f"grant roles/bigquery.jobUser on project {project} (to run query jobs) and "
            f"roles/bigquery.dataViewer on dataset {dataset} (to read the export)"
        )
    elif isinstance(exc, gexc.NotFound) or reason == "notFound":
        fix = (
            f"check billing.table (the export table gcp_billing_export_resource_v1_<ACCOUNT> or a view "
            f"over it) and billing.location (now {cfg.location}, must be the dataset's location)"
        )
    elif isinstance(exc, gexc.BadRequest):
        fix = "check that billing.table is a Cloud Billing detailed export table or a view with its columns"
    else:
        fix = "see the message above"
    return PermanentSourceError(f"{where}: {msg}; {fix}")


def _label(value: str) -> str:
    """A legal label value (lowercase letters, digits, `_`, `-`; at most 63 characters)."""
    return _LABEL_VALUE.sub("_", value.lower())[:63]


class BigQueryBillingSource:
    """`BillingSource` over BigQuery: one query job per `run`, a free dry run per `dry_run`.

    `client` defaults to `make_client(cfg, google)`; `rules` is the ordered attribution (None: the
    built-in rules, as `DuckDBBillingSource`); `retry`/`job_retry` default to the library's
    `DEFAULT_RETRY`/`DEFAULT_JOB_RETRY` (tests pass shorter ones); `timer` measures `seconds`;
    `job_timeout` bounds the wait for one job in seconds (module docstring); None reads
    `billing.job_timeout_seconds` (tests pass a shorter one than the config allows).
    Parameters a query does not use are dropped (BigQuery rejects surplus ones); missing ones are a
    `ConfigError`.
    """

    engine = "bigquery"

    def __init__(
        self,
        cfg: BillingConfig,
        google: GoogleConfig,
        client: bigquery.Client | None = None,
        *,
        rules: Sequence[Rule] | None = None,
        retry: Retry = DEFAULT_RETRY,
        job_retry: Retry = DEFAULT_JOB_RETRY,
        use_query_cache: bool = True,
        timer: Callable[[], float] = time.perf_counter,
        job_timeout: float | None = None,
    ) -> None:
        if cfg.table is None:
            raise ConfigError('billing.table: required for the BigQuery source ("project.dataset.table")')
        self.cfg, self.table = cfg, cfg.table
        self.client = client if client is not None else make_client(cfg, google)
        self.rules = None if rules is None else tuple(rules)
        self._retry, self._job_retry = retry, job_retry
        self._use_query_cache, self._timer = use_query_cache, timer
        self.job_timeout = cfg.job_timeout_seconds if job_timeout is None else job_timeout

    def _job_config(self, name: str, params: Mapping[str, Any], *, dry_run: bool) -> bigquery.QueryJobConfig:
        return bigquery.QueryJobConfig(
            query_parameters=to_bigquery_params(params),
            maximum_bytes_billed=self.cfg.maximum_bytes_billed,
            labels={"app": "gpucost", "query": _label(name)},
            # A dry run must not be answered from the cache, or it reports 0 bytes.
            use_query_cache=False if dry_run else self._use_query_cache,
            dry_run=dry_run,
        )

    def _error(self, exc: BaseException, name: str) -> SourceError:
        err = classify_error(exc, name=name, table=self.table, project=self.client.project, cfg=self.cfg)
        err.source = "bigquery"  # type: ignore[attr-defined]  # named in the daemon's failure log
        return err

    def run(self, name: str, params: dict[str, Any], *, arrow: bool = False) -> QueryResult:
        """Run `queries/<name>.sql` against `billing.table`; rows come back already aggregated
        (`arrow`: as a `pyarrow.Table` built from the result pages, typed by the result's schema)."""
        return self._run_sql(self.sql(name), self._params(name, params), name, arrow=arrow)

    def sql(self, name: str) -> str:
        """The BigQuery SQL `run(name, ...)` sends (slots filled, table substituted)."""
        return render_query(name, "bigquery", table=self.table, rules=self.rules)

    @staticmethod
    def _params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        wanted = query_params(name)
        missing = sorted(wanted - params.keys())
        if missing:
            raise ConfigError(f"query {name!r} needs parameter(s) {', '.join('@' + m for m in missing)}")
        return {k: v for k, v in params.items() if k in wanted}

    def _run_sql(self, sql: str, params: Mapping[str, Any], name: str, *, arrow: bool = False) -> QueryResult:
        """Run already-rendered SQL through the same job path as `run` (labels, limits, retries)."""
        job_config = self._job_config(name, params, dry_run=False)
        started = self._timer()
        try:
            it = self.client.query_and_wait(
                sql,
                job_config=job_config,
                location=self.cfg.location,
                retry=self._retry,
                job_retry=self._job_retry,
                wait_timeout=self.job_timeout,
            )
            table = it.to_arrow(create_bqstorage_client=False) if arrow else None
            rows = [] if arrow else [dict(row.items()) for row in it]
        except _CLIENT_ERRORS as e:
            raise self._error(e, name) from e
        return QueryResult(
            name=name,
            rows=rows,
            table=table,
            bytes_processed=it.total_bytes_processed,
            seconds=self._timer() - started,
            extra={"job_id": it.job_id, "query_id": it.query_id, "location": it.location},
        )

    def dry_run(self, name: str, params: dict[str, Any]) -> int:
        """Bytes `queries/<name>.sql` would process now (free: BigQuery plans without running)."""
        return self._dry_run_sql(self.sql(name), self._params(name, params), name)

    def _dry_run_sql(self, sql: str, params: Mapping[str, Any], name: str) -> int:
        try:
            job = self.client.query(
                sql,
                job_config=self._job_config(name, params, dry_run=True),
                location=self.cfg.location,
                retry=self._retry,
                job_retry=None,
            )
        except _CLIENT_ERRORS as e:
            raise self._error(e, name) from e
        return int(job.total_bytes_processed or 0)
