"""The board's data-access seam: one writer thread, a few reader threads, one hop per command.

A command is a plain function ``fn(tx, ...)`` that runs inside one ``BEGIN IMMEDIATE`` transaction
on the writer thread; it validates, writes state and appends its activity rows through
``tx.record``. The event loop pays one thread hop per command, never one per statement. Reads run
the same way on reader connections. This is the whole surface a PostgreSQL store would implement.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import orjson

from shared.errors import ERROR_STATUS, TaskloomError
from shared.events import EVENT_SET
from shared.timestamps import format_timestamp

P = ParamSpec("P")
T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
READER_THREADS = 2


class SchemaTooNew(RuntimeError):
    """The database file was written by a newer Taskloom; we refuse to touch it."""


@dataclass(frozen=True)
class Actor:
    kind: str
    id: str


SYSTEM_ACTOR = Actor("system", "board")


def utc_now() -> str:
    return format_timestamp(datetime.now(timezone.utc))


def migrations() -> list[tuple[int, str]]:
    """The numbered migration scripts shipped with this code, in order."""
    folder = resources.files("services.board") / "migrations"
    scripts = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0])
            scripts.append((number, entry.read_text(encoding="utf-8")))
    scripts.sort()
    return scripts


def schema_version() -> int:
    return migrations()[-1][0]


def connect(path: Path) -> sqlite3.Connection:
    """A connection with the board's pragmas; autocommit mode, transactions are explicit."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def migrate(path: Path) -> None:
    """Create or upgrade the file; a file from a newer schema is refused before anything is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        latest = schema_version()
        if current > latest:
            raise SchemaTooNew(
                f"{path} has schema version {current}, newer than this Taskloom understands ({latest}); "
                "upgrade Taskloom or point --data-dir elsewhere. The file was not modified."
            )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        for number, script in migrations():
            if number <= current:
                continue
            # executescript commits first, so the script and its version bump form one transaction.
            conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
        conn.execute(
            "INSERT OR IGNORE INTO board_meta (key, value) VALUES ('board_id', ?)",
            (f"brd_{secrets.token_hex(8)}",),
        )
    finally:
        conn.close()


def translate_integrity_error(exc: sqlite3.DatabaseError) -> TaskloomError:
    """Map a trigger's RAISE(ABORT, 'CODE: text') to the stable error it stands for."""
    text = str(exc)
    code, _, detail = text.partition(":")
    code = code.strip()
    known = {
        "INVALID_TRANSITION": "INVALID_TRANSITION",
        "TERMINAL_STATE": "TERMINAL_STATE",
        "RELATION_INVALID": "RELATION_INVALID",
        "RELATION_CYCLE": "RELATION_CYCLE",
        "RELATION_DEPTH": "RELATION_DEPTH",
        "RELATION_FAN_IN": "RELATION_FAN_IN",
    }
    if code in known and code in ERROR_STATUS:
        return TaskloomError(known[code], detail.strip() or text, details={"constraint": code})
    return TaskloomError("VALIDATION_FAILED", f"refused by the database: {text}", details={"constraint": text})


@dataclass
class Tx:
    """One command's transaction: the connection, who is acting, and the commit time."""

    conn: sqlite3.Connection
    actor: Actor
    now: str
    appended: list[int] = field(default_factory=list)

    def execute(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Row | None:
        return self.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def record(
        self,
        event: str,
        changes: dict[str, Any],
        *,
        task_id: str | None,
        project_id: str | None,
        actor: Actor | None = None,
    ) -> int:
        """Append one activity row; it carries the revision its own insert produces."""
        if event not in EVENT_SET:
            raise ValueError(f"undeclared event {event!r}")
        who = actor or self.actor
        revision = self.conn.execute("SELECT revision + 1 FROM global_revision WHERE singleton = 1").fetchone()[0]
        self.conn.execute(
            "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (task_id, project_id, who.kind, who.id, event, orjson.dumps(changes).decode(), revision, self.now),
        )
        self.appended.append(revision)
        return revision


CommitListener = Callable[[int], None]


class SqliteStore:
    """The SQLite implementation of the store seam."""

    def __init__(self, path: Path, *, clock: Callable[[], str] = utc_now) -> None:
        self.path = path
        self.clock = clock
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="taskloom-writer")
        self._readers = ThreadPoolExecutor(max_workers=READER_THREADS, thread_name_prefix="taskloom-reader")
        self._local = threading.local()
        self._listeners: list[CommitListener] = []
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        migrate(self.path)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Called on the event loop after every commit that appended activity rows."""
        self._listeners.append(listener)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    # -- the seam -------------------------------------------------------------------------------

    def run_command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> tuple[T, list[int]]:
        """Run ``fn(tx, ...)`` in one transaction on the calling thread; returns (result, revisions)."""
        conn = self._conn()
        tx = Tx(conn, actor, self.clock())
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(tx, *args, **kwargs)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            raise translate_integrity_error(exc) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result, tx.appended

    def run_query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(conn, ...)`` in one read transaction (a consistent snapshot)."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            return fn(conn, *args, **kwargs)
        finally:
            conn.execute("COMMIT")

    async def command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(self.run_command, fn, actor, *args, **kwargs)
        result, appended = await loop.run_in_executor(self._writer, call)
        if appended:
            for listener in self._listeners:
                listener(appended[-1])
        return result

    async def query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(self.run_query, fn, *args, **kwargs))
