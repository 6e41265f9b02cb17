"""What commands and queries may assume of a database connection, whichever engine is behind it.

They are written once, against these protocols: ``conn.execute(sql, params)`` with ``?``
placeholders, rows readable by position and by column name, ``keys()`` for the names. SQLite's
own connection and row satisfy them as they are; the PostgreSQL store hands out an adapter that
rewrites the placeholders (:func:`to_pyformat`) and builds rows of the same shape.

The few places where the two engines' SQL really differs (reading inside a JSON text column)
ask :func:`dialect_of` for a fragment instead of spelling either engine's syntax.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

Params = Sequence[Any] | Mapping[str, Any]


class Row(Protocol):
    """One result row: ``row[0]``, ``row["title"]``, ``keys()``; iterating yields the values."""

    def keys(self) -> list[str]: ...

    def __getitem__(self, key: int | str, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    @property
    def rowcount(self) -> int: ...


class Connection(Protocol):
    def execute(self, sql: str, parameters: Params = ..., /) -> Cursor: ...


class Dialect:
    """SQL fragments whose spelling depends on the engine; each takes exactly one ``?``."""

    name: str = "sqlite"

    def json_array_has(self, column: str) -> str:
        """True when the JSON array of strings in ``column`` holds the text bound to ``?``."""
        return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = ?)"


class PostgresDialect(Dialect):
    name = "postgresql"

    def json_array_has(self, column: str) -> str:
        # jsonb_exists is the function behind the ``?`` operator, which the placeholders would eat.
        return f"jsonb_exists(({column})::jsonb, ?)"


SQLITE: Final = Dialect()
POSTGRESQL: Final = PostgresDialect()


def dialect_of(conn: object) -> Dialect:
    """The adapter of a non-SQLite engine names its dialect; a bare ``sqlite3.Connection`` is SQLite."""
    dialect = getattr(conn, "dialect", SQLITE)
    return dialect if isinstance(dialect, Dialect) else SQLITE


def may_write(sql: str) -> bool:
    """Whether a statement may change a row: any but a ``SELECT`` (the board's SQL is written in
    capitals; a statement that only looks otherwise is taken to write, the safe side). What the
    writer counts to know that a refused command left nothing to undo, and what makes the command
    hook read a card its command wrote again."""
    return not sql.lstrip().startswith("SELECT")


def statement_code(statement: str) -> str:
    """A migration statement without the comment lines and blank lines before it: what the
    schema checks match a ``CREATE TRIGGER`` against, and run again to repair one."""
    lines = statement.splitlines(keepends=True)
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "".join(lines).strip()


def placeholders(values: Sequence[Any]) -> str:
    """``?, ?, ?`` for an ``IN (...)`` list of ``values`` (at least one)."""
    return ", ".join("?" for _ in values) or "NULL"


@functools.lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """SQLite's placeholders (``?``, ``?NNN``, ``:name``) as psycopg's (``%s``, ``%(name)s``).

    Only outside string literals, quoted identifiers and comments; a literal ``%`` is doubled, as
    psycopg reads ``%`` as the start of a placeholder. ``?NNN`` becomes ``%(pNNN)s`` and the
    caller's sequence is turned into a mapping for it (:func:`bind`). ``::`` casts are left alone.
    """
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in ("'", '"'):
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i:end + 1].replace("%", "%%"))
            i = end + 1
        elif ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif ch == "?":
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            out.append(f"%(p{sql[i + 1:j]})s" if j > i + 1 else "%s")
            i = j
        elif ch == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_") and (i == 0 or sql[i - 1] != ":"):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            out.append(f"%({sql[i + 1:j]})s")
            i = j
        elif ch == "%":
            out.append("%%")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def bind(sql: str, params: Params) -> tuple[str, Params]:
    """The psycopg form of ``sql`` and ``params``; numbered placeholders bind by position."""
    query = to_pyformat(sql)
    if isinstance(params, Mapping) or "%(p" not in query:
        return query, params
    return query, {f"p{index}": value for index, value in enumerate(params, start=1)}
