"""A bad `billing.job_timeout_seconds` stops a command with the usual one-line config error."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("10", "greater than or equal to 30"),
        ("86400", "less than or equal to 21600"),
        ('"15m"', "valid number"),
    ],
)
def test_bad_job_timeout_is_one_line_naming_the_key(
    value: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # default paths are relative: nothing may appear
    path = tmp_path / "gpucost.toml"
    path.write_text(f'[billing]\nsource = "bigquery"\ntable = "p.d.t"\njob_timeout_seconds = {value}\n')
    rc = main(["check", "--config", str(path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    line = err.strip()
    assert "\n" not in line, err
    assert line.startswith(f"gpucost: error: {path}: billing.job_timeout_seconds: "), line
    assert says in line
    assert list(tmp_path.iterdir()) == [path]
