"""README's configuration reference is generated from the config models and cannot go stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config_reference import BEGIN, END, reference_markdown, replace_block

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_reference_is_current() -> None:
    readme = README.read_text(encoding="utf-8")
    assert replace_block(readme, reference_markdown()) == readme, (
        "README.md's configuration reference is stale: run `.venv/bin/python -m monitor.config_reference --write`"
    )


def test_every_key_of_every_section_is_listed() -> None:
    table = reference_markdown()
    for key in (
        "billing.duckdb_memory_limit",
        "state.retention_days",
        "utilization.backfill_interval_seconds",
        "attribution.rules[].sku_regex",
        "detectors.idle_gpu.min_idle_hours",
        "alerts.group_wait_seconds",
    ):
        assert f"| `{key}` |" in table, key
    assert "| `state.retention_days` | int | `90` | >= 62 |" in table


def test_a_readme_without_the_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="lacks the markers"):
        replace_block("no markers here", "| t |")
    assert BEGIN in README.read_text(encoding="utf-8") and END in README.read_text(encoding="utf-8")
