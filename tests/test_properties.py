"""Property-based tests (hypothesis): for ANY input, not only the examples we thought of.

- Slack mrkdwn escaping: no `<` / `>` survives (so no `<!channel>` or link can be injected from a
  label value), `&` only starts an entity, unescaping gives the text back, truncation never splits
  an entity and respects the limit.
- The export row loader: any number-like amount loads as that number; any non-finite or
  non-numeric amount is refused as a `FieldError` naming the field, never an unhandled exception.
- The config model: any TOML-shaped value of a wrong type for a key is a one-line `ConfigError`
  naming the file and the key, never a traceback.
"""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.escape import escape_mrkdwn, truncate
from monitor.config import parse_config
from monitor.errors import ConfigError
from monitor.sources.loader import FieldError, normalize_row
from tests.export_rows import export_row

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


@FAST
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_any_finite_cost_loads_as_that_number(cost: float) -> None:
    assert normalize_row({**export_row(), "cost": cost})["cost"] == cost
    assert normalize_row({**export_row(), "cost": repr(cost)})["cost"] == cost  # bq-extract strings


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
