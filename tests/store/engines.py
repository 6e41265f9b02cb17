"""The two engines of the store, opened the same way for the conformance suite."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from services.board.postgres_store import PgConnection, PostgresStore
from services.board.sqlite_store import SqliteStore
from services.board.store import WriterStore, utc_now

ENGINES = ("sqlite", "postgresql")


class Refused(Exception):
    """A hand-written statement the database refused (a trigger, a constraint): its message."""


class Raw:
    """A plain client of the engine's own driver in autocommit mode, as a script would open one.

    SQL is written once with ``?`` placeholders; on PostgreSQL they are rewritten as the store does.
    """

    def __init__(self, conn: Any, errors: tuple[type[BaseException], ...]) -> None:
        self.conn = conn
        self.errors = errors

    def execute(self, sql: str, params: Any = ()) -> Any:
        try:
            return self.conn.execute(sql, params)
        except self.errors as exc:
            diag = getattr(exc, "diag", None)
            raise Refused(getattr(diag, "message_primary", None) or str(exc)) from exc


def open_store(engine: str, tmp_path: Path, database_url: str | None, *, clock: Callable[[], str] = utc_now) -> WriterStore:
    """``clock``: the wall clock the store stamps its commits with (a test may set it forward)."""
    if engine == "sqlite":
        return SqliteStore(tmp_path / "board.sqlite", clock=clock)
    assert database_url is not None
    return PostgresStore(database_url, clock=clock)


@contextmanager
def raw_client(store: WriterStore) -> Iterator[Raw]:
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        try:
            yield Raw(conn, (sqlite3.IntegrityError,))
        finally:
            conn.close()
        return
    assert isinstance(store, PostgresStore)
    pg = psycopg.connect(store.url, autocommit=True)
    try:
        yield Raw(PgConnection(pg), (psycopg.errors.RaiseException, psycopg.IntegrityError))
    finally:
        pg.close()
