"""The PostgreSQL engine of the store seam: one database, any number of board processes.

The commands and queries are the SQLite store's, unchanged: they talk to :class:`PgConnection`,
an adapter that rewrites SQLite's placeholders (``dialect.to_pyformat``) and builds rows of the
same shape as ``sqlite3.Row``. What differs is below the seam:

* **The write lock.** Every writing transaction's first statement locks the one
  ``global_revision`` row (``SELECT … FOR UPDATE``); the triggers bump it as SQLite's do. The lock
  is held until COMMIT, so revisions are assigned and become visible in commit order across every
  process (``docs/architecture.md``, "Revisions on PostgreSQL never let a reader skip").
* **Waking the other processes.** The batch's last statement is ``pg_notify('taskloom_log', R)``:
  delivered at COMMIT, never for a rollback. A ``LISTEN`` thread turns each notification into the
  same commit-listener call an in-process commit makes. Before it go the batch's encoded frames
  (``FRAMES_CHANNEL``) while another process has live streams (``WANT_CHANNEL``), which the other
  processes' hand-offs publish without reading the rows back. Every payload is sealed
  (``notification_seal.py``): any login may notify, only a board process can seal.
* **Reads** run on a ``psycopg_pool`` of ``REPEATABLE READ READ ONLY`` connections: one snapshot
  per ``store.query``, as on SQLite.
* **Refusals** of the PL/pgSQL triggers carry SQLite's exact RAISE text, so they translate to the
  same stable codes; a server that went away is ``503 STORE_UNAVAILABLE``, retried by the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from importlib import resources
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import psycopg
import psycopg.errors
import structlog
from psycopg import sql
from psycopg.adapt import Dumper, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from shared.errors import TaskloomError

from .dialect import POSTGRESQL, Params, bind, may_write
from .notification_seal import KEY_BYTES, KEY_SECRET, SEAL_BYTES, NotificationSeal
from .store import (
    PEER_GAP,
    READER_THREADS,
    ROWS_AFTER_SQL,
    STREAMING_READER_THREADS,
    Actor,
    BatchFrames,
    Handed,
    MigrationFailed,
    SchemaTooNew,
    SecretChanged,
    StoreUnreachable,
    Tx,
    WriterStore,
    handed_if_whole,
    refuse_unencodable,
    store_unavailable,
    trigger_refusal,
    utc_now,
)

T = TypeVar("T")

log = structlog.get_logger("taskd.store")

#: The channel every writing transaction notifies with its last revision, and the one a token
#: rotation notifies, so every board process on the database reloads it.
LOG_CHANNEL: Final = "taskloom_log"
TOKEN_CHANNEL: Final = "taskloom_token"
#: What a commit's effects mean for the other board processes (signals, deadlines), as
#: ``<origin> <head> <serial> <note>``: each process drops its own, and any it has heard already.
PEER_CHANNEL: Final = "taskloom_peer"
#: A batch's encoded frames, sent with its COMMIT before the log notification, as ``<end> <origin>
#: <began> <packed frames>``: another process whose log reader stands at ``began`` publishes them
#: without reading the rows back (``Handoff.deliver``); any other falls back to reading.
FRAMES_CHANNEL: Final = "taskloom_frames"
#: The most a frames notification may hold, its seal included: PostgreSQL refuses one of 8,000
#: bytes or more. A batch whose frames do not fit sends none; the other processes read its rows.
FRAMES_NOTE_BYTES: Final = 7900
#: Sent (``<origin>``) by a process while its log reader has live streams: only then do the others
#: send their frames, which cost a process serving the database alone server and client time.
WANT_CHANNEL: Final = "taskloom_frames_wanted"
#: Board processes whose last peer note a listener remembers: more than ever serve one database
#: at once; one forgotten (long stopped) could have a note sent again heard once more.
PEER_ORIGINS: Final = 256
#: How often a process with live streams says so again, seconds; the others send frames for
#: ``WANT_LEASE_S`` after hearing it. Until the first word arrives a new stream's frames are read.
WANT_EVERY_S: Final = 5.0
WANT_LEASE_S: Final = 3 * WANT_EVERY_S
#: Sent on ``WANT_CHANNEL`` by a process that has just started listening: whoever has live streams
#: says so at once.
WANT_ASK: Final = "?"
#: How long connecting may take before the server counts as unreachable, seconds.
CONNECT_TIMEOUT_S: Final = 5
#: How long a writing batch waits for the revision lock before its commands answer 503 (as
#: ``sqlite_store.BUSY_TIMEOUT_MS`` on SQLite), milliseconds.
LOCK_TIMEOUT_MS: Final = 5000
#: How long a read waits for a pool connection before answering 503, seconds.
READ_TIMEOUT_S: Final = 5.0
#: How long any session of the board (the writer's, a read's, the log reader's) waits for one
#: answer from the server before it gives up on the session, seconds: far past the revision
#: lock's timeout and what any statement of the board takes, so only a server that has stopped
#: answering while its host still acknowledges every packet (a backend stopped by a signal, a
#: disk hung under it) meets it. TCP keepalives cannot see that.
ANSWER_TIMEOUT_S: Final = 60.0
#: How often the watch looks at the round trips under way, seconds.
WATCH_INTERVAL_S: Final = 0.5
#: The log reader's safety poll: notifications wake it; this catches anything they could miss.
SAFETY_POLL_S: Final = 2.0
#: How often the LISTEN thread looks up from its wait (to notice the store closing), seconds.
LISTEN_WAKE_S: Final = 0.2
#: Pause between attempts of the LISTEN thread to reach a server that went away, seconds.
LISTEN_RETRY_S: Final = 0.5
#: Taken (transaction-scoped) while migrating, so two processes starting at once apply a file once.
MIGRATION_LOCK: Final = 0x7461736B6C6F6F6D  # "taskloom"


def describe_target(url: str) -> str:
    """``host:port/dbname`` of a connection URL, for one-line errors (never the password)."""
    try:
        parts: dict[str, Any] = dict(conninfo_to_dict(url))
    except psycopg.ProgrammingError:
        split = urlsplit(url)
        try:
            number = split.port
        except ValueError:
            number = None
        parts = {"host": split.hostname, "port": number, "dbname": split.path.lstrip("/")}
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = str(parts.get("port") or "5432")
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


def check_url(url: str) -> None:
    """A ``postgresql://`` (or ``postgres://``) URL, or StoreUnreachable saying what is wrong with it."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise StoreUnreachable(f"--database takes a postgresql://host:port/dbname URL, not {url.split(':', 1)[0]!r}")


def url_settings(url: str) -> dict[str, Any]:
    """The connection settings a URL names (``user:secret@`` and ``?key=value`` alike); none for a
    URL libpq cannot read, which ``connect()`` then refuses saying why."""
    try:
        return dict(conninfo_to_dict(url))
    except psycopg.ProgrammingError:
        return {}


def holds_password(url: str) -> bool:
    """Whether ``url`` carries a password (``user:secret@``, or ``?password=``)."""
    return bool(url_settings(url).get("password"))


def migration_files() -> list[tuple[int, str, str]]:
    """The numbered PostgreSQL migration scripts shipped with this code, in order: number, file
    name, text."""
    folder = resources.files("services.board") / "migrations" / "postgresql"
    scripts = []
    for entry in folder.iterdir():
        if entry.is_file() and entry.name.endswith(".sql"):
            scripts.append((int(entry.name.split("_", 1)[0]), entry.name, entry.read_text(encoding="utf-8")))
    scripts.sort()
    return scripts


def migrations() -> list[tuple[int, str]]:
    """The numbered PostgreSQL migration scripts shipped with this code, in order."""
    return [(number, script) for number, _, script in migration_files()]


def schema_version() -> int:
    return migrations()[-1][0]


# -- rows and the connection adapter --------------------------------------------------------------


class PgRow:
    """A result row shaped like ``sqlite3.Row``: by position, by column name, ``keys()``."""

    __slots__ = ("_index", "_names", "_values")

    def __init__(self, values: Sequence[Any], names: list[str], index: dict[str, int]) -> None:
        self._values = values
        self._names = names
        self._index = index

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key: int | str, /) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._names, self._values))!r})"


def pg_rows(cursor: psycopg.Cursor[Any]) -> Callable[[Sequence[Any]], PgRow]:
    # The names straight from the result: ``cursor.description`` builds a Column object (with a
    # type lookup) per column for every statement, a sixth of the writer thread's time in a profile.
    result = cursor.pgresult
    fields = tuple(result.fname(number) for number in range(result.nfields)) if result is not None else ()
    names, index = _row_shape(fields)
    return lambda values: PgRow(values, names, index)


@functools.lru_cache(maxsize=512)
def _row_shape(fields: tuple[bytes | None, ...]) -> tuple[list[str], dict[str, int]]:
    """Column names and the first position of each (``sqlite3.Row`` reads a repeated name so)."""
    names = [(field or b"").decode() for field in fields]
    index = {name: position for position, name in reversed(list(enumerate(names)))}
    return names, index


class _Number(Loader):
    """``numeric`` (what ``sum`` of a BIGINT returns, text format) as SQLite returns it: an int, else a float."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        value = Decimal(text)
        return int(value) if value == value.to_integral_value() else float(value)


class _BoolAsInteger(Dumper):
    """SQLite has no booleans; a Python bool bound into a BIGINT column is 0 or 1 there, and here."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_loader("numeric", _Number)
    conn.adapters.register_dumper(bool, _BoolAsInteger)


#: Idle cursors a connection keeps for its next statements (``PgConnection.execute``).
SPARE_CURSORS: Final = 8
#: A cursor keeps its last statement's parameters until its next one: one that carried a value
#: this large (an attachment's bytes) is not kept, so spares never hold megabytes between writes.
SPARE_PARAMETER_BYTES: Final = 64 * 1024


def _small(params: Any) -> bool:
    values = params.values() if isinstance(params, Mapping) else params
    return all(not isinstance(value, str | bytes | bytearray | memoryview) or len(value) <= SPARE_PARAMETER_BYTES
               for value in values)


class PgResult:
    """One statement's result as ``dialect.Cursor``. Once nobody holds it (or an iteration of it),
    its psycopg cursor goes back to the connection's spares, to run a later statement."""

    __slots__ = ("_cursor", "_spares")

    def __init__(self, cursor: psycopg.Cursor[PgRow], spares: list[psycopg.Cursor[PgRow]] | None) -> None:
        self._cursor = cursor
        self._spares = spares  # None: this cursor is not to be reused

    def fetchone(self) -> PgRow | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[PgRow]:
        return self._cursor.fetchall()

    def fetchmany(self, size: int = 0) -> list[PgRow]:
        return self._cursor.fetchmany(size)

    def __iter__(self) -> Iterator[PgRow]:
        # A generator, so an iteration keeps this result (and its cursor) held until it ends.
        yield from self._cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def nextset(self) -> bool:
        """On to the next statement's result of a script (``PgConnection.script``)."""
        return bool(self._cursor.nextset())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)  # the rest of psycopg's cursor, for what reads it directly

    def __del__(self) -> None:
        # Runs when the last reference goes (CPython frees at once); where a runtime frees later,
        # or never, the cursor is simply not reused. The list may belong to another thread's
        # connection: append is atomic, and a cursor is only taken from it by that thread.
        if self._spares is not None and len(self._spares) < SPARE_CURSORS and not self._cursor.closed:
            self._spares.append(self._cursor)


class RoundTrips:
    """The round trips under way on a store's sessions, for the thread that gives up on a server
    that stopped answering (``PostgresStore._watch_round_trips``).

    Ending a round trip and cutting it take the same lock, so the watch never shuts down a socket
    whose round trip has ended meanwhile (and whose descriptor may belong to someone else by then).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: session → (when its round trip began, its socket). psycopg reads a whole result in
        #: ``execute``, so a round trip ends when the call returns.
        self._under_way: dict[PgConnection, tuple[float, int]] = {}

    def begin(self, conn: PgConnection) -> None:
        with self._lock:
            self._under_way[conn] = (time.monotonic(), conn.raw.pgconn.socket)

    def end(self, conn: PgConnection) -> None:
        with self._lock:
            self._under_way.pop(conn, None)

    def cut_older_than(self, bound_s: float) -> list[float]:
        """Shut down the socket of every round trip that began more than ``bound_s`` ago, so the
        blocked call fails as for a lost connection; how long each had waited."""
        now = time.monotonic()
        waited = []
        with self._lock:
            for conn, (since, fd) in list(self._under_way.items()):
                if now - since >= bound_s:
                    del self._under_way[conn]
                    _shut_down(fd)
                    waited.append(now - since)
        return waited


class PgConnection:
    """What commands and queries see on PostgreSQL (``dialect.Connection``).

    A psycopg cursor is reused once the result it gave is no longer held: a fresh cursor per
    statement builds its adapters, and its loaders per result column, again — about a third of
    psycopg's client time for a one-row ``SELECT * FROM tasks``, measured.
    """

    dialect = POSTGRESQL

    def __init__(self, raw: psycopg.Connection[Any], watch: RoundTrips | None = None) -> None:
        self.raw = raw
        self._spares: list[psycopg.Cursor[PgRow]] = []
        #: Statements sent that may have changed a row: all but a ``SELECT`` (``_writes``).
        self.writes = 0
        #: Where this session's round trips are told, so a silent server cannot hold them for ever.
        self._watch = watch

    def execute(self, sql: str, parameters: Params = (), /) -> PgResult:
        if may_write(sql):
            self.writes += 1
        query, params = bind(sql, parameters)
        cursor: psycopg.Cursor[PgRow] = self._spares.pop() if self._spares else self.raw.cursor(row_factory=pg_rows)
        if self._watch is not None:
            self._watch.begin(self)
        try:
            # A tuple is always passed, even empty: psycopg then reads ``%%`` as the ``%`` it stands for.
            cursor.execute(query, params if isinstance(params, Mapping) else tuple(params))
        finally:
            if self._watch is not None:
                self._watch.end(self)
        return PgResult(cursor, self._spares if _small(params) else None)

    def script(self, statements: str) -> PgResult:
        """Statements without parameters, ``;``-separated: one simple query, one round trip. The
        result starts at the first statement's; ``nextset`` moves on."""
        cursor: psycopg.Cursor[PgRow] = self._spares.pop() if self._spares else self.raw.cursor(row_factory=pg_rows)
        self.writes += 1
        if self._watch is not None:
            self._watch.begin(self)
        try:
            cursor.execute(statements.encode())  # no parameters: psycopg sends it as it is
        finally:
            if self._watch is not None:
                self._watch.end(self)
        return PgResult(cursor, self._spares)

    def replace(self, raw: psycopg.Connection[Any]) -> None:
        """Go on over ``raw``, a fresh session, in place of one the server ended."""
        with contextlib.suppress(Exception):
            self.raw.close()
        self.raw = raw
        self._spares = []

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def usable(self) -> bool:
        return not (self.raw.closed or self.raw.broken)


def session_name(url: str, purpose: str) -> dict[str, Any]:
    """``application_name`` for a session of the board (``taskd writer``, ``taskd reader``, ``taskd
    log``…), so ``pg_stat_activity`` tells an operator which is which; none when the URL names one
    itself, which is the operator's to choose."""
    return {} if "application_name" in url_settings(url) else {"application_name": f"taskd {purpose}"}


def connect(url: str, *, autocommit: bool = True, purpose: str = "") -> psycopg.Connection[Any]:
    """A connection with the board's adapters; StoreUnreachable (host and port) when there is none."""
    named = session_name(url, purpose) if purpose else {}
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S, **named)
    except psycopg.ProgrammingError as exc:
        raise StoreUnreachable(f"cannot use PostgreSQL at {describe_target(url)}: the URL cannot be read ({exc})") from exc
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise StoreUnreachable(f"cannot reach PostgreSQL at {describe_target(url)}: {reason}") from exc
    _configure(conn)
    return conn


# -- migrations -------------------------------------------------------------------------------------


def current_version(conn: psycopg.Connection[Any]) -> int:
    if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:  # type: ignore[index]
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def _refuse_newer(url: str, current: int, latest: int) -> None:
    if current > latest:
        raise SchemaTooNew(
            f"the database at {describe_target(url)} has schema version {current}, newer than this Taskloom "
            f"understands ({latest}); upgrade Taskloom or point --database elsewhere. The database was not modified."
        )


def migrate(url: str) -> None:
    """Create or upgrade the schema; a newer one is refused before anything is written.

    Each file records its own version (its last statement), so applying the files with ``psql``
    gives the same database. Every pending file runs in one transaction under an advisory lock,
    the version re-read there: two processes starting on one database apply every file once, and
    a file the server refuses (a role without the rights an upgrade needs, an object already
    there) leaves the database at the version it had (:class:`MigrationFailed`).
    """
    latest = schema_version()
    check_url(url)
    with connect(url) as conn:
        _refuse_newer(url, current_version(conn), latest)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            current = current_version(conn)
            _refuse_newer(url, current, latest)
            pending = [(number, name, script) for number, name, script in migration_files() if number > current]
            for _, name, script in pending:
                try:
                    conn.execute(script.encode())  # no parameters: one simple-protocol script
                except psycopg.Error as exc:
                    raise MigrationFailed(f"migration {name}", current, server_message(exc)) from exc
            conn.execute(
                "INSERT INTO board_meta (key, value) VALUES ('board_id', %s) ON CONFLICT (key) DO NOTHING",
                (f"brd_{secrets.token_hex(8)}",),
            )


def server_message(exc: psycopg.Error) -> str:
    """The server's message in one line, with its hint (what to grant, for a refused upgrade)."""
    diag = exc.diag
    primary = diag.message_primary or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{primary} (hint: {diag.message_hint})" if diag.message_hint else primary


# -- errors -----------------------------------------------------------------------------------------

#: SQLSTATE classes that mean "the database cannot be used right now", not "this request is wrong":
#: 08 connection exception, 53 insufficient resources, 57 operator intervention (shutdown), 40
#: serialisation failure / deadlock (the transaction is lost, a retry succeeds), 55P03 lock not available.
_UNAVAILABLE_CLASSES: Final = ("08", "53", "57", "40", "58", "55P03")


#: What to look at when the server keeps refusing (the hint of every 503 a PostgreSQL board gives).
UNAVAILABLE_CHECK: Final = "the PostgreSQL server"


def _driver_details(exc: BaseException) -> dict[str, Any]:
    return {"sqlstate": getattr(exc, "sqlstate", None)}


def unavailable(exc: BaseException, what: str = "is unavailable") -> TaskloomError:
    return store_unavailable(exc, what, details=_driver_details(exc), check=UNAVAILABLE_CHECK)


def _shut_down(fd: int) -> None:
    """End the TCP (or Unix) connection on ``fd`` both ways, leaving the descriptor to its owner."""
    try:
        duplicate = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()  # the duplicate only: the owner's descriptor stays open


def _connection_lost(raw: psycopg.Connection[Any], exc: psycopg.Error) -> bool:
    """The session is gone (dropped, or ended by the server), not the statement refused."""
    state = exc.sqlstate or ""
    return raw.broken or raw.closed or state.startswith(("08", "57P"))


def translate_error(exc: BaseException) -> BaseException:
    """What a command's caller is told: a stable error for what PostgreSQL refused, else ``exc``."""
    error: TaskloomError | None = None
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        message = exc.diag.message_primary or str(exc)
        if isinstance(exc, psycopg.errors.RaiseException):
            error = trigger_refusal(message)
        elif isinstance(exc, psycopg.errors.UniqueViolation):
            error = TaskloomError("CONFLICT", f"already taken: {message}", details={"constraint": message})
        elif isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) or state.startswith(_UNAVAILABLE_CLASSES):
            error = unavailable(exc)
        elif isinstance(exc, (psycopg.IntegrityError, psycopg.DataError)):
            error = TaskloomError("VALIDATION_FAILED", f"refused by the database: {message}", details={"constraint": message})
    elif isinstance(exc, PoolTimeout):
        error = unavailable(exc)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


# -- the store --------------------------------------------------------------------------------------

#: Revisions are BIGINT: the widest head a frames notification may name.
MAX_REVISION: Final = 2**63 - 1

TokenListener = Callable[[], None]


class PostgresStore(WriterStore):
    """The PostgreSQL implementation of the store seam."""

    engine = "postgresql"
    blobs_in_database = True
    serves_peers = True
    driver_error = psycopg.Error
    lost_check = UNAVAILABLE_CHECK

    def __init__(self, url: str, *, clock: Callable[[], str] = utc_now) -> None:
        super().__init__(clock=clock)
        self.url = url
        self.target = describe_target(url)
        self._local = threading.local()
        self._own: list[PgConnection] = []
        self._own_lock = threading.Lock()
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._token_listeners: list[TokenListener] = []
        self._listen_thread: threading.Thread | None = None
        self._listen_stop = threading.Event()
        #: How often the listener found the database not opened yet and waited (tests).
        self.listen_waits = 0
        #: Names this store's notifications, so its own LISTEN drops them.
        self.origin = secrets.token_hex(6)
        #: Numbers this process's peer notes, so a listener can tell a note it has heard from the
        #: same sealed text sent again by anyone who can LISTEN (``_fresh_peer_note``).
        self._peer_serial = itertools.count(1)
        #: origin → the serial of the last peer note heard from it (LISTEN thread only).
        self._peer_heard: dict[str, int] = {}
        #: The head when this listener's connection began listening: a genuine note comes from a
        #: commit after that, at or above it; an older one is a recording sent again.
        self._peer_floor = 0
        self._listen_conn: psycopg.Connection[Any] | None = None
        #: Until when (monotonic) another process has said it has live streams (``WANT_CHANNEL``),
        #: and when this one last said so itself (LISTEN thread).
        self._frames_wanted_until = 0.0
        self._said_wanted: float | None = None
        #: Seals what this process sends the others and checks what they send (``notification_seal``):
        #: set at ``open``, or read by the LISTEN thread if it starts first.
        self._seal: NotificationSeal | None = None
        #: Every round trip of this store's sessions but the LISTEN one's (which waits by design),
        #: and the thread that gives up on those the server leaves unanswered (``_watch_round_trips``).
        self.answer_timeout_s = ANSWER_TIMEOUT_S
        self.round_trips = RoundTrips()
        self._watch_thread: threading.Thread | None = None
        self._watch_stop = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        migrate(self.url)
        self._seal = NotificationSeal(bytes.fromhex(
            self.write_secret(KEY_SECRET, secrets.token_hex(KEY_BYTES), only_if_absent=True)
        ))
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=READER_THREADS + STREAMING_READER_THREADS + 2,
            open=False,
            timeout=READ_TIMEOUT_S,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_S, **session_name(self.url, "reader")},
            configure=self._configure_reader,
            name="taskloom-readers",
        )
        self._pool.open(wait=False)
        self._watch_thread = threading.Thread(target=self._watch_round_trips, name="taskloom-pg-watch", daemon=True)
        self._watch_thread.start()

    @staticmethod
    def _configure_reader(conn: psycopg.Connection[Any]) -> None:
        _configure(conn)
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True

    def _close_connections(self) -> None:
        self._watch_stop.set()
        self._listen_stop.set()
        if self._listen_conn is not None:
            with contextlib.suppress(Exception):
                self._listen_conn.cancel_safe(timeout=1)
        if self._listen_thread is not None:
            self._listen_thread.join(timeout=10)
        with self._own_lock:
            for conn in self._own:
                with contextlib.suppress(Exception):
                    conn.raw.close()
            self._own.clear()
        if self._pool is not None:
            self._pool.close()

    def _own_conn(self, purpose: str = "secrets") -> PgConnection:
        """This thread's autocommit connection (made again when the last one broke); ``purpose``
        names the session for ``pg_stat_activity``: the writer thread's, or a thread that writes
        the board's secrets."""
        conn: PgConnection | None = getattr(self._local, "conn", None)
        if conn is None or not conn.usable():
            conn = PgConnection(connect(self.url, purpose=purpose), self.round_trips)
            self._local.conn = conn
            with self._own_lock:
                self._own.append(conn)
        return conn

    # -- engine hooks -----------------------------------------------------------------------------

    def _writer_conn(self) -> PgConnection:
        try:
            return self._own_conn("writer")
        except StoreUnreachable as exc:
            raise psycopg.OperationalError(str(exc)) from exc

    def _watch_round_trips(self) -> None:
        """Give up on any session whose server has not answered one round trip for
        ``answer_timeout_s``: shut its socket down, so the blocked call fails as for a lost
        connection. Without this the call, and everything queued behind it, would wait for as long
        as the server stays silent. What follows is each caller's handling of a lost session: the
        writer's commands answer 503 and its next batch begins on a fresh session (a batch cut at
        BEGIN begins again at once, ``_begin``); a read runs again on a fresh pool connection; the
        log reader reconnects."""
        while not self._watch_stop.wait(WATCH_INTERVAL_S):
            for waited in self.round_trips.cut_older_than(self.answer_timeout_s):
                log.error("server_silent", target=self.target, waited_s=round(waited, 1))

    def _begin(self, conn: PgConnection, *then: str) -> int:
        # The revision lock first, before any other row lock (commit order = revision order, no
        # deadlock) and before any savepoint in ``then``: a lock taken inside a savepoint would go
        # with a rollback to it. One round trip: a script without parameters goes as one simple
        # query; its cursor starts at BEGIN's result, then SET's, then the lock's row.
        # ``lock_timeout``: a lock held elsewhere (another process's long batch, a stuck psql
        # session) makes this batch 503 after that long, as SQLite's busy timeout does, rather than
        # leave every write of this process waiting without end.
        script = "; ".join((
            "BEGIN", f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'",
            "SELECT revision FROM global_revision WHERE singleton = 1 FOR UPDATE", *then,
        ))
        try:
            cursor = conn.script(script)
        except psycopg.OperationalError as exc:
            if not _connection_lost(conn.raw, exc):
                raise
            # The writer's session ended while it was idle (a terminated backend, the server's
            # idle_session_timeout, a restart): this batch has written nothing, so it begins once
            # more on a fresh session rather than answer 503 to a server that is up.
            log.info("writer_session_replaced", error=str(exc).strip())
            try:
                conn.replace(connect(self.url, purpose="writer"))
            except StoreUnreachable as unreachable:
                raise psycopg.OperationalError(str(unreachable)) from unreachable
            cursor = conn.script(script)
        cursor.nextset()
        cursor.nextset()
        row = cursor.fetchone()
        assert row is not None, "the schema has exactly one global_revision row"
        return int(row[0])

    def _steps(self, conn: PgConnection, *statements: str) -> None:
        if statements:
            conn.script("; ".join(statements))  # one simple query, one round trip

    def _commit(
        self, conn: PgConnection, revision: int, notes: Sequence[str] = (), frames: BatchFrames | None = None,
    ) -> Handed | None:
        encoded = frames[1] if frames is not None else ()
        # One round trip with the COMMIT itself: the check of the batch's frames (as
        # ``WriterStore._encoded_batch``) and the notifications, delivered at COMMIT, never for a
        # rollback. The frames go first: a process that publishes them has read up to the
        # revision the log notification then names, and reads nothing for it. A batch with none
        # of these sends its COMMIT alone, the same way, so its answer is read as every other's.
        steps = []
        if frames is not None and encoded:
            steps.append(ROWS_AFTER_SQL.format(began=int(frames[0])))
            steps += self._frames_note(conn, frames[0], encoded)
        steps += [self._sealed_notify(conn, LOG_CHANNEL, str(int(revision)))] if revision else []
        # ``_batch_head``: the head the batch commits at, which the writer set before this COMMIT.
        steps += [self._sealed_notify(conn, PEER_CHANNEL, f"{self.origin} {self._batch_head} {next(self._peer_serial)} {note}")
                  for note in notes]
        cursor = conn.script("; ".join((*steps, "COMMIT")))
        row = cursor.fetchone() if frames is not None and encoded else None
        while cursor.nextset():
            pass
        if cursor.statusmessage != "COMMIT":
            # A transaction a statement left failed ends at COMMIT as a ROLLBACK, and the server
            # says so only in the tag: nobody of the batch may hear that it committed, whether
            # or not it appended a row (a command may write without one, as purge_blob does).
            raise psycopg.OperationalError(f"the transaction was rolled back at COMMIT ({cursor.statusmessage})")
        if frames is None or not encoded:
            return None
        assert row is not None, "an aggregate returns one row"
        return handed_if_whole(frames[0], row[0], row[1], encoded)

    def _frames_note(self, conn: PgConnection, began: int, encoded: tuple[Any, ...]) -> list[str]:
        """The statement sending the batch's frames to the other processes, if one of them has
        live streams and they fit one notification; it sends nothing unless they are every row
        after ``began`` (the same count as the check before it), and names the head the batch
        commits at."""
        handoff = self._handoff
        if handoff is None or not self.frames_wanted:
            return []
        budget = FRAMES_NOTE_BYTES - SEAL_BYTES - len(str(MAX_REVISION))
        if sum(len(frame.wire) for frame in encoded) > budget:
            return []  # not packed at all: a large batch would build its JSON under the lock for nothing
        tail = f" {self.origin} {int(began)} ".encode() + handoff.pack(encoded)
        if len(tail) > budget:
            return []
        return [
            sql.SQL(
                "SELECT pg_notify({}, {}) FROM (SELECT batch.head::text || {} AS payload FROM ({}) AS batch"
                " WHERE batch.rows_after = {}) AS note"
            ).format(
                sql.Literal(FRAMES_CHANNEL), self._sealing().sql(sql.Identifier("note", "payload")),
                sql.Literal(tail.decode()), sql.SQL(ROWS_AFTER_SQL.format(began=int(began))), sql.Literal(len(encoded)),
            ).as_string(conn.raw)
        ]

    def _sealed_notify(self, conn: PgConnection, channel: str, payload: str) -> str:
        """A ``pg_notify`` statement for a script: ``payload`` sealed, spelled as a literal."""
        return sql.SQL("SELECT pg_notify({}, {})").format(
            sql.Literal(channel), sql.Literal(self._sealing().seal(payload)),
        ).as_string(conn.raw)

    def _sealing(self) -> NotificationSeal:
        seal = self._seal
        if seal is None:
            raise RuntimeError("the store is not open: it has no notification key")
        return seal

    def _in_transaction(self, conn: PgConnection) -> bool:
        return conn.in_transaction

    def _writes(self, conn: PgConnection) -> int:
        return conn.writes

    def _failed(self, conn: PgConnection) -> bool:
        return conn.raw.info.transaction_status == TransactionStatus.INERROR

    @property
    def frames_wanted(self) -> bool:
        """Whether another process on the database has said lately that it has live streams."""
        return time.monotonic() < self._frames_wanted_until

    def translate_error(self, exc: BaseException) -> BaseException:
        return translate_error(exc)

    def lost_details(self, exc: BaseException) -> dict[str, Any]:
        return _driver_details(exc)

    # -- the seam ---------------------------------------------------------------------------------

    def run_command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> tuple[T, list[int]]:
        conn: PgConnection | None = None
        try:
            conn = self._writer_conn()
            locked_at = self._begin(conn)
            tx = Tx(conn, actor, self.clock(), others_committed=self._others_committed(locked_at))
            result = fn(tx, *args, **kwargs)
            self._run_hook(tx)
            refuse_unencodable(result)
            self._commit(conn, tx.appended[-1] if tx.appended else 0)
            self._committed_at(locked_at, tx.appended[-1] if tx.appended else 0)
        except BaseException as exc:
            self._left_head = None
            if conn is not None and conn.in_transaction:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            error = translate_error(exc)
            if error is exc:
                raise
            raise error from exc
        return result, tx.appended

    def run_query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(conn, ...)`` in one ``REPEATABLE READ`` read-only transaction (one snapshot)."""
        assert self._pool is not None, "open() the store first"
        # Every pooled connection may have been dropped by a server that went away and came back:
        # one attempt more than the pool holds reaches a fresh connection.
        attempts = self._pool.max_size + 1
        for attempt in range(attempts):
            try:
                with self._pool.connection() as raw:
                    try:
                        return fn(PgConnection(raw, self.round_trips), *args, **kwargs)
                    except psycopg.OperationalError as exc:
                        if attempt + 1 < attempts and _connection_lost(raw, exc):
                            # A read is safe to run again; the closed connection leaves the pool.
                            raw.close()
                            continue
                        raise
            except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
                raise unavailable(exc) from exc
            except psycopg.DataError as exc:
                # A value the server cannot take (a text holding U+0000 that no check before
                # caught): the request's fault, said as a writer says it, never a 500.
                raise translate_error(exc) from exc
        raise AssertionError("every attempt returns or raises")

    def follow_log(self) -> PgLogFollower:
        return PgLogFollower(self.url, self.round_trips)

    # -- secrets shared by every process (token, login codes, session revocations) ---------------

    def read_secret(self, key: str) -> str | None:
        row = self.run_query(lambda conn: conn.execute("SELECT value FROM board_secrets WHERE key = ?", (key,)).fetchone())
        return None if row is None else str(row[0])

    def write_secret(
        self, key: str, value: str, *, only_if_absent: bool = False, notify_token: bool = False,
        drop_prefix: str | None = None, while_holding: tuple[str, str] | None = None,
    ) -> str:
        conflict = "DO NOTHING" if only_if_absent else "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
        return self._on_own_conn(functools.partial(
            self._write_secret, key, value, conflict, notify_token=notify_token, drop_prefix=drop_prefix,
            while_holding=while_holding,
        ))

    def _write_secret(
        self, key: str, value: str, conflict: str, conn: PgConnection, *, notify_token: bool, drop_prefix: str | None,
        while_holding: tuple[str, str] | None,
    ) -> str:
        with conn.raw.transaction():
            if while_holding is not None:
                # FOR SHARE waits for a write of that row under way elsewhere and then reads what it
                # committed; held until COMMIT, so that write cannot land between check and insert.
                other, expected = while_holding
                held = conn.execute("SELECT value FROM board_secrets WHERE key = ? FOR SHARE", (other,)).fetchone()
                if held is None or str(held[0]) != expected:
                    raise SecretChanged(other)
            conn.execute(
                f"INSERT INTO board_secrets (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key) {conflict}",
                (key, value, utc_now()),
            )
            if drop_prefix is not None:
                conn.execute("DELETE FROM board_secrets WHERE key LIKE ?", (f"{drop_prefix}%",))
            stored = conn.execute("SELECT value FROM board_secrets WHERE key = ?", (key,)).fetchone()
            assert stored is not None, "written in this transaction"
            if notify_token:
                conn.execute("SELECT pg_notify(?, '')", (TOKEN_CHANNEL,))
        return str(stored[0])

    def take_secret(self, key: str) -> str | None:
        # Not sent again on a lost session: the DELETE may have committed before the answer was lost,
        # and sent again it would find nothing and call a good code used. 503: the client asks again.
        row = self._on_own_conn(
            lambda conn: conn.execute("DELETE FROM board_secrets WHERE key = ? RETURNING value", (key,)).fetchone(),
            again=False,
        )
        return None if row is None else str(row[0])

    def _on_own_conn(self, fn: Callable[[PgConnection], T], *, again: bool = True) -> T:
        """``fn`` on this thread's own connection, once more on a fresh one if the session was
        gone (a server restarted, a backend terminated) and ``again`` says ``fn`` may run twice; a
        server that cannot be used is 503, as for every other statement, never a 500."""
        for attempt in range(2):
            try:
                conn = self._own_conn()
                try:
                    return fn(conn)
                except psycopg.OperationalError as exc:
                    if _connection_lost(conn.raw, exc):
                        conn.raw.close()  # the next use makes a fresh one
                    if again and attempt == 0 and conn.raw.closed:
                        continue
                    raise
            except (psycopg.OperationalError, psycopg.InterfaceError, StoreUnreachable) as exc:
                raise unavailable(exc) from exc
        raise AssertionError("every attempt returns or raises")

    def secrets_with_prefix(self, prefix: str) -> dict[str, str]:
        rows = self.run_query(
            lambda conn: conn.execute("SELECT key, value FROM board_secrets WHERE key LIKE ?", (f"{prefix}%",)).fetchall()
        )
        return {str(row[0]): str(row[1]) for row in rows}

    def drop_expired_secrets(self, prefix: str, now: float, *, at_most: int) -> int:
        # The key's C collation lets the primary key answer the prefix; LIMIT bounds the work.
        return self._on_own_conn(lambda conn: int(conn.execute(
            "DELETE FROM board_secrets WHERE key IN (SELECT key FROM board_secrets"
            " WHERE key LIKE ? AND CAST(value AS BIGINT) <= ? LIMIT ?)",
            (f"{prefix}%", now, at_most),
        ).rowcount))

    def add_token_listener(self, listener: TokenListener) -> None:
        """Called on the event loop when any process rotates the board token."""
        self._token_listeners.append(listener)
        self._start_listening()

    # -- LISTEN ---------------------------------------------------------------------------------

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        super().add_commit_listener(listener)
        self._start_listening()

    def add_peer_listener(self, listener: Callable[[str], None]) -> None:
        super().add_peer_listener(listener)
        self._start_listening()

    def _start_listening(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
        if self._listen_thread is None and self._loop is not None:
            self._listen_thread = threading.Thread(target=self._listen, name="taskloom-listen", daemon=True)
            self._listen_thread.start()

    def _listen(self) -> None:
        """Turn every notification into a commit-listener (or token-listener) call on the loop."""
        listened = False
        while not self._listen_stop.is_set():
            try:
                conn = connect(self.url, purpose="listen")
            except StoreUnreachable:
                self._listen_stop.wait(LISTEN_RETRY_S)
                continue
            self._listen_conn = conn
            try:
                seal = self._seal or self._read_seal(conn)
                if seal is None:
                    self.listen_waits += 1
                    self._listen_stop.wait(LISTEN_RETRY_S)
                    continue
                # Read before LISTEN: every commit heard from now on is at or above it.
                floor = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()
                self._peer_floor = int(floor[0]) if floor else 0
                conn.execute(f"LISTEN {LOG_CHANNEL}")
                conn.execute(f"LISTEN {TOKEN_CHANNEL}")
                conn.execute(f"LISTEN {PEER_CHANNEL}")
                conn.execute(f"LISTEN {FRAMES_CHANNEL}")
                conn.execute(f"LISTEN {WANT_CHANNEL}")
                # Anyone with live streams says so again at once, rather than at its next turn.
                conn.execute("SELECT pg_notify(%s, %s)", (WANT_CHANNEL, seal.seal(WANT_ASK)))
                # Whatever was committed while nobody listened: the readers read up to the head now.
                head = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()
                # Listening again after a lost connection: what the others' commits told the peers
                # meanwhile (their deadlines above all) never reached this process.
                self._hand_over(int(head[0]) if head else 0, token=True, peer=PEER_GAP if listened else None)
                listened = True
                while not self._listen_stop.is_set():
                    for note in conn.notifies(timeout=LISTEN_WAKE_S):
                        try:
                            self._take_note(note, seal)
                        except Exception:  # noqa: BLE001 - one notification, whoever sent it, must not end the listener
                            log.exception("notification_failed", channel=note.channel, size=len(note.payload))
                    self._say_wanted(conn, seal)
            except psycopg.Error as exc:
                if not self._listen_stop.is_set():
                    log.warning("listen_connection_lost", target=self.target, error=str(exc))
                    self._listen_stop.wait(LISTEN_RETRY_S)
            finally:
                self._listen_conn = None
                with contextlib.suppress(Exception):
                    conn.close()

    def _take_note(self, note: psycopg.Notify, seal: NotificationSeal) -> None:
        """One notification, on the LISTEN thread: anyone who can log in may have sent it."""
        if note.channel == TOKEN_CHANNEL:
            self._hand_over(0, token=True)  # only a cue: the token is read from the database
            return
        payload = seal.open(note.payload)
        if payload is None:
            log.warning("notification_unsealed", channel=note.channel, size=len(note.payload))
        elif note.channel == LOG_CHANNEL:
            self._hand_over(int(payload) if payload.isascii() and payload.isdigit() else 0)
        elif note.channel == FRAMES_CHANNEL:
            self._take_frames(payload)
        elif note.channel == WANT_CHANNEL:
            if payload == WANT_ASK:
                self._said_wanted = None
            elif payload != self.origin:
                self._frames_wanted_until = time.monotonic() + WANT_LEASE_S
        elif note.channel == PEER_CHANNEL:
            body = self._fresh_peer_note(payload)
            if body is not None:
                self._hand_over(0, peer=body)

    def _fresh_peer_note(self, payload: str) -> str | None:
        """The note of another process's ``<origin> <head> <serial> <note>`` heard for the first
        time; None for this process's own, and for one sent again: the seal proves who wrote a
        note, not that it is new, and anyone who can LISTEN can send the same text once more."""
        try:
            origin, head_text, serial_text, body = payload.split(" ", 3)
            head, serial = int(head_text), int(serial_text)
        except ValueError:
            log.warning("peer_note_unreadable", size=len(payload))
            return None
        if origin == self.origin:
            return None
        if head < self._peer_floor or serial <= self._peer_heard.get(origin, 0):
            log.warning("peer_note_replayed", origin=origin, head=head, serial=serial)
            return None
        self._peer_heard.pop(origin, None)  # the most recently heard last: the oldest is dropped first
        self._peer_heard[origin] = serial
        if len(self._peer_heard) > PEER_ORIGINS:
            self._peer_heard.pop(next(iter(self._peer_heard)))
        return body

    def _hand_over(self, revision: int, *, token: bool = False, peer: str | None = None) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody left to tell
            if revision:
                loop.call_soon_threadsafe(self._notify, revision)
            if token:
                loop.call_soon_threadsafe(self._tell_token_listeners)
            if peer is not None:
                loop.call_soon_threadsafe(self._tell_peer_listeners, peer)

    def _read_seal(self, conn: psycopg.Connection[Any]) -> NotificationSeal | None:
        """The boards' notification key, or None while no process has opened the database: a new
        one has no ``board_secrets`` table until this process's own ``open`` migrates it, and the
        listener may start first (a commit listener is added before the board opens its store)."""
        try:
            row = conn.execute("SELECT value FROM board_secrets WHERE key = %s", (KEY_SECRET,)).fetchone()
        except psycopg.errors.UndefinedTable:
            row = None
        return None if row is None else NotificationSeal(bytes.fromhex(str(row[0])))

    def _say_wanted(self, conn: psycopg.Connection[Any], seal: NotificationSeal) -> None:
        """On the LISTEN thread, between waits: while this process has live streams, tell the
        others (at once when the first joins, then every ``WANT_EVERY_S``) to send their frames."""
        handoff = self._handoff
        if handoff is None or not handoff.wanted():
            self._said_wanted = None
            return
        now = time.monotonic()
        if self._said_wanted is None or now - self._said_wanted >= WANT_EVERY_S:
            conn.execute("SELECT pg_notify(%s, %s)", (WANT_CHANNEL, seal.seal(self.origin)))
            self._said_wanted = now

    def _take_frames(self, payload: str) -> None:
        """Another process's batch frames (``FRAMES_CHANNEL``), decoded here on the LISTEN thread
        and handed to this process's hand-off on the loop. One that cannot be read is dropped: the
        log notification after it still wakes the log reader, which reads the rows."""
        end, origin, began, packed = (payload.split(" ", 3) + ["", "", ""])[:4]
        handoff, loop = self._handoff, self._loop
        if origin == self.origin or handoff is None or loop is None:
            return
        try:
            handed = (int(began), int(end), handoff.unpack(packed.encode()))
        except ValueError:
            log.warning("frames_note_unreadable", target=self.target)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody left to tell
            loop.call_soon_threadsafe(self._hand_off, handed)

    def _tell_token_listeners(self) -> None:
        for listener in tuple(self._token_listeners):
            try:
                listener()
            except Exception:
                log.exception("token_listener_failed")


class PgLogFollower:
    """The log reader's own connection. ``changed`` is the slow safety poll: NOTIFY does the waking."""

    def __init__(self, url: str, watch: RoundTrips | None = None) -> None:
        self.url = url
        self.watch = watch
        self.conn: PgConnection | None = None
        self._last = 0.0

    def changed(self) -> bool:
        now = time.monotonic()
        if now - self._last >= SAFETY_POLL_S:
            self._last = now
            return True
        return False

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PgConnection]:
        if self.conn is None or not self.conn.usable():
            raw = connect(self.url, autocommit=False, purpose="log")
            PostgresStore._configure_reader(raw)
            self.conn = PgConnection(raw, self.watch)
        raw = self.conn.raw
        try:
            yield self.conn
        finally:
            if raw.info.transaction_status != TransactionStatus.UNKNOWN:
                raw.rollback()

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.raw.close()
            self.conn = None
