"""`monitor.columns.Columns`: rows of a frozen dataclass held a list per field."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from monitor.columns import Columns


@dataclass(frozen=True)
class _Row:
    name: str
    hour: datetime
    value: float


class _Rows(Columns[_Row], row_type=_Row):
    pass


_ROWS = [_Row("a", datetime(2026, 11, 1, h, tzinfo=UTC), h / 3) for h in range(5)]


def test_from_tuples_holds_what_from_rows_holds_and_gives_the_rows_back() -> None:
    built = _Rows.from_tuples([_Rows.astuple(r) for r in _ROWS])
    assert built.columns == _Rows.from_rows(_ROWS).columns
    assert built.rows() == _ROWS and len(built) == 5 and built["value"][3] == 1.0


def test_from_tuples_of_nothing_is_empty_columns() -> None:
    empty = _Rows.from_tuples([])
    assert len(empty) == 0 and empty.columns == {"name": [], "hour": [], "value": []}


@pytest.mark.parametrize("bad", [("a", datetime(2026, 11, 1, tzinfo=UTC)), ("a", None, 1.0, "extra")])
def test_a_row_of_another_width_is_refused(bad: tuple) -> None:
    rows = [_Rows.astuple(_ROWS[0]), bad]
    with pytest.raises(ValueError, match=r"_Rows rows have \[\d\] fields, not 3"):
        _Rows.from_tuples(rows)
