"""User mistakes around files, ports, credentials and dates: one line naming the setting, the path
and the fix (exit 2), never a traceback; `gpucost check` fails on the same mistakes."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.sources.duckdb_conn import open_billing_db
from tests.test_queries import fleet_rows, load_rows


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # `check` exits 1 when a check fails
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str, *fragments: str) -> None:
    line = err.strip()
    assert "Traceback" not in err and "\n" not in line, err
    assert line.startswith("gpucost: error: "), line
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"


def _check_line(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if ln.split()[:1] == [name])


@pytest.fixture(scope="module")
def billing_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("billing") / "billing.duckdb"
    conn = open_billing_db(db)
    load_rows(conn, fleet_rows(3, 60))
    conn.close()
    return db


def _config(tmp: Path, db: Path, **sections: str) -> Path:
    """A DuckDB + files config under `tmp`; `sections` replace a section's body by name."""
    (tmp / "util").mkdir(exist_ok=True)
    body = {
        "billing": f'db = "{db}"',
        "utilization": f'files = ["{tmp / "util"}"]',
        "state": f'url = "sqlite:///{tmp / "state" / "state.sqlite"}"',
        "alerts": f'console_dir = "{tmp / "console"}"',
        "digest": f'out_dir = "{tmp / "out"}"',
        "http": "enabled = false",
    } | sections
    path = tmp / "gpucost.toml"
    path.write_text("".join(f"[{k}]\n{v}\n" for k, v in body.items()), encoding="utf-8")
    return path


@pytest.fixture
def clean_process() -> Iterator[None]:
    """`gpucost run` (the daemon) installs signal handlers and configures the root logger: put
    both back for the rest of the suite."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    yield
    for s, h in handlers.items():
        signal.signal(s, h)
    root.handlers[:] = saved
    root.setLevel(level)


# 1. The HTTP port


@pytest.mark.parametrize(
    ("host", "reason", "fix"),
    [
        ("127.0.0.1", "Address already in use", "stop the other process on port"),
        ("192.0.2.1", "Cannot assign requested address", "set http.host to an address of this machine"),
    ],
    ids=["port-in-use", "host-not-local"],
)
def test_daemon_http_port_unusable_is_one_line(
    host, reason, fix, tmp_path, billing_db, capsys, clean_process
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, billing_db, http=f'enabled = true\nhost = "{host}"\nport = {port}')
        code, _, err = _run(capsys, "run", "--config", str(config))
    assert code == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # the daemon logs its start-up before
    _one_line(last, f"http.host / http.port: cannot listen on {host}:{port}: {reason}", fix)
    assert "http.enabled = false" in last


# 2. state.url


def _not_sqlite(tmp: Path) -> Path:
    path = tmp / "export.parquet"
    path.write_bytes(b"PAR1" + bytes(range(256)) * 8 + b"PAR1")
    return path


STATE_CASES = {
    "directory": (
        lambda tmp: tmp,
        "is a directory, not a SQLite file; name a file in it",
    ),
    "not-sqlite": (_not_sqlite, "is not a SQLite database (file is not a database); point state.url"),
    "under-a-file": (
        lambda tmp: _not_sqlite(tmp) / "state.sqlite",
        "export.parquet is a file, not a directory; point state.url at a path under a directory",
    ),
}


@pytest.mark.parametrize("command", [["run", "--once"], ["outbox"], ["digest"]])
@pytest.mark.parametrize("case", STATE_CASES)
def test_unusable_state_url_is_one_line(case, command, tmp_path, billing_db, capsys) -> None:
    where, fix = STATE_CASES[case]
    path = where(tmp_path)
    config = _config(tmp_path, billing_db, state=f'url = "sqlite:///{path}"')
    code, _, err = _run(capsys, command[0], "--config", str(config), *command[1:])
    assert code == 2, err
    # digest reads the aggregate store only once it exists (7a57f3d): state.url is named first
    _one_line(err, f"state.url: {path}", fix)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (unwritable even by root)")
@pytest.mark.parametrize(
    ("path", "fix"),
    [
        ("/proc/gpucost-test/state.sqlite", "cannot create the directory /proc/gpucost-test ("),
        ("/proc/gpucost-test.sqlite", "(unable to open database file); make /proc writable by the user"),
    ],
    ids=["directory-not-creatable", "directory-not-writable"],
)
def test_unwritable_state_directory_is_one_line(path, fix, tmp_path, billing_db, capsys) -> None:
    config = _config(tmp_path, billing_db, state=f'url = "sqlite:///{path}"')
    code, _, err = _run(capsys, "outbox", "--config", str(config))
    assert code == 2, err
    _one_line(err, f"state.url: {path}" if "create" in fix else f"state.url: cannot open {path}", fix)


@pytest.mark.parametrize("case", STATE_CASES)
def test_check_names_state_url_path_and_fix(case, tmp_path, billing_db, capsys) -> None:
    where, fix = STATE_CASES[case]
    path = where(tmp_path)
    config = _config(tmp_path, billing_db, state=f'url = "sqlite:///{path}"')
    code, out, _ = _run(capsys, "check", "--config", str(config), "--offline")
    assert code == 1
    line = _check_line(out, "state")
    assert line.split()[1] == "FAIL" and f"state.url: {path}" in line and fix in line, line


# 3. digest.out_dir and alerts.console_dir


def test_digest_out_dir_naming_a_file_is_one_line(tmp_path, billing_db, capsys) -> None:
    taken = tmp_path / "out.txt"
    taken.write_text("not a directory\n")
    config = _config(tmp_path, billing_db, digest=f'out_dir = "{taken}"')
    code, _, err = _run(capsys, "digest", "--config", str(config))
    assert code == 2
    _one_line(err, f"digest.out_dir: {taken} is a file, not a directory; point digest.out_dir at a directory")


def test_console_dir_naming_a_file_is_one_line(tmp_path, billing_db, capsys) -> None:
    """Before, every console alert stayed pending (retried for ever) while `run` exited 0."""
    taken = tmp_path / "alerts.txt"
    taken.write_text("not a directory\n")
    config = _config(tmp_path, billing_db, alerts=f'console_dir = "{taken}"')
    code, _, err = _run(capsys, "run", "--config", str(config), "--once")
    assert code == 2
    _one_line(err, f"alerts.console_dir: {taken} is a file, not a directory; point alerts.console_dir at")


@pytest.mark.parametrize("setting", ["alerts.console_dir", "digest.out_dir"])
def test_check_fails_an_output_dir_that_is_a_file(setting, tmp_path, billing_db, capsys) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x")
    section, key = setting.split(".")
    config = _config(tmp_path, billing_db, **{section: f'{key} = "{taken / "sub"}"'})
    code, out, _ = _run(capsys, "check", "--config", str(config), "--offline")
    assert code == 1
    line = _check_line(out, "outputs")
    assert line.split()[1] == "FAIL", line
    assert f"{setting}: {taken / 'sub'}: {taken} is a file, not a directory; point {setting} at" in line


# 4. GOOGLE_APPLICATION_CREDENTIALS

BIGQUERY = 'source = "bigquery"\ntable = "p.billing.gcp_billing_export_resource_v1_000000_000000_000000"'


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (lambda tmp: tmp, "a directory, not a key file"),
        (lambda tmp: tmp / "missing.json", "was not found"),
        (lambda tmp: tmp / "key.json", "is not a valid json file"),
        (lambda tmp: tmp / "sa.json", "missing fields"),
    ],
    ids=["directory", "missing", "not-json", "not-a-key"],
)
def test_bad_credentials_file_names_the_variable_and_googles_reason(
    key, reason, tmp_path, billing_db, capsys, monkeypatch
) -> None:
    (tmp_path / "key.json").write_text("not json\n")
    (tmp_path / "sa.json").write_text('{"type": "service_account"}\n')
    path = key(tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    config = _config(tmp_path, billing_db, billing=BIGQUERY)
    code, _, err = _run(capsys, "analyze", "--config", str(config))
    assert code == 2
    _one_line(err, f"GOOGLE_APPLICATION_CREDENTIALS={path}: ", reason, "point it at a service-account key")
    assert "found no Application Default Credentials" not in err


# 5. Dates past what a window can hold


@pytest.mark.parametrize("command", ["report", "jobs"])
@pytest.mark.parametrize("end", ["9999-12-31T00:00:00Z", "0001-01-01T00:00:00+01:00"])
def test_out_of_range_end_is_one_line(command, end, tmp_path, billing_db, capsys) -> None:
    config = _config(tmp_path, billing_db)
    code, _, err = _run(capsys, command, "--config", str(config), "--end", end)
    assert code == 2
    line = err.strip()
    assert "Traceback" not in err and "\n" not in line, err
    assert line.startswith(f"gpucost {command}: error: Invalid value for '--end': "), line
    assert f'"{end}"' in line and ("years 2000 to 2099" in line or "date value out of range" in line)


def test_an_aggregate_store_under_a_file_is_one_line(tmp_path, billing_db, capsys) -> None:
    blocker = tmp_path / "export.parquet"
    blocker.write_bytes(b"PAR1")
    state = f'url = "sqlite:///{tmp_path / "state.sqlite"}"\naggregates_path = "{blocker / "agg.duckdb"}"'
    config = _config(tmp_path, billing_db, state=state)
    code, _, err = _run(capsys, "run", "--config", str(config), "--once")
    assert code == 2, err
    agg = f"aggregate store {blocker / 'agg.duckdb'}: cannot create the directory"
    _one_line(err, agg, "(a file is in the way)", "beside state.url's file")
