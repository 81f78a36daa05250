"""The SQL fragments of `monitor.attribution.compile.FRAGMENTS`: one definition, used everywhere.

Money in micros, the pricing model and the usage window are each written once, as a slot the
compiler fills; these tests keep the queries from spelling them by hand again, pin what the
expansions compute (on DuckDB and on the BigQuery emulator, on rows chosen to break a careless
rewrite: a 0 or NULL rate, a non-trivial rate, negative amounts, exact halves), and pin how the
compiler splices arguments.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from monitor.attribution.compile import FRAGMENTS, query_params, render_sql
from monitor.errors import ConfigError
from monitor.sql import load_query, query_names

pytest_plugins = ("tests.conftest_bq",)

#: What each fragment replaces, as spelled by hand: any of these in a query's SQL (comments aside)
#: means a copy of the definition, which can drift from the slot.
HAND_SPELLED = {
    "GPUCOST_USD_MICROS / GPUCOST_MICROS": re.compile(r"\b1000000\b|\b1e6\b|currency_conversion_rate", re.I),
    "GPUCOST_PRICING_MODEL": re.compile(r"'committed'|'on_demand'\s*\)\s*\)", re.I),
    "GPUCOST_USAGE_WINDOW": re.compile(r"@partition_end|INTERVAL\s+3\s+DAY", re.I),
}


def hand_spelled(sql: str) -> list[str]:
    """The slots whose definition `sql` repeats by hand (`--` comments are ignored)."""
    code = re.sub(r"--[^\n]*", "", sql)
    return [slot for slot, pattern in HAND_SPELLED.items() if pattern.search(code)]


OLD_HOURLY_LINES = [  # how hourly.sql spelled them before the slots
    "CAST(ROUND(IFNULL(cost, 0) / IFNULL(NULLIF(currency_conversion_rate, 0), 1) * 1000000) AS INT64)",
    "SELECT SUM(CAST(ROUND(c.amount * 1000000) AS INT64)) FROM UNNEST(credits) AS c",
    "THEN IFNULL(GPUCOST_SKU_PRICING_MODEL(r.rule), IF(r.cud_micros <> 0, 'committed', 'on_demand'))",
    "AND _PARTITIONTIME < GREATEST(\n  @partition_end, TIMESTAMP_ADD(TIMESTAMP_TRUNC(@usage_end, DAY), INTERVAL 3 DAY)",
]


@pytest.mark.parametrize("line", OLD_HOURLY_LINES)
def test_the_check_catches_each_old_spelling(line: str) -> None:
    assert hand_spelled(f"SELECT\n  {line}\n") != []
    comment = "".join(f"-- {part}\n" for part in line.splitlines())
    assert hand_spelled(f"{comment}SELECT 1") == []  # a comment may explain the definition


@pytest.mark.parametrize("name", query_names())
def test_no_query_spells_a_fragment_by_hand(name: str) -> None:
    assert hand_spelled(load_query(name)) == [], f"queries/{name}.sql: use the slot instead"


def test_each_fragment_is_used_where_it_belongs() -> None:
    """USD for what detectors and jobs read, the export's currency for report, FOCUS and skus."""
    uses = {slot: {n for n in query_names() if f"{slot}(" in load_query(n)} for slot in FRAGMENTS}
    assert uses["GPUCOST_USD_MICROS"] == {"hourly", "jobs"}
    assert uses["GPUCOST_MICROS"] == {"report", "focus", "skus"}
    assert uses["GPUCOST_PRICING_MODEL"] == {"hourly", "jobs", "report", "focus"}
    window = {"hourly", "jobs", "report", "focus", "skus", "extent", "project_ids"}
    assert uses["GPUCOST_USAGE_WINDOW"] == window
    assert uses["GPUCOST_LOAD_DAYS"] == {"partitions"}  # whole partitions: its marks ignore the scope


def test_parameters_inside_slots_count_as_the_querys_own() -> None:
    """Sources pass exactly `query_params(name)`: the window's parameters live in the slot."""
    assert query_params("extent") == {"usage_start", "usage_end", "partition_end"}
    assert {"usage_start", "usage_end", "partition_end", "label_keys"} == query_params("hourly")


# (amount, currency_conversion_rate, USD micros, micros in the export's currency): exact halves
# round away from zero (BigQuery's ROUND; half-to-even would give 2, -2, 12345678), a 0 or NULL
# rate counts as 1, a NULL amount stays NULL.
AWKWARD = [
    ("2.5e-06", None, 3, 3),
    ("-2.5e-06", "0", -3, -3),
    ("5e-07", "1", 1, 1),
    ("-5e-07", None, -1, -1),
    ("12.3456785", "0", 12345679, 12345679),
    ("10", "0.92", 10869565, 10000000),
    ("-10", "0.92", -10869565, -10000000),
    ("1.25e-06", "0.5", 3, 1),
    ("-1.25e-06", "0.5", -3, -1),
    ("123456.789", "0.92", 134192161957, 123456789000),
    (None, "0.92", None, None),
    ("1.0000005", "1", 1000001, 1000001),
    ("0", None, 0, 0),
    ("5000000.123456", "1380.25", 3622532239, 5000000123456),
    ("-3.5e-06", "0.92", -4, -4),
]


def _float(text: str | None) -> str:
    return "CAST(NULL AS FLOAT64)" if text is None else f"CAST('{text}' AS FLOAT64)"


AWKWARD_SQL = (
    "SELECT id, GPUCOST_USD_MICROS(amount) AS usd, GPUCOST_MICROS(amount) AS local FROM ("
    + " UNION ALL ".join(
        f"SELECT {i} AS id, {_float(a)} AS amount, {_float(r)} AS currency_conversion_rate"
        for i, (a, r, _, _) in enumerate(AWKWARD)
    )
    + ") AS t ORDER BY id"
)
EXPECTED = [(i, usd, local) for i, (_, _, usd, local) in enumerate(AWKWARD)]


def _on_duckdb(sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(":memory:") as conn:
        return conn.execute(render_sql(sql, "duckdb")).fetchall()


def test_micros_on_duckdb_on_awkward_rows() -> None:
    assert _on_duckdb(AWKWARD_SQL) == EXPECTED


@pytest.mark.slow
@pytest.mark.integration
def test_micros_on_bigquery_equal_duckdbs_on_awkward_rows(bq_client: Any) -> None:
    rows = bq_client.query(render_sql(AWKWARD_SQL, "bigquery")).result()
    got = [(r["id"], r["usd"], r["local"]) for r in rows]
    assert got == EXPECTED == _on_duckdb(AWKWARD_SQL)


@pytest.mark.parametrize(
    ("rule", "cud_micros", "model"),
    [
        ("gpu", 0, "on_demand"),
        ("gpu", -5, "committed"),  # CUD credits make an on-demand SKU's row committed
        ("gpu-spot", -5, "spot"),  # ... never a Spot one: the SKU's own model wins
        ("commitment-fee", 0, "committed"),
        ("tax", -5, None),  # not compute: no pricing model
        (None, -5, None),  # no rule matched: `other`
    ],
)
def test_pricing_model_fragment(rule: str | None, cud_micros: int, model: str | None) -> None:
    literal = "CAST(NULL AS STRING)" if rule is None else f"'{rule}'"
    sql = f"SELECT GPUCOST_PRICING_MODEL(r, c) FROM (SELECT {literal} AS r, {cud_micros} AS c) AS t"
    assert _on_duckdb(sql) == [(model,)]


def test_a_compound_argument_is_parenthesized() -> None:
    """`a + b` spliced into `amount * 1000000` as it is would compute a + b * 1000000."""
    sql = "SELECT GPUCOST_MICROS(a + b), GPUCOST_USD_MICROS(-a) FROM (SELECT 1.0 AS a, 2.0 AS b, 0.5 AS currency_conversion_rate) AS t"
    assert _on_duckdb(sql) == [(3_000_000, -2_000_000)]


def test_the_window_keeps_its_meaning_under_not() -> None:
    """Spliced bare, `NOT <window>` would negate only its first condition."""
    sql = render_sql("SELECT 1 FROM t WHERE NOT GPUCOST_USAGE_WINDOW() AND y", "bigquery")
    condition = sqlglot.parse_one(sql, read="bigquery").args["where"].this
    assert isinstance(condition, exp.And) and isinstance(condition.this, exp.Not)
    negated = condition.this.this
    assert isinstance(negated, exp.Paren) and len(list(negated.this.flatten())) == 4
    assert "GPUCOST_" not in sql


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT GPUCOST_USD_MICROS() FROM t", r"GPUCOST_USD_MICROS\(amount\) takes 1 argument\(s\), got 0"),
        ("SELECT GPUCOST_PRICING_MODEL(r) FROM t", r"GPUCOST_PRICING_MODEL\(rule, cud_micros\) takes 2"),
        (
            "SELECT 1 FROM t WHERE GPUCOST_USAGE_WINDOW(x)",
            r"GPUCOST_USAGE_WINDOW\(\) takes 0 argument\(s\), got 1",
        ),
    ],
)
def test_wrong_arguments_are_config_errors(sql: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_sql(sql, "duckdb")
