"""`gpucost report`'s share column adds up to its TOTAL's 100.0%, as `analyze`'s Markdown does."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.render import shares_adding_up
from tests.export_rows import write_ndjson
from tests.test_queries import export_row

#: SKUs of four categories (`report --by category` gives one line each)
_SKUS = (
    "Nvidia H100 80GB GPU running in Americas",
    "Network Inter Zone Data Transfer Out",
    "E2 Instance Ram running in Americas",
    "E2 Instance Core running in Americas",
)


def _shares(tmp_path: Path, capsys, costs: list[float]) -> list[str]:
    rows = [export_row(sku, cost) for sku, cost in zip(_SKUS, costs, strict=False)]
    path = write_ndjson(tmp_path / "export.ndjson", rows)
    assert main(["report", "--billing", str(path)]) == 0
    table = [r.split("│") for r in capsys.readouterr().out.splitlines() if r.startswith("│")]
    return [cells[-2].strip() for cells in table]


@pytest.mark.parametrize(
    ("costs", "alone"),
    [
        ([1.0, 1.0, 1.0], "99.9%"),  # 33.3% three times
        ([2.0, 2.0, 2.0, 1.0], "100.1%"),  # 28.6% three times and 14.3%
    ],
)
def test_the_shares_add_up_to_the_totals(tmp_path: Path, capsys, costs: list[float], alone: str) -> None:
    """Each share rounded alone, lines of $1, $1 and $1 read 33.3% thrice (99.9%) under a TOTAL of
    100.0%, and the demo's USD lines of 2026-11-13 summed to 100.1%; now the shares are
    `shares_adding_up`'s, as in `analyze`'s Markdown: largest remainder, ties to the first line."""
    *lines, total = _shares(tmp_path, capsys, costs)
    assert total == "100.0%"
    assert sum(Decimal(s.rstrip("%")) for s in lines) == 100
    nets = {i: Decimal(str(c)) for i, c in enumerate(sorted(costs, reverse=True))}
    assert lines == list(shares_adding_up(nets).values())
    rounded_alone = sum(Decimal(f"{100 * c / sum(costs):.1f}") for c in costs)
    assert f"{rounded_alone}%" == alone  # the case is one rounding alone got wrong


def test_a_net_credit_line_keeps_its_share(tmp_path: Path, capsys) -> None:
    """A line below zero (a refund over its cost) still has its share of a positive total, and the
    shares still add up."""
    rows = [
        export_row(_SKUS[0], 1.0),
        export_row(_SKUS[1], 1.0),
        export_row(_SKUS[2], 1.0),
        export_row(_SKUS[3], 0.5, credits=[("PROMOTION", -1.0)]),
    ]
    path = write_ndjson(tmp_path / "export.ndjson", rows)
    assert main(["report", "--billing", str(path)]) == 0
    table = [r.split("│") for r in capsys.readouterr().out.splitlines() if r.startswith("│")]
    *lines, total = [cells[-2].strip() for cells in table]
    assert total == "100.0%"
    assert lines == ["40.0%", "40.0%", "40.0%", "-20.0%"]
