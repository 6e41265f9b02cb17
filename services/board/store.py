"""The board's data-access seam: one writer thread, a few reader threads, one hop per command.

A command is a plain function ``fn(tx, ...)`` that runs inside one ``BEGIN IMMEDIATE`` transaction
on the writer thread; it validates, writes state and appends its activity rows through
``tx.record``. The event loop pays one thread hop per command, never one per statement. Reads run
the same way on reader connections. This is the whole surface a PostgreSQL store would implement.

Group commit: commands that queue up while the writer is busy run together in one transaction,
each inside its own ``SAVEPOINT``. A refused command rolls back to its savepoint only; the batch
pays ``BEGIN``, ``COMMIT`` and one wake-up of the event loop once. Nobody hears of a command —
neither its caller nor the commit listeners — before the batch's ``COMMIT`` has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import orjson
import structlog

from shared.errors import ERROR_STATUS, TaskloomError
from shared.events import EVENT_SET
from shared.limits import MAX_ACTIVITY_BYTES, MAX_CHANGES_BYTES
from shared.timestamps import format_timestamp

P = ParamSpec("P")
T = TypeVar("T")

log = structlog.get_logger("taskd.store")

BUSY_TIMEOUT_MS = 5000
READER_THREADS = 2
#: Most commands one transaction carries; a longer queue is served in several batches, in order.
MAX_BATCH: Final = 64
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
    return format_timestamp(datetime.now(UTC))


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


class SchemaDamaged(RuntimeError):
    """The file lacks triggers the migrations define: its rules would go unenforced."""

    def __init__(self, path: Path, missing: list[str]) -> None:
        self.missing = missing
        noun = "trigger" if len(missing) == 1 else "triggers"
        super().__init__(
            f"{path} lacks {len(missing)} {noun} the schema defines ({', '.join(missing)}), so its rules are not "
            "enforced; run `taskd serve --repair-schema` to recreate them from the migrations"
        )


_CREATE_TRIGGER = re.compile(r"CREATE\s+TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_DROP_TRIGGER = re.compile(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def _code(statement: str) -> str:
    """A statement without the comment lines and blank lines before it."""
    lines = statement.splitlines(keepends=True)
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "".join(lines).strip()


def defined_triggers() -> dict[str, str]:
    """Every trigger the migrations leave in place, name → its ``CREATE TRIGGER`` statement.

    Read from the migration SQL itself, so the list cannot drift from what the schema creates.
    """
    triggers: dict[str, str] = {}
    for _, script in migrations():
        for statement in _statements(script):
            code = _code(statement)
            if created := _CREATE_TRIGGER.match(code):
                triggers[created[1]] = code
            elif dropped := _DROP_TRIGGER.match(code):
                triggers.pop(dropped[1], None)
    return triggers


def missing_triggers(conn: sqlite3.Connection) -> list[str]:
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    return sorted(name for name in defined_triggers() if name not in present)


def verify_triggers(path: Path, *, repair: bool = False) -> list[str]:
    """Check that every trigger the migrations define exists; returns the names it recreated.

    Raises :class:`SchemaDamaged` naming the missing ones, unless ``repair`` recreates them (from
    the migration SQL, in one transaction).
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        missing = missing_triggers(conn)
        if not missing:
            return []
        if not repair:
            raise SchemaDamaged(path, missing)
        definitions = defined_triggers()
        conn.execute("BEGIN IMMEDIATE")
        try:
            missing = missing_triggers(conn)  # again, under the write lock
            for name in missing:
                conn.execute(definitions[name])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return missing
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


def translate_error(exc: BaseException) -> BaseException:
    """What a command's caller is told: a stable error for what SQLite refused, else ``exc`` itself."""
    error: TaskloomError | None = None
    if isinstance(exc, sqlite3.IntegrityError):
        error = translate_integrity_error(exc)
    elif isinstance(exc, sqlite3.OperationalError):
        error = translate_operational_error(exc)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


def refuse_unencodable(result: Any) -> None:
    """Encode a command's result before its COMMIT: a caller must never hear 500 about a change
    that was written (its retry would write it twice). Types JSON has no word for are the route's
    business (it reshapes them); what is checked is that every value can be encoded."""
    try:
        orjson.dumps(result, default=_opaque)
    except orjson.JSONEncodeError as exc:
        raise TaskloomError(
            "VALIDATION_FAILED",
            f"this change would produce a response that cannot be encoded as JSON ({exc}); nothing was written",
            details={"reason": str(exc)},
        ) from exc


def _opaque(value: Any) -> None:
    return None


def batch_lost(exc: BaseException) -> TaskloomError:
    """A transaction that could not begin or commit: every command in it is unwritten, retry later."""
    error = TaskloomError(
        "STORE_UNAVAILABLE",
        f"the board's database could not write this change: {exc}",
        details={"sqlite_error": getattr(exc, "sqlite_errorname", None), "retry_after": 1},
        hint="nothing was written; retry in a moment. If it persists, check the disk and other processes holding the file",
    )
    error.__cause__ = exc
    return error


@dataclass
class Tx:
    """One command's transaction: the connection, who is acting, and the commit time."""

    conn: sqlite3.Connection
    actor: Actor
    now: str
    appended: list[int] = field(default_factory=list)
    #: (project_id, task_id, event) of every row appended: where the conditions look (docs/conditions.md).
    scopes: list[tuple[str | None, str | None, str]] = field(default_factory=list)
    #: What the command hook leaves for after COMMIT (signals, timer deadlines); opaque here.
    effects: list[Any] = field(default_factory=list)

    def execute(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(sql, params).fetchone()
        return row

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
        revision: int = self.conn.execute("SELECT revision + 1 FROM global_revision WHERE singleton = 1").fetchone()[0]
        changes_json = orjson.dumps(changes)
        frame_size = len(changes_json) + len(
            orjson.dumps({
                "id": revision, "revision": revision, "task_id": task_id, "project_id": project_id,
                "actor_kind": who.kind, "actor_id": who.id, "event": event, "changes": None, "created_at": self.now,
            })
        )
        if len(changes_json) > MAX_CHANGES_BYTES or frame_size > MAX_ACTIVITY_BYTES:
            # The backstop of shared/limits.py: a row this large would not fit the frames and lines
            # downstream, and would stall every stream at its revision. The field limits keep every
            # command below it; refusing here writes nothing.
            raise TaskloomError(
                "VALIDATION_FAILED",
                f"this change would write a {event} row of {frame_size} bytes; at most {MAX_ACTIVITY_BYTES} fit a frame",
                details={"event": event, "size": frame_size, "limit": MAX_ACTIVITY_BYTES},
                hint="send less text at once",
            )
        self.conn.execute(
            "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (task_id, project_id, who.kind, who.id, event, changes_json.decode(), revision, self.now),
        )
        self.appended.append(revision)
        self.scopes.append((project_id, task_id, event))
        return revision


CommitListener = Callable[[int], None]
#: Runs inside each command's transaction once the command has returned, so conditions are judged
#: on the state it leaves behind, and roll back with it (docs/conditions.md).
CommandHook = Callable[[Tx], None]
#: Told on the event loop, after COMMIT, what the committed commands left in ``Tx.effects``.
EffectsListener = Callable[[list[Any]], None]


class _Job:
    """One queued command and, once its batch has ended, its outcome."""

    __slots__ = ("actor", "appended", "args", "effects", "error", "fn", "future", "kwargs", "loop", "result")

    def __init__(
        self,
        fn: Callable[..., Any],
        actor: Actor,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.fn = fn
        self.actor = actor
        self.args = args
        self.kwargs = kwargs
        self.loop = loop
        self.future = future
        self.result: Any = None
        self.error: BaseException | None = None
        self.appended: list[int] = []
        self.effects: list[Any] = []

    def lose(self, error: BaseException) -> None:
        """The transaction this command ran in was rolled back: whatever it did is gone."""
        self.result, self.appended, self.effects, self.error = None, [], [], error


#: Tells the writer thread to finish the commands queued before it and stop.
_STOP: Final = object()


class SqliteStore:
    """The SQLite implementation of the store seam."""

    def __init__(
        self, path: Path, *, clock: Callable[[], str] = utc_now, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self.path = path
        self.clock = clock
        self.busy_timeout_ms = busy_timeout_ms
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._closed = False
        self._readers = ThreadPoolExecutor(max_workers=READER_THREADS, thread_name_prefix="taskloom-reader")
        self._local = threading.local()
        self._listeners: list[CommitListener] = []
        self._effects_listeners: list[EffectsListener] = []
        #: Set by the board's conditions engine; None runs commands without conditions.
        self.command_hook: CommandHook | None = None
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        #: Transactions the writer thread committed or tried, and the commands they carried (bench, tests).
        self.batches = 0
        self.batched_commands = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        migrate(self.path)

    def close(self) -> None:
        """Finish the commands already queued, then stop the threads and close every connection."""
        with self._writer_lock:
            self._closed = True
            writer = self._writer
        if writer is not None:
            # Nothing can be queued after this: _submit checks _closed under the same lock.
            self._queue.put(_STOP)
            writer.join()
        self._readers.shutdown(wait=True)
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Called on the event loop after every commit that appended activity rows."""
        self._listeners.append(listener)

    def add_effects_listener(self, listener: EffectsListener) -> None:
        """Called on the event loop with the effects of the commands a batch committed."""
        self._effects_listeners.append(listener)

    def remove_effects_listener(self, listener: EffectsListener) -> None:
        if listener in self._effects_listeners:
            self._effects_listeners.remove(listener)

    def remove_commit_listener(self, listener: CommitListener) -> None:
        """Stop telling ``listener`` about commits (a reader leaving with its app)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def queued(self) -> int:
        """Commands waiting for the writer thread (tests and diagnostics; approximate)."""
        return self._queue.qsize()

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
        """Run ``fn(tx, ...)`` in one transaction on the calling thread; returns (result, revisions).

        For scripts, tests, benches and other processes writing the file: it does not go through
        the writer thread, so SQLite's lock (and ``busy_timeout``) orders it against the board.
        """
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Stamped once the write lock is held, so commit times follow revision order even when
            # another process made this command wait.
            tx = Tx(conn, actor, self.clock())
            result = fn(tx, *args, **kwargs)
            if self.command_hook is not None:
                self.command_hook(tx)
            refuse_unencodable(result)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = translate_error(exc)
            if error is exc:
                raise
            raise error from exc
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

    async def command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(tx, ...)`` on the writer thread; returns once its transaction has committed.

        A command that has been queued runs and commits even if its caller is cancelled meanwhile
        (the client went away): the commit listeners still hear of it, nobody awaits the result.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._submit(_Job(fn, actor, args, kwargs, loop, future))
        return await future

    async def query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(self.run_query, fn, *args, **kwargs))

    # -- the writer thread ----------------------------------------------------------------------

    def _submit(self, job: _Job) -> None:
        with self._writer_lock:
            if self._closed:
                raise RuntimeError("the store is closed")
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="taskloom-writer", daemon=True)
                self._writer.start()
            # Under the lock, so no command can slip in behind close()'s stop marker.
            self._queue.put(job)

    def _write_loop(self) -> None:
        """Take whatever is queued (up to MAX_BATCH commands), run it as one transaction, repeat."""
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            try:
                revision = self._run_batch(batch)
            except BaseException as exc:  # the writer must outlive anything a batch does
                log.exception("write_batch_failed", commands=len(batch))
                self._abandon(self._conn())
                for job in batch:
                    job.lose(batch_lost(exc))
                revision = 0
            self._settle(batch, revision)

    def _run_batch(self, batch: list[_Job]) -> int:
        """One transaction for the whole batch; returns the last revision it appended (0: none).

        When this returns, every job holds its outcome: a result (committed) or an error (nothing
        of it written).
        """
        conn = self._conn()
        self.batches += 1
        self.batched_commands += len(batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            # Another process holds the write lock past busy_timeout, or the file is unusable.
            for job in batch:
                job.lose(batch_lost(exc))
            return 0
        # A lone command needs no savepoint: its refusal rolls back the transaction itself.
        savepoints = len(batch) > 1
        for position, job in enumerate(batch):
            # Each command's own clock reading, taken under the write lock: commit times follow
            # revision order inside a batch and across processes.
            tx = Tx(conn, job.actor, self.clock())
            if savepoints:
                conn.execute("SAVEPOINT command")
            try:
                job.result = job.fn(tx, *job.args, **job.kwargs)
                if self.command_hook is not None:
                    self.command_hook(tx)
                refuse_unencodable(job.result)
            except Exception as exc:  # noqa: BLE001 - any refusal or bug is this command's alone
                job.error = translate_error(exc)
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back itself (disk full, I/O error): the
                    # commands before this one are gone too, and nobody has been told otherwise.
                    for earlier in batch[:position]:
                        earlier.lose(batch_lost(exc))
                    return self._run_rest(batch[position + 1:])
                if savepoints:
                    conn.execute("ROLLBACK TO command")
                    conn.execute("RELEASE command")
                else:
                    conn.execute("ROLLBACK")
                    return 0
                continue
            if savepoints:
                conn.execute("RELEASE command")
            job.appended = tx.appended
            job.effects = tx.effects
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # The whole batch is unwritten; which command made COMMIT fail cannot be told, so
            # every caller hears 503 and may retry.
            self._abandon(conn)
            for job in batch:
                job.lose(batch_lost(exc))
            return 0
        return max((job.appended[-1] for job in batch if job.appended), default=0)

    def _run_rest(self, rest: list[_Job]) -> int:
        """Commands of a lost batch that had not run yet get a transaction of their own."""
        return self._run_batch(rest) if rest else 0

    @staticmethod
    def _abandon(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _settle(self, batch: list[_Job], revision: int) -> None:
        """Hand the outcomes to the event loops that wait for them: one wake-up per loop and batch."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, jobs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody left to tell
                loop.call_soon_threadsafe(self._deliver, jobs, revision)

    def _deliver(self, jobs: list[_Job], revision: int) -> None:
        """On the event loop, after COMMIT: listeners first, then the callers resume."""
        if revision:
            self._notify(revision)
        effects = [effect for job in jobs if job.error is None for effect in job.effects]
        if effects:
            for effects_listener in tuple(self._effects_listeners):
                try:
                    effects_listener(effects)
                except Exception:
                    log.exception("effects_listener_failed", revision=revision)
        for job in jobs:
            if job.future.done():
                continue  # cancelled: the caller went away; its command stands
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.result)

    def _notify(self, revision: int) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(revision)
            except Exception:
                log.exception("commit_listener_failed", revision=revision)
