"""Property-based tests (hypothesis): for ANY input, not only the examples we thought of.

- Slack mrkdwn escaping: no `<` / `>` survives (so no `<!channel>` or link can be injected from a
  label value), `&` only starts an entity, unescaping gives the text back, truncation never splits
  an entity and respects the limit.
- The export row loader: any number-like amount within the bounds loads as that number (negative
  ones only on a correction); any non-finite, non-numeric or absurd amount is refused as a
  `FieldError` naming the field; any JSON value in any field of a row, in Python or in an NDJSON
  file through `load_billing`, loads or is refused as our `UserError`, never another exception.
- The utilization JSON parser: any JSON value in any field of a TimeSeries never raises, and every
  point is either kept or counted under a skip reason; any JSON document given to the files source
  is read or refused as our `UserError`.
- The config model: any TOML-shaped value of a wrong type for a key is a one-line `ConfigError`
  naming the file and the key, never a traceback.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.escape import escape_mrkdwn, truncate
from monitor.config import parse_config
from monitor.errors import ConfigError, UserError
from monitor.gpu_rollups import split_exact
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import MAX_ABS_AMOUNT, FieldError, load_billing, normalize_row
from monitor.sources.utilization_files import FileUtilizationSource
from monitor.utilization import parse_series
from tests.export_rows import export_row, write_ndjson

# derandomize: the same examples on every run, so CI never fails on a draw nobody can reproduce
FAST = settings(
    max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _unescape(s: str) -> str:
    return s.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@FAST
@given(st.text())
def test_escaped_text_has_no_control_sequences_and_round_trips(text: str) -> None:
    out = escape_mrkdwn(text)
    assert "<" not in out and ">" not in out
    assert re.sub(r"&(amp|lt|gt);", "", out).count("&") == 0  # every & starts an entity
    assert _unescape(out) == text


@FAST
@given(st.text(), st.integers(min_value=1, max_value=300))
def test_truncation_respects_the_limit_and_never_splits_an_entity(text: str, limit: int) -> None:
    out = truncate(escape_mrkdwn(text), limit)
    assert len(out) <= limit
    body = out.removesuffix("…")
    assert re.sub(r"&(amp|lt|gt);", "", body).count("&") == 0


CORRECTION = {"cost_type": "adjustment", "adjustment_info": {"id": "a1", "description": "usage correction"}}


@FAST
@given(st.floats(min_value=-MAX_ABS_AMOUNT, max_value=MAX_ABS_AMOUNT, allow_nan=False, width=64))
def test_any_cost_within_bounds_loads_as_that_number(cost: float) -> None:
    base = export_row(**CORRECTION) if cost < 0 else export_row()  # negative: only on a correction
    assert normalize_row({**base, "cost": cost})["cost"] == cost
    assert normalize_row({**base, "cost": repr(cost)})["cost"] == cost  # bq-extract strings


@FAST
@given(
    st.floats(min_value=MAX_ABS_AMOUNT, exclude_min=True, allow_infinity=False, width=64),
    st.sampled_from(["cost", "cost_at_list"]),
    st.booleans(),
)
def test_an_absurd_amount_is_refused_naming_the_field(size: float, name: str, negative: bool) -> None:
    row = export_row(**CORRECTION)
    row[name] = -size if negative else size
    try:
        normalize_row(row)
    except FieldError as e:
        assert e.field == name and "check the column's scale" in e.message
    else:
        raise AssertionError(f"{name}={row[name]!r} was accepted")


@FAST
@given(
    st.floats(max_value=0, exclude_max=True, allow_nan=False, allow_infinity=False, min_value=-MAX_ABS_AMOUNT),
    st.sampled_from(["cost", "usage.amount", "usage.amount_in_pricing_units"]),
)
def test_a_negative_amount_needs_a_correction(x: float, name: str) -> None:
    row = export_row({name: x})
    try:
        normalize_row(row)
    except FieldError as e:
        assert e.field == name and "not a correction" in e.message
    else:
        raise AssertionError(f"{name}={x!r} on a regular row was accepted")
    for kind in ({"cost_type": "adjustment"}, {"cost_type": "tax"}, {"cost_type": "rounding_error"}, CORRECTION):
        normalize_row(export_row({name: x}, **kind))


@FAST
@given(
    st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf, "nan", "inf", "-Infinity"]),
        st.text().filter(lambda s: _not_a_number(s)),
        st.booleans(),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
)
def test_any_non_number_cost_is_refused_naming_the_field(value: object) -> None:
    try:
        normalize_row({**export_row(), "cost": value})
    except FieldError as e:
        assert e.field == "cost"
        assert "expected a number" in e.message or "required" in e.message
    else:
        raise AssertionError(f"cost={value!r} was accepted")


def _not_a_number(s: str) -> bool:
    try:
        return not math.isfinite(float(s))
    except ValueError:
        return True


_WRONG = st.one_of(
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["x", "y"]), st.integers(), max_size=1),
    st.booleans(),
)


@FAST
@given(
    st.sampled_from(
        [
            ("daemon", "billing_poll_minutes"),
            ("alerts", "group_wait_seconds"),
            ("state", "retention_days"),
            ("billing", "lookback_days"),
            ("utilization", "backfill_chunks_per_run"),
            ("http", "port"),
        ]
    ),
    _WRONG,
)
def test_a_wrong_value_for_a_number_key_is_a_one_line_config_error(key: tuple[str, str], value: object) -> None:
    section, name = key
    if isinstance(value, str) and _looks_numeric(value):
        return  # "30" parses as a number in lax mode: not a wrong value
    if isinstance(value, bool):
        return  # pydantic reads booleans as 0 / 1 for ints: not what this property is about
    try:
        parse_config({section: {name: value}}, "gpucost.toml")
    except ConfigError as e:
        text = str(e)
        assert text.startswith(f"gpucost.toml: {section}.{name}") and "\n" not in text, text
    else:
        raise AssertionError(f"{section}.{name} = {value!r} was accepted")


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


# --- any JSON value in any field: loaded, or refused as our UserError -----------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)

#: Every field of an export row a value can be put in, nested ones as paths (ints index lists).
ROW_PATHS: list[tuple[Any, ...]] = [(name,) for name in export_row()]
ROW_PATHS += [
    ("service", "id"), ("sku", "description"), ("project", "labels"), ("project", "labels", 0),
    ("project", "labels", 0, "value"), ("labels", 0), ("labels", 0, "key"), ("system_labels", 0, "value"),
    ("location", "zone"), ("resource", "global_name"), ("tags", 0, "inherited"), ("usage", "amount"),
    ("usage", "amount_in_pricing_units"), ("usage", "unit"), ("credits", 0), ("credits", 0, "amount"),
    ("credits", 0, "type"), ("invoice", "month"), ("adjustment_info", "mode"), ("price", "effective_price"),
]


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A deep copy of `doc` with `value` at `path` (a missing parent is created as an object)."""
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        if isinstance(target, list) and isinstance(key, int) and key < len(target):
            target = target[key]
        elif isinstance(target, dict):
            if not isinstance(target.get(key), dict | list):
                target[key] = {}
            target = target[key]
        else:
            return out
    fits = isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(target)
    if fits or isinstance(target, dict):
        target[path[-1]] = value
    return out


@FAST
@given(st.sampled_from(ROW_PATHS), JSON)
def test_any_json_value_in_any_row_field_loads_or_is_a_field_error(path: tuple[Any, ...], value: Any) -> None:
    try:
        normalize_row(_put(export_row(), path, value))
    except FieldError as e:
        assert e.message and "\n" not in e.message


#: File round trips cost a DuckDB load each: fewer examples, same determinism.
FILES = settings(FAST, max_examples=25)


@FILES
@given(st.sampled_from(ROW_PATHS), JSON)
def test_any_json_value_in_an_ndjson_file_loads_or_is_a_user_error(path: tuple[Any, ...], value: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = write_ndjson(Path(tmp) / "billing.ndjson", [export_row(), _put(export_row(), path, value)])
        conn = open_billing_db(None)
        try:
            load_billing([file], conn)
        except UserError as e:
            assert str(e).startswith(f"{file}") and "\n" not in str(e)
            assert conn.execute("SELECT count(*) FROM billing_export").fetchone() == (0,)
        finally:
            conn.close()


T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)


def _series(n: int = 3) -> dict[str, Any]:
    """A valid NVML TimeSeries with `n` points, newest first (as the API returns them)."""
    times = [(T0 + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(n)][::-1]
    return {
        "metric": {"type": "agent.googleapis.com/gpu/utilization", "labels": {"gpu_number": "0"}},
        "resource": {"type": "gce_instance", "labels": {"project_id": "p", "instance_id": "1", "zone": "z"}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "points": [{"interval": {"startTime": t, "endTime": t}, "value": {"doubleValue": 40.0}} for t in times],
    }


SERIES_PATHS: list[tuple[Any, ...]] = [
    ("metric",), ("metric", "type"), ("metric", "labels"), ("metric", "labels", "gpu_number"), ("resource",),
    ("resource", "labels"), ("resource", "labels", "instance_id"), ("resource", "labels", "project_id"),
    ("metricKind",), ("valueType",), ("unit",), ("points",), ("points", 0), ("points", 1, "interval"),
    ("points", 0, "interval", "endTime"), ("points", 2, "interval", "startTime"), ("points", 1, "value"),
    ("points", 0, "value", "doubleValue"), ("points", 2, "value", "int64Value"), ("metadata",),
]  # fmt: skip


@FAST
@given(st.sampled_from(SERIES_PATHS), JSON)
def test_any_json_value_in_a_time_series_is_kept_or_counted(path: tuple[Any, ...], value: Any) -> None:
    ts = _put(_series(), path, value)
    skips: Counter[str] = Counter()
    parsed = parse_series(ts, skips)  # never raises: bad input never aborts a poll
    points = ts.get("points")
    expected = len(points) if isinstance(points, list) else 1  # a malformed series counts once
    kept = len(parsed.points) if parsed is not None else 0
    assert kept + sum(skips.values()) == expected, (kept, dict(skips))
    for _, end, value_pct in parsed.points if parsed is not None else ():
        assert 0.0 <= value_pct <= 100.0 and math.isfinite(end)


@FILES
@given(
    st.one_of(
        JSON,
        st.builds(lambda p, v: {"timeSeries": [_put(_series(), p, v)]}, st.sampled_from(SERIES_PATHS), JSON),
        st.builds(lambda p, v: [_put(_series(), p, v)], st.sampled_from(SERIES_PATHS), JSON),
    )
)
def test_any_json_document_is_read_or_a_user_error(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "u.json"
        path.write_text(json.dumps(doc))
        try:
            FileUtilizationSource([path]).fetch(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
        except UserError as e:
            assert str(e).startswith(str(path)) and "\n" not in str(e)


@FAST
@given(
    st.decimals(min_value=-10**6, max_value=10**6, allow_nan=False, allow_infinity=False, places=6)
    | st.builds(lambda a, b: a / b, st.integers(-(10**9), 10**9), st.integers(1, 10**6).map(Decimal)),
    st.decimals(min_value=-10, max_value=10**4, allow_nan=False, allow_infinity=False),
)
def test_one_weight_takes_the_whole_as_the_general_split_gives_it(total: Decimal, weight: Decimal) -> None:
    """`split_exact`'s shortcut for one weight (most node-hours are one job's): the part the general
    largest-remainder steps give it beside a weight of zero, for any total (28-digit idle shares
    too) and any weight (zero or less: an even split, here of one)."""
    beside = weight if weight > 0 else Decimal(1)
    assert split_exact(total, [weight]) == split_exact(total, [beside, Decimal(0)])[:1]
