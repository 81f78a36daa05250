"""Google client plumbing shared by the Catalog and Budget sources: endpoints and error mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from monitor.errors import PermanentSourceError, RetryableSourceError

__all__ = ["call_google", "grpc_target"]

T = TypeVar("T")


def grpc_target(endpoint: str) -> str:
    """`host:port` for a gRPC channel from `api_endpoint` (which may be written as a URL)."""
    return endpoint.split("://", 1)[-1].rstrip("/")


def call_google(what: str, fn: Callable[[], T]) -> T:
    """Run a google-cloud call, turning its exceptions into gpucost's retryable/permanent tree.

    Transient statuses (UNAVAILABLE, DEADLINE_EXCEEDED, 429/RESOURCE_EXHAUSTED, INTERNAL, ABORTED)
    and an exhausted retry budget are `RetryableSourceError`; the rest (PERMISSION_DENIED,
    NOT_FOUND, INVALID_ARGUMENT, missing credentials) are `PermanentSourceError`.
    """
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    retryable = (
        gexc.ServiceUnavailable,
        gexc.DeadlineExceeded,
        gexc.TooManyRequests,
        gexc.InternalServerError,
        gexc.Aborted,
        gexc.BadGateway,
        gexc.GatewayTimeout,
    )
    try:
        return fn()
    except auth_exc.DefaultCredentialsError as e:
        raise PermanentSourceError(
            f"{what}: no Google credentials ({e}); run `gcloud auth application-default login`, "
            'or set google.credentials = "anonymous" for a local emulator'
        ) from e
    except gexc.RetryError as e:
        raise RetryableSourceError(f"{what}: gave up after retrying ({e.cause or e})") from e
    except gexc.GoogleAPICallError as e:
        kind = RetryableSourceError if isinstance(e, retryable) else PermanentSourceError
        status = e.grpc_status_code.name if e.grpc_status_code else type(e).__name__
        raise kind(f"{what}: {status}: {e.message}") from e
