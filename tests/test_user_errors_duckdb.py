"""A DuckDB database path that is not one gpucost can use is one line and exit 2, never $0.

DuckDB opens an export file (Parquet, NDJSON, CSV) given as its database as an empty in-memory
database: a load into it vanished ("loaded 1 rows ... into export.ndjson", exit 0) and a report on
it read $0.00. A billing database another user loaded (mode 644) could not be read at all, since
every reader opened it for writing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from monitor.cli import main
from tests.export_rows import export_row, write_csv, write_ndjson, write_parquet

Writer = Callable[[Path], Path]

EXPORTS: dict[str, tuple[Writer, str]] = {
    "parquet": (lambda d: write_parquet(d / "export.parquet", [export_row()]), "a Parquet"),
    "ndjson": (lambda d: write_ndjson(d / "export.ndjson", [export_row()]), "an NDJSON"),
    "ndjson.gz": (lambda d: write_ndjson(d / "export.ndjson.gz", [export_row()]), "a gzipped NDJSON"),
    "csv": (lambda d: write_csv(d / "export.csv", [export_row()]), "a CSV"),
}


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _config(tmp: Path, db: Path) -> Path:
    config = tmp / "gpucost.toml"
    config.write_text(
        f'[billing]\nsource = "duckdb"\ndb = "{db}"\n\n[http]\nenabled = false\n', encoding="utf-8"
    )
    return config


@pytest.mark.parametrize("fmt", list(EXPORTS))
def test_load_into_an_export_file_is_refused_and_leaves_it_as_it_was(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write, kind = EXPORTS[fmt]
    source = write_parquet(tmp_path / "rows.parquet", [export_row()])
    (tmp_path / "db").mkdir()
    export = write(tmp_path / "db")
    before = export.read_bytes()
    assert main(["load", "--billing", str(source), "--db", str(export)]) == 2
    assert _one_error_line(capsys) == (
        f"gpucost: error: {export} is {kind} file, not a DuckDB database: "
        f"load it with `gpucost load --billing {export} --db new.duckdb`"
    )
    assert export.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == [export.name]


def test_a_file_that_is_no_database_is_named_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_ndjson(tmp_path / "rows.ndjson", [export_row()])
    notes = tmp_path / "notes.duckdb"
    notes.write_text("not a database\n", encoding="utf-8")
    assert main(["load", "--billing", str(source), "--db", str(notes)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(
        f"gpucost: error: {notes}: cannot open the DuckDB database: the file is not a DuckDB"
    )
    assert line.endswith("pass one made by `gpucost load`, or a new path")


def test_a_new_database_path_is_created_with_duckdbs_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The header the opener recognises a database by (bytes 8..12), as `gpucost load` writes it."""
    source = write_ndjson(tmp_path / "rows.ndjson", [export_row()])
    db = tmp_path / "sub" / "new.duckdb"
    assert main(["load", "--billing", str(source), "--db", str(db)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"loaded 1 rows from 1 file into {db}"
    assert db.read_bytes()[8:12] == b"DUCK"
    assert main(["load", "--billing", str(source), "--db", str(db), "--again"]) == 0


def test_billing_db_naming_a_directory_says_to_name_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it said "does not exist; load export files into it with ... --db DIR", a load that fails
    config = _config(tmp_path, tmp_path)
    assert main(["report", "--config", str(config)]) == 2
    assert _one_error_line(capsys) == (
        f'gpucost: error: billing.db: {tmp_path} is a directory; name the DuckDB file, e.g. billing.db = "'
        f'{tmp_path / "billing.duckdb"}"'
    )
    with pytest.raises(SystemExit):  # and check says the same (it said "file not found")
        main(["check", "--config", str(config), "--offline"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("billing")]
    assert line.split(None, 2)[1:] == [
        "FAIL",
        f'billing.db: {tmp_path} is a directory; name the DuckDB file, e.g. billing.db = "'
        f'{tmp_path / "billing.duckdb"}"',
    ]


def test_billing_db_naming_an_export_file_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report` printed an empty table and `run --once` polled nothing, both exit 0. (Under a
    directory named "blocks": `check` read "lock" in the message's path as a running daemon.)"""
    (tmp_path / "blocks").mkdir()
    export = write_parquet(tmp_path / "blocks" / "export.parquet", [export_row()])
    config = _config(tmp_path, export)
    assert main(["report", "--config", str(config)]) == 2
    assert _one_error_line(capsys) == (
        f"gpucost: error: billing.db: {export} is a Parquet file, not a DuckDB database: load it with "
        f"`gpucost load --billing {export} --db new.duckdb`, then set billing.db to new.duckdb"
    )
    with pytest.raises(SystemExit) as exc:
        main(["check", "--config", str(config), "--offline"])
    assert exc.value.code == 1
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("billing")]
    assert line.split(None, 2)[1:] == [
        "FAIL",
        f"{export} is a Parquet file, not a DuckDB database: load it with "
        f"`gpucost load --billing {export} --db new.duckdb`",
    ]


#: The day of `export_row()`'s usage.
_DAY = ("--start", "2026-11-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z")


@contextmanager
def _as_another_user() -> Iterator[None]:
    """As root: effective uid and gid `nobody`, for the block (restored after); otherwise as is.
    The block must not import a module on first use: the Python install may be private to root
    (here under /root), so each test runs its commands once as itself first."""
    if os.geteuid() != 0:
        yield
        return
    try:
        os.setegid(65534)
        os.seteuid(65534)
    except OSError as e:  # no CAP_SETUID / CAP_SETGID
        os.setegid(0)
        pytest.skip(f"cannot drop privileges to test a file only another user may write: {e}")
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user may enter (pytest's own tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpucost-ro-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_billing_db_only_its_owner_may_write_is_read_and_not_loaded_into(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Readers open it read-only; `load`, which must write, says so (it said "pass a DuckDB file
    that no other process holds open" to every command)."""
    source = write_parquet(shared_dir / "rows.parquet", [export_row()])
    db = shared_dir / "billing.duckdb"
    assert main(["load", "--billing", str(source), "--db", str(db)]) == 0
    db.chmod(0o444 if os.geteuid() != 0 else 0o644)  # as root: owned by root, read by nobody
    config = _config(shared_dir, db)
    config.chmod(0o644)
    assert main(["report", "--config", str(config), "--format", "json", *_DAY]) == 0  # imports, as root
    capsys.readouterr()
    with _as_another_user():
        report = main(["report", "--config", str(config), "--format", "json", *_DAY])
        out, err = capsys.readouterr()
        load = main(["load", "--billing", str(source), "--db", str(db), "--again"])
    assert report == 0, err
    assert [t["gross"] for t in json.loads(out)["totals"]] == [88.0]  # export_row()'s cost
    assert load == 2
    assert _one_error_line(capsys) == (
        f"gpucost: error: cannot write {db} (permission denied): run as its owner or load into a new path"
    )


def test_a_billing_db_in_a_directory_the_user_may_not_write_is_refused_before_loading(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DuckDB writes its log (`billing.duckdb.wal`) beside the file: the load read every file and
    then failed its commit with a traceback."""
    import duckdb

    from monitor.errors import InputError
    from monitor.sources.loader import load_billing

    source = write_parquet(shared_dir / "rows.parquet", [export_row()])
    db = shared_dir / "db" / "billing.duckdb"
    assert main(["load", "--billing", str(source), "--db", str(db)]) == 0
    db.chmod(0o666)
    db.parent.chmod(0o555)
    capsys.readouterr()
    try:
        with _as_another_user():
            load = main(["load", "--billing", str(source), "--db", str(db), "--again"])
            conn = duckdb.connect(str(db))  # past the opener: the commit fails, and says why
            with pytest.raises(InputError, match=r"cannot write the loaded rows .*nothing was loaded"):
                load_billing([source], conn, again=True)
            conn.close()
    finally:
        db.parent.chmod(0o755)
    assert load == 2
    assert _one_error_line(capsys) == (
        f"gpucost: error: cannot write {db} (permission denied in {db.parent}, where DuckDB writes"
        " billing.duckdb.wal): run as a user who may write that directory, or load into a new path"
    )


def test_check_takes_a_database_another_process_holds_for_a_running_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    source = write_parquet(tmp_path / "rows.parquet", [export_row()])
    db = tmp_path / "billing.duckdb"
    assert main(["load", "--billing", str(source), "--db", str(db)]) == 0
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(db)!r}); print(1, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        with pytest.raises(SystemExit):
            main(["check", "--config", str(_config(tmp_path, db)), "--offline"])
    finally:
        holder.communicate("")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("billing")]
    assert line.split(None, 2)[1:] == ["ok", f"DuckDB {db}: present, held open by a running daemon"]
