"""`monitor.scratch`: sessions on one in-memory database per process, each with its own tables."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from monitor.scratch import scratch


def test_sessions_keep_their_tables_and_registrations_to_themselves() -> None:
    a, b = scratch(), scratch()
    try:
        a.execute("CREATE TEMP TABLE costs AS SELECT 1 AS v")
        b.execute("CREATE TEMP TABLE costs AS SELECT 2 AS v")
        a.register("rows", pa.table({"x": [10]}))
        assert a.execute("SELECT v FROM costs").fetchall() == [(1,)]
        assert b.execute("SELECT v FROM costs").fetchall() == [(2,)]
        with pytest.raises(duckdb.CatalogException):
            b.execute("SELECT x FROM rows")
    finally:
        a.close()
    c = scratch()
    try:  # a closed session's tables went with it
        with pytest.raises(duckdb.CatalogException):
            c.execute("SELECT v FROM costs")
    finally:
        b.close()
        c.close()


def test_a_session_is_in_utc_and_its_thread_count_is_its_databases() -> None:
    one, default = scratch(threads=1), scratch()
    try:
        assert one.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
        assert default.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
        assert one.execute("SELECT current_setting('threads')").fetchone() == (1,)
        # the one-thread database's setting is not the default one's (DuckDB's: one per core)
        with duckdb.connect() as fresh:
            want = fresh.execute("SELECT current_setting('threads')").fetchone()
        assert default.execute("SELECT current_setting('threads')").fetchone() == want
    finally:
        one.close()
        default.close()
