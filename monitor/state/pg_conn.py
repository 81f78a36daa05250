"""The connection `PostgresStore.transaction()` yields: sqlite3's surface over psycopg.

Components call `execute` / `executemany` / `cursor()` with SQLite SQL and `?` placeholders; each
statement is translated once (`monitor.state.dialect`, cached per store) and rows come back as
`Row`, read like `sqlite3.Row`. `cursor.lastrowid` comes from a `RETURNING` of the table's
identity column that the dialect adds to single-row INSERTs; a bulk `INSERT ... VALUES`
through `executemany` runs as one statement over arrays.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from monitor.state.dialect import UntranslatableSQL, has_placeholders, translate

if TYPE_CHECKING:
    from monitor.state.postgres import PostgresStore

__all__ = ["PgConnection", "PgCursor", "Row"]

#: `INSERT INTO t (...) VALUES (%s, ..., %s) [ON CONFLICT ...]`, as translated: batched by executemany.
_VALUES = re.compile(
    r"(?P<head>INSERT\s.*?\sVALUES\s*)(?P<group>\(\s*%s(?:\s*,\s*%s)*\s*\))(?P<tail>.*)", re.S | re.I
)
_ARRAY_MIN_ROWS = 50  # below this, row by row costs less than the savepoint and the arrays
_TARGET = re.compile(r"INSERT\s+INTO\s+(?P<table>.+?)\s*\((?P<cols>[^()]*)\)\s*VALUES\s*", re.S | re.I)


class Row:
    """A result row read like `sqlite3.Row`: by index, slice or (case-insensitive) column name."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: Sequence[Any]):
        self._index, self._values = index, tuple(values)

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            i = self._index.get(key)
            if i is None:
                i = self._index.get(key.lower())
            if i is None:
                raise IndexError(f"no such column: {key}")
            return self._values[i]
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._values == other._values and self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"Row({ {n: self._values[i] for n, i in self._index.items()}!r})"


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = [c.name for c in cursor.description or ()]
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(n, i)  # the first of duplicate names wins, as in sqlite3.Row
    return lambda values: Row(index, values)


class _Catalog:
    """Table facts the dialect needs (keys, identity column), cached per store until a migration."""

    def __init__(self, raw: Any, cache: dict[tuple[str, str], Any]):
        self._raw, self._cache = raw, cache

    def _ask(self, what: str, table: str, sql: str) -> Any:
        hit = self._cache.get((what, table))
        if hit is not None:
            return hit
        rows = self._raw.execute(sql, (table,)).fetchall()
        value = [tuple(r) for r in rows]
        if value:  # an unknown table is asked again (it may be created by a later migration)
            self._cache[(what, table)] = value
        return value

    def columns(self, table: str) -> list[str]:
        sql = (
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum"
        )
        return [r[0] for r in self._ask("columns", table, sql)]

    def unique_keys(self, table: str) -> list[list[str]]:
        sql = (
            "SELECT i.indisprimary, array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY"
            " AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " ORDER BY k.n)::text[] FROM pg_index i WHERE i.indrelid = to_regclass(%s) AND i.indisunique"
            " ORDER BY i.indisprimary DESC, i.indexrelid"
        )
        return [list(r[1]) for r in self._ask("keys", table, sql)]

    def types(self, table: str) -> list[tuple[str, str]]:
        sql = (
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
        return self._ask("types", table, sql)

    def identity(self, table: str) -> str | None:
        sql = (
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attidentity <> ''"
            " AND attnum > 0 AND NOT attisdropped"
        )
        found = self._ask("identity", table, sql)
        return found[0][0] if found else None


class PgCursor:
    """The subset of `sqlite3.Cursor` components use, over a psycopg cursor."""

    def __init__(self, conn: PgConnection):
        self._conn = conn
        self._cur = conn.raw.cursor(row_factory=_row_factory)
        self._hidden = False  # the result is our own RETURNING (for lastrowid), not the caller's
        self._batched_rowcount: int | None = None
        self.lastrowid: int | None = None

    @property
    def row_factory(self) -> Any:
        return self._cur.row_factory

    @row_factory.setter
    def row_factory(self, factory: Any) -> None:
        """None: plain tuples (as in sqlite3); anything else: our `Row`."""
        from psycopg.rows import tuple_row

        self._cur.row_factory = tuple_row if factory is None else _row_factory

    @property
    def rowcount(self) -> int:
        if self._batched_rowcount is not None:
            return self._batched_rowcount
        return self._cur.rowcount

    @property
    def description(self) -> Any:
        return None if self._hidden else self._cur.description

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        query, bound, hidden = self._conn.sql(sql, params, returning=True)
        self._cur.execute(query, bound)
        self._hidden, self.lastrowid, self._batched_rowcount = hidden, None, None
        if hidden:
            got = self._cur.fetchone()
            self.lastrowid = None if got is None else int(got[0])
        return self

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        """As sqlite3's, in order. `INSERT ... VALUES (?, ...)` runs as one statement over arrays
        (see `_insert_arrays`) instead of one round trip per row."""
        query, _, _ = self._conn.sql(sql, (), returning=False, force_params=True)
        rows = [tuple(p) for p in seq]
        self._hidden, self.lastrowid, self._batched_rowcount = False, None, None
        parts = _VALUES.fullmatch(query)
        if parts is None or len(rows) < _ARRAY_MIN_ROWS or "%s" in parts["head"] + parts["tail"]:
            self._cur.executemany(query, rows)
        else:
            self._insert_arrays(query, parts, rows)
        return self

    def _insert_arrays(self, query: str, parts: re.Match[str], rows: list[tuple[Any, ...]]) -> None:
        """`INSERT INTO t (c...) SELECT * FROM unnest(%s::type[], ...) <tail>`, one array per column,
        typed from the catalog. Where that differs from row by row (an upsert naming one key twice
        is an error in one statement; a value that does not fit the array type), the statement is
        rolled back to a savepoint and the rows replayed one by one, so the outcome (or the error)
        is exactly the row-by-row one."""
        from psycopg import Error

        types = self._conn.column_types(parts["head"])
        width = parts["group"].count("%s")
        if types is None or len(types) != width:
            self._cur.executemany(query, rows)
            return
        arrays = ", ".join(f"%s::{t}[]" for t in types)
        sql = f"{parts['head'].rstrip()[: -len('VALUES')]}SELECT * FROM unnest({arrays}){parts['tail']}"
        raw = self._conn.raw  # savepoints on a cursor of their own: ours keeps the rowcount
        raw.execute("SAVEPOINT gpucost_rows")
        try:
            self._cur.execute(sql, [list(col) for col in zip(*rows, strict=True)])
        except Error:
            raw.execute("ROLLBACK TO SAVEPOINT gpucost_rows")
            self._cur.executemany(query, rows)
        self._batched_rowcount = self._cur.rowcount
        raw.execute("RELEASE SAVEPOINT gpucost_rows")

    def _has_rows(self) -> bool:
        return not self._hidden and self._cur.description is not None

    def fetchone(self) -> Any:
        return self._cur.fetchone() if self._has_rows() else None

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall() if self._has_rows() else []

    def fetchmany(self, size: int = 1) -> list[Any]:
        return self._cur.fetchmany(size) if self._has_rows() else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def close(self) -> None:
        self._cur.close()


class PgConnection:
    """What `PostgresStore.transaction()` yields: `execute` / `executemany` / `cursor` as in sqlite3."""

    def __init__(self, raw: Any, store: PostgresStore):
        self.raw, self._store = raw, store

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def sql(
        self, sql: str, params: Sequence[Any], *, returning: bool, force_params: bool = False
    ) -> tuple[str, tuple[Any, ...] | None, bool]:
        """(translated SQL, params to bind or None, whether the result is our own RETURNING of
        the identity column), cached per store by SQL text and mode."""
        if isinstance(params, dict):
            raise UntranslatableSQL("named parameters are not supported; use ? placeholders")
        bound = force_params or bool(params) or has_placeholders(sql)
        key = (sql, bound, returning)
        hit = self._store.sql_cache.get(key)
        if hit is None:
            catalog = _Catalog(self.raw, self._store.catalog_cache)
            query = translate(sql, params=bound, catalog=catalog, returning=returning)
            hidden = returning and query != translate(sql, params=bound, catalog=catalog)
            hit = self._store.sql_cache[key] = (query, hidden)
        return hit[0], (tuple(params) if bound else None), hit[1]

    def column_types(self, head: str) -> list[str] | None:
        """SQL types of the columns named in `INSERT INTO t (c...) VALUES`, in that order."""
        m = _TARGET.fullmatch(head)
        if m is None:
            return None
        catalog = _Catalog(self.raw, self._store.catalog_cache)
        types = dict(catalog.types(m["table"]))
        cols = [c.strip() for c in m["cols"].split(",")]
        names = [c[1:-1].replace('""', '"') if c.startswith('"') else c.lower() for c in cols]
        return [types[n] for n in names] if all(n in types for n in names) else None

    def cursor(self) -> PgCursor:
        return PgCursor(self)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        return PgCursor(self).execute(sql, params)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> PgCursor:
        return PgCursor(self).executemany(sql, seq)
