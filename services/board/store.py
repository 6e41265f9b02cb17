"""The board's data-access seam: one writer thread, a few reader threads, one hop per command.

A command is a plain function ``fn(tx, ...)`` that runs inside one ``BEGIN IMMEDIATE`` transaction
on the writer thread; it validates, writes state and appends its activity rows through
``tx.record``. The event loop pays one thread hop per command, never one per statement. Reads run
the same way on reader connections. This is the whole surface a PostgreSQL store would implement.
"""

from __future__ import annotations

import asyncio
import contextlib
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
#: The database header (https://www.sqlite.org/fileformat.html#the_database_header): a magic
#: string, then at offset 60 the 4-byte big-endian user_version.
SQLITE_MAGIC = b"SQLite format 3\x00"
USER_VERSION_OFFSET = 60
#: Primary result codes that mean "the file cannot be used right now", not "this request is wrong".
UNAVAILABLE_CODES = frozenset({
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL,
})


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


def connect(path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A connection with the board's pragmas; autocommit mode, transactions are explicit."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def header_user_version(path: Path) -> int | None:
    """``user_version`` read from the file's header without opening it through SQLite.

    Opening a WAL file creates ``-wal``/``-shm`` siblings, so a newer file is judged by its bytes
    first. None when the header cannot be trusted alone: no file, not SQLite, or a WAL sibling
    that may hold a newer page 1.
    """
    if Path(f"{path}-wal").exists():
        return None
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        return None
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return None
    return int.from_bytes(header[USER_VERSION_OFFSET:USER_VERSION_OFFSET + 4], "big", signed=True)


def _refuse_newer(path: Path, current: int, latest: int) -> None:
    if current > latest:
        raise SchemaTooNew(
            f"{path} has schema version {current}, newer than this Taskloom understands ({latest}); "
            "upgrade Taskloom or point --data-dir elsewhere. The file was not modified."
        )


def _statements(script: str) -> list[str]:
    """Split a migration into statements; ``sqlite3.complete_statement`` knows trigger bodies."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending)
            pending = ""
    if pending.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in pending.splitlines()
    ):
        raise ValueError(f"incomplete statement at the end of a migration: {pending[:80]!r}")
    return statements


def migrate(path: Path) -> None:
    """Create or upgrade the file; a file from a newer schema is refused before anything is written."""
    latest = schema_version()
    known = header_user_version(path)
    if known is not None:
        _refuse_newer(path, known, latest)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        seen = conn.execute("PRAGMA user_version").fetchone()[0]
        _refuse_newer(path, seen, latest)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        for number, script in migrations():
            if number <= seen:
                continue
            # Each step re-reads the version under the write lock: two processes opening one fresh
            # file at once must not both run a script (the second would find its tables there).
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                _refuse_newer(path, current, latest)
                if number > current:
                    for statement in _statements(script):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {number}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        conn.execute(
            "INSERT OR IGNORE INTO board_meta (key, value) VALUES ('board_id', ?)",
            (f"brd_{secrets.token_hex(8)}",),
        )
    finally:
        conn.close()


def translate_operational_error(exc: sqlite3.OperationalError) -> TaskloomError | None:
    """A busy, locked, full or failing file is 503 STORE_UNAVAILABLE (retry later), not a 500."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in UNAVAILABLE_CODES:
        return None
    return TaskloomError(
        "STORE_UNAVAILABLE",
        f"the board's database is unavailable: {exc}",
        details={"sqlite_error": getattr(exc, "sqlite_errorname", None), "retry_after": 1},
        hint="retry in a moment; if it persists, check the disk and other processes holding the file",
    )


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
    if text.startswith("UNIQUE constraint failed"):
        # Commands check uniqueness first with a clear message; this is the backstop for a race.
        return TaskloomError("CONFLICT", f"already taken: {text}", details={"constraint": text})
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

    def __init__(
        self, path: Path, *, clock: Callable[[], str] = utc_now, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self.path = path
        self.clock = clock
        self.busy_timeout_ms = busy_timeout_ms
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

    def remove_commit_listener(self, listener: CommitListener) -> None:
        """Stop telling ``listener`` about commits (a reader leaving with its app)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, busy_timeout_ms=self.busy_timeout_ms)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    # -- the seam -------------------------------------------------------------------------------

    def run_command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> tuple[T, list[int]]:
        """Run ``fn(tx, ...)`` in one transaction on the calling thread; returns (result, revisions)."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Stamped once the write lock is held, so commit times follow revision order even when
            # another process made this command wait.
            tx = Tx(conn, actor, self.clock())
            result = fn(tx, *args, **kwargs)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.IntegrityError):
                raise translate_integrity_error(exc) from exc
            if isinstance(exc, sqlite3.OperationalError) and (unavailable := translate_operational_error(exc)):
                raise unavailable from exc
            raise
        return result, tx.appended

    def run_query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(conn, ...)`` in one read transaction (a consistent snapshot)."""
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn, *args, **kwargs)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if unavailable := translate_operational_error(exc):
                raise unavailable from exc
            raise

    def _notify(self, revision: int) -> None:
        for listener in self._listeners:
            listener(revision)

    async def command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()

        def run_and_announce() -> T:
            result, appended = self.run_command(fn, actor, *args, **kwargs)
            if appended:
                # Scheduled from the writer thread right after the commit, so the listeners hear it
                # even when the awaiting request was cancelled, and before that request resumes.
                with contextlib.suppress(RuntimeError):  # a closed loop has nobody left to tell
                    loop.call_soon_threadsafe(self._notify, appended[-1])
            return result

        return await loop.run_in_executor(self._writer, run_and_announce)

    async def query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(self.run_query, fn, *args, **kwargs))
