"""Logging: JSON lines with a Cloud Logging `severity` field in production, readable in a terminal.

Secrets never reach a log line: a filter redacts anything shaped like a Slack token or webhook URL,
as a last line of defence behind `SecretStr`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

__all__ = ["configure_logging", "redact"]

_SECRET = re.compile(
    r"xox[a-z]-[A-Za-z0-9-]+"  # bot, user, app-configuration tokens
    r"|xapp-[A-Za-z0-9-]+"  # app-level tokens
    r"|https://hooks\.slack\.com/\S+"  # incoming-webhook URLs carry their secret in the path
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]+"  # any bearer credential, e.g. in a dumped request header
)
_STD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def redact(text: str) -> str:
    """Replace anything shaped like a Slack token, webhook URL or bearer credential.

    >>> redact("auth failed for xoxb-123-456-abc (Authorization: Bearer xoxb-123-456-abc)")
    'auth failed for [redacted] (Authorization: Bearer [redacted])'
    """
    return _SECRET.sub("[redacted]", text)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "time": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STD and not key.startswith("_"):
                entry[key] = (
                    value if isinstance(value, int | float | bool | type(None)) else redact(str(value))
                )
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        """`HH:MM:SS LEVEL logger: message key=value ...`, then the traceback on its own lines."""
        extras = {k: v for k, v in vars(record).items() if k not in _STD and not k.startswith("_")}
        exc_info, exc_text = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text = exc_info, exc_text
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if exc_info:
            line += "\n" + self.formatException(exc_info)
        return redact(line)


def configure_logging(fmt: str = "auto", level: str = "INFO", stream: IO[str] | None = None) -> None:
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    handler = logging.StreamHandler(out)
    handler.setFormatter(_JsonFormatter() if use_json else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("apscheduler", "urllib3", "google", "slack_sdk"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # "skipped: maximum number of running instances reached" is max_instances=1 working as designed
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
