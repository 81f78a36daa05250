"""Bad input through the command line (issue 13, item 1), one parametrized test per input family.

Every case runs `gpucost` in process the way tests/test_cli.py does and asserts the contract: exit
code 2, one line on stderr naming the file and the line (or the config key) and saying the fix, no
traceback, and nothing written: a DuckDB file `gpucost load` appends to keeps its rows, a failed
config leaves the working directory as it was. The few inputs that are accepted on purpose (a
correction's negative cost, the standard export, utilization with some unusable points) are pinned
too, with what the user is told.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from monitor.cli import main
from tests.conftest import SHARED_DATA
from tests.export_rows import export_row, without, write_csv, write_ndjson, write_parquet

Case = Callable[[Path], Path]

GOOD = [
    export_row(),
    export_row(usage_start_time="2026-11-01 11:00:00 UTC", usage_end_time="2026-11-01 12:00:00 UTC"),
]
CORRECTION = {"cost_type": "adjustment", "adjustment_info": {"id": "a1", "description": "usage correction"}}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    line = err.strip()
    assert "\n" not in line, err
    assert line.startswith("gpucost: error: "), line
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"


def _text(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _ndjson(*rows: dict) -> Case:
    return lambda tmp: write_ndjson(tmp / "billing.ndjson", [GOOD[0], *rows])


def _raw(name: str, data: Callable[[], bytes]) -> Case:
    def make(tmp: Path) -> Path:
        (tmp / name).write_bytes(data())
        return tmp / name

    return make


def _truncated_parquet(tmp: Path) -> Path:
    path = write_parquet(tmp / "billing.parquet", GOOD * 20)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _focus(tmp: Path) -> Path:
    path = SHARED_DATA / "focus-1.0-sample" / "focus_sample.csv"
    if not path.is_file():
        pytest.skip(f"no FOCUS sample at {path}")
    return path


# case id -> (file maker, where (":<line>: <field>" or the file alone), the fix or what it says)
BILLING: dict[str, tuple[Case, str, str]] = {
    "malformed-line": (
        _raw("billing.ndjson", lambda: (_text(GOOD) + '{"cost": 1,\n').encode()),
        ":3:",
        "one export row object per line",
    ),
    "truncated-mid-line": (
        _raw("billing.ndjson", lambda: _text(GOOD)[:-40].encode()),
        ":2:",
        "truncated: copy or export it again",
    ),
    "truncated-gz": (
        _raw("billing.ndjson.gz", lambda: gzip.compress(_text(GOOD * 50).encode())[:-200]),
        ".ndjson.gz:",
        "truncated; copy or export it again",
    ),
    "truncated-parquet": (_truncated_parquet, "billing.parquet:", "copy or export it again"),
    "empty-file": (_raw("billing.ndjson", lambda: b""), "billing.ndjson:", "pass a Cloud Billing export"),
    "not-an-object": (
        _raw("billing.ndjson", lambda: (_text(GOOD) + "[1, 2]\n").encode()),
        ":3:",
        "one export row object per line",
    ),
    "cost-abc": (_ndjson(export_row(cost="abc")), ":2: cost:", 'expected a number, got "abc"'),
    "cost-nan": (_ndjson(export_row(cost="NaN")), ":2: cost:", "expected a number"),
    "start-time-12": (
        _ndjson(export_row(usage_start_time=12)),
        ":2: usage_start_time:",
        "expected a timestamp such as",
    ),
    "labels-not-a-list": (_ndjson(export_row(labels="team=ml")), ":2: labels:", "expected a list such as"),
    "credit-abc": (
        _ndjson(export_row(credits=[{"name": "x", "amount": "abc"}])),
        ":2: credits[0].amount:",
        "expected a number",
    ),
    "cost-true": (_ndjson(export_row(cost=True)), ":2: cost:", "expected a number, got True"),
    "usage-false": (
        _ndjson(export_row({"usage.amount": False})),
        ":2: usage.amount:",
        "expected a number, got False",
    ),
    "credit-true": (
        _ndjson(export_row(credits=[{"name": "x", "amount": True}])),
        ":2: credits[0].amount:",
        "expected a number, got True",
    ),
    "cost-1e30": (_ndjson(export_row(cost=1e30)), ":2: cost:", "check the column's scale"),
    "credit-1e15": (
        _ndjson(export_row(credits=[{"name": "x", "amount": -1e15}])),
        ":2: credits[0].amount:",
        "check the column's scale",
    ),
    "cost-1e13-after-conversion": (
        _ndjson(export_row(cost=1e10, currency="KWD", currency_conversion_rate=0.001)),
        ":2: cost:",
        "check the column's scale",
    ),
    "negative-cost": (
        _ndjson(export_row(cost=-50.0, credits=[])),
        ":2: cost:",
        "mark it as the correction it is",
    ),
    "negative-usage": (
        _ndjson(export_row({"usage.amount": -3600.0})),
        ":2: usage.amount:",
        "negative (-3600.0)",
    ),
    "rate-zero-usd": (
        _ndjson(export_row(currency_conversion_rate=0)),
        ":2: currency_conversion_rate:",
        "must be positive",
    ),
    "rate-negative-eur": (
        _ndjson(export_row(currency="EUR", currency_conversion_rate=-0.9)),
        ":2: currency_conversion_rate:",
        "missing or not positive (-0.9)",
    ),
    "rate-missing-eur": (
        _ndjson({**export_row(currency="EUR"), "currency_conversion_rate": None}),
        ":2: currency_conversion_rate:",
        "divides them by this rate",
    ),
    "currency-not-iso": (_ndjson(export_row(currency="usd")), ":2: currency:", "ISO 4217"),
    "naive-ndjson": (
        _ndjson(export_row(usage_start_time="2026-11-01 11:00:00", usage_end_time="2026-11-01 12:00:00")),
        ':2: usage_start_time: no time zone in "2026-11-01 11:00:00"',
        'end each with " UTC"',
    ),
    "naive-parquet": (
        lambda tmp: write_parquet(
            tmp / "billing.parquet", [GOOD[0], export_row(export_time="2026-11-02T03:15:00")]
        ),
        ":2: export_time: no time zone",
        'end each with " UTC"',
    ),
    "naive-csv": (
        lambda tmp: write_csv(tmp / "billing.csv", [GOOD[0], export_row(export_time="2026-11-02 03:15:00")]),
        ":3: export_time: no time zone",  # line 1 is the header
        'end each with " UTC"',
    ),
    "focus-csv": (_focus, "focus_sample.csv:", "this looks like a FOCUS file"),
}

#: The cases today's code got wrong (accepted, exit 1, or said no fix); the others pin what was right.
WRONG_BEFORE = {
    "truncated-mid-line", "truncated-gz", "truncated-parquet", "cost-1e30", "credit-1e15",
    "cost-1e13-after-conversion", "negative-cost", "negative-usage", "rate-zero-usd",
    "naive-ndjson", "naive-parquet", "naive-csv", "cost-true", "usage-false", "credit-true",
}  # fmt: skip


def _table(db: Path) -> list[tuple]:
    conn = duckdb.connect(str(db), read_only=True)
    try:
        return conn.execute("SELECT count(*), sum(cost), max(export_time) FROM billing_export").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("case", BILLING)
def test_bad_billing_file(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, where, fix = BILLING[case]
    path = make(tmp_path)
    db = tmp_path / "state.duckdb"
    good = write_ndjson(tmp_path / "good.ndjson", GOOD)
    assert run(["load", "--billing", str(good), "--db", str(db)], capsys)[0] == 0
    before = _table(db)

    rc, out, err = run(["analyze", "--billing", str(path), "--format", "json"], capsys)
    assert rc == 2 and out == ""
    assert_one_line_error(err, f"{path}", where, fix)

    rc, _, err = run(["load", "--again", "--billing", str(good), "--billing", str(path), "--db", str(db)], capsys)
    assert rc == 2
    assert_one_line_error(err, f"{path}", where, fix)
    assert _table(db) == before  # the good file given first was not appended either

    fresh = tmp_path / "new.duckdb"
    rc, _, err = run(["load", "--billing", str(path), "--db", str(fresh)], capsys)
    assert rc == 2
    assert not fresh.exists(), "a failed load into a new database leaves no empty file behind"


def test_loading_a_file_again_is_refused_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_ndjson(tmp_path / "good.ndjson", GOOD)
    db = tmp_path / "state.duckdb"
    assert run(["load", "--billing", str(good), "--db", str(db)], capsys)[0] == 0
    before = _table(db)
    rc, out, err = run(["load", "--billing", str(good), "--db", str(db)], capsys)
    assert rc == 2 and out == ""
    assert_one_line_error(err, str(good), "already loaded", "count its costs twice", "--again")
    assert _table(db) == before
    assert run(["load", "--again", "--billing", str(good), "--db", str(db)], capsys)[0] == 0


def test_a_correction_may_be_negative(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The export writes refunds and corrections as rows of their own (cost_type "adjustment" with
    adjustment_info, "tax", "rounding_error"): their negative amounts load, and count."""
    negation = export_row(
        {"usage.amount": -28800.0}, cost=-88.0, credits=[{"name": "SUD", "amount": 8.5}], **CORRECTION
    )
    refund = export_row(cost=-4.0, credits=[], cost_type="tax")
    path = write_ndjson(tmp_path / "billing.ndjson", [*GOOD, negation, refund])
    rc, out, err = run(["analyze", "--billing", str(path), "--format", "json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["totals"]["cost"] == pytest.approx(88.0 + 88.0 - 88.0 - 4.0)


def test_the_standard_export_loads_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The standard export (gcp_billing_export_v1_*) lacks `resource` (and `price`): every dollar is
    still attributed by project, SKU and label, so it loads, and the user is told what is missing."""
    path = write_ndjson(tmp_path / "standard.ndjson", [without(r, "resource", "price") for r in GOOD])
    rc, out, err = run(["analyze", "--billing", str(path), "--format", "json"], capsys)
    assert rc == 0
    assert json.loads(out)["totals"]["cost"] == pytest.approx(176.0)
    assert "standard usage cost export" in err and "gcp_billing_export_resource_v1_" in err
    assert str(path) in err

    detailed = write_ndjson(tmp_path / "detailed.ndjson", GOOD)
    rc, _, err = run(["analyze", "--billing", str(detailed), "--format", "json"], capsys)
    assert rc == 0 and "standard usage cost export" not in err


# --- utilization JSON (Cloud Monitoring timeSeries) -----------------------------------------------

NVML = "agent.googleapis.com/gpu/utilization"


def _point(end: str = "2026-11-01T10:05:00Z", value: object = 40.0, *, interval: bool = True) -> dict:
    p: dict = {"value": {"doubleValue": value}} if value is not None else {"value": {}}
    if interval:
        p["interval"] = {"startTime": end, "endTime": end}
    return p


def _series(points: list[dict], *, instance: str | None = "1001") -> dict:
    labels = {"project_id": "ml-prod", "zone": "us-central1-a"}
    if instance is not None:
        labels["instance_id"] = instance
    return {
        "metric": {"type": NVML, "labels": {"gpu_number": "0"}},
        "resource": {"type": "gce_instance", "labels": labels},
        "metricKind": "GAUGE",
        "valueType": "DOUBLE",
        "points": points,
    }


def _page(*series: dict) -> bytes:
    return json.dumps({"timeSeries": list(series)}).encode()


# case id -> (file name, content, where, fix). Rejected: a file none of whose points is usable.
UTILIZATION: dict[str, tuple[str, bytes, str, str]] = {
    "not-json": ("u.json", b'{"timeSeries": [', "u.json:1:", "not valid JSON"),
    "truncated-gz": (
        "u.json.gz",
        gzip.compress(_page(_series([_point()])))[:-10],
        "u.json.gz:",
        "copy or export it again",
    ),
    "not-a-page": ("u.json", b'{"series": []}', "u.json:", "expected a Cloud Monitoring timeSeries page"),
    "no-host-label": (
        "u.json",
        _page(_series([_point()], instance=None), _series([_point()], instance=None)),
        "u.json: series #0:",
        "missing_labels 2 skipped",
    ),
    "non-numeric": (
        "u.json",
        _page(_series([_point(value="busy"), _point(value=None)])),
        "u.json: series #0:",
        "value.doubleValue",
    ),
    "no-interval": (
        "u.json",
        _page(_series([_point(interval=False)])),
        "u.json: series #0:",
        "interval.endTime",
    ),
    "naive-time": (
        "u.json",
        _page(_series([_point("2026-11-01T10:05:00")])),
        "u.json: series #0:",
        "with a zone",
    ),
    "all-out-of-range": (  # per mille, say: every hour would have read as unmonitored
        "u.json",
        _page(_series([_point(value=400.0), _point("2026-11-01T10:10:00Z", value=950.0)])),
        "u.json: series #0:",
        "out_of_range 2 skipped",
    ),
}


@pytest.mark.parametrize("case", UTILIZATION)
def test_bad_utilization_file(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, content, where, fix = UTILIZATION[case]
    (tmp_path / name).write_bytes(content)
    billing = write_ndjson(tmp_path / "billing.ndjson", GOOD)
    rc, out, err = run(
        ["analyze", "--billing", str(billing), "--utilization", str(tmp_path / name), "--format", "json"],
        capsys,
    )
    assert rc == 2 and out == ""
    assert_one_line_error(err, str(tmp_path), where, fix)


def test_unusable_points_beside_good_ones_are_skipped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One bad series or point does not sink a file: it is skipped, and the counts are logged."""
    doc = _page(
        _series([_point(value=55.0), _point("2026-11-01T10:00:00Z", value="n/a")]),
        _series([_point()], instance=None),
        _series([_point(interval=False)], instance="1002"),
    )
    (tmp_path / "u.json").write_bytes(doc)
    billing = write_ndjson(tmp_path / "billing.ndjson", GOOD)
    rc, _, err = run(
        ["analyze", "--billing", str(billing), "--utilization", str(tmp_path / "u.json"), "--format", "json"],
        capsys,
    )
    assert rc == 0, err
    skipped = next(json.loads(line) for line in err.splitlines() if "utilization points skipped" in line)
    for count in ("'non_numeric': 1", "'missing_labels': 1", "'bad_timestamp': 1"):
        assert count in skipped["message"], skipped


# --- config ---------------------------------------------------------------------------------------

# case id -> (TOML, key named, the fix or what it says)
CONFIG: dict[str, tuple[str, str, str]] = {
    "wrong-type": (
        '[daemon]\nbilling_poll_minutes = "often"\n',
        "daemon.billing_poll_minutes:",
        "valid number",
    ),
    "wrong-type-table": ("daemon = 5\n", "daemon:", "valid dictionary"),
    "unknown-key": (
        "[daemon]\nbiling_poll_minutes = 5\n",
        "daemon.biling_poll_minutes:",
        "check the spelling",
    ),
    "unknown-section": ("[deamon]\nx = 1\n", "deamon:", "check the spelling"),
    "interval-zero": ("[daemon]\noutbox_seconds = 0\n", "daemon.outbox_seconds:", "greater than 0"),
    "interval-negative": (
        "[daemon]\nutilization_poll_minutes = -5\n",
        "daemon.utilization_poll_minutes:",
        "greater than 0",
    ),
    "digest-25h": ('[digest]\ntime = "25:00"\n', "digest.time:", 'expected "HH:MM" (24 h)'),
    "digest-zone": ('[digest]\ntimezone = "Mars/Olympus"\n', "digest.timezone:", "IANA name"),
    "backfill-chunk-over-a-day": (
        "[utilization]\nbackfill_chunk_hours = 48\n",
        "utilization.backfill_chunk_hours:",
        "less than or equal to 24",
    ),
    "retention-below-minimum": (
        "[state]\nretention_days = 30\n",
        "state.retention_days:",
        "greater than or equal to 62",
    ),
    "ready-shorter-than-poll": (
        "[daemon]\nbilling_poll_minutes = 120\n",
        "http.ready_max_age_minutes",
        "set it to at least",
    ),
    "jitter-over-interval": (
        "[daemon]\noutbox_seconds = 5\njitter_seconds = 60\n",
        "daemon.jitter_seconds:",
        "lower jitter_seconds",
    ),
    "repeat-shorter-than-group": (
        "[alerts]\ngroup_interval_seconds = 7200\nrepeat_interval_hours = 1\n",
        "alerts.repeat_interval_hours:",
        "raise repeat_interval_hours",
    ),
    "silence-until-not-a-time": (
        '[[alerts.silences]]\nmatch = {kind = "idle_gpu"}\nuntil = "tomorrow"\n',
        "alerts.silences.0.until:",
        'bad timestamp "tomorrow": use',
    ),
    "two-errors-one-line": (
        "[daemon]\noutbox_seconds = 0\njitter_seconds = -1\n",
        "daemon.outbox_seconds:",
        "; daemon.jitter_seconds:",
    ),
    "not-toml": ("[daemon\n", "not valid TOML", "line 1"),
    "secret-in-file": ('[slack]\ntoken = "xoxb-1"\n', "slack.token:", "set SLACK_BOT_TOKEN"),
}
CONFIG_WRONG_BEFORE = {"ready-shorter-than-poll", "jitter-over-interval", "repeat-shorter-than-group",
                       "silence-until-not-a-time", "two-errors-one-line"}  # fmt: skip


@pytest.mark.parametrize("command", [["check"], ["run", "--once"]], ids=["check", "run"])
@pytest.mark.parametrize("case", CONFIG)
def test_bad_config(
    case: str,
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text, key, fix = CONFIG[case]
    monkeypatch.chdir(tmp_path)  # the default state and billing paths are relative: nothing may appear
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    path = tmp_path / "gpucost.toml"
    path.write_text(text)
    rc, _, err = run([command[0], "--config", str(path), *command[1:]], capsys)
    assert rc == 2
    assert_one_line_error(err, f"{path}: {key}", fix)
    assert list(tmp_path.iterdir()) == [path]
