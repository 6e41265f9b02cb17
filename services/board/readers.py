"""The board's asynchronous read side: one statement per await, on aiosqlite connections.

Reads of the log are one statement each (a poll of ``PRAGMA data_version``, a page of rows with
its head), so they are what an async driver is for: no thread pool of our own, one hop per read.
Commands stay on the store's writer thread (a command is one function in one transaction; an
``await`` per statement costs a hop each and lets other coroutines run between the statements).

The names say what a read does, not how SQLite does it, so a PostgreSQL store can hand out the
same reader on an ``AsyncConnection``: ``changed`` would be ``LISTEN``/``NOTIFY`` there.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Awaitable, Callable
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, NamedTuple

import aiosqlite

from . import activities
from .pages import Frame, Page, encode_row, page_of

#: Connections a process keeps for catch-up reads (streams that replay or fell behind), beside
#: the log reader's own; each is one thread in aiosqlite, so reads queue there, not in a pool.
CATCH_UP_READERS: Final = 2

_COLUMNS = activities.ACTIVITY_COLUMNS
_NULLS = ", ".join("NULL" for _ in _COLUMNS.split(","))
#: The head of the log and the connection's ``data_version``, read in the statement's own snapshot
#: (the table-valued form of the pragma, https://www.sqlite.org/pragma.html#pragfunc).
_SNAPSHOT = "SELECT revision, data_version FROM global_revision, pragma_data_version WHERE singleton = 1"
#: One statement, so one snapshot: the rows after a revision and, as the last member, the head and
#: the data_version of that snapshot (NULL on the activity rows; every activity column NULL there).
PAGE_SQL: Final = (
    f"SELECT * FROM (SELECT {_COLUMNS}, NULL AS head, NULL AS data_version FROM task_activities"
    " WHERE revision > ? ORDER BY revision LIMIT ?)"
    f" UNION ALL SELECT {_NULLS}, revision, data_version FROM global_revision, pragma_data_version"
    " WHERE singleton = 1"
)
PAGE_WIDTH: Final = len(_COLUMNS.split(",")) + 2
DATA_VERSION_SQL: Final = "PRAGMA data_version"

_by_revision = attrgetter("revision")


class Snapshot(NamedTuple):
    """What a read saw besides its rows: the last revision, and the connection's data_version."""

    head: int
    data_version: int


def _decode(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Any:
    """Row factory of a reader connection. It runs on the connection's thread, so the SSE bytes of
    a page are encoded there, off the event loop, as they were on the reader's own thread before."""
    if len(row) != PAGE_WIDTH:
        return row
    if row[0] is None:
        return Snapshot(row[-2], row[-1])  # the head row (an activity's id is its INTEGER PRIMARY KEY)
    return encode_row(sqlite3.Row(cursor, row))


class ActivityReader:
    """One read connection to the log: ``fetch_after``, ``head``, ``changed``; one await each."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._data_version: int | None = None

    @classmethod
    async def open(cls, path: Path, *, busy_timeout_ms: int) -> ActivityReader:
        conn = await aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)
        try:
            # The board's pragmas (store.connect), and query_only: this connection never writes.
            await conn.executescript(
                f"PRAGMA busy_timeout = {int(busy_timeout_ms)}; PRAGMA foreign_keys = ON;"
                " PRAGMA synchronous = NORMAL; PRAGMA query_only = ON;"
            )
        except BaseException:
            await conn.close()
            raise
        conn.row_factory = _decode
        return cls(conn)

    async def close(self) -> None:
        await self._conn.close()

    async def fetch_after(self, revision: int, limit: int) -> Page:
        """Streamable rows with a revision above ``revision`` (at most ``limit``), in one snapshot."""
        items = await self._conn.execute_fetchall(PAGE_SQL, (revision, limit))
        frames: list[Frame] = []
        snapshot: Snapshot | None = None
        for item in items:
            if type(item) is Frame:
                frames.append(item)
            else:
                snapshot = item
        if snapshot is None:
            raise RuntimeError("the log's head row is missing (global_revision)")
        self._data_version = snapshot.data_version
        # SQL leaves the order of a compound's output open; sorting rows already in order is one
        # pass, and the fan-out's cursor rule needs revision order (SPEC §6.3).
        frames.sort(key=_by_revision)
        return page_of(revision, limit, frames, snapshot.head)

    async def head(self) -> int:
        """The last revision committed to the file."""
        ((head, version),) = await self._conn.execute_fetchall(_SNAPSHOT)
        self._data_version = version
        return int(head)

    async def changed(self) -> bool:
        """True when another connection has committed since this reader's last read (or ever).

        ``PRAGMA data_version`` changes whenever any *other* connection commits to the file: the
        board's writer thread, or another process (https://www.sqlite.org/pragma.html#pragma_data_version).
        ``fetch_after`` and ``head`` note the version of the snapshot they read, so a commit they
        saw is not reported again, and one they did not see is.
        """
        ((version,),) = await self._conn.execute_fetchall(DATA_VERSION_SQL)
        if version == self._data_version:
            return False
        self._data_version = version
        return True

    def forget(self) -> None:
        """After a failed read: the next ``changed`` says True whatever the file says."""
        self._data_version = None


class ReaderPool:
    """A few ``ActivityReader``s taking the catch-up reads of every stream in turn."""

    def __init__(self, readers: list[ActivityReader]) -> None:
        self._readers = readers
        self._turn = itertools.cycle(readers)

    @classmethod
    async def open(cls, opener: Callable[[], Awaitable[ActivityReader]], *, size: int = CATCH_UP_READERS) -> ReaderPool:
        readers: list[ActivityReader] = []
        try:
            for _ in range(size):
                readers.append(await opener())
        except BaseException:
            for reader in readers:
                await reader.close()
            raise
        return cls(readers)

    async def fetch_after(self, revision: int, limit: int) -> Page:
        return await next(self._turn).fetch_after(revision, limit)

    async def close(self) -> None:
        for reader in self._readers:
            await reader.close()
