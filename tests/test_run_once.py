"""`gpucost run --once` on an export whose rows all lie before the poll's scope."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from monitor.cli import main
from tests.export_rows import export_row, write_ndjson


def test_an_export_without_rows_in_scope_is_said_not_read_as_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pointed at a copy of an old export (koku's real files are from 2020 to 2024), the daemon read
    $0.00 everywhere without a word, and called the wall clock "simulated now". Each poll that finds
    no row in its scope now warns with the fix; only the demo's clock is called simulated."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    old = export_row(
        usage_start_time="2024-03-01 07:00:00 UTC",
        usage_end_time="2024-03-01 08:00:00 UTC",
        export_time="2024-03-01 12:00:00 UTC",
    )
    path = write_ndjson(tmp_path / "old.ndjson", [old])
    assert main(["load", "--billing", str(path), "--db", "billing.duckdb"]) == 0
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "none.json").write_text("[]")  # no samples (a directory without files is an error)
    config = tmp_path / "gpucost.toml"
    config.write_text(
        '[billing]\nsource = "duckdb"\ndb = "billing.duckdb"\n\n'
        '[utilization]\nsource = "files"\nfiles = ["util"]\n\n[http]\nenabled = false\n',
        encoding="utf-8",
    )
    capsys.readouterr()
    handlers = logging.getLogger().handlers[:]
    assert main(["run", "--config", str(config), "--once"]) == 0
    # as every one-shot command: the root logger as it was (it logged to a stderr since closed, and
    # the next test in the process failed on "I/O operation on closed file")
    assert logging.getLogger().handlers == handlers
    out, err = capsys.readouterr()
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    (warned,) = [r for r in logs if r["message"].startswith("no billing export rows in the poll's scope")]
    assert warned["severity"] == "WARNING" and "gpucost check" in warned["message"]
    assert " (now 20" in out and "simulated" not in out
    assert "UserWarning" not in err  # the empty digest chart drew no legend
    main(["check", "--config", str(config), "--offline"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("aggregates")]
    assert "0 hourly aggregates of usage from 20" in line  # how far back the month to date can reach
