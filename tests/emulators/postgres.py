"""A throwaway PostgreSQL server for the tests, from Debian's binaries (`postgres_setup.sh`).

`initdb` into a fresh temporary directory (trust auth, no fsync: nothing here must survive), then
`pg_ctl start` on 127.0.0.1 and a free port, its Unix socket inside the data directory. PostgreSQL
refuses to run as root, so under root both run as the `postgres` user the Debian package creates
(`runuser`). `stop()` shuts it down immediately and removes the directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "pg_bin_dir", "postgres_missing_reason"]

SETUP = "bash tests/emulators/postgres_setup.sh"


def pg_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/<ver>/bin holding pg_ctl, else pg_ctl's directory on PATH."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)] or [0],
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).resolve().parent if on_path else None


def _run_as() -> str | None:
    """The user to run PostgreSQL as: None for ourselves, `postgres` when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return ""
    return "postgres"


def postgres_missing_reason() -> str | None:
    """Why a server cannot be started here (None when it can)."""
    bin_dir = pg_bin_dir()
    if bin_dir is None or not (bin_dir / "initdb").is_file():
        return f"PostgreSQL binaries (initdb, pg_ctl) not found: run `{SETUP}`"
    if _run_as() == "":
        return f"running as root and there is no `postgres` user to run PostgreSQL as: run `{SETUP}`"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return 'psycopg is not installed: pip install "psycopg[binary]"'
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """`with PostgresServer() as pg:` ... `pg.url()`; superuser `gpucost`, trust auth."""

    user = "gpucost"

    def __init__(self) -> None:
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(postgres_missing_reason())
        self.bin = bin_dir
        self.as_user = _run_as()
        self.data: Path | None = None
        self.port: int | None = None
        self.started_in: float | None = None

    def _cmd(self, *argv: str | Path) -> list[str]:
        prefix = ["runuser", "-u", self.as_user, "--"] if self.as_user else []
        return [*prefix, *(str(a) for a in argv)]

    def _run(self, *argv: str | Path, timeout: float = 60) -> None:
        done = subprocess.run(self._cmd(*argv), capture_output=True, text=True, timeout=timeout, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(f"{Path(str(argv[0])).name} failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> PostgresServer:
        began = time.monotonic()
        self.data = Path(tempfile.mkdtemp(prefix="gpucost-pg-"))
        if self.as_user:
            shutil.chown(self.data, self.as_user, self.as_user)
        pgdata = self.data / "data"
        self._run(
            self.bin / "initdb", "-D", pgdata, "-U", self.user, "--auth=trust", "--no-sync",
            "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        for attempt in range(3):  # a free port can be taken between probing and binding
            self.port = _free_port()
            opts = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.data}"
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
            )
            try:
                self._run(
                    self.bin / "pg_ctl", "-D", pgdata, "-l", self.data / "server.log", "-w", "-t", "30",
                    "-o", opts, "start",
                )  # fmt: skip
                break
            except RuntimeError:
                if attempt == 2:
                    log = self.data / "server.log"
                    raise RuntimeError(
                        log.read_text()[-2000:] if log.is_file() else "pg_ctl start failed"
                    ) from None
        self.started_in = time.monotonic() - began
        return self

    def url(self, schema: str | None = None, database: str = "postgres") -> str:
        base = f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"
        return base if schema is None else f"{base}?options=-csearch_path%3D{schema}"

    def stop(self) -> None:
        if self.data is None:
            return
        pgdata = self.data / "data"
        if (pgdata / "postmaster.pid").exists():
            subprocess.run(
                self._cmd(self.bin / "pg_ctl", "-D", pgdata, "-m", "immediate", "-w", "stop"),
                capture_output=True,
                timeout=30,
                cwd="/",
            )
        shutil.rmtree(self.data, ignore_errors=True)
        self.data = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
