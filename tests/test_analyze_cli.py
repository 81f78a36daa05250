"""`gpucost analyze` end to end, in process, on a small simulated fleet: the JSON contract of issue 5
key by key, totals to the cent, window defaults, the Markdown report, and user errors (exit 2)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from monitor.render import is_advice
from monitor.simulate import write_fleet
from monitor.timeutil import parse_timestamp
from tests.export_rows import export_row, write_csv, write_ndjson, write_parquet

DAYS = 3


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, seed=3, days=DAYS)
    return out


def files(fleet: Path) -> list[str]:
    return [
        "--billing",
        str(fleet / "billing" / "export.parquet"),
        "--utilization",
        str(fleet / "utilization"),
    ]


def run(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def analyzed(fleet: Path) -> dict[str, Any]:
    rc, out = run(["analyze", *files(fleet), "--format", "json"])
    assert rc == 0
    return json.loads(out)  # stdout is the JSON document and nothing else


@pytest.fixture(scope="module")
def truth(fleet: Path) -> dict[str, Any]:
    return json.loads((fleet / "ground_truth.json").read_text())


@pytest.mark.slow
def test_the_header_names_the_currencies_converted(fleet: Path) -> None:
    """Seed 7's USD total holds its EUR account converted ($263,739.10 against the USD invoice's
    $258,781.85 in `report`): the header says so."""
    rc, out = run(["analyze", *files(fleet)])
    assert rc == 0 and "USD (EUR converted at the export's rates)" in out.splitlines()[0]


def is_iso(v: Any) -> bool:
    return isinstance(v, str) and v.endswith("Z") and parse_timestamp(v).tzinfo is not None


def is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


FINDING_KEYS = {
    "kind",
    "severity",
    "title",
    "summary",
    "impact_usd",
    "window_start",
    "window_end",
    "scope",
    "evidence",
    "recommendation",
    "fingerprint",
    "provisional",
    "estimated",
}
SCOPE_KEYS = {"project", "zone", "region", "instance", "instance_id", "cluster", "labels"}


@pytest.mark.slow
def test_json_has_every_key_of_the_contract_with_its_type(analyzed: dict[str, Any]) -> None:
    d = analyzed
    assert set(d) == {"window", "currency", "converted_from", "totals", "attribution", "findings", "stats"}
    assert set(d["window"]) == {"start", "end", "provisional_from"}
    assert all(is_iso(v) for v in d["window"].values())
    assert d["currency"] == "USD" and d["converted_from"] == ["EUR"]  # the mixed fleet's EUR account
    assert set(d["totals"]) == {"cost", "credits", "net_cost"} and all(map(is_num, d["totals"].values()))
    assert d["attribution"]
    for a in d["attribution"]:
        assert set(a) == {"category", "subcategory", "pricing_model", "cost", "credits", "net_cost"}
        assert a["subcategory"].startswith(a["category"])
        assert a["pricing_model"] is None or isinstance(a["pricing_model"], str)
        assert all(is_num(a[k]) for k in ("cost", "credits", "net_cost"))
    assert d["findings"]
    for f in d["findings"]:
        assert set(f) == FINDING_KEYS
        assert f["severity"] in ("info", "warning", "critical")
        assert all(isinstance(f[k], str) and f[k] for k in ("kind", "title", "summary", "recommendation"))
        assert is_num(f["impact_usd"]) and f["impact_usd"] > 0
        assert is_iso(f["window_start"]) and is_iso(f["window_end"])
        assert set(f["scope"]) == SCOPE_KEYS and isinstance(f["scope"]["labels"], dict)
        assert isinstance(f["evidence"], dict) and len(f["fingerprint"]) == 16
        assert isinstance(f["provisional"], bool) and isinstance(f["estimated"], bool)
    impacts = [f["impact_usd"] for f in d["findings"]]
    assert impacts == sorted(impacts, reverse=True)
    s = d["stats"]
    assert set(s) == {"engine", "queries", "rows_scanned", "rows_fetched", "bytes_processed", "seconds"}
    assert s["engine"] == "duckdb" and s["bytes_processed"] is None  # DuckDB bills no bytes
    assert s["queries"] >= 3 and s["rows_fetched"] > 0 and is_num(s["seconds"])


@pytest.mark.slow
def test_totals_and_attribution_equal_the_export_to_the_cent(analyzed: dict, truth: dict) -> None:
    t = truth["totals"]
    assert analyzed["totals"] == {"cost": t["cost"], "credits": t["credits"], "net_cost": t["net_cost"]}
    assert analyzed["stats"]["rows_scanned"] == t["rows"]
    net = sum(a["net_cost"] for a in analyzed["attribution"])  # lines are rounded to the cent each
    assert abs(net - t["net_cost"]) <= 0.005 * len(analyzed["attribution"])


@pytest.mark.slow
def test_window_defaults_to_fourteen_days_up_to_the_latest_usage(analyzed: dict, truth: dict) -> None:
    end = parse_timestamp(truth["window"]["end"])
    assert parse_timestamp(analyzed["window"]["end"]) == end
    assert parse_timestamp(analyzed["window"]["start"]) == end - timedelta(days=14)
    # every row has landed (late ones too): nothing in the window is provisional any more
    assert parse_timestamp(analyzed["window"]["provisional_from"]) >= end


@pytest.mark.slow
def test_the_injected_idle_gpus_are_found_and_advice_never_alerts(analyzed: dict, truth: dict) -> None:
    idle = {f["scope"]["instance_id"]: f for f in analyzed["findings"] if f["kind"] == "idle_gpu"}
    for h in (h for h in truth["hidden_costs"] if h["kind"] == "idle_gpu"):
        f = idle[h["scope"]["instance_id"]]
        assert f["evidence"]["variant"] == h["variant"]
        assert f["impact_usd"] == pytest.approx(h["impact_usd"], rel=0.01)
        assert not f["estimated"]  # every hour is billed: nothing priced from the catalog
    assert all(f["severity"] == "info" for f in analyzed["findings"] if is_advice(f["kind"]))
    assert not any(f["kind"] == "budget_forecast" for f in analyzed["findings"])  # no budgets given


@pytest.mark.slow
def test_explicit_window_is_honoured(fleet: Path) -> None:
    rc, out = run(
        [
            "analyze",
            *files(fleet),
            "--start",
            "2026-11-02T00:00:00Z",
            "--end",
            "2026-11-03",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    d = json.loads(out)
    assert (d["window"]["start"], d["window"]["end"]) == ("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")
    for f in d["findings"]:
        if f["kind"] == "idle_gpu":  # impact counted inside the window only
            assert parse_timestamp(f["window_start"]) >= datetime.fromisoformat("2026-11-02T00:00:00+00:00")


@pytest.mark.slow
def test_markdown_leads_with_the_top_hidden_cost(fleet: Path, analyzed: dict) -> None:
    rc, md = run(["analyze", *files(fleet), "--format", "markdown"])
    assert rc == 0
    top = next(f for f in analyzed["findings"] if not is_advice(f["kind"]))
    assert md.startswith("# GPU cost report: ")
    head = md.index("### 1. ")
    assert md[head:].startswith(f"### 1. [{top['severity'].upper()}] {top['title']}")
    assert f"- **Impact:** ${top['impact_usd']:,.2f} between" in md
    assert "- **What to do:** " in md and "## Where the money went" in md
    if any(is_advice(f["kind"]) for f in analyzed["findings"]):
        assert md.index("## Savings opportunities") > head


@pytest.mark.slow
def test_table_format(fleet: Path, analyzed: dict[str, Any]) -> None:
    rc, out = run(["analyze", *files(fleet), "--format", "table"])
    assert rc == 0 and "Hidden costs" in out and "Where the money went" in out and "bob-a100-debug" in out
    # advice apart, as in the Markdown report; provisional days named only when the window has some
    advice = [f for f in analyzed["findings"] if is_advice(f["kind"])]
    if advice:
        assert out.index("Savings opportunities") > out.index("Hidden costs")
    else:
        assert "Savings opportunities" not in out
    w = analyzed["window"]
    assert ("provisional from" in out) == (w["provisional_from"] < w["end"])


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """One GPU row: enough to open, fast to load (user errors need no fleet)."""
    return write_ndjson(tmp_path / "export.ndjson", [export_row()])


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--end", "yesterday"], 'bad timestamp "yesterday"'),
        (["--start", "2026-11-02T00:00:00Z", "--end", "2026-11-01T00:00:00Z"], "must be before --end"),
        (["--format", "pdf"], "'pdf' is not one of"),
        (["--utilization", "/nonexistent/dir"], "does not exist"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tiny: Path, capsys, extra: list[str], needle: str) -> None:
    rc = main(["analyze", "--billing", str(tiny), *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_one_row_export_analyses(tiny: Path, capsys) -> None:
    assert main(["analyze", "--billing", str(tiny), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (line,) = d["attribution"]
    assert (line["subcategory"], line["cost"]) == ("compute.gpu", d["totals"]["cost"])
    assert d["window"]["end"] == "2026-11-01T11:00:00Z" and d["findings"] == []


def test_analyze_without_budgets_does_not_import_the_daemons_cycle(tiny: Path) -> None:
    """No budget to evaluate: `analyze` skips the daemon's budget rule and its module
    (`monitor.cycle`, 0.25-0.45 s of a first `analyze` at bench scale 5, twenty-first session)."""
    import subprocess
    import sys

    probe = (
        "import sys; from monitor.cli import main;"
        f" code = main(['analyze', '--billing', {str(tiny)!r}, '--format', 'json']);"
        " print(code, 'monitor.cycle' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 False"


@pytest.mark.parametrize("write", [write_ndjson, write_csv, write_parquet], ids=["ndjson", "csv", "parquet"])
def test_a_row_exported_before_its_usage_is_analysed(tmp_path: Path, capsys, write: Any) -> None:
    """BigQuery loads a row after its usage; koku's real test rows (`2024-03-01_5.csv`) carry an
    `export_time` two years before it. Read from the day of its usage on, the row is in the window's
    totals, not left where no query reads it ($0.00 before)."""
    row = export_row(export_time="2024-08-02 01:11:12.066 UTC")  # used 2026-11-01
    path = write(tmp_path / f"export.{write.__name__.removeprefix('write_')}", [row])
    assert main(["analyze", "--billing", str(path), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["totals"] == {"cost": 88.0, "credits": -8.5, "net_cost": 79.5}
    assert d["stats"]["rows_scanned"] == 1


def test_report_and_analyze_count_provisional_days_from_the_same_instant(tmp_path: Path, capsys) -> None:
    """Both count back from the data's latest load, never before the window's end: a file exported
    before its usage had `report` mark two years provisional where `analyze` marked days."""
    path = write_ndjson(tmp_path / "export.ndjson", [export_row(export_time="2024-08-02 01:11:12.066 UTC")])
    assert main(["analyze", "--billing", str(path), "--format", "json"]) == 0
    analyzed = json.loads(capsys.readouterr().out)
    assert main(["report", "--billing", str(path), "--format", "json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    assert reported["provisional_since"] == analyzed["window"]["provisional_from"] == "2026-10-30T00:00:00Z"


@pytest.mark.parametrize(
    "loaded", ["2026-11-21 09:00:00 UTC", "2027-03-01 09:00:00 UTC"], ids=["20d", "120d"]
)
def test_rows_loaded_weeks_after_their_usage_count_in_every_command(
    tmp_path: Path, capsys, loaded: str
) -> None:
    """koku's real export has rows loaded 27 days after their usage: `analyze` and `jobs` counted
    them, `report` (and its FOCUS rows) read only the loads of 7 days past the window's end and
    left them out, so two commands gave two totals for one window ($0.25 and $0.36 there). A cap on
    how late (62 days, tried) split them again: analyze reads up to the data's latest load."""
    late = export_row(export_time=loaded, cost=12.0, credits=[])  # used 2026-11-01
    path = write_ndjson(tmp_path / "export.ndjson", [export_row(), late])
    totals = {}
    for command in ("analyze", "report", "jobs"):
        assert main([command, "--billing", str(path), "--format", "json"]) == 0
        totals[command] = json.loads(capsys.readouterr().out)
    assert main(["report", "--billing", str(path), "--format", "focus"]) == 0
    focus = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert totals["analyze"]["totals"]["cost"] == 100.0
    assert totals["report"]["total"]["gross"] == 100.0
    assert totals["jobs"]["totals"]["cost_usd"] == 100.0
    assert totals["report"]["total"]["net"] == 91.5  # the first row's credits: -$8.50
    assert sum(Decimal(r["BilledCost"]) for r in focus) == Decimal("91.5")  # FOCUS bills net of credits


def test_no_billing_source_is_a_usage_error(capsys) -> None:
    assert main(["analyze", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--billing FILE" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_config_alone_reads_the_configured_sources_and_budgets(fleet: Path, analyzed: dict, tmp_path) -> None:
    db = tmp_path / "billing.duckdb"
    assert run(["load", "--billing", str(fleet / "billing" / "export.ndjson.gz"), "--db", str(db)])[0] == 0
    cfg = tmp_path / "gpucost.toml"
    cfg.write_text(
        f'[billing]\ndb = "{db}"\n\n[utilization]\nfiles = ["{fleet / "utilization"}"]\n\n'
        '[budgets]\nitems = [{ name = "fleet", amount_usd = 1000.0 }]\n\n'
        "[detectors.spot_opportunity]\nenabled = false\n"
    )
    rc, out = run(["analyze", "--config", str(cfg), "--format", "json"])
    assert rc == 0
    d = json.loads(out)
    assert d["totals"] == analyzed["totals"] and d["window"] == analyzed["window"]
    kinds = [f["kind"] for f in d["findings"]]
    assert "budget_forecast" in kinds and "spot_opportunity" not in kinds  # config: budgets, detectors
    (budget,) = [f for f in d["findings"] if f["kind"] == "budget_forecast"]
    assert budget["evidence"]["budget"] == "fleet" and budget["severity"] == "critical"

    def leaks(findings: list[dict]) -> set[tuple]:
        return {
            (f["kind"], f["fingerprint"], f["impact_usd"])
            for f in findings
            if f["kind"] != "spot_opportunity"
        }

    budget_key = ("budget_forecast", budget["fingerprint"], budget["impact_usd"])
    assert leaks(d["findings"]) - {budget_key} == leaks(analyzed["findings"])


def _lines_summed(export: Path, capsys) -> tuple[str, list[list[str]]]:
    assert main(["analyze", "--billing", str(export), "--format", "table"]) == 0
    out = capsys.readouterr().out
    start = out.index("Where the money went")
    rows = [[c.strip() for c in r.strip("│").split("│")] for r in out[start:].splitlines() if r.startswith("│")]
    return out.splitlines()[0], rows


def test_printed_lines_add_up_to_the_printed_totals(tmp_path: Path, capsys) -> None:
    """Each line rounded alone, seed 7's "Where the money went" summed to $67,880.10 and -$13,250.84
    under $67,880.11 and -$13,250.85, and the Markdown shares to 100.1%. Here the lines' costs
    10.004 + 2.003 + 3.333 read $10.00 + $2.00 + $3.33 under $15.34, their credits -$1.00 under
    -$1.01, and the shares 62.8% + 14.0% + 23.3% = 100.1%."""
    sud = {"name": "Sustained Usage Discount", "amount": -1.006, "type": "SUSTAINED_USAGE_DISCOUNT"}
    rows = [
        export_row({"sku.description": "Nvidia H100 80GB GPU running in Americas"}, cost=10.004, credits=[sud]),
        export_row({"sku.id": "N1", "sku.description": "Network Inter Zone Data Transfer Out"}, cost=2.003, credits=[]),
        export_row(
            {"sku.id": "T1", "sku.description": "Tax", "service.description": "Invoice"},
            cost=3.333,
            credits=[],
            cost_type="tax",
        ),
    ]
    export = write_ndjson(tmp_path / "export.ndjson", rows)
    header, printed = _lines_summed(export, capsys)
    assert "net $14.33 (cost $15.34, credits -$1.01)" in header

    def dollars(cell: str) -> Decimal:
        return Decimal(cell.replace("$", "").replace(",", ""))

    columns = [sum((dollars(r[i]) for r in printed), Decimal(0)) for i in (2, 3, 4)]
    assert columns == [Decimal("15.34"), Decimal("-1.01"), Decimal("14.33")], printed
    assert all(dollars(r[2]) + dollars(r[3]) == dollars(r[4]) for r in printed), printed
    assert main(["analyze", "--billing", str(export), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "**Spend:** $14.33 net ($15.34 before -$1.01 credits)" in md
    table = [r.split("|") for r in md[md.index("## Where the money went") :].splitlines() if r.startswith("| ")]
    lines = [r for r in table if r[1].strip() != "Category"]
    assert sum((dollars(r[3].strip()) for r in lines), Decimal(0)) == Decimal("14.33")
    assert sum((Decimal(r[4].strip().rstrip("%")) for r in lines), Decimal(0)) == Decimal("100.0"), lines
