"""`/healthz`, `/readyz` and `/metrics` on a small threaded HTTP server.

Liveness only says the process serves requests; readiness says every source was polled successfully
recently enough (`http.ready_max_age_minutes`), which is what an operator pages on. The /readyz body
names each poll's last error and the system it failed on, and lists under `failing` every job whose
last run failed (a Catalog API outage shows there while the daemon stays ready on cached prices).
"""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from monitor.errors import ConfigError

__all__ = ["HealthServer", "bind_error"]

#: How often the server's loop looks for a stop request: `shutdown()` waits for it, so a daemon's
#: shutdown (and each test that stops one) waited out socketserver's default 0.5 s.
_POLL_S = 0.05

ReadyCheck = Callable[[], tuple[bool, dict[str, object]]]


class HealthServer:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, ready: ReadyCheck):
        registry_, ready_ = registry, ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, "application/json", b'{"status": "ok"}')
                elif path == "/readyz":
                    ok, detail = ready_()
                    body = json.dumps({"ready": ok, **detail}, default=str).encode()
                    self._send(200 if ok else 503, "application/json", body)
                elif path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry_))
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet: no access log spam
                return

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise bind_error(host, port, e) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(_POLL_S,), name="http", daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def bind_error(host: str, port: int, e: OSError) -> ConfigError:
    """Why the server could not listen on `host:port`, naming the settings and the fix.

    >>> str(bind_error("127.0.0.1", 9464, OSError(errno.EADDRINUSE, "Address already in use")))[:60]
    'http.host / http.port: cannot listen on 127.0.0.1:9464: Addr'
    """
    where = f"http.host / http.port: cannot listen on {host}:{port}: {e.strerror or e}"
    off = "or set http.enabled = false to run without /healthz, /readyz and /metrics"
    if e.errno == errno.EADDRINUSE:
        fix = f"stop the other process on port {port}, choose another http.port, {off}"
    elif e.errno == errno.EACCES:
        fix = f"choose an http.port above 1023 (or grant this process the right to bind it), {off}"
    else:  # EADDRNOTAVAIL, an unknown name (socket.gaierror): the host is not this machine's
        fix = (
            'set http.host to an address of this machine ("127.0.0.1", or "0.0.0.0" for every '
            f"interface), {off}"
        )
    return ConfigError(f"{where}; {fix}")
