"""Google client plumbing shared by the Catalog and Budget sources: endpoints and error mapping."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from monitor.errors import PermanentSourceError, RetryableSourceError

__all__ = ["ADC_ENV", "call_google", "credentials_failure", "credentials_problem", "grpc_target"]

#: The variable google-auth reads a key file's path from (a path, never a secret itself).
ADC_ENV = "GOOGLE_APPLICATION_CREDENTIALS"

T = TypeVar("T")


def grpc_target(endpoint: str) -> str:
    """`host:port` for a gRPC channel from `api_endpoint` (which may be written as a URL)."""
    return endpoint.split("://", 1)[-1].rstrip("/")


def credentials_problem(e: BaseException, environ: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the key file `GOOGLE_APPLICATION_CREDENTIALS` names, in google-auth's own
    words, when `e` (raised while finding Application Default Credentials) is about that file; None
    otherwise (the variable unset, or `e` about something else).

    >>> from google.auth.exceptions import DefaultCredentialsError
    >>> credentials_problem(DefaultCredentialsError("File /k.json was not found."), {ADC_ENV: "/k.json"})[:54]
    'GOOGLE_APPLICATION_CREDENTIALS=/k.json: File /k.json w'
    """
    from google.auth import exceptions as auth_exc

    path = (os.environ if environ is None else environ).get(ADC_ENV)
    if not path:
        return None
    if isinstance(e, IsADirectoryError):
        reason = "a directory, not a key file"
    elif isinstance(e, OSError) and e.filename == path:
        reason = e.strerror or str(e)
    elif isinstance(e, auth_exc.DefaultCredentialsError):
        # args: a message, then (for a file it could not parse) the parser's exception
        reason = ": ".join(str(a).strip().rstrip(".") for a in e.args if str(a).strip())
    else:
        return None
    return (
        f"{ADC_ENV}={path}: {reason}; point it at a service-account key file (JSON), or unset it to"
        " use `gcloud auth application-default login` or the VM's / GKE node's service account"
    )


def credentials_failure(
    e: BaseException, problem: Callable[[str], Exception], fallback: Exception
) -> Exception:
    """The error to raise for `e`, caught (a `DefaultCredentialsError` or an `OSError`) while a
    client found its Application Default Credentials: `problem` of google-auth's reason when `e` is
    about the key file `GOOGLE_APPLICATION_CREDENTIALS` names (`credentials_problem`), `fallback`
    when no credentials were found. Any other `OSError` is raised again as it is. One decision for
    every client (`call_google`, BigQuery's `make_client`, Monitoring's `build_client`)."""
    from google.auth import exceptions as auth_exc

    if (reason := credentials_problem(e)) is not None:
        return problem(reason)
    if not isinstance(e, auth_exc.DefaultCredentialsError):
        raise e
    return fallback


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
    except (auth_exc.DefaultCredentialsError, OSError) as e:
        raise credentials_failure(
            e,
            lambda reason: PermanentSourceError(f"{what}: {reason}"),
            PermanentSourceError(
                f"{what}: no Google credentials ({e}); run `gcloud auth application-default login`, "
                'or set google.credentials = "anonymous" for a local emulator'
            ),
        ) from e
    except gexc.RetryError as e:
        raise RetryableSourceError(f"{what}: gave up after retrying ({e.cause or e})") from e
    except gexc.GoogleAPICallError as e:
        kind = RetryableSourceError if isinstance(e, retryable) else PermanentSourceError
        status = e.grpc_status_code.name if e.grpc_status_code else type(e).__name__
        raise kind(f"{what}: {status}: {e.message}") from e
