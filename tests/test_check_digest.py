"""`gpucost check` and `gpucost digest` against a real DuckDB export copy and the fake Slack."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from pydantic import SecretStr

from alerts.delivery import deliver_outbox
from alerts.notifier import Message
from alerts.outbox import enqueue
from alerts.pipeline import Deps as AlertDeps
from alerts.slack import SlackNotifier
from monitor.cli import main
from monitor.sources.duckdb_conn import open_billing_db
from monitor.state.store import SQLiteStore
from tests.export_rows import export_row, write_ndjson
from tests.fakes.slack_server import FakeSlack
from tests.test_queries import fleet_rows, load_rows

TOKEN = "xoxb-check-digest-secret"
CENT = Decimal("0.01")


def _config(tmp: Path, *, slack: FakeSlack | None = None, db: Path | None = None) -> Path:
    (tmp / "util").mkdir(exist_ok=True)
    (tmp / "util" / "none.json").write_text("[]")  # no samples (a directory without files is an error)
    text = f"""
[billing]
source = "duckdb"
db = "{db or tmp / "billing.duckdb"}"
lookback_days = 10
provisional_days = 3

[utilization]
source = "files"
files = ["{tmp / "util"}"]

[state]
url = "sqlite:///{tmp / "state.sqlite"}"

[digest]
out_dir = "{tmp / "out"}"

[alerts]
console_dir = "{tmp / "console"}"
"""
    if slack is not None:
        text += f'\n[slack]\nchannel = "C0ALERTS"\napi_base_url = "{slack.base_url}"\n'
    path = tmp / "gpucost.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def export_db(tmp_path: Path) -> Path:
    """Two days (2026-11-02 and -03) of seeded rows: many SKUs, credit types, 6-9 decimal costs."""
    db = tmp_path / "billing.duckdb"
    conn = open_billing_db(db)
    load_rows(conn, fleet_rows(11, 600))
    conn.close()
    return db


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _digest_categories(markdown: str) -> dict[str, Decimal]:
    """The "Yesterday by category" column of the Markdown digest, as printed (cents)."""
    section = markdown.split("## Yesterday by category", 1)[1].split("\n## ", 1)[0]
    out = {}
    for name, amount in re.findall(r"^\| (\*\*Total\*\*|[a-z_]+) \| \**(-?\$[\d,]+\.\d\d)\**", section, re.M):
        out[name.strip("*")] = Decimal(amount.replace("$", "").replace(",", ""))
    return out


def _report_categories(report: dict) -> dict[str, Decimal]:
    micros: dict[str, int] = defaultdict(int)
    for line in report["lines"]:
        micros[line["key"].split(".", 1)[0]] += line["net_micros"]
    out = {k: (Decimal(v) / 10**6).quantize(CENT, ROUND_HALF_EVEN) for k, v in micros.items()}
    out["Total"] = (Decimal(sum(micros.values())) / 10**6).quantize(CENT, ROUND_HALF_EVEN)
    return out


@pytest.mark.parametrize("day", ["2026-11-02", "2026-11-03"])
def test_digest_figures_match_report_for_the_day(tmp_path, export_db, capsys, day) -> None:
    config = _config(tmp_path, db=export_db)
    code, out, err = _cli(capsys, "digest", "--config", str(config), "--date", day)
    assert code == 0, err
    md_path, png_path = (Path(p) for p in out.split())
    assert md_path.name == f"digest-{day}.md" and png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    digest = _digest_categories(md_path.read_text(encoding="utf-8"))

    end = f"{day[:-2]}{int(day[-2:]) + 1:02d}"
    code, out, err = _cli(
        capsys, "report", "--config", str(config), "--start", day, "--end", end, "--format", "json"
    )
    assert code == 0, err
    expected = _report_categories(json.loads(out))
    assert len(expected) >= 3 and expected["Total"] > 0
    # the digest also lists, at $0.00, a category spent on only the day before
    shown = {k: v for k, v in digest.items() if v or k in expected}
    assert shown.keys() == expected.keys() and shown["Total"] == expected["Total"]
    # its categories add up to its total as shown, each within a cent of the report's line, which
    # is rounded on its own (README: "Its tables add up as shown")
    assert sum(v for k, v in shown.items() if k != "Total") == shown["Total"]
    assert all(abs(shown[k] - expected[k]) <= Decimal("0.01") for k in shown)
    # run before any daemon cycle, it read billing only: findings were not looked for (seed 11's
    # said "No findings." over $14,004.30 of idle GPUs), nor was utilization read
    text = md_path.read_text(encoding="utf-8")
    assert "No findings." not in text and "Not looked for: no detection has run" in text


def test_a_digest_of_a_day_to_come_is_refused(tmp_path, export_db, capsys) -> None:
    # it wrote digest-2027-01-01.md, exit 0 (a helper's audit)
    config = _config(tmp_path, db=export_db)
    code, _, err = _cli(capsys, "digest", "--config", str(config), "--date", "2027-01-01")
    assert code == 2 and "Traceback" not in err, err
    assert re.search(
        r"'--date': 2027-01-01 is after the day gpucost's data reaches \(2026-11-\d\d, UTC\)", err
    )
    assert not (tmp_path / "out" / "digest-2027-01-01.md").exists()
    code, _, err = _cli(capsys, "digest", "--config", str(config), "--date", "0001-01-01")  # OverflowError
    assert code == 2 and "'--date': 0001-01-01 is before 2000" in err, err
    assert not (tmp_path / "state.sqlite").exists()  # refused before the state store is made


def test_digest_send_posts_once_with_chart_and_fails_in_one_line(tmp_path, export_db, capsys, monkeypatch):
    """`digest --send` goes through the outbox: posted once with its chart; a day already sent is
    not posted again; a refused post fails in one line, and once the token is fixed the same
    command re-queues that day's digest and posts it once."""
    with FakeSlack(token=TOKEN) as slack:
        config = _config(tmp_path, slack=slack, db=export_db)
        monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
        code, out, err = _cli(capsys, "digest", "--config", str(config), "--date", "2026-11-03", "--send")
        assert code == 0, err
        assert out.splitlines()[-1] == "sent to C0ALERTS"
        (msg,) = slack.messages
        assert msg["text"].startswith("GPU cost digest for 2026-11-03")
        spend, jobs = slack.files  # the spend chart, then the per-job chart (the export has job labels)
        assert [spend["title"], jobs["title"]] == ["Daily spend to 2026-11-03", "Daily spend per job to 2026-11-03"]
        for chart in (spend, jobs):
            assert chart["thread_ts"] == msg["ts"] and chart["data"][:4] == b"\x89PNG"
        code, out, err = _cli(capsys, "digest", "--config", str(config), "--date", "2026-11-03", "--send")
        assert code == 0 and len(slack.messages) == 1 and len(slack.files) == 2  # sent: never again

        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked-token")
        code, out, err = _cli(capsys, "digest", "--config", str(config), "--date", "2026-11-02", "--send")
        assert code == 1
        assert (
            err == "gpucost: failed: digest written but not sent to Slack: chat.postMessage: invalid_auth\n"
        )
        assert "xoxb-" not in out + err
        assert "SLACK_BOT_TOKEN" in out  # the operator's console alert says what to fix

        monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
        code, out, err = _cli(capsys, "digest", "--config", str(config), "--date", "2026-11-02", "--send")
        assert code == 0, err
        days = [m["text"][:30] for m in slack.messages]
        assert days == ["GPU cost digest for 2026-11-03", "GPU cost digest for 2026-11-02"]
        assert len(slack.files) == 4


def test_digest_send_without_slack_is_a_config_error(tmp_path, export_db, capsys, monkeypatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    code, _, err = _cli(capsys, "digest", "--config", str(_config(tmp_path, db=export_db)), "--send")
    assert code == 2
    assert (
        err == "gpucost: error: --send needs SLACK_BOT_TOKEN and slack.channel (or slack.webhook_url_env)\n"
    )


def _check(capsys, config: Path, *extra: str) -> tuple[int, dict[str, str], str]:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--config", str(config), *extra])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    head, *rest = out.splitlines()
    assert head == f"{config}: config OK"
    lines = {line.split()[0]: line for line in rest}
    return int(exc.value.code or 0), lines, out + err


def test_check_healthy(tmp_path, export_db, capsys, monkeypatch) -> None:
    with FakeSlack(token=TOKEN) as slack:
        monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
        code, lines, text = _check(capsys, _config(tmp_path, slack=slack, db=export_db))
        assert [r.method for r in slack.requests] == ["auth.test"]
    assert code == 0, text
    names = ["billing", "utilization", "prices", "state", "aggregates", "outbox", "slack", "outputs", "http"]
    assert list(lines) == names
    assert re.match(
        r"billing +ok +DuckDB .*billing\.duckdb: 6\d\d export rows, last exported 2026-11-0", lines["billing"]
    )
    assert re.match(r"prices +ok +bundled snapshot as of \d{4}-\d\d-\d\d", lines["prices"])
    assert re.match(r"state +ok .*not created yet", lines["state"])  # the check did not create it
    assert not (tmp_path / "state.sqlite").exists()
    assert re.match(r"aggregates +ok .*aggregates\.duckdb: not created yet", lines["aggregates"])
    assert not (tmp_path / "aggregates.duckdb").exists()
    assert lines["slack"].split(None, 2)[1:] == [
        "ok",
        "auth.test ok (team T000); channels C0ALERTS = C0ALERTS",
    ]
    assert TOKEN not in text


def test_check_surfaces_a_permanent_slack_error(tmp_path, export_db, capsys, monkeypatch) -> None:
    """A revoked token: the outbox row failed for good, and both `outbox` and `slack` say why."""
    with FakeSlack(token=TOKEN) as slack:
        config = _config(tmp_path, slack=slack, db=export_db)
        store = SQLiteStore(tmp_path / "state.sqlite")
        now = datetime(2026, 11, 3, 12, tzinfo=UTC)
        notifier = SlackNotifier(SecretStr("xoxb-revoked"), slack.base_url)
        deps = AlertDeps(store, notifier)
        deliver_outbox(deps, now)  # creates the schema
        with store.transaction() as conn:
            enqueue(
                conn,
                key="k1",
                group_key="g",
                receiver="C0ALERTS",
                sequence=1,
                reason="new_group",
                root_key=None,
                message=Message("k1", "C0ALERTS", "idle GPUs"),
                now=now,
            )
        assert deliver_outbox(deps, now).failed == 1
        store.close()

        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked")
        code, lines, text = _check(capsys, config)
        assert code == 1
        assert lines["outbox"].split(None, 2)[1:] == [
            "FAIL",
            "pending 0, failed 1, sent 0; last error: chat.postMessage: invalid_auth",
        ]
        assert lines["slack"].split(None, 2)[1:] == ["FAIL", "auth.test: invalid_auth"]
        assert "xoxb-revoked" not in text

        n = len(slack.requests)
        code, lines, text = _check(capsys, config, "--offline")
        assert len(slack.requests) == n, "--offline makes no request"
        assert code == 1 and lines["slack"].split()[1] == "skip" and lines["outbox"].split()[1] == "FAIL"


def test_check_missing_billing_copy_and_bad_config(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    code, lines, _ = _check(capsys, _config(tmp_path, db=tmp_path / "nope.duckdb"), "--offline")
    assert code == 1
    assert re.match(
        r"billing +FAIL +DuckDB .*nope\.duckdb: file not found; load exports with `gpucost load`",
        lines["billing"],
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('[slack]\nchanel = "x"\n', encoding="utf-8")
    code = main(["check", "--config", str(bad)])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith(f"gpucost: error: {bad}: slack.chanel: unknown key")


def test_check_counts_the_files_gpucost_load_put_in(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    db = tmp_path / "billing.duckdb"
    for i in range(2):
        path = write_ndjson(tmp_path / f"export-{i}.ndjson", [export_row(cost=1.0 + i)])
        assert main(["load", "--billing", str(path), "--db", str(db)]) == 0
    capsys.readouterr()
    _, lines, _ = _check(capsys, _config(tmp_path, db=db), "--offline")
    assert re.match(
        r"billing +ok +DuckDB .*billing\.duckdb: 2 export rows, from 2 files \(the last loaded at"
        r" \d{4}-\d\d-\d\dT[\d:.]+Z\), last exported 2026-11-02T[\d:.]+Z$",  # ISO 8601, as every time it prints
        lines["billing"],
    ), lines["billing"]


def test_check_fails_an_empty_export_table_with_its_fix(tmp_path, capsys, monkeypatch) -> None:
    """A database with the export's table and no rows (created, never loaded): it said "0 export
    rows, last exported None"."""
    from monitor.sources.duckdb_conn import open_billing_db

    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    db = tmp_path / "billing.duckdb"
    open_billing_db(db).close()
    code, lines, text = _check(capsys, _config(tmp_path, db=db), "--offline")
    assert code != 0, text
    assert lines["billing"].split(None, 2)[1:] == [
        "FAIL",
        f"DuckDB {db}: no export rows yet; load exports with `gpucost load`",
    ]


DCGM_V1 = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"


def test_check_names_a_file_metric_with_an_unknown_unit(tmp_path, export_db, capsys, monkeypatch) -> None:
    """A unit the table does not know is never guessed: the metric is skipped and `check` names it."""
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    config = _config(tmp_path, db=export_db)
    (tmp_path / "util" / "none.json").unlink()
    series = {
        "metric": {"type": DCGM_V1, "labels": {"gpu_number": "0", "model": "NVIDIA A100-SXM4-40GB"}},
        "resource": {"type": "gce_instance", "labels": {"project_id": "p", "instance_id": "1", "zone": "z"}},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "points": [{"interval": {"endTime": "2026-11-02T10:00:00Z"}, "value": {"doubleValue": 0.72}}],
    }
    util = tmp_path / "util" / "2026-11-02.json"
    util.write_text(json.dumps({"timeSeries": [series], "unit": "1"}), encoding="utf-8")
    code, lines, text = _check(capsys, config, "--offline")
    assert code == 0, text
    assert lines["utilization"].split(None, 2)[1:] == ["ok", "files: 1 file under 1 path"]

    util.write_text(json.dumps({"timeSeries": [series | {"unit": "ms"}]}), encoding="utf-8")
    code, lines, text = _check(capsys, config, "--offline")
    assert code == 1
    assert lines["utilization"].split(None, 2)[1:] == [
        "FAIL",
        f"files: 1 file under 1 path; skipped, unit unknown (never guessed): {DCGM_V1} (unit 'ms')",
    ]


def test_check_reads_units_from_cloud_monitoring(tmp_path, export_db, capsys, monkeypatch) -> None:
    """Descriptors through the real client: a known unit passes, an unknown one fails by name."""
    from tests.fakes.monitoring_server import FakeMonitoringServer

    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with FakeMonitoringServer() as server:
        text = _config(tmp_path, db=export_db).read_text(encoding="utf-8")
        files = f'[utilization]\nsource = "files"\nfiles = ["{tmp_path / "util"}"]\n'
        live = (
            '[utilization]\nsource = "cloud_monitoring"\nprojects = ["p1"]\n'
            'presets = ["ops_agent_nvml", "ops_agent_dcgm"]\n'
            f'api_endpoint = "{server.address}"\ninsecure = true\n\n[google]\ncredentials = "anonymous"\n'
        )
        assert files in text
        config = tmp_path / "live.toml"
        config.write_text(text.replace(files, live), encoding="utf-8")

        code, lines, out = _check(capsys, config)
        assert code == 0, out
        assert lines["utilization"].split(None, 2)[1:] == [
            "ok",
            "Cloud Monitoring p1 (ops_agent_nvml): 0 samples in the last 10 min",
        ]
        asked = {r.filter for r in server.descriptor_requests}
        assert f'metric.type = "{DCGM_V1}"' in asked and len(asked) == 6  # every metric of both presets

        server.units[DCGM_V1] = "ms"
        code, lines, out = _check(capsys, config)
        assert code == 1
        detail = lines["utilization"].split(None, 2)[2]
        assert detail.endswith(f"; skipped, unit unknown (never guessed): {DCGM_V1} (unit 'ms')")


def test_a_digest_without_billing_data_writes_nothing(tmp_path, capsys, monkeypatch) -> None:
    # it left out/aggregates.duckdb behind, opened before the billing check (a helper's README audit)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text("[http]\nenabled = false\n", encoding="utf-8")
    code, _, err = _cli(capsys, "digest", "--config", "c.toml")
    assert code == 2 and "billing.db: out/gpucost.duckdb does not exist" in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["c.toml"]
