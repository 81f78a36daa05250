"""The exception tree, named by where a failure happens.

GpucostError
├── UserError            a mistake the user can fix (bad config, missing file, bad timestamp):
│   ├── ConfigError      the CLI prints one line and exits 2, never a traceback
│   └── InputError       a malformed input file (names file, line, field)
├── NotAvailableYet      a command whose implementation has not landed yet (exit 2)
└── SourceError          a data source failed while talking to a remote system
    ├── RetryableSourceError   transient (503, UNAVAILABLE, quota): try again later, keep the window
    └── PermanentSourceError   will not succeed on retry (permission denied, table not found)
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "GpucostError",
    "InputError",
    "NotAvailableYet",
    "PermanentSourceError",
    "RetryableSourceError",
    "SourceError",
    "UserError",
    "first_line",
]


class GpucostError(Exception):
    """Base of every error gpucost raises on purpose."""


class UserError(GpucostError):
    """Something the user can fix; rendered as one line, exit code 2."""

    exit_code = 2


class ConfigError(UserError):
    pass


class InputError(UserError):
    """A malformed input file; the message names the file, the line (when known) and the field."""

    def __init__(self, path: str, message: str, *, line: int | None = None, field: str | None = None):
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")
        self.path, self.line, self.field = path, line, field


class NotAvailableYet(GpucostError):
    exit_code = 2


class SourceError(GpucostError):
    pass


class RetryableSourceError(SourceError):
    pass


class PermanentSourceError(SourceError):
    pass


def first_line(e: BaseException) -> str:
    """An exception's first line (its type when it says nothing), for one-line errors."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
