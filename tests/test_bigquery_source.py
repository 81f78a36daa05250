"""`BigQueryBillingSource` through the real google-cloud-bigquery client.

Pure parts (parameter typing, error classification, client construction) are table-driven; the
rest runs against the `bqemulator` emulator (PyPI, DuckDB + sqlglot behind BigQuery's REST API) on
127.0.0.1 behind a recording proxy: see `tests/emulators/bqemu.py` for the emulator's gaps the
proxy patches (`_PARTITIONTIME`, parameters named in comments, failures answered as 200). Every `queries/*.sql` must give the same rows on the emulator as on the
embedded DuckDB table loaded with the same export rows.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import requests
from google.api_core import exceptions as gexc
from google.cloud import bigquery
from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

from monitor.config import BillingConfig, GoogleConfig
from monitor.errors import ConfigError, PermanentSourceError, RetryableSourceError
from monitor.sources.billing_bigquery import (
    BigQueryBillingSource,
    classify_error,
    make_client,
    to_bigquery_params,
)
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sql import query_names
from tests.emulators.fleet import (
    ANONYMOUS,
    BQ_PROJECT,
    DATASET,
    FLEET_END,
    FLEET_START,
    LoadedExport,
    billing_config,
    export_arrow,
    export_table,
    load_rows,
)
from tests.emulators.wire import WireProxy, rewrite_partition_pseudo_columns, strip_sql_comments
from tests.test_queries import params as query_params_for

#: The emulator fixtures (`bq_emulator`, `bq_wire`, `bq_client`, `bq_export`, `duck_conn`).
pytest_plugins = ("tests.conftest_bq",)

TS = datetime(2026, 11, 1, 10, 30, tzinfo=UTC)
#: Retries bounded for tests (production uses the library defaults: 10 min / 40 min deadlines).
FAST_RETRY = DEFAULT_RETRY.with_timeout(0.5).with_delay(initial=0.01, maximum=0.05)
FAST_JOB_RETRY = DEFAULT_JOB_RETRY.with_timeout(1.0).with_delay(initial=0.01, maximum=0.05)


# --- pure: parameters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "wire_type", "wire_value"),
    [
        (TS, {"type": "TIMESTAMP"}, "2026-11-01 10:30:00+00:00"),
        (date(2026, 11, 1), {"type": "DATE"}, "2026-11-01"),
        (7, {"type": "INT64"}, "7"),
        (2.5, {"type": "FLOAT64"}, 2.5),
        (Decimal("1.123456789"), {"type": "NUMERIC"}, "1.123456789"),
        ("ml-prod", {"type": "STRING"}, "ml-prod"),
        (True, {"type": "BOOL"}, "true"),
    ],
)
def test_scalar_parameters_are_typed_from_python_values(value: Any, wire_type: dict, wire_value: Any) -> None:
    (p,) = to_bigquery_params({"x": value})
    api = p.to_api_repr()
    assert api["name"] == "x"
    assert api["parameterType"] == wire_type
    assert api["parameterValue"] == {"value": wire_value}


def test_array_parameters_and_conversions() -> None:
    berlin = datetime(2026, 11, 1, 11, 30, tzinfo=UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin")
    )
    out = to_bigquery_params({"keys": ["team", "job"], "empty": [], "hours": (berlin,)})
    api = {p.name: p.to_api_repr() for p in out}
    assert api["keys"]["parameterType"] == {"type": "ARRAY", "arrayType": {"type": "STRING"}}
    assert api["keys"]["parameterValue"] == {"arrayValues": [{"value": "team"}, {"value": "job"}]}
    assert api["empty"]["parameterType"] == {"type": "ARRAY", "arrayType": {"type": "STRING"}}
    # An aware datetime in any zone goes over the wire as the same instant in UTC.
    assert api["hours"]["parameterValue"] == {"arrayValues": [{"value": "2026-11-01 11:30:00+00:00"}]}
    ready = bigquery.ScalarQueryParameter("y", "BIGNUMERIC", Decimal(1))
    assert to_bigquery_params({"y": ready}) == [ready]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (datetime(2026, 11, 1), ValueError, "@x: naive datetime 2026-11-01 00:00:00; pass a UTC-aware"),
        (None, TypeError, "@x: None has no BigQuery type"),
        (["a", 1], TypeError, "@x: mixed element types ['INT64', 'STRING']"),
        ({"a": 1}, TypeError, "@x: unsupported type dict"),
    ],
)
def test_untypable_parameters_are_refused(value: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        to_bigquery_params({"x": value})
    assert message in str(info.value)


# --- pure: error classification ---------------------------------------------------------------

CFG = BillingConfig(
    source="bigquery", table="billing-prj.exports.gcp_billing_export_resource_v1_X", project="jobs-prj"
)


def _api_error(status: int, reason: str, message: str = "boom") -> gexc.GoogleAPICallError:
    return gexc.from_http_status(status, message, errors=[{"reason": reason, "message": message}])


@pytest.mark.parametrize(
    ("exc", "kind", "needle"),
    [
        (_api_error(503, "backendError"), RetryableSourceError, "backendError"),
        (_api_error(500, "internalError"), RetryableSourceError, "will retry later"),
        (_api_error(403, "rateLimitExceeded"), RetryableSourceError, "rateLimitExceeded"),
        (gexc.RetryError("Timeout of 600.0s exceeded", _api_error(503, "backendError")), RetryableSourceError,
         "still failing after retries"),
        (_api_error(403, "accessDenied"), PermanentSourceError,
         "grant roles/bigquery.jobUser on project jobs-prj (to run query jobs) and roles/bigquery.dataViewer "
         "on dataset billing-prj.exports"),
        (_api_error(404, "notFound", "Not found: Table x"), PermanentSourceError,
         "check billing.table (the export table gcp_billing_export_resource_v1_<ACCOUNT>"),
        (_api_error(400, "bytesBilledLimitExceeded"), PermanentSourceError,
         f"raise billing.maximum_bytes_billed (now {50 * 2**30})"),
        (_api_error(400, "invalidQuery", "Unrecognized name: foo"), PermanentSourceError,
         "Unrecognized name: foo; check that billing.table is a Cloud Billing detailed export"),
        (_api_error(401, "authError"), PermanentSourceError, "credentials were rejected"),
        (requests.exceptions.ConnectionError("refused"), RetryableSourceError,
         "cannot reach bigquery.googleapis.com (refused); will retry later"),
    ],
)  # fmt: skip
def test_errors_are_classified_with_the_fix(exc: BaseException, kind: type, needle: str) -> None:
    err = classify_error(exc, name="hourly", table=CFG.table or "", project="jobs-prj", cfg=CFG)
    assert type(err) is kind
    assert str(err).startswith(f"BigQuery query hourly on {CFG.table}: ")
    assert needle in str(err)


# --- pure-ish: client construction ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "base"),
    [("127.0.0.1:9050", "http://127.0.0.1:9050"), ("https://bq.example:443", "https://bq.example:443")],
)
def test_client_uses_endpoint_project_and_anonymous_credentials(endpoint: str, base: str) -> None:
    client = make_client(
        BillingConfig(source="bigquery", table="a.b.c", api_endpoint=endpoint, location="EU"), ANONYMOUS
    )
    assert client.project == "a"  # jobs run in the table's project unless billing.project says otherwise
    assert client.location == "EU"
    assert base == client._connection.API_BASE_URL
    assert type(client._credentials).__name__ == "AnonymousCredentials"


def test_missing_default_credentials_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match=r"GOOGLE_APPLICATION_CREDENTIALS=\S+: File \S+ was not found"):
        make_client(BillingConfig(source="bigquery", table="a.b.c"), GoogleConfig())


def test_source_without_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"billing\.table: required"):
        BigQueryBillingSource(BillingConfig(), ANONYMOUS, client=object())  # type: ignore[arg-type]


def test_emulator_patch_drops_comments_but_not_quoted_text() -> None:
    sql = "/* @usage_start */\nSELECT '--x' AS `#y`, r'/*z*/' -- @usage_end\nFROM t # end"
    assert strip_sql_comments(sql) == "SELECT '--x' AS `#y`, r'/*z*/' \nFROM t"


def test_pseudo_column_rewrite_for_the_emulator_touches_only_the_identifier() -> None:
    sql = "SELECT _PARTITIONTIME AS p, DATE(_partitiontime), _PARTITIONDATE, x_PARTITIONTIME FROM t"
    assert rewrite_partition_pseudo_columns(sql) == (
        "SELECT gpucost_partitiontime AS p, DATE(gpucost_partitiontime), DATE(gpucost_partitiontime), "
        "x_PARTITIONTIME FROM t"
    )


# --- against the emulator ---------------------------------------------------------------------


def _source(wire: WireProxy, table: str, **kw: Any) -> BigQueryBillingSource:
    cfg = billing_config(wire.url, table, maximum_bytes_billed=kw.pop("maximum_bytes_billed", 12345678))
    return BigQueryBillingSource(cfg, ANONYMOUS, retry=FAST_RETRY, job_retry=FAST_JOB_RETRY, **kw)


def _norm(value: Any) -> Any:
    """One representation for values both engines return (Decimal vs int, aware datetimes)."""
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((_norm(r) for r in rows), key=lambda r: repr(sorted(r.items(), key=lambda kv: kv[0])))


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("name", query_names())
def test_every_query_gives_the_same_rows_on_bigquery_and_duckdb(
    name: str, bq_wire: WireProxy, bq_export: LoadedExport, duck_conn: Any
) -> None:
    p = query_params_for(
        FLEET_START,
        FLEET_END - timedelta(days=1),
        partition_end=FLEET_END,
        partition_time=FLEET_START + timedelta(days=2),  # changed_hours: a day with loads
    )
    bq = _source(bq_wire, bq_export.table).run(name, p)
    duck = DuckDBBillingSource(duck_conn).run(name, p)
    assert bq.name == name and bq.bytes_processed is not None
    assert duck.rows, "the comparison needs rows: widen the fleet or the parameters"
    assert _sorted(bq.rows) == _sorted(duck.rows)


@pytest.mark.integration
def test_a_parquet_load_job_leaves_the_rows_streaming_inserts_leave(
    bq_client: bigquery.Client, bq_export: LoadedExport
) -> None:
    """`load_rows` (one Parquet load job: the emulator tests with a whole simulated fleet use it)
    leaves in the emulator exactly the rows `bq_export`'s streaming inserts of the same export rows
    leave: every column, nested and repeated ones and the `_PARTITIONTIME` stand-in included."""
    table = export_table(bq_client, "export_by_load_job", replace=True)
    load_rows(bq_client, table, export_arrow(bq_export.rows))
    loaded = f"{BQ_PROJECT}.{DATASET}.export_by_load_job"
    for a, b in ((bq_export.table, loaded), (loaded, bq_export.table)):
        sql = f"SELECT COUNT(*) FROM (SELECT * FROM `{a}` EXCEPT DISTINCT SELECT * FROM `{b}`)"
        assert [tuple(r) for r in bq_client.query(sql).result()] == [(0,)], (a, b)


PROBE_SQL = (
    "SELECT @ts AS ts, @d AS d, @i AS i, @f AS f, @s AS s, @n AS n, @a AS a, ARRAY_LENGTH(@a) AS a_len"
)
PROBE_PARAMS = {
    "ts": TS,
    "d": date(2026, 11, 1),
    "i": 5,
    "f": 1.5,
    "s": "ml-prod",
    "n": Decimal("1.123456789"),
    "a": ["team", "job"],
}


@pytest.mark.integration
def test_run_sends_typed_parameters_labels_and_byte_limit(bq_wire: WireProxy) -> None:
    src = _source(bq_wire, f"{BQ_PROJECT}.billing.export", maximum_bytes_billed=987_654_321)
    bq_wire.clear()
    result = src._run_sql(PROBE_SQL, PROBE_PARAMS, "Probe Query!")
    # Values come back as the types they went in as: the emulator bound them with their types.
    assert result.rows == [{**PROBE_PARAMS, "a_len": 2}]
    assert result.bytes_processed == 0 and result.extra["job_id"]
    (sent,) = bq_wire.queries()
    body = sent.body
    assert sent.path.startswith(f"/bigquery/v2/projects/{BQ_PROJECT}/queries")
    assert body["labels"] == {"app": "gpucost", "query": "probe_query_"}
    assert body["maximumBytesBilled"] == "987654321"
    assert body["useQueryCache"] is True and body["useLegacySql"] is False and body["location"] == "US"
    assert {p["name"]: p["parameterType"] for p in body["queryParameters"]} == {
        "ts": {"type": "TIMESTAMP"},
        "d": {"type": "DATE"},
        "i": {"type": "INT64"},
        "f": {"type": "FLOAT64"},
        "s": {"type": "STRING"},
        "n": {"type": "NUMERIC"},
        "a": {"type": "ARRAY", "arrayType": {"type": "STRING"}},
    }
    assert body["query"] == PROBE_SQL  # the client sent our text as is


@pytest.mark.integration
def test_run_passes_only_the_parameters_a_query_uses(bq_wire: WireProxy, bq_export: LoadedExport) -> None:
    src = _source(bq_wire, bq_export.table, use_query_cache=False)
    bq_wire.clear()
    src.run("partitions", query_params_for(FLEET_START, FLEET_END, partition_end=FLEET_END))
    (sent,) = bq_wire.queries()
    assert sorted(p["name"] for p in sent.body["queryParameters"]) == [
        "partition_end",
        "usage_end",
        "usage_start",
    ]
    assert sent.body["labels"] == {"app": "gpucost", "query": "partitions"}
    assert sent.body["useQueryCache"] is False
    assert (
        "`gpucost-test`.`billing`.`export`" in sent.body["query"] and "_PARTITIONTIME" in sent.body["query"]
    )
    with pytest.raises(
        ConfigError, match=r"query 'partitions' needs parameter\(s\) @partition_end, @usage_end"
    ):
        src.run("partitions", {"usage_start": FLEET_START})


@pytest.mark.integration
def test_dry_run_reports_bytes_without_running(bq_wire: WireProxy, bq_export: LoadedExport) -> None:
    src = _source(bq_wire, bq_export.table)
    p = query_params_for(FLEET_START, FLEET_END, partition_end=FLEET_END)
    bq_wire.clear()
    assert src.dry_run("hourly", p) == 0  # the emulator estimates every query at 0 bytes
    (sent,) = bq_wire.queries()
    assert sent.body["configuration"]["dryRun"] is True
    assert sent.body["configuration"]["query"]["useQueryCache"] is False  # else a cached plan says 0
    assert sent.body["configuration"]["labels"] == {"app": "gpucost", "query": "hourly"}
    # What BigQuery answers for a dry run (a DONE job with statistics), served by the proxy.
    job = {
        "kind": "bigquery#job",
        "jobReference": {"projectId": BQ_PROJECT, "jobId": "dry-1", "location": "US"},
        "configuration": {"dryRun": True, "query": {"query": "SELECT 1", "useLegacySql": False}},
        "status": {"state": "DONE"},
        "statistics": {
            "creationTime": "1793700000000",
            "totalBytesProcessed": "7340032000",
            "query": {
                "totalBytesProcessed": "7340032000",
                "totalBytesBilled": "0",
                "statementType": "SELECT",
            },
        },
    }
    with bq_wire.answering(1, 200, job):
        assert src.dry_run("hourly", p) == 7_340_032_000


@pytest.mark.integration
def test_transient_503_is_retried_then_succeeds(bq_wire: WireProxy) -> None:
    src = _source(bq_wire, f"{BQ_PROJECT}.billing.export")
    with bq_wire.failing(2, 503, "backendError") as canned:
        result = src._run_sql("SELECT @i AS i", {"i": 41}, "probe")
    assert canned.served == 2
    assert result.rows == [{"i": 41}]


@pytest.mark.integration
@pytest.mark.parametrize(("status", "reason"), [(503, "backendError"), (403, "rateLimitExceeded")])
def test_persistent_transient_errors_end_as_retryable_after_retries(
    bq_wire: WireProxy, status: int, reason: str
) -> None:
    src = _source(bq_wire, f"{BQ_PROJECT}.billing.export")
    began = time.monotonic()
    with bq_wire.failing(10_000, status, reason) as canned, pytest.raises(RetryableSourceError) as info:
        src._run_sql("SELECT 1 AS one", {}, "probe")
    assert canned.served > 2, "the client must have retried"
    # bounded by the test-sized retry deadlines (~1.5 s); the default deadline (600 s) would blow
    # this generous bound, which a loaded machine does not
    assert time.monotonic() - began < 60
    assert f"BigQuery query probe on {BQ_PROJECT}.billing.export: " in str(info.value)
    assert reason in str(info.value)


@pytest.mark.integration
def test_permission_denied_is_permanent_and_not_retried(bq_wire: WireProxy) -> None:
    src = _source(bq_wire, f"{BQ_PROJECT}.billing.export")
    with bq_wire.failing(5, 403, "accessDenied") as canned, pytest.raises(PermanentSourceError) as info:
        src._run_sql("SELECT 1 AS one", {}, "probe")
    assert canned.served == 1
    assert f"grant roles/bigquery.jobUser on project {BQ_PROJECT}" in str(info.value)


@pytest.mark.integration
def test_missing_table_from_the_emulator_is_permanent_and_names_the_table(
    bq_wire: WireProxy, bq_export: LoadedExport
) -> None:
    table = f"{BQ_PROJECT}.billing.no_such_export"
    src = _source(bq_wire, table)
    with pytest.raises(PermanentSourceError) as info:
        src.run("partitions", query_params_for(FLEET_START, FLEET_END))
    msg = str(info.value)
    assert msg.startswith(f"BigQuery query partitions on {table}: ")
    assert "no_such_export" in msg.split(";")[0] and "check billing.table" in msg


def test_check_dry_runs_the_polls_aggregation_so_a_standard_export_table_fails(
    bq_wire: WireProxy, bq_client: bigquery.Client, bq_export: LoadedExport
) -> None:
    """A standard usage cost export table (no `resource`: real koku and psp exports) passed `check`,
    which dry-ran `partitions` only, and then failed every poll's `hourly` (a helper's real exports)."""
    from monitor.cli.check import check_billing
    from monitor.config import Config
    from monitor.schema import bigquery_schema
    from tests.emulators.fleet import DATASET
    from tests.emulators.wire import PARTITION_STANDIN

    name = f"{BQ_PROJECT}.{DATASET}.standard"
    fields = [f for f in bigquery_schema() if f.name != "resource"]
    table = bigquery.Table(name, schema=[*fields, bigquery.SchemaField(PARTITION_STANDIN, "TIMESTAMP")])
    table.time_partitioning = bigquery.TimePartitioning(type_=bigquery.TimePartitioningType.DAY)
    bq_client.create_table(table, exists_ok=True)
    now = FLEET_END
    for tbl, ok in ((bq_export.table, True), (name, False)):
        cfg = Config(billing=billing_config(bq_wire.url, tbl), google=ANONYMOUS)
        if ok:
            check = check_billing(cfg, offline=False, now=now)
            assert check.ok and "dry runs of `partitions` and `hourly`" in check.detail, check.detail
        else:
            with pytest.raises(PermanentSourceError, match=r"hourly.*detailed export table"):
                check_billing(cfg, offline=False, now=now)
