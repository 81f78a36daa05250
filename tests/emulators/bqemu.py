"""The BigQuery emulator (PyPI `bqemulator`) as a subprocess of the tests.

The emulator runs from its own virtualenv `.venv-bqemu` (made by `tests/emulators/bqemu_setup.sh`;
its pins clash with the project's), as `bqemulator start --ephemeral` on 127.0.0.1 with
`--rest-port 0 --grpc-port 0`: it binds free ports itself and logs the REST one
(`"event": "rest.listen"`), so there is no port race. DuckDB extension downloads are switched off
(`BQEMU_ENABLE_FORMAT_EXTENSIONS=false`; `spatial` was installed from its PyPI wheel by the setup
script). Tests talk to it through `tests.emulators.wire.WireProxy`, which patches its known gaps.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["REPO", "Emulator", "emulator_missing_reason", "emulator_venv"]

REPO = Path(__file__).resolve().parents[2]


def emulator_venv() -> Path:
    return Path(os.environ.get("BQEMU_VENV", REPO / ".venv-bqemu"))


def emulator_missing_reason() -> str | None:
    """Why the emulator cannot run here (None when it can)."""
    venv = emulator_venv()
    if not (venv / ".bqemu-stamp").is_file() or not (venv / "bin" / "bqemulator").is_file():
        return f"BigQuery emulator not installed at {venv}: run `bash tests/emulators/bqemu_setup.sh`"
    return None


class Emulator:
    """`bqemulator start` in a subprocess; `url` is its REST endpoint once `start()` returned."""

    def __init__(self, project: str, log_path: Path, venv: Path | None = None):
        self.project, self.log_path = project, log_path
        self.venv = venv or emulator_venv()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.started_in: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Emulator:
        began = time.monotonic()
        env = {
            **os.environ,
            # No DuckDB extension downloads (CI reaches package registries only); `spatial` is
            # pre-installed by bqemu_setup.sh, `avro` is optional and unused here.
            "BQEMU_ENABLE_FORMAT_EXTENSIONS": "false",
            "BQEMU_TRACING_ENABLED": "false",
        }
        cmd = [str(self.venv / "bin" / "bqemulator"), "start", "--rest-host", "127.0.0.1", "--rest-port", "0"]
        cmd += ["--grpc-host", "127.0.0.1", "--grpc-port", "0", "--ephemeral", "--project", self.project]
        cmd += ["--log-format", "json", "--log-level", "info"]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            self.port = self._wait_for_port(began + timeout)
            self._wait_until_answering(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def _log_tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines[-15:] if "sql.translator.init" not in line)

    def _wait_for_port(self, deadline: float) -> int:
        assert self.proc is not None
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if '"rest.listen"' in line:
                    return int(json.loads(line)["port"])
            if self.proc.poll() is not None:
                raise RuntimeError(f"bqemulator exited with {self.proc.returncode}:\n{self._log_tail()}")
            time.sleep(0.05)
        raise TimeoutError(f"bqemulator did not log its REST port in time:\n{self._log_tail()}")

    def _wait_until_answering(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", f"/bigquery/v2/projects/{self.project}/datasets")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"bqemulator on port {self.port} did not answer in time:\n{self._log_tail()}")

    def stop(self) -> None:
        """SIGTERM (the emulator shuts down cleanly on it), then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
