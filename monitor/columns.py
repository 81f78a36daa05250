"""Rows of a frozen dataclass held as one list per field: what an engine returns, kept columnar.

Tens of thousands of node-hours or GPU-hours cross from DuckDB or SQLite into Python on every
detection; building a frozen dataclass for each costs more than the query (6-8 us apiece). Code
that only reads a few fields reads the columns; `row` / `rows` build the objects for the callers
that want them (tests, tools, the few live-estimated hours).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from operator import attrgetter, itemgetter
from typing import Any, ClassVar, Generic, Self, TypeVar

__all__ = ["Columns", "objects", "shared_values"]

T = TypeVar("T")


class Columns(Generic[T]):
    """`columns`: field name -> values, one list per field of `row_type`, all of one length."""

    __slots__ = ("columns",)
    row_type: ClassVar[type]
    names: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, *, row_type: type | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if row_type is not None:
            cls.row_type = row_type
            cls.names = tuple(f.name for f in fields(row_type))

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        if missing := set(self.names) - columns.keys():
            raise ValueError(f"{type(self).__name__} lacks columns {sorted(missing)}")
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"{type(self).__name__} columns differ in length: {sorted(lengths)}")
        self.columns = columns

    @classmethod
    def from_rows(cls, rows: Sequence[T]) -> Self:
        return cls({name: list(map(attrgetter(name), rows)) for name in cls.names})

    @classmethod
    def from_tuples(cls, rows: Sequence[tuple]) -> Self:
        """From tuples of the fields in order. A column at a time (`itemgetter` over the rows):
        half the time of transposing with `zip(*rows)` (0.24 s against 0.49 s for 500,000 rows of
        15 fields), which was a fifth of reading stored utilization hours."""
        if widths := {len(r) for r in rows} - {len(cls.names)}:
            raise ValueError(f"{cls.__name__} rows have {sorted(widths)} fields, not {len(cls.names)}")
        return cls({name: list(map(itemgetter(i), rows)) for i, name in enumerate(cls.names)})

    def __len__(self) -> int:
        return len(self.columns[self.names[0]])

    def __getitem__(self, name: str) -> list[Any]:
        return self.columns[name]

    def row(self, i: int) -> T:
        return self.row_type(*(self.columns[name][i] for name in self.names))

    def rows(self) -> list[T]:
        return [self.row(i) for i in range(len(self))]

    @classmethod
    def astuple(cls, row: T) -> tuple:
        """A row's fields in order (shallow: `dataclasses.astuple` deep-copies)."""
        return tuple(getattr(row, name) for name in cls.names)


def objects(column: Sequence[Any]) -> Any:
    """A column as a numpy object array, one dimension whatever its values (`numpy.array` makes a
    list of tuples two-dimensional): for picking and comparing a column's values in numpy's loops,
    not Python's."""
    import numpy as np

    return np.fromiter(column, dtype=object, count=len(column))


def shared_values(column: Any, convert: Callable[[Any], Any] | None = None, null: Any = None) -> list[Any]:
    """An Arrow column's `to_pylist()` with one object per distinct value: `to_pylist` builds a new
    string per cell, 1.2 M node-hours x a dozen string columns held 1.4 GB at 7.4 M export rows
    (bench scale 48); a node's names repeat every hour. `convert` is applied once per distinct
    value; a null reads as `null`. The values are picked by numpy (an object array indexed by the
    codes): a list comprehension over the codes took 0.035 s a column of 382,000 node-hours, numpy
    0.009 s."""
    encoded = column.combine_chunks().dictionary_encode()
    values = encoded.dictionary.to_pylist()
    if convert is not None:
        values = [convert(v) for v in values]
    values.append(null)  # a null's index: -1
    return objects(values)[_codes(encoded.indices)].tolist()  # type: ignore[no-any-return]


def _codes(indices: Any) -> Any:
    """A dictionary's integer indices as a numpy int64 array, a null as -1, read from the Arrow
    buffers: pyarrow's own `fill_null` and `to_numpy` import pandas on their first call (0.25 s of a
    process that never uses it, 7% of `gpucost analyze` at bench scale 5, where `shared_values`
    was its only importer)."""
    import numpy as np

    n, offset = len(indices), indices.offset
    if n == 0:
        return np.zeros(0, np.int64)
    validity, data = indices.buffers()
    kind = np.dtype(str(indices.type))  # int32 from `dictionary_encode`; a dictionary column keeps its own
    codes = np.frombuffer(data, dtype=kind, count=offset + n)[offset:].astype(np.int64)
    if indices.null_count:
        valid = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little", count=offset + n)
        codes[valid[offset:] == 0] = -1
    return codes
