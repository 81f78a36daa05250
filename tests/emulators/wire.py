"""A recording HTTP proxy in front of the BigQuery emulator that patches its known gaps.

`_PARTITIONTIME` on the emulator: bqemulator does not keep ingestion-time partitions. It rewrites
every `_PARTITIONTIME` / `_PARTITIONDATE` in a query's text to `CURRENT_TIMESTAMP()` /
`CURRENT_DATE()` (a word-bounded regex, before parsing), so every row "lives" in today's partition.
Our queries filter and group by `_PARTITIONTIME`, and the embedded DuckDB table defines it as the
load day (`export_time` truncated to the UTC day, never before the usage day); on the emulator the filter would keep or drop
every row depending on the wall clock and the watermark query would see a single partition.

Least-bad fix, chosen over the alternatives:

- the export table is created with `monitor.schema.bigquery_schema()`, ingestion-time partitioned by
  DAY as in BigQuery, plus one extra column `gpucost_partitiontime` that the fixture fills with the
  load day, `export_time` truncated to the UTC day and never before the usage day: the very
  definition the embedded DuckDB table uses for its real `_PARTITIONTIME` column. Rows are loaded through the real client;
- `WireProxy`, between the client and the emulator, renames the pseudo-column to that column in the
  query text of `jobs.query` / `jobs.insert` requests. gpucost and the google-cloud-bigquery client
  send the unchanged production SQL; only the emulator's known gap is patched, on the wire, in test
  code.

Rejected: the raw emulator semantics with rows dated "today" (flaky around midnight, a single
partition, and the partition timestamp would be "now", not midnight); a view adding the column
(`billing.table` may be a view, but the emulator only knows the schemas of tables when it qualifies
columns, so `service.id` in a query over a view becomes a reference to a table `service` and the
query fails); patching the emulator's Python code (monkeypatching a library).

A second emulator gap is patched the same way: bqemulator binds named parameters by replacing every
`@name` in the translated text, comments and string literals included, so a comment mentioning
`@usage_start` (our queries document their parameters in a header comment) consumes a value and
shifts every later binding: the query silently returns wrong rows. The proxy drops SQL comments
(`strip_sql_comments`, string literals and quoted identifiers untouched) before forwarding. Queries
must therefore not spell `@name` inside string literals; none do.

A third: when a query fails, the emulator's `jobs.query` answers HTTP 200 with the failure in
`errors` and no rows; the client (rightly, for BigQuery, which answers 400) reads that as an empty
result. The proxy turns such a response into the 400 BigQuery sends, so a query the emulator cannot
run fails the test loudly instead of comparing empty results.

The proxy also records every request (method, path, JSON body), so tests assert on what went over
the wire (parameter types, labels, `maximumBytesBilled`, `dryRun`), and it can answer with
BigQuery-shaped error responses (`failing`, `answering`) to test retries.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "PARTITION_STANDIN",
    "Exchange",
    "WireProxy",
    "emulator_sql",
    "error_body",
    "rewrite_partition_pseudo_columns",
    "strip_sql_comments",
]

#: The column standing in for `_PARTITIONTIME` on the emulator (no `_PARTITION` prefix: the
#: emulator's word-bounded rewrite leaves it alone, and BigQuery reserves that prefix).
PARTITION_STANDIN = "gpucost_partitiontime"
_PSEUDO = re.compile(r"\b(_PARTITIONTIME|_PARTITIONDATE)\b", re.IGNORECASE)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


def strip_sql_comments(sql: str) -> str:
    """`sql` without `-- ...`, `# ...` and `/* ... */` comments; quoted text is kept verbatim."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif sql.startswith("--", i) or ch == "#":
            end = sql.find("\n", i)
            i = n if end < 0 else end
        else:
            out.append(ch)
            i += 1
    return "".join(out).strip()


def emulator_sql(sql: str) -> str:
    """What the proxy forwards instead of `sql` (see module docstring)."""
    return rewrite_partition_pseudo_columns(strip_sql_comments(sql))


def rewrite_partition_pseudo_columns(sql: str) -> str:
    """`_PARTITIONTIME` -> the stand-in column, `_PARTITIONDATE` -> its DATE (module docstring)."""

    def sub(m: re.Match[str]) -> str:
        col = PARTITION_STANDIN
        return col if m.group(1).upper() == "_PARTITIONTIME" else f"DATE({col})"

    return _PSEUDO.sub(sub, sql)


@dataclass(frozen=True)
class Exchange:
    """One request as it went over the wire, and the status the client got back."""

    method: str
    path: str
    body: Any
    status: int


@dataclass
class _Canned:
    """The next `remaining` requests get `status`/`body` instead of being forwarded."""

    remaining: int = 0
    status: int = 503
    body: bytes = b""
    served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> tuple[int, bytes] | None:
        with self.lock:
            if self.remaining == 0:
                return None
            self.remaining -= 1
            self.served += 1
            return self.status, self.body


_STATUS_NAMES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 500: "INTERNAL"}


def error_body(status: int, reason: str, message: str) -> dict[str, Any]:
    """A BigQuery REST error response body (`{"error": {code, message, errors: [{reason}]}}`)."""
    return {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
            "status": _STATUS_NAMES.get(status, "UNAVAILABLE"),
        }
    }


class WireProxy:
    """An HTTP proxy on 127.0.0.1 (free port) in front of `upstream` (see module docstring)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.exchanges: list[Exchange] = []
        self.canned = _Canned()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="bq-wire-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> WireProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @contextmanager
    def answering(self, times: int, status: int, body: Any) -> Iterator[_Canned]:
        """Answer the next `times` requests with `status` and the JSON `body`, not forwarding them."""
        with self.canned.lock:
            self.canned.remaining, self.canned.status = times, status
            self.canned.body, self.canned.served = json.dumps(body).encode(), 0
        try:
            yield self.canned
        finally:
            with self.canned.lock:
                self.canned.remaining = 0

    def failing(self, times: int, status: int = 503, reason: str = "backendError") -> Any:
        """Answer the next `times` requests with a BigQuery error response (see `error_body`)."""
        return self.answering(times, status, error_body(status, reason, f"injected {reason}"))

    def queries(self) -> list[Exchange]:
        """The requests that carried a query (`jobs.query` and `jobs.insert`)."""
        with self._lock:
            return [x for x in self.exchanges if x.method == "POST" and _query_text(x.body) is not None]

    def clear(self) -> None:
        with self._lock:
            self.exchanges.clear()

    def _record(self, x: Exchange) -> None:
        with self._lock:
            self.exchanges.append(x)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:  # keep pytest output clean
                pass

            def _relay(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = _json_or_none(raw)
                canned = proxy.canned.take()
                if canned is not None:
                    status, payload = canned
                    proxy._record(Exchange(self.command, self.path, body, status))
                    self._reply(status, {"Content-Type": "application/json"}, payload)
                    return
                if isinstance(body, dict) and _query_text(body) is not None:
                    raw = json.dumps(_with_query(body, emulator_sql(_query_text(body)))).encode()
                status, headers, payload = proxy._forward(self.command, self.path, dict(self.headers), raw)
                status, payload = _failed_query_as_error(self.path, status, payload)
                proxy._record(Exchange(self.command, self.path, body, status))
                self._reply(status, headers, payload)

            def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in _HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

        return Handler

    def _forward(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP | {"host"}}
            fwd["Content-Length"] = str(len(raw))
            conn.request(method, path, body=raw if raw else None, headers=fwd)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()


#: The HTTP status BigQuery answers with for an error reason (anything else: 400).
_REASON_STATUS = {"notFound": 404, "accessDenied": 403, "backendError": 503, "internalError": 500}


def _failed_query_as_error(path: str, status: int, payload: bytes) -> tuple[int, bytes]:
    """A `jobs.query` 200 carrying `errors` (the emulator's way to fail) -> BigQuery's 4xx/5xx."""
    if status != 200 or not path.split("?")[0].endswith("/queries"):
        return status, payload
    body = _json_or_none(payload)
    errors = body.get("errors") if isinstance(body, dict) else None
    if not errors:
        return status, payload
    first = errors[0]
    return 400, json.dumps(
        error_body(400, first.get("reason", "invalidQuery"), first.get("message", ""))
    ).encode()


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _query_text(body: Any) -> str | None:
    """The SQL of a `jobs.query` body (`query`) or a `jobs.insert` body (`configuration.query`)."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("query"), str):
        return body["query"]
    q = body.get("configuration", {}).get("query", {})
    return q.get("query") if isinstance(q, dict) else None


def _with_query(body: dict, sql: str | None) -> dict:
    out = json.loads(json.dumps(body))
    if isinstance(out.get("query"), str):
        out["query"] = sql
    else:
        out["configuration"]["query"]["query"] = sql
    return out
