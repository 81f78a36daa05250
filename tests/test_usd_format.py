"""One dollar format (`monitor.model.usd`): every printed figure rounds to the cent first (half-even,
as Decimal rounds), then takes its sign, so a few negative micro-dollars print as `$0.00`."""

from __future__ import annotations

from decimal import Decimal

import pytest

from alerts import blocks
from monitor.detectors import base
from monitor.model import plain_cents, usd


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (Decimal("1234.565"), "$1,234.56"),  # half-even: a tie goes to the even cent
        (Decimal("1234.575"), "$1,234.58"),
        (Decimal("-3"), "-$3.00"),
        (Decimal("-0.004999"), "$0.00"),  # rounds to zero: no minus sign
        (Decimal("-0.005"), "$0.00"),  # a tie, to the even cent: zero
        (Decimal("-0.015"), "-$0.02"),
        (Decimal("-0.000001"), "$0.00"),
        (-0.0, "$0.00"),  # a JSON number that came back negative zero
        (2.675, "$2.68"),  # a float is the decimal it prints as, not its binary value (2.67499…)
        (1_000_000, "$1,000,000.00"),
        (None, "$0.00"),
    ],
)
def test_usd(amount: Decimal | float | int | None, text: str) -> None:
    assert usd(amount) == text


def test_plain_cents_has_the_same_rounding_without_the_sign() -> None:
    assert [plain_cents(x) for x in (Decimal("1234.565"), Decimal("-0.000032"), -2.5)] == [
        "1,234.56",
        "0.00",
        "-2.50",
    ]


def test_the_detectors_and_slack_print_dollars_with_the_same_function() -> None:
    assert base.fmt_usd is usd and blocks.money is usd


def test_a_total_of_findings_adds_up_to_its_listed_lines() -> None:
    # seed 23's first-start summary: "worth $24,883.35" over six lines adding up to $24,883.34
    from datetime import UTC, datetime

    from alerts.dedupe import Reason
    from monitor.model import Finding, Scope, Severity

    t = datetime(2026, 11, 1, tzinfo=UTC)
    findings = [
        Finding(
            "idle_gpu", Severity.WARNING, f"f{i}", "", Decimal("0.333333"), t, t, Scope(), {}, "", f"fp{i}"
        )
        for i in range(3)
    ]  # each lists as $0.33; unrounded they sum to $1.00
    text, summary = blocks.render_summary(findings, 14, t)
    assert "worth $0.99 " in summary[1]["text"]["text"] and text.endswith("3 findings, $0.99")
    fallback, _ = blocks.render_group(Reason.NEW_GROUP, findings, frozenset(), [])
    assert fallback.endswith(": $0.99")
