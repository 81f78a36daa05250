"""Real export rows (Red Hat koku's test data, see its SOURCE.txt): conserved and classified.

The CSVs flatten nested fields to dotted columns and REPEATED fields to Python-repr lists; the
loader reads them as they are. Skipped when ../shared/data is absent; nothing is copied here.
The `agpl/` file is only read at test time, never shipped.
"""

from __future__ import annotations

import ast
import csv
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from monitor.sources.billing_duckdb import DuckDBBillingSource
from monitor.sources.duckdb_conn import open_billing_db
from monitor.sources.loader import load_billing

# What a FinOps engineer files each SKU found in those files under.
EXPECTED: dict[tuple[str, str], str] = {
    ("BigQuery", "Active Storage"): "storage.bigquery",
    ("BigQuery", "Analysis"): "other",
    ("Cloud Storage", "Download Worldwide Destinations (excluding Asia & Australia)"): "network.internet",
    ("Cloud Storage", "Multi-Region Standard Class B Operations"): "storage.gcs",
    ("Compute Engine", "E2 Instance Core running in Americas"): "compute.cpu",
    ("Compute Engine", "E2 Instance Ram running in Americas"): "compute.ram",
    ("Compute Engine", "External IP Charge on a Standard VM"): "network.other",
    ("Compute Engine", "Licensing Fee for Debian 10 Buster (CPU cost)"): "licensing.os",
    ("Compute Engine", "Licensing Fee for Debian 10 Buster (RAM cost)"): "licensing.os",
    ("Compute Engine", "Network Google Egress from Americas to Americas"): "network.google",
    ("Compute Engine", "Network Google Ingress from Americas to Americas"): "network.ingress",
    ("Compute Engine", "Network HTTP Load Balancing Ingress from Load Balancer"): "network.ingress",
    ("Compute Engine", "Network Ingress via Carrier Peering Network - Americas Based"): "network.ingress",
    ("Compute Engine", "Network Inter Region Egress from Americas to EMEA"): "network.inter_region",
    ("Compute Engine", "Network Inter Region Egress from Americas to Montreal"): "network.inter_region",
    ("Compute Engine", "Network Inter Region Egress from Americas to Mumbai"): "network.inter_region",
    ("Compute Engine", "Network Inter Region Egress from Americas to Singapore"): "network.inter_region",
    ("Compute Engine", "Network Inter Region Egress from Americas to Zurich"): "network.inter_region",
    ("Compute Engine", "Network Inter Region Ingress from Americas to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from EMEA to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Finland to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Japan to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from London to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Los Angeles to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Montreal to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Mumbai to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Netherlands to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Sao Paulo to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Singapore to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Region Ingress from Zurich to Americas"): "network.ingress",
    ("Compute Engine", "Network Inter Zone Egress"): "network.inter_zone",
    ("Compute Engine", "Network Inter Zone Ingress"): "network.ingress",
    ("Compute Engine", "Network Internet Egress from Americas to APAC"): "network.internet",
    ("Compute Engine", "Network Internet Egress from Americas to Americas"): "network.internet",
    ("Compute Engine", "Network Internet Egress from Americas to Australia"): "network.internet",
    ("Compute Engine", "Network Internet Egress from Americas to China"): "network.internet",
    ("Compute Engine", "Network Internet Egress from Americas to EMEA"): "network.internet",
    ("Compute Engine", "Network Internet Ingress from APAC to Americas"): "network.ingress",
    ("Compute Engine", "Network Internet Ingress from Americas to Americas"): "network.ingress",
    ("Compute Engine", "Network Internet Ingress from Australia to Americas"): "network.ingress",
    ("Compute Engine", "Network Internet Ingress from China to Americas"): "network.ingress",
    ("Compute Engine", "Network Internet Ingress from EMEA to Americas"): "network.ingress",
    ("Compute Engine", "Storage PD Capacity"): "storage.persistent_disk",
    ("Security Command Center", "Event Threat Detection Log Ingest Bytes"): "other",
    ("Stackdriver Logging", "Log Volume"): "other",
}
WIDE = {
    "usage_start": datetime(2000, 1, 1, tzinfo=UTC),
    "usage_end": datetime(2100, 1, 1, tzinfo=UTC),
    "partition_end": datetime(2100, 1, 1, tzinfo=UTC),
    "label_keys": ["vm_key_proj2"],
    "group_by": "category",
    "label_key": "",
}


@pytest.fixture(scope="module")
def files(shared_data: Path) -> list[Path]:
    folder = shared_data / "koku-gcp-billing-export"
    found = sorted(folder.glob("*.csv")) + sorted(folder.glob("agpl/*.csv"))
    if not found:
        pytest.skip(f"no CSV files in {folder}")
    return found


@pytest.fixture(scope="module")
def source(files: list[Path]) -> DuckDBBillingSource:
    conn = open_billing_db(None)
    load_billing(files, conn)
    yield DuckDBBillingSource(conn)
    conn.close()


def _csv_totals(files: list[Path]) -> tuple[Decimal, Decimal, int]:
    gross, credits, n = Decimal(0), Decimal(0), 0
    for path in files:
        with path.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                n += 1
                gross += Decimal(row["cost"] or "0")
                for c in ast.literal_eval(row["credits"] or "[]"):
                    credits += Decimal(str(c["amount"]))
    return gross, credits, n


def test_real_rows_are_conserved(files: list[Path], source: DuckDBBillingSource) -> None:
    gross, credits, n = _csv_totals(files)
    assert n > 300 and credits != 0  # the files carry real free-trial credits
    for name in ("hourly", "report", "focus", "skus"):
        rows = source.run(name, WIDE).rows
        got_gross = Decimal(sum(r["gross_micros"] for r in rows)) / 1_000_000
        got_net = Decimal(sum(r["net_micros"] for r in rows)) / 1_000_000
        assert abs(got_gross - gross) < Decimal("0.01"), name
        assert abs(got_net - (gross + credits)) < Decimal("0.01"), name
        assert sum(r["row_count"] for r in rows) == n, name


def test_every_real_sku_gets_the_expected_category(source: DuckDBBillingSource) -> None:
    got = {(r["service_description"], r["sku_description"]): r for r in source.run("skus", WIDE).rows}
    unexpected = sorted(set(got) - set(EXPECTED))
    assert not unexpected, f"classify these SKUs in EXPECTED first: {unexpected}"
    wrong = {
        k: (got[k]["subcategory"], want) for k, want in EXPECTED.items() if got[k]["subcategory"] != want
    }
    assert not wrong, wrong
    # Compute capacity is on-demand here (no CUD credits, no Spot); nothing else has a pricing model.
    models = {k: r["pricing_model"] for k, r in got.items()}
    assert {m for k, m in models.items() if EXPECTED[k].startswith("compute.")} == {"on_demand"}
    assert {m for k, m in models.items() if not EXPECTED[k].startswith("compute.")} == {None}


def test_micro_dollar_credits_print_as_zero_not_minus_zero(
    files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """koku's November 2020 file carries FreeTrial credits of -1e-06 and -5e-06: rounded to the cent
    they are zero, and `analyze` showed them as `$-0.00` in its table and -0.0 in its JSON."""
    import json
    import math

    from monitor.cli import main

    (path,) = [p for p in files if p.name.startswith("202011_")]
    assert main(["analyze", "--billing", str(path)]) == 0
    table = capsys.readouterr().out
    assert "credits $0.00)" in table and "-0.00" not in table
    assert main(["analyze", "--billing", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    figures = [*doc["totals"].values()] + [
        a[k] for a in doc["attribution"] for k in ("cost", "credits", "net_cost")
    ]
    assert figures and all(math.copysign(1.0, v) > 0 for v in figures if v == 0), figures
