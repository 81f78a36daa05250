"""`monitor.columns.Columns`: rows of a frozen dataclass held a list per field."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from monitor.columns import Columns, shared_values


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


@pytest.mark.parametrize(
    "values",
    [
        ["a", None, "b", "a", None],
        [None, None],
        ["x"],
        [],
        [f"v{i % 7}" if i % 5 else None for i in range(1000)],  # nulls past the first byte of bits
    ],
)
def test_shared_values_are_to_pylist_with_one_object_per_value(values: list[str | None]) -> None:
    import pyarrow as pa

    column = pa.chunked_array([pa.array(values[:2], pa.string()), pa.array(values[2:], pa.string())])
    got = shared_values(column, str.upper, null="-")
    assert got == [v.upper() if v is not None else "-" for v in values]
    assert len({id(v) for v in got}) == len(set(got))  # one object per distinct value


def test_codes_read_a_sliced_array_from_its_offset() -> None:
    """`shared_values` encodes a fresh array (offset 0); its codes' reader reads any offset."""
    import pyarrow as pa

    from monitor.columns import _codes

    whole = pa.array([0, None, 1, None, 2, 0, None, 1, 2, None, 0, 1, None], pa.int32())
    for start in range(len(whole)):
        part = whole.slice(start)
        assert _codes(part).tolist() == [-1 if v is None else v for v in part.to_pylist()]


@pytest.mark.parametrize("kind", ["uint8", "int8", "uint16", "int64"])
def test_shared_values_read_a_dictionary_column_with_its_own_index_type(kind: str) -> None:
    """A column already dictionary-encoded (a DuckDB ENUM, say) keeps its index type: an unsigned
    index past the signed range is read as itself."""
    import pyarrow as pa

    codes = [5, 120, None, 126, 0]
    if kind.startswith("u"):
        codes = [5, 200, None, 255, 0]
    names = pa.array([f"v{i}" for i in range(300)])
    column = pa.chunked_array([pa.DictionaryArray.from_arrays(pa.array(codes, getattr(pa, kind)()), names)])
    assert shared_values(column) == [None if c is None else f"v{c}" for c in codes]


def test_shared_values_do_not_import_pandas() -> None:
    """pyarrow's `fill_null` and `to_numpy` import pandas on first use (0.25 s of a process)."""
    import subprocess
    import sys

    # the column built from its buffers: pyarrow converting Python values imports pandas itself
    probe = (
        "import struct, sys, pyarrow as pa; from monitor.columns import shared_values;"
        " offsets = pa.py_buffer(struct.pack('<4i', 0, 1, 1, 2));"
        " column = pa.Array.from_buffers(pa.string(), 3, [pa.py_buffer(bytes([5])), offsets, pa.py_buffer(b'ab')]);"
        " print(shared_values(pa.chunked_array([column])), 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['a', None, 'b'] False"
