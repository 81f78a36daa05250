"""`gpucost run` as a child process, as the end-to-end daemon tests start it (JSON logs on stderr)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["DaemonProcess", "http_get"]

REPO = Path(__file__).resolve().parents[1]


class DaemonProcess:
    """One `gpucost run --config` process started in `tmp`, with `token` as its Slack token."""

    def __init__(self, tmp: Path, config: Path, n: int, token: str):
        self.err = tmp / f"daemon{n}.err"
        env = {**os.environ, "SLACK_BOT_TOKEN": token, "PYTHONPATH": str(REPO)}
        self.started = time.monotonic()
        with open(self.err, "wb") as err, open(tmp / f"daemon{n}.out", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(config)],
                cwd=tmp,
                env=env,
                stdout=out,
                stderr=err,
            )

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.err.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"message": line, "severity": "RAW"})
        return out

    def wait_log(self, message: str, timeout: float, count: int = 1) -> dict[str, Any]:
        """The `count`-th log line with this message; fails at once if the process exited. Looked for
        every 50 ms: the lines awaited come within seconds, and each look was 0.1 s late on average
        at 0.2 s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [e for e in self.logs() if e.get("message") == message]
            if len(hits) >= count:
                return hits[count - 1]
            assert self.proc.poll() is None, f"daemon exited {self.proc.returncode}:\n{self.tail()}"
            time.sleep(0.05)
        raise AssertionError(f"no {message!r} log line within {timeout} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")[-6000:]

    def kill(self) -> None:
        """SIGKILL if still running (a test's cleanup, whatever happened before)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; killed if it has not exited within 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
