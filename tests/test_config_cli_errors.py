"""A bad `billing.job_timeout_seconds` stops a command with the usual one-line config error."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main
from monitor.config import load_config, parse_config
from monitor.errors import ConfigError


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


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        # `check` said "config OK" of each, and `run` refused it (a helper's audit)
        ('[alerts]\ngroup_by = ["kind", "projct"]\n', 'alerts.group_by.1: unknown key "projct"'),
        ('[[alerts.silences]]\nmatch = {knd = "idle_gpu"}\nuntil = "2027-01-01"\n', 'unknown key "knd"'),
        ('[[slack.routes]]\nmatch = {}\nchannel = "#x"\n', "slack.routes.0.match: empty matcher"),
        ('[budgets]\nsource = "api"\n', "budgets.billing_account: required"),
        ('[[attribution.rules]]\ncategory = "licensing.os"\n', "attribution.rules.0: give at least one of"),
        # and `run` crashed on this one, every cycle
        (
            '[[budgets.items]]\nname = "fleet"\namount_usd = 1.0\n[[budgets.items]]\nname = "fleet"\n'
            "amount_usd = 2.0\n",
            'budgets.items: "fleet" names two budgets',
        ),
        (
            '[billing]\nlabels = ["team", "team name"]\n',
            "billing.labels: label keys are non-empty, without spaces",
        ),
    ],
)
def test_check_refuses_what_run_refuses(
    toml: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "gpucost.toml"
    path.write_text(toml)
    rc = main(["check", "--config", str(path), "--offline"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.strip().startswith(f"gpucost: error: {path}: ") and says in err, err


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("# café\n".encode("latin-1"), "not UTF-8 text (byte 5); TOML is UTF-8: save the file as UTF-8"),
        ('[digest]\ntime = "09:00"\n'.encode("utf-16"), "not UTF-8 text (byte 0)"),
    ],
)
def test_a_config_not_in_utf8_is_one_line(
    data: bytes, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpucost.toml"
    path.write_bytes(data)
    rc = main(["check", "--config", str(path), "--offline"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and f"gpucost: error: {path}: {says}" in err, err


def test_toml_dates_times_and_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    # unquoted TOML values were "Input should be a valid string"; a BOM (Windows editors) was
    # "not valid TOML (Invalid statement (at line 1, column 1))"
    text = '[digest]\ntime = 09:30:00\n[[alerts.silences]]\nmatch = {kind = "idle_gpu"}\nuntil = 2027-01-01T00:00:00Z\n'
    path = tmp_path / "gpucost.toml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    cfg = load_config(path)
    assert cfg.digest.time == "09:30"
    assert cfg.alerts.silences[0].until == "2027-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"state": {"url": "sqlite:///"}}, 'state.url: "sqlite:///" names no file'),
        ({"slack": {"webhook_url_env": "https://hooks.slack.com/services/T/B/x"}}, "not the URL itself"),
        ({"jobs": {"budgets": {"llm": True}}}, '"llm" = true: a job budget is an amount in USD'),
    ],
)
def test_values_that_ran_wrongly_are_refused(given: dict, says: str) -> None:
    # an in-memory state repeats every alert after a restart; a webhook URL where its variable's
    # name goes was "NOT SET"; a job budget `= true` was $1
    with pytest.raises(ConfigError) as e:
        parse_config(given, "gpucost.toml")
    assert says in str(e.value) and "hooks.slack.com" not in str(e.value)
