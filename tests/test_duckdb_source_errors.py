"""A DuckDB failure is one line naming the query, whatever the error's message: never a traceback,
never an IndexError from an empty message."""

from __future__ import annotations

import duckdb
import pytest

from monitor.attribution.compile import query_params
from monitor.errors import PermanentSourceError
from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import first_line


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (duckdb.CatalogException("Catalog Error: no table\nLINE 1: SELECT ..."), "Catalog Error: no table"),
        (duckdb.Error(""), "Error"),  # says nothing: its type
        (duckdb.Error("  \n "), "Error"),
        (ValueError("\n\nsecond line"), "second line"),
    ],
)
def test_first_line(error: BaseException, line: str) -> None:
    assert first_line(error) == line


def test_a_failed_query_is_one_line_naming_it() -> None:
    source = DuckDBBillingSource(duckdb.connect())  # no export table in it
    params = dict.fromkeys(query_params("partitions"), None)
    with pytest.raises(PermanentSourceError) as got:
        source.run("partitions", params)
    message = str(got.value)
    assert message.startswith("DuckDB query 'partitions' failed: Catalog Error")
    assert "\n" not in message
