"""BigQuery REST fault responses, served through `tests.emulators.wire.WireProxy.answering`.

The emulator cannot fail on demand, so the fault-matrix tests put these bodies in front of it. The
error reasons and their HTTP codes are Google's, from "BigQuery error messages"
(https://cloud.google.com/bigquery/docs/error-messages, "Error table": the `reason` of an
`ErrorProto`): `backendError` 500/503 ("retry the request"), `rateLimitExceeded` 403 (too many
requests in a short time), `quotaExceeded` 403 (a project or user quota), and
`bytesBilledLimitExceeded` 400 ("the job exceeded the maximum_bytes_billed limit"). The body shape
is the Google API error envelope, `{"error": {"code", "message", "errors": [{"reason", "domain",
"message"}], "status"}}` (https://cloud.google.com/apis/design/errors#http_mapping).

`HoldingProxy` sits in front of another BigQuery endpoint and holds the query jobs labelled
`query: <name>` (gpucost labels every job with its query's name) until released: a poll in flight,
for a test that kills the daemon at that moment.

`RUNNING` is a query job that never finishes: `jobs.query` answers `jobComplete: false` with its
`jobReference` (REST reference, `jobs.query` response body), and `jobs.get` / `jobs.getQueryResults`
keep answering `status.state = "RUNNING"` / `jobComplete: false`
(https://cloud.google.com/bigquery/docs/reference/rest/v2/jobs/getQueryResults). One body serves all
three calls (each reads only its own fields); the client's `cancel` after its `wait_timeout` reads
the `job` field.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.emulators.wire import error_body

__all__ = ["FAULTS", "HoldingProxy", "fault_body", "running_job"]

#: fault name -> (HTTP status, reason), as the error table lists them.
FAULTS: dict[str, tuple[int, str]] = {
    "backendError": (503, "backendError"),
    "rateLimitExceeded": (403, "rateLimitExceeded"),
    "quotaExceeded": (403, "quotaExceeded"),
    "bytesBilledLimitExceeded": (400, "bytesBilledLimitExceeded"),
}

_MESSAGES = {
    "backendError": "Error encountered during execution. Retrying may solve the problem.",
    "rateLimitExceeded": "Exceeded rate limits: too many api requests per user per method for this "
    "user_method. For more information, see https://cloud.google.com/bigquery/docs/troubleshoot-quotas",
    "quotaExceeded": "Quota exceeded: Your project exceeded quota for free query bytes scanned.",
    "bytesBilledLimitExceeded": "Query exceeded limit for bytes billed: 1048576. 10485760 or higher required.",
}


def fault_body(name: str) -> tuple[int, dict[str, Any]]:
    """(status, body) of the named fault."""
    status, reason = FAULTS[name]
    return status, error_body(status, reason, _MESSAGES[reason])


def running_job(project: str, job_id: str = "gpucost_stuck_job", location: str = "US") -> dict[str, Any]:
    """A job that stays RUNNING, for every call the client makes about it (module docstring)."""
    ref = {"projectId": project, "jobId": job_id, "location": location}
    job = {
        "kind": "bigquery#job",
        "id": f"{project}:{location}.{job_id}",
        "jobReference": ref,
        "status": {"state": "RUNNING"},
        "configuration": {"query": {"query": "SELECT 1", "useLegacySql": False}},
    }
    return {**job, "jobComplete": False, "job": job}


def _label(body: Any) -> str | None:
    """The `query` label of a `jobs.query` (`labels`) or `jobs.insert` (`configuration.labels`) body."""
    if not isinstance(body, dict):
        return None
    labels = body.get("labels") or body.get("configuration", {}).get("labels") or {}
    return labels.get("query") if isinstance(labels, dict) else None


class HoldingProxy:
    """Forwards to `upstream` (an http:// URL); a query labelled `hold` waits until `release()`."""

    def __init__(self, upstream: str, hold: str):
        self.upstream = urlsplit(upstream)
        self.hold = hold
        self.held = threading.Event()  # a held query arrived
        self.gate = threading.Event()  # set: let everything through
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="bq-hold", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HoldingProxy:
        self._thread.start()
        return self

    def release(self) -> None:
        self.gate.set()

    def stop(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _relay(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                if _label(body) == proxy.hold and not proxy.gate.is_set():
                    proxy.held.set()
                    proxy.gate.wait(60)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                    }
                    conn.request(self.command, self.path, body=raw or None, headers=headers)
                    resp = conn.getresponse()
                    payload = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in (
                        "connection",
                        "transfer-encoding",
                        "content-length",
                        "server",
                        "date",
                    ):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client was killed while we held its query
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

        return Handler
