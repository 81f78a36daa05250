"""Logs: JSON lines with a Cloud Logging `severity` when not on a terminal, text on one; no secrets."""

from __future__ import annotations

import io
import json
import logging

import pytest

from monitor.logs import configure_logging, redact

TOKEN = "xoxb-1234567890-0987654321-AbCdEfGhIjKl"
HOOK = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _log_failure(log: logging.Logger) -> None:
    try:
        raise RuntimeError(f"slack said invalid_auth for token {TOKEN}")
    except RuntimeError:
        log.error(
            "delivery to %s failed", HOOK, exc_info=True, extra={"job": "outbox", "auth": f"Bearer {TOKEN}"}
        )


def test_json_lines_off_a_terminal_with_severity_and_no_secret() -> None:
    out = io.StringIO()
    configure_logging("auto", "INFO", stream=out)
    log = logging.getLogger("gpucost.test")
    log.info("billing poll", extra={"rows": 12, "engine": "duckdb"})
    _log_failure(log)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["severity"] == "INFO" and first["message"] == "billing poll"
    assert (first["rows"], first["engine"], first["logger"]) == (12, "duckdb", "gpucost.test")
    assert first["time"].endswith("Z")
    assert second["severity"] == "ERROR" and second["job"] == "outbox"
    assert second["message"] == "delivery to [redacted] failed"
    assert second["auth"] == "Bearer [redacted]"
    assert "RuntimeError: slack said invalid_auth for token [redacted]" in second["exception"]
    assert TOKEN not in out.getvalue() and "XXXXSECRET" not in out.getvalue()


def test_text_on_a_terminal_and_no_secret() -> None:
    out = Terminal()
    configure_logging("auto", "INFO", stream=out)
    _log_failure(logging.getLogger("gpucost.test"))
    text = out.getvalue()
    assert not text.startswith("{")
    assert " ERROR   gpucost.test: delivery to [redacted] failed job=outbox auth=Bearer [redacted]" in text
    assert "RuntimeError: slack said invalid_auth for token [redacted]" in text
    assert TOKEN not in text and "XXXXSECRET" not in text


def test_format_forced_and_level() -> None:
    out = Terminal()
    configure_logging("json", "WARNING", stream=out)
    logging.getLogger("gpucost.test").info("quiet")
    logging.getLogger("gpucost.test").warning("loud")
    (line,) = out.getvalue().splitlines()
    assert json.loads(line)["severity"] == "WARNING"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token={TOKEN}", "token=[redacted]"),
        ("xapp-1-A0-123-abc and xoxp-9-8", "[redacted] and [redacted]"),
        (f"POST {HOOK} -> 404", "POST [redacted] -> 404"),
        ("Authorization: Bearer ya29.a0AfH6SM-x_y", "Authorization: Bearer [redacted]"),
        ("invalid_auth for channel C0ALERTS", "invalid_auth for channel C0ALERTS"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
