"""The CLI's contract: every command listed, user mistakes are one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main

COMMANDS = ("run", "analyze", "skus", "report", "gpus", "digest", "check", "simulate", "load")


def test_each_command_module_is_a_listed_command_that_registers_itself() -> None:
    """`gpucost` imports a command's module when the command is named (`monitor.cli.COMMANDS`): a
    module under monitor/cli missing from the list would be a command no one can run."""
    import importlib

    from monitor.cli import COMMANDS as LISTED
    from monitor.cli import cli

    modules = {p.stem for p in Path("monitor/cli").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(LISTED)
    for name in LISTED:
        importlib.import_module(f"monitor.cli.{name}")
    assert set(cli.commands) == set(LISTED)


def test_a_command_imports_its_own_module_not_every_other_commands() -> None:
    """`gpucost simulate` no longer loads the detectors, DuckDB and the Slack client the other
    commands need (1.2 s of imports; `gpucost simulate --help` took 0.82 s, now 0.20 s)."""
    import subprocess
    import sys

    probe = (
        "import sys; from monitor.cli import main; code = main(['simulate', '--help']);"
        " print(code, sorted(m for m in ('monitor.analysis', 'duckdb', 'slack_sdk', 'sqlglot') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"


def test_the_command_list_imports_no_command() -> None:
    """`gpucost --help` lists every command's summary without importing the commands' modules
    (0.86 s with all of them imported)."""
    import subprocess
    import sys

    probe = (
        "import sys; from monitor.cli import main; code = main(['--help']);"
        " print(code, sorted(m for m in sys.modules if m.startswith('monitor.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_command_list_shows_each_commands_own_summary_as_click_would(width: int) -> None:
    """`SUMMARIES` is each command's own help, listed as click lists the imported commands."""
    import importlib

    import click

    from monitor.cli import COMMANDS as LISTED
    from monitor.cli import SUMMARIES, cli

    assert set(SUMMARIES) == set(LISTED)
    for name in LISTED:
        importlib.import_module(f"monitor.cli.{name}")
        assert SUMMARIES[name] == " ".join(cli.commands[name].help.split("\n\n")[0].split()), name
    ctx = click.Context(cli)
    lazy, eager = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
    cli.format_commands(ctx, lazy)
    click.Group.format_commands(cli, ctx, eager)
    assert lazy.getvalue() == eager.getvalue()


def test_help_lists_every_command_with_a_purpose(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in COMMANDS:
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(cmd + " "))
        assert len(line.split(None, 1)[1]) > 10, line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["report", "--start", "yesterday"], "Invalid value for '--start': bad timestamp \"yesterday\""),
        (["check", "--config", "/nonexistent/gpucost.toml"], "config file not found"),
        (["load", "--billing", "/nonexistent.ndjson", "--db", "x.duckdb"], "does not exist"),
        (["report", "--format", "xml"], "Invalid value for '--format'"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_user_mistakes_are_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_check_accepts_the_demo_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", "deploy/config/demo.toml"]) == 0
    assert "config OK" in capsys.readouterr().out


def test_check_tries_the_http_port_as_run_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` stops at start on a port another program holds; `check` said nothing of it. A port
    a running gpucost holds is fine (`check` is run beside the daemon), asked directly even where
    `http_proxy` is set for egress (through it, the answer never came); a free one is."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from monitor.cli.check import Check, check_http
    from monitor.config import load_config
    from monitor.http import HealthServer
    from monitor.metrics import Metrics

    cfg = load_config(Path("deploy/config/demo.toml"))

    def on(port: int) -> Check:  # the check of `cfg` with its port set
        return check_http(cfg.model_copy(update={"http": cfg.http.model_copy(update={"port": port})}))

    other = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)  # answers GET with 501
    gpucost = HealthServer("127.0.0.1", 0, Metrics.create().registry, lambda: (True, {}))
    gpucost.start()
    try:
        held = on(other.server_address[1])
        assert held.ok is False
        assert f"cannot listen on 127.0.0.1:{other.server_address[1]}" in held.detail
        assert f"stop the other process on port {other.server_address[1]}" in held.detail
        assert on(gpucost.port).ok is True and "a running gpucost answers" in on(gpucost.port).detail
    finally:
        other.server_close()
        gpucost.stop()
    assert on(other.server_address[1]).ok is True  # free again
    assert (
        check_http(cfg.model_copy(update={"http": cfg.http.model_copy(update={"enabled": False})})).ok is None
    )


def test_check_fails_when_a_slack_channel_has_no_token(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment whose token Secret is missing would write every alert to files nobody reads."""
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    config = tmp_path / "gpucost.toml"
    demo = (Path(__file__).resolve().parents[1] / "deploy/config/demo.toml").read_text(encoding="utf-8")
    config.write_text(demo + '\n[slack]\nchannel = "#gpu-costs"\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["check", "--offline", "--config", str(config)])
    code = exc.value.code
    slack = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("slack"))
    assert code == 1
    assert slack.split(None, 2)[1] == "FAIL"
    assert "slack.channel is #gpu-costs but SLACK_BOT_TOKEN is not set" in slack
    assert "set SLACK_BOT_TOKEN" in slack
