"""The SQLite engine of the store seam: one file, WAL, ``BEGIN IMMEDIATE`` as the write lock.

The default for one person's machine. On SQLite the single writer lock makes commit order equal
revision order by itself; :mod:`.store` holds everything the two engines share.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

from shared.errors import TaskloomError

from .dialect import statement_code
from .store import (
    Actor,
    MigrationFailed,
    SchemaDamaged,
    SchemaTooNew,
    Tx,
    WriterStore,
    refuse_unencodable,
    store_unavailable,
    trigger_refusal,
    utc_now,
)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
#: The database header (https://www.sqlite.org/fileformat.html#the_database_header): a magic
#: string, then at offset 60 the 4-byte big-endian user_version.
SQLITE_MAGIC = b"SQLite format 3\x00"
USER_VERSION_OFFSET = 60
#: Primary result codes that mean "the file cannot be used right now", not "this request is wrong".
UNAVAILABLE_CODES = frozenset({
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL,
})


def migration_files() -> list[tuple[int, str, str]]:
    """The numbered migration scripts shipped with this code, in order: number, file name, text."""
    folder = resources.files("services.board") / "migrations"
    scripts = []
    for entry in folder.iterdir():
        if entry.is_file() and entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0])
            scripts.append((number, entry.name, entry.read_text(encoding="utf-8")))
    scripts.sort()
    return scripts


def migrations() -> list[tuple[int, str]]:
    """The numbered migration scripts shipped with this code, in order."""
    return [(number, script) for number, _, script in migration_files()]


def schema_version() -> int:
    return migrations()[-1][0]


def connect(path: Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, synchronous: str = "full") -> sqlite3.Connection:
    """A connection with the board's pragmas; autocommit mode, transactions are explicit.

    ``synchronous`` is ``taskd serve --durability``: FULL (default) fsyncs the WAL at every commit.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")
    # Temporary data in memory: above all the journal of an open savepoint (a batch runs inside
    # ``SAVEPOINT batch``), which SQLite otherwise spills past 64 KiB to a new temporary file —
    # an open, an unlink and a write per page changed, every batch: at 16 clients about 40 % of
    # the board's system time. It holds the first image of each page a transaction changes, so it is
    # as large as the transaction's changes to pages that existed before it began.
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA synchronous = {'NORMAL' if synchronous == 'normal' else 'FULL'}")
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


#: How long a start waits for another process that is creating or upgrading the same file, seconds:
#: it holds the write lock for all its scripts, which on a loaded machine outlasts sqlite3's 5 s.
MIGRATION_BUSY_TIMEOUT_S: Final = 30.0


def migrate(path: Path) -> None:
    """Create or upgrade the file; a file from a newer schema is refused before anything is written.

    Every pending script runs in one transaction, the version re-read under its write lock: two
    processes opening one fresh file at once do not both run a script, and a script that fails
    (or a disk that fills up) leaves the file at the version it had (:class:`MigrationFailed`).
    """
    latest = schema_version()
    known = header_user_version(path)
    if known is not None:
        _refuse_newer(path, known, latest)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, timeout=MIGRATION_BUSY_TIMEOUT_S)
    try:
        _refuse_newer(path, conn.execute("PRAGMA user_version").fetchone()[0], latest)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            _refuse_newer(path, current, latest)
            pending = [(number, name, script) for number, name, script in migration_files() if number > current]
            for number, name, script in pending:
                try:
                    for statement in _statements(script):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {number}")
                except sqlite3.Error as exc:
                    raise MigrationFailed(f"migration {name}", current, str(exc)) from exc
            conn.execute(
                "INSERT OR IGNORE INTO board_meta (key, value) VALUES ('board_id', ?)",
                (f"brd_{secrets.token_hex(8)}",),
            )
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if not pending:
                    raise
                raise MigrationFailed(f"the upgrade to version {latest}", current, str(exc)) from exc
        except BaseException:
            _rollback(conn)
            raise
    finally:
        conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is still open: SQLite has already rolled back a transaction that a full
    disk or an I/O error ended, and a ROLLBACK then would hide that error behind its own."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


_CREATE_TRIGGER = re.compile(r"CREATE\s+TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_DROP_TRIGGER = re.compile(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def defined_triggers() -> dict[str, str]:
    """Every trigger the migrations leave in place, name → its ``CREATE TRIGGER`` statement.

    Read from the migration SQL itself, so the list cannot drift from what the schema creates.
    """
    triggers: dict[str, str] = {}
    for _, script in migrations():
        for statement in _statements(script):
            code = statement_code(statement)
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
            raise SchemaDamaged(str(path), missing)
        definitions = defined_triggers()
        conn.execute("BEGIN IMMEDIATE")
        try:
            missing = missing_triggers(conn)  # again, under the write lock
            for name in missing:
                conn.execute(definitions[name])
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return missing
    finally:
        conn.close()


#: What to look at when the file keeps refusing (the hint of every 503 a SQLite board gives).
UNAVAILABLE_CHECK: Final = "the disk and other processes holding the file"


def translate_operational_error(exc: sqlite3.OperationalError) -> TaskloomError | None:
    """A busy, locked, full or failing file is 503 STORE_UNAVAILABLE (retry later), not a 500."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in UNAVAILABLE_CODES:
        return None
    return store_unavailable(exc, "is unavailable", details=_driver_details(exc), check=UNAVAILABLE_CHECK)


def _driver_details(exc: BaseException) -> dict[str, Any]:
    return {"sqlite_error": getattr(exc, "sqlite_errorname", None)}


def translate_integrity_error(exc: sqlite3.DatabaseError) -> TaskloomError:
    """Map a trigger's RAISE(ABORT, 'CODE: text') to the stable error it stands for."""
    text = str(exc)
    if text.startswith("UNIQUE constraint failed"):
        # Commands check uniqueness first with a clear message; this is the backstop for a race.
        return TaskloomError("CONFLICT", f"already taken: {text}", details={"constraint": text})
    return trigger_refusal(text)


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




class SqliteStore(WriterStore):
    """The SQLite implementation of the store seam."""

    engine = "sqlite"
    driver_error = sqlite3.Error
    lost_check = UNAVAILABLE_CHECK

    def __init__(
        self, path: Path, *, clock: Callable[[], str] = utc_now, busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        synchronous: str = "full",
    ) -> None:
        super().__init__(clock=clock)
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        migrate(self.path)

    def _close_connections(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, busy_timeout_ms=self.busy_timeout_ms, synchronous=self.synchronous)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _writer_conn(self) -> sqlite3.Connection:
        return self._conn()

    def _begin(self, conn: sqlite3.Connection, *then: str) -> int:
        conn.execute("BEGIN IMMEDIATE")
        # The head under the write lock: what tells this writer whether a script or a restored
        # file moved it since its last commit (``Tx.others_committed``). One read per batch.
        head: int = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()[0]
        self._steps(conn, *then)
        return head

    def _in_transaction(self, conn: sqlite3.Connection) -> bool:
        return conn.in_transaction

    def _writes(self, conn: sqlite3.Connection) -> int:
        # Every row inserted, updated or deleted, by triggers too; a statement SQLite refused
        # has undone its own changes.
        return conn.total_changes

    def translate_error(self, exc: BaseException) -> BaseException:
        return translate_error(exc)

    def lost_details(self, exc: BaseException) -> dict[str, Any]:
        return _driver_details(exc)

    def follow_log(self) -> SqliteLogFollower:
        return SqliteLogFollower(connect(self.path, busy_timeout_ms=self.busy_timeout_ms, synchronous=self.synchronous))

    # -- the seam -------------------------------------------------------------------------------

    def run_command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> tuple[T, list[int]]:
        """Run ``fn(tx, ...)`` in one transaction on the calling thread; returns (result, revisions).

        For scripts, tests, benches and other processes writing the file: it does not go through
        the writer thread, so SQLite's lock (and ``busy_timeout``) orders it against the board.
        """
        conn = self._conn()
        try:
            locked_at = self._begin(conn)
            # Stamped once the write lock is held, so commit times follow revision order even when
            # another process made this command wait.
            tx = Tx(conn, actor, self.clock(), others_committed=self._others_committed(locked_at))
            result = fn(tx, *args, **kwargs)
            self._run_hook(tx)
            refuse_unencodable(result)
            conn.execute("COMMIT")
            self._committed_at(locked_at, tx.appended[-1] if tx.appended else 0)
        except BaseException as exc:
            self._left_head = None
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


class SqliteLogFollower:
    """``PRAGMA data_version`` changes whenever any *other* connection commits to the file."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._version: int | None = None

    def changed(self) -> bool:
        version: int = self.conn.execute("PRAGMA data_version").fetchone()[0]
        changed, self._version = version != self._version, version
        return changed

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()
