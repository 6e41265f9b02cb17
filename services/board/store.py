"""The board's data-access seam: one writer thread, a few reader threads, one hop per command.

A command is a plain function ``fn(tx, ...)`` that runs inside one writing transaction on the
writer thread; it validates, writes state and appends its activity rows through ``tx.record``. The
event loop pays one thread hop per command, never one per statement. Reads run the same way on
reader connections. Commands and queries see only :mod:`services.board.dialect`'s connection and
row protocols, so one copy of them runs on either engine: :mod:`.sqlite_store` (the embedded
default) or :mod:`.postgres_store` (a shared database several board processes serve).

Group commit: commands that queue up while the writer is busy run together in one transaction,
which pays ``BEGIN``, ``COMMIT`` and one wake-up of the event loop once. A refused command leaves
nothing of itself: one that had written nothing costs nothing more; the first that had takes the
batch back to the savepoint at its start, and the batch runs again from there with each command
inside a savepoint of its own, so that any later refusal rolls back that command's alone
(``WriterStore._run_batch``). Nobody hears of a command — neither its caller nor the commit
listeners — before the batch's ``COMMIT`` has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, ParamSpec, Protocol, TypeVar, runtime_checkable

import orjson
import structlog

from shared.errors import ERROR_STATUS, TaskloomError
from shared.events import EVENT_SET
from shared.limits import MAX_ACTIVITY_BYTES, MAX_CHANGES_BYTES
from shared.timestamps import format_timestamp

from .dialect import Connection, Cursor, Params, Row, may_write

P = ParamSpec("P")
T = TypeVar("T")

log = structlog.get_logger("taskd.store")

READER_THREADS = 2
#: Threads for reads that last as long as a client keeps reading (a state export streamed to a
#: slow client): apart from ``READER_THREADS``, so they never hold the reads every request needs.
#: More such reads at once wait for one of these.
STREAMING_READER_THREADS = 2
#: Most commands one transaction carries; a longer queue is served in several batches, in order.
MAX_BATCH: Final = 64
#: The savepoint a batch of several commands takes as it begins, and the one each command of a
#: batch that is run again takes (``WriterStore._run_batch``).
BATCH_SAVEPOINT: Final = "batch"
COMMAND_SAVEPOINT: Final = "command"


class SchemaTooNew(RuntimeError):
    """The database was written by a newer Taskloom; we refuse to touch it."""


class SchemaDamaged(RuntimeError):
    """The database lacks triggers the migrations define, or has them disabled: its rules would
    go unenforced, so the board does not serve it."""

    def __init__(self, where: str, missing: list[str], disabled: list[str] | None = None) -> None:
        self.missing, self.disabled = missing, disabled or []
        faults = []
        if missing:
            faults.append(f"lacks {len(missing)} {'trigger' if len(missing) == 1 else 'triggers'} the schema defines"
                          f" ({', '.join(missing)})")
        if self.disabled:
            faults.append(f"has {len(self.disabled)} of them disabled ({', '.join(self.disabled)})")
        super().__init__(
            f"{where} {' and '.join(faults)}, so its rules are not enforced; run `taskd serve --repair-schema` "
            "to put them back from the migrations"
        )


class MigrationFailed(RuntimeError):
    """An upgrade step the database refused; every pending step is one transaction, so the
    database is still at the version it had (``version``)."""

    def __init__(self, step: str, version: int, reason: str) -> None:
        self.step, self.version, self.reason = step, version, reason
        super().__init__(f"{step} failed: {reason}; the database was left at version {version}")


class StoreUnreachable(RuntimeError):
    """The database server cannot be reached, or refused the connection: named by host and port."""


@dataclass(frozen=True)
class Actor:
    kind: str
    id: str


SYSTEM_ACTOR = Actor("system", "board")


def utc_now() -> str:
    return format_timestamp(datetime.now(UTC))


#: The stable codes the schema's triggers raise, on either engine: the message is ``CODE: text``.
TRIGGER_CODES: Final = frozenset({
    "INVALID_TRANSITION", "TERMINAL_STATE", "RELATION_INVALID", "RELATION_CYCLE", "RELATION_DEPTH", "RELATION_FAN_IN",
})


def trigger_refusal(text: str) -> TaskloomError:
    """A trigger's refusal (``'CODE: text'``) as the stable error it stands for."""
    code, _, detail = text.partition(":")
    code = code.strip()
    if code in TRIGGER_CODES and code in ERROR_STATUS:
        return TaskloomError(code, detail.strip() or text, details={"constraint": code})
    return TaskloomError("VALIDATION_FAILED", f"refused by the database: {text}", details={"constraint": text})


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


def store_unavailable(
    exc: BaseException, what: str, *, details: dict[str, Any], check: str, nothing_written: bool = False,
) -> TaskloomError:
    """503 STORE_UNAVAILABLE, in the engine's words: ``details`` what its driver said, ``check``
    what an operator should look at if it keeps happening. Retry later."""
    said = str(exc).strip().splitlines()
    return TaskloomError(
        "STORE_UNAVAILABLE",
        f"the board's database {what}: {said[0] if said else type(exc).__name__}",
        details={**details, "retry_after": 1},
        hint=(f"nothing was written; retry in a moment. If it persists, check {check}" if nothing_written
              else f"retry in a moment; if it persists, check {check}"),
    )


def disk_refused(exc: OSError, what: str, *, then: str = "", hint: str) -> TaskloomError:
    """503 STORE_UNAVAILABLE for a file the board's disk would not take (full, read-only,
    failing): ``what`` could not be written, in the system's words, then what that left; the
    errno's name in the details. Retry once there is room."""
    return TaskloomError(
        "STORE_UNAVAILABLE",
        f"{what}: {exc.strerror or exc}{then}",
        details={"errno": errno.errorcode.get(exc.errno or 0, "EIO"), "retry_after": 1},
        hint=hint,
    )


def batch_lost(exc: BaseException, *, details: dict[str, Any], check: str) -> TaskloomError:
    """A transaction that could not begin or commit: every command in it is unwritten, retry later."""
    error = store_unavailable(exc, "could not write this change", details=details, check=check, nothing_written=True)
    error.__cause__ = exc
    return error


@dataclass
class Tx:
    """One command's transaction: the connection, who is acting, and the commit time."""

    conn: Connection
    actor: Actor
    now: str
    appended: list[int] = field(default_factory=list)
    #: (project_id, task_id, event) of every row appended: where the conditions look (docs/conditions.md).
    scopes: list[tuple[str | None, str | None, str]] = field(default_factory=list)
    #: What the command hook leaves for after COMMIT (signals, timer deadlines); opaque here.
    effects: list[Any] = field(default_factory=list)
    #: The frames of the rows this command appended, encoded as they were written; None when no
    #: batch hand-off is attached (see ``BatchHandoff``).
    encode: Callable[..., Any] | None = None
    encoded: list[Any] = field(default_factory=list)
    #: Another process may have committed since this store last did (another board process on the
    #: same PostgreSQL database, a script writing the SQLite file): what a cache kept between
    #: commands holds of committed state (the conditions' project settings) must be read again.
    #: Found from the head under the write lock, against the head this store's last commit left.
    others_committed: bool = False
    #: Cards this command updated, by id, as the update returned them (``conditions.card``), for
    #: the command hook to judge without reading them again. Only while nothing else the command
    #: sent may have changed them: any statement but a ``SELECT`` forgets them all (a relation
    #: added makes a card blocked; a delete takes it away).
    cards: dict[str, Row] = field(default_factory=dict)

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        self._sending(sql)
        return self.conn.execute(sql, params)

    def one(self, sql: str, params: Params = ()) -> Row | None:
        self._sending(sql)
        row: Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Params = ()) -> list[Row]:
        self._sending(sql)
        return self.conn.execute(sql, params).fetchall()

    def _sending(self, sql: str) -> None:
        if self.cards and may_write(sql):
            self.cards.clear()

    def record(
        self,
        event: str,
        changes: dict[str, Any],
        *,
        task_id: str | None,
        project_id: str | None,
        actor: Actor | None = None,
    ) -> int:
        """Append one activity row; it carries the revision its own insert produces.

        One statement: the revision is read inside the INSERT and returned with the row's id, so a
        PostgreSQL writer pays one round trip per row, not two. The frame-size backstop needs the
        revision, so it is judged on what was inserted; refusing then raises inside the command,
        whose rollback takes the row away again (nothing is written).
        """
        if event not in EVENT_SET:
            raise ValueError(f"undeclared event {event!r}")
        who = actor or self.actor
        changes_json = orjson.dumps(changes)
        row = self.conn.execute(
            "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, (SELECT revision + 1 FROM global_revision WHERE singleton = 1), ?)"
            " RETURNING id, revision",
            (task_id, project_id, who.kind, who.id, event, changes_json.decode(), self.now),
        ).fetchone()
        row_id, revision = int(row[0]), int(row[1])
        frame_size = len(changes_json) + len(
            orjson.dumps({
                "id": revision, "revision": revision, "task_id": task_id, "project_id": project_id,
                "actor_kind": who.kind, "actor_id": who.id, "event": event, "changes": None, "created_at": self.now,
            })
        )
        if len(changes_json) > MAX_CHANGES_BYTES or frame_size > MAX_ACTIVITY_BYTES:
            _refuse_oversized(event, frame_size)
        if self.encode is not None:
            self.encoded.append(self.encode(
                row_id, revision, task_id, project_id, who.kind, who.id, event, changes_json, self.now
            ))
        self.appended.append(revision)
        self.scopes.append((project_id, task_id, event))
        return revision


def _refuse_oversized(event: str, frame_size: int) -> None:
    """The backstop of shared/limits.py: a row this large would not fit the frames and lines
    downstream, and would stall every stream at its revision. The field limits keep every command
    below it."""
    raise TaskloomError(
        "VALIDATION_FAILED",
        f"this change would write a {event} row of {frame_size} bytes; at most {MAX_ACTIVITY_BYTES} fit a frame",
        details={"event": event, "size": frame_size, "limit": MAX_ACTIVITY_BYTES},
        hint="send less text at once",
    )


CommitListener = Callable[[int], None]
#: Runs inside each command's transaction once the command has returned, so conditions are judged
#: on the state it leaves behind, and roll back with it (docs/conditions.md).
CommandHook = Callable[[Tx], None]
#: Told on the event loop, after COMMIT, what the committed commands left in ``Tx.effects``, with
#: the head the batch committed at (its last revision, or the head it found if it appended none).
EffectsListener = Callable[[list[Any], int], None]
#: Encodes a batch's committed effects, and its head, for the other board processes on the same
#: database: each string returned rides one notification sent with the COMMIT (PostgreSQL).
PeerEffects = Callable[[list[Any], int], list[str]]
#: Told on the event loop what another board process's ``PeerEffects`` encoded.
PeerListener = Callable[[str], None]
#: Told to the peer listeners instead of a note when this process may have missed some: its
#: listening connection was lost and is back (a notification reaches only who listens at COMMIT).
PEER_GAP: Final = ""
#: The most one such string may hold: PostgreSQL refuses a notification of 8,000 bytes or more.
#: In front of it go the seal (65 bytes), the sender's name (13) and the head and serial the
#: receiver checks for freshness (up to 20 digits each, with their spaces): 7,860 + 120 < 8,000.
PEER_NOTE_BYTES: Final = 7860


class BatchHandoff(Protocol):
    """Takes a committed batch's frames straight from the writer (``services/board/fanout.py``).

    ``encode`` runs on the writer thread inside ``Tx.record`` (the row's fields and its changes
    JSON, as written). ``deliver`` runs on the event loop after COMMIT, before the commit
    listeners, with ``after`` the head the batch began on, ``end`` the head it committed, and every
    streamable row in between encoded, in revision order; it returns whether it published them.
    """

    def wanted(self) -> bool:
        """Whether the next batch should encode its frames (someone is listening)."""

    def encode(
        self, row_id: int, revision: int, task_id: str | None, project_id: str | None, actor_kind: str,
        actor_id: str, event: str, changes_json: bytes, created_at: str,
    ) -> Any:
        """One appended row's frame."""

    def deliver(self, after: int, end: int, frames: tuple[Any, ...]) -> bool:
        """Publish a committed batch; False leaves it to the log reader."""

    def pack(self, frames: tuple[Any, ...]) -> bytes:
        """A batch's frames as text another board process's ``unpack`` reads (PostgreSQL sends it
        with the COMMIT, so the other processes' log readers need not read the rows back)."""

    def unpack(self, packed: bytes) -> tuple[Any, ...]:
        """The frames ``pack`` wrote; ValueError (or a subclass) when ``packed`` is not such text."""


#: ``(after, end, frames)`` of a committed batch whose frames were encoded by the writer.
Handed = tuple[int, int, tuple[Any, ...]]
#: ``(began, frames)``: the head a batch began on and the frames its commands encoded, for the
#: COMMIT to check against the database (``WriterStore._commit``).
BatchFrames = tuple[int, tuple[Any, ...]]
#: The head and the activity rows after a batch's first head, read before its COMMIT (under the
#: write lock): the batch's frames are its hand-off only if they are that many (``handed_if_whole``).
#: ``{began}`` is a placeholder, or on PostgreSQL the revision itself in a script of one round trip.
ROWS_AFTER_SQL: Final = (
    "SELECT (SELECT revision FROM global_revision WHERE singleton = 1) AS head, count(*) AS rows_after"
    " FROM task_activities WHERE revision > {began}"
)


def handed_if_whole(began: int, head: Any, rows_after: Any, frames: tuple[Any, ...]) -> Handed | None:
    """The batch's hand-off, if its frames are every row after ``began`` (``ROWS_AFTER_SQL``)."""
    return (began, int(head), frames) if rows_after == len(frames) else None


class _Job:
    """One queued command and, once its batch has ended, its outcome."""

    __slots__ = ("actor", "appended", "args", "effects", "encoded", "error", "fn", "future", "kwargs", "loop", "result")

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
        self.encoded: list[Any] = []

    def lose(self, error: BaseException) -> None:
        """The transaction this command ran in was rolled back: whatever it did is gone."""
        self.reset()
        self.error = error

    def reset(self) -> None:
        """What this command did was rolled back, and it is to run again."""
        self.result, self.appended, self.effects, self.encoded, self.error = None, [], [], [], None


#: Tells the writer thread to finish the commands queued before it and stop.
_STOP: Final = object()


class LogFollower(Protocol):
    """The log reader's own connection, on its own thread (see ``logreader``)."""

    def changed(self) -> bool:
        """Whether another connection may have committed since the last call (cheap, no snapshot)."""

    def snapshot(self) -> AbstractContextManager[Connection]:
        """One read transaction: everything read inside it is one consistent state."""

    def close(self) -> None: ...


class SecretChanged(Exception):
    """``SharedSecrets.write_secret``'s condition failed: another process changed that secret."""


@runtime_checkable
class SharedSecrets(Protocol):
    """An engine several board processes share keeps the board's secrets itself (PostgreSQL)."""

    def read_secret(self, key: str) -> str | None: ...

    def write_secret(
        self, key: str, value: str, *, only_if_absent: bool = False, notify_token: bool = False,
        drop_prefix: str | None = None, while_holding: tuple[str, str] | None = None,
    ) -> str:
        """Store ``value`` under ``key`` (or keep the stored one when ``only_if_absent``) and return
        what is stored; in the same transaction, remove every key under ``drop_prefix``. With
        ``while_holding = (other, expected)`` nothing is written unless ``other`` holds ``expected``
        (read under a lock against a concurrent write of it): :class:`SecretChanged` instead."""

    def take_secret(self, key: str) -> str | None:
        """Remove ``key`` and return what it held, atomically: a second taker gets None."""

    def secrets_with_prefix(self, prefix: str) -> dict[str, str]: ...

    def drop_expired_secrets(self, prefix: str, now: float, *, at_most: int) -> int:
        """Remove up to ``at_most`` keys under ``prefix`` whose value, an expiry in Unix seconds, is
        not after ``now`` (exactly those a reader testing ``int(value) > now`` refuses); how many."""

    def add_token_listener(self, listener: Callable[[], None]) -> None:
        """Called on the event loop when any process changes the token or revokes a session."""


class WriterStore:
    """What both engines share: the writer thread, group commit, the readers, commit listeners.

    An engine supplies its connections and its words for a transaction (the ``_``-prefixed hooks
    below); everything about ordering, batching and telling callers is decided here, once.
    """

    #: ``sqlite`` or ``postgresql``.
    engine: str = "sqlite"
    #: Whether attachment bytes are rows of the database (shared by every board process) or files.
    blobs_in_database: bool = False
    #: Whether other board processes may serve the same database (PostgreSQL): what a commit's
    #: effects mean for them (signals, deadlines) is then sent to them with the COMMIT.
    serves_peers: bool = False
    #: The engine's driver errors: a BEGIN or COMMIT failing with one of these loses its batch.
    driver_error: type[BaseException] = Exception
    #: What an operator should look at when batches keep being lost (the 503's hint).
    lost_check: str = "the database"

    def __init__(self, *, clock: Callable[[], str] = utc_now) -> None:
        self.clock = clock
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._closed = False
        self._readers = ThreadPoolExecutor(max_workers=READER_THREADS, thread_name_prefix="taskloom-reader")
        self._streaming_readers = ThreadPoolExecutor(max_workers=STREAMING_READER_THREADS,
                                                     thread_name_prefix="taskloom-streaming-reader")
        self._listeners: list[CommitListener] = []
        self._effects_listeners: list[EffectsListener] = []
        #: Set by the board's conditions engine where ``serves_peers``; see ``PeerEffects``.
        self.peer_effects: PeerEffects | None = None
        self._peer_listeners: list[PeerListener] = []
        #: Set by the board's conditions engine; None runs commands without conditions.
        self.command_hook: CommandHook | None = None
        #: Transactions the writer thread committed or tried, and the commands they carried (bench, tests).
        self.batches = 0
        self.batched_commands = 0
        self._handoff: BatchHandoff | None = None
        #: The hand-off of the batch the writer thread has just run, and the head it committed at
        #: (writer thread only).
        self._handed: Handed | None = None
        self._batch_head = 0
        #: The head this process's writer left at its last commit (writer thread only); None until
        #: the first, and after a batch whose outcome is not known. ``run_command`` keeps it too.
        self._left_head: int | None = None

    # -- what an engine provides ----------------------------------------------------------------

    def open(self) -> None:
        raise NotImplementedError

    def _close_connections(self) -> None:
        raise NotImplementedError

    def _writer_conn(self) -> Any:
        """The writer thread's connection (made again if the last one broke)."""
        raise NotImplementedError

    def _begin(self, conn: Any, *then: str) -> int:
        """Start a writing transaction that holds the engine's write lock from its first statement,
        then run the statements ``then`` (which return nothing). Returns the head revision the lock
        was taken at: the batch's frame hand-off starts there, and it tells whether another process
        committed since this store's last commit."""
        raise NotImplementedError

    def _steps(self, conn: Any, *statements: str) -> None:
        """Run statements that return nothing, in order (savepoints); PostgreSQL sends them at once."""
        for statement in statements:
            conn.execute(statement)

    def _commit(self, conn: Any, revision: int, notes: Sequence[str] = (), frames: BatchFrames | None = None) -> Handed | None:
        """COMMIT a batch whose last appended revision is ``revision`` (0: none); PostgreSQL adds its
        NOTIFY, and sends ``notes`` (``PeerEffects``) to the other board processes with it.

        With ``frames``, the batch's frames are checked against the rows the database holds after
        the head it began on, before COMMIT (``_encoded_batch``): what is returned, the batch's
        hand-off, is None unless they are every row of its range."""
        handed = self._encoded_batch(conn, *frames) if frames is not None and frames[1] else None
        conn.execute("COMMIT")
        return handed

    def _in_transaction(self, conn: Any) -> bool:
        """Whether the batch's transaction is still open; asked after a refusal or a failure
        (SQLite rolls the whole transaction back by itself on a full disk or an I/O error)."""
        raise NotImplementedError

    def _writes(self, conn: Any) -> int:
        """A count that moves whenever ``conn`` may have changed a row: a refused command that
        left it where it was has nothing to undo."""
        raise NotImplementedError

    def _failed(self, conn: Any) -> bool:
        """Whether the transaction is open but refuses every statement until it is rolled back to
        a savepoint (PostgreSQL, after any error)."""
        return False

    @property
    def frames_wanted(self) -> bool:
        """Whether another board process on the database has live streams that this writer's
        frames would spare a read (PostgreSQL; never where the database has one board)."""
        return False

    def translate_error(self, exc: BaseException) -> BaseException:
        """What a command's caller is told about ``exc`` (a stable code where the engine refused)."""
        return exc

    def lost_details(self, exc: BaseException) -> dict[str, Any]:
        """What the engine's driver said about a lost batch, for the 503's details."""
        return {}

    def _lost(self, exc: BaseException) -> TaskloomError:
        return batch_lost(exc, details=self.lost_details(exc), check=self.lost_check)

    def run_command(self, fn: Callable[..., T], actor: Actor, *args: Any, **kwargs: Any) -> tuple[T, list[int]]:
        """Run ``fn(tx, ...)`` in one transaction on the calling thread; returns (result, revisions).

        For scripts, tests and benches: it does not go through the writer thread, so the engine's
        write lock orders it against the board.
        """
        raise NotImplementedError

    def follow_log(self) -> LogFollower:
        raise NotImplementedError

    def run_query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------------

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
        self._streaming_readers.shutdown(wait=True)
        self._close_connections()

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Called on the event loop after every commit that appended activity rows."""
        self._listeners.append(listener)

    def remove_commit_listener(self, listener: CommitListener) -> None:
        """Stop telling ``listener`` about commits (a reader leaving with its app)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_effects_listener(self, listener: EffectsListener) -> None:
        """Called on the event loop with the effects of the commands a batch committed."""
        self._effects_listeners.append(listener)

    def remove_effects_listener(self, listener: EffectsListener) -> None:
        if listener in self._effects_listeners:
            self._effects_listeners.remove(listener)

    def add_peer_listener(self, listener: PeerListener) -> None:
        """Called on the event loop with what another board process on the same database sent with
        its COMMIT (``PeerEffects``); never where the database has one board (SQLite)."""
        self._peer_listeners.append(listener)

    def _tell_peer_listeners(self, note: str) -> None:
        for listener in tuple(self._peer_listeners):
            try:
                listener(note)
            except Exception:
                log.exception("peer_listener_failed")

    def attach_handoff(self, handoff: BatchHandoff | None) -> None:
        """Let the writer hand each committed batch's encoded frames to ``handoff`` (None: stop)."""
        self._handoff = handoff

    @property
    def handoff(self) -> BatchHandoff | None:
        return self._handoff

    def _run_hook(self, tx: Tx) -> None:
        """The conditions' judgement of the state ``tx`` leaves behind, inside its transaction."""
        if self.command_hook is not None:
            self.command_hook(tx)

    @property
    def queued(self) -> int:
        """Commands waiting for the writer thread (tests and diagnostics; approximate)."""
        return self._queue.qsize()

    # -- the seam -------------------------------------------------------------------------------

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
        return await self._read_on(self._readers, fn, *args, **kwargs)

    async def streaming_query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``query`` for a read that hands its rows to a client as it goes and lasts as long as the
        client takes (``STREAMING_READER_THREADS``)."""
        return await self._read_on(self._streaming_readers, fn, *args, **kwargs)

    async def _read_on(self, threads: ThreadPoolExecutor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(threads, functools.partial(self.run_query, fn, *args, **kwargs))

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
            stopping = self._take_queued(batch)
            self._handed, self._batch_head = None, 0
            try:
                revision = self._run_batch(batch)
            except BaseException as exc:  # the writer must outlive anything a batch does
                log.exception("write_batch_failed", commands=len(batch))
                with contextlib.suppress(Exception):
                    self._abandon(self._writer_conn())
                for job in batch:
                    job.lose(self._lost(exc))
                revision = 0
            self._settle(batch, revision, self._handed if revision else None, self._batch_head)

    def _take_queued(self, batch: list[_Job]) -> bool:
        """Move what has queued onto ``batch``, up to MAX_BATCH commands; True if it met the stop
        marker (``close()``), which is never followed by a command."""
        while len(batch) < MAX_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            batch.append(item)
        return False

    def _run_batch(self, batch: list[_Job]) -> int:
        """One transaction for the whole batch; returns the last revision it appended (0: none).

        When this returns, every job holds its outcome: a result (committed) or an error (nothing
        of it written).
        """
        self.batches += 1
        # A lone command needs no savepoint: its refusal rolls back the transaction itself.
        several = len(batch) > 1
        conn = None
        try:
            conn = self._writer_conn()
            locked_at = self._begin(conn, *((f"SAVEPOINT {BATCH_SAVEPOINT}",) if several else ()))
            # What queued while the lock was awaited (another board process held it) joins this
            # batch: each command left out would wait for the lock again, behind the other's batch.
            if self._take_queued(batch):
                self._queue.put(_STOP)  # for the write loop: the stop marker stays the last item
            if not several and len(batch) > 1:
                self._steps(conn, f"SAVEPOINT {BATCH_SAVEPOINT}")
                several = True
        except self.driver_error as exc:
            # Another process holds the write lock past its timeout, or the database is unusable.
            # A BEGIN that got as far as opening the transaction leaves it open (on PostgreSQL,
            # aborted): rolled back here, or every later batch would fail inside it.
            if conn is not None:
                self._abandon(conn)
            for job in batch:
                job.lose(self._lost(exc))
            return 0
        self.batched_commands += len(batch)
        handoff = self._handoff
        # Frames are encoded for this process's live streams, and for those of other board
        # processes on the database that have some: they travel with the COMMIT (``_commit``).
        local = handoff is not None and handoff.wanted()
        encode = handoff.encode if handoff is not None and (local or self.frames_wanted) else None
        # ``locked_at`` is the head this batch begins on, read under the write lock; the hand-off
        # still counts the rows after it (_encoded_batch): a trigger may have appended one.
        others = self._others_committed(locked_at)
        # Until this batch commits (``_committed_at``) or is wholly rolled back, what its commands
        # read and cached (a project's settings one of them changed) is not known to have
        # committed: every other way out leaves the next batch to read afresh, as after another
        # process's commit (``Tx.others_committed``).
        self._left_head = None
        # The commands run without a savepoint each (on PostgreSQL that is a round trip per
        # command) until one is refused after it wrote: then the batch goes back to its start and
        # runs again, ``guarded``, each command inside a savepoint of its own. The write lock is
        # held throughout, so the second run sees what the first saw.
        guarded = False
        position = 0
        while position < len(batch):
            job = batch[position]
            # Each command's own clock reading, taken under the write lock: commit times follow
            # revision order inside a batch and across processes.
            tx = Tx(conn, job.actor, self.clock(), encode=encode, others_committed=others)
            # Guarded, the savepoint of the next command is set as this one's is released (or
            # rolled back to): one step between commands. The last one's is released by COMMIT.
            following = (f"SAVEPOINT {COMMAND_SAVEPOINT}",) if position + 1 < len(batch) else ()
            writes = self._writes(conn)
            try:
                job.result = job.fn(tx, *job.args, **job.kwargs)
                self._run_hook(tx)
                refuse_unencodable(job.result)
            except Exception as exc:  # noqa: BLE001 - any refusal or bug is this command's alone
                job.error = self.translate_error(exc)
                if not self._in_transaction(conn):
                    # SQLite rolled the whole transaction back itself (disk full, I/O error): the
                    # commands before this one are gone too, and nobody has been told otherwise.
                    for earlier in batch[:position]:
                        earlier.lose(self._lost(exc))
                    return self._run_rest(batch, position + 1)
                if not several:
                    conn.execute("ROLLBACK")
                    self._left_head = locked_at  # nothing of it stands: the head is the one it found
                    return 0
                if guarded:
                    self._steps(conn, f"ROLLBACK TO {COMMAND_SAVEPOINT}", f"RELEASE {COMMAND_SAVEPOINT}", *following)
                elif self._writes(conn) != writes or self._failed(conn):
                    # Something of it may stand: back to the batch's start, every command to run
                    # again, this one included (judged again on what it then finds). What the
                    # first run cached is read afresh, as after another process's commit.
                    self._steps(conn, f"ROLLBACK TO {BATCH_SAVEPOINT}", f"SAVEPOINT {COMMAND_SAVEPOINT}")
                    for earlier in batch[:position + 1]:
                        earlier.reset()
                    guarded, others, position = True, True, 0
                    continue
                position += 1
                continue
            if guarded and following:
                self._steps(conn, f"RELEASE {COMMAND_SAVEPOINT}", *following)
            job.appended = tx.appended
            job.effects = tx.effects
            job.encoded = tx.encoded
            position += 1
        frames = (locked_at, tuple(frame for job in batch for frame in job.encoded)) if encode is not None else None
        last = max((job.appended[-1] for job in batch if job.appended), default=0)
        self._batch_head = last or locked_at
        try:
            handed = self._commit(conn, last, self._peer_notes(batch, self._batch_head), frames)
        except self.driver_error as exc:
            # The whole batch is unwritten; which command made COMMIT fail cannot be told, so
            # every caller hears 503 and may retry.
            self._abandon(conn)
            for job in batch:
                job.lose(self._lost(exc))
            return 0
        self._handed = handed if local else None
        if not guarded:
            self._committed_at(locked_at, last)
        # A batch run again leaves ``_left_head`` unknown: what its first run cached is forgotten
        # only by a command of the second run that reaches the command hook, and if each was
        # refused before it (a command whose outcome depends on the clock), the settings read in
        # the first run, never committed, would be judged by the next batch. It reads afresh.
        return last

    def _peer_notes(self, batch: list[_Job], head: int) -> list[str]:
        """What the batch's committed effects mean for the other board processes, if any may be."""
        if not self.serves_peers or self.peer_effects is None:
            return []
        effects = [effect for job in batch if job.error is None for effect in job.effects]
        return self.peer_effects(effects, head) if effects else []

    def _others_committed(self, locked_at: int) -> bool:
        """Whether the head the write lock was taken at is not the one this writer left: another
        process committed in between (or this writer does not know, having just started)."""
        return locked_at != self._left_head

    def _committed_at(self, locked_at: int, last: int) -> None:
        """What this writer left: its last revision, or the head it found when it appended none."""
        self._left_head = last or locked_at

    def _encoded_batch(self, conn: Any, began: int, frames: tuple[Any, ...]) -> Handed | None:
        """The batch's frames with the range they cover, if they are every row of that range.

        Counted in the database rather than trusted: a row appended by anything but ``Tx.record``
        (a trigger, a future command) or by another process committing before this batch's first
        row would otherwise be skipped by every stream.
        """
        try:
            head, rows_after = conn.execute(ROWS_AFTER_SQL.format(began="?"), (began,)).fetchone()
        except self.driver_error:
            return None  # the commit is not this check's to fail: the log reader will read it
        return handed_if_whole(began, head, rows_after, frames)

    def _run_rest(self, batch: list[_Job], start: int) -> int:
        """The commands of a lost batch from ``start`` on, which had not run yet, get a transaction
        of their own. What queued meanwhile joins that transaction (``_take_queued``), and so
        joins ``batch`` too: the write loop settles ``batch``, and a job it does not hold would
        commit with its caller never told."""
        rest = batch[start:]
        revision = self._run_batch(rest) if rest else 0
        batch[start:] = rest
        return revision

    def _abandon(self, conn: Any) -> None:
        if self._in_transaction(conn):
            with contextlib.suppress(self.driver_error):
                conn.execute("ROLLBACK")

    def _settle(self, batch: list[_Job], revision: int, handed: Handed | None = None, head: int = 0) -> None:
        """Hand the outcomes to the event loops that wait for them: one wake-up per loop and batch."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for number, (loop, jobs) in enumerate(by_loop.items()):
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody left to tell
                # The frames go out once, with the first loop's wake-up (the board has one loop).
                loop.call_soon_threadsafe(self._deliver, jobs, revision, handed if number == 0 else None, head)

    def _deliver(self, jobs: list[_Job], revision: int, handed: Handed | None = None, head: int = 0) -> None:
        """On the event loop, after COMMIT: the hand-off and listeners first, then the callers resume."""
        if handed is not None:
            self._hand_off(handed)
        if revision:
            self._notify(revision)
        effects = [effect for job in jobs if job.error is None for effect in job.effects]
        if effects:
            for effects_listener in tuple(self._effects_listeners):
                try:
                    effects_listener(effects, head)
                except Exception:
                    log.exception("effects_listener_failed", revision=revision)
        for job in jobs:
            if job.future.done():
                continue  # cancelled: the caller went away; its command stands
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.result)

    def _hand_off(self, handed: Handed) -> None:
        """On the event loop: a committed batch's frames (this writer's, or another board
        process's) to the hand-off, which publishes them if they start where its reader stands."""
        if self._handoff is not None:
            try:
                self._handoff.deliver(*handed)
            except Exception:
                log.exception("batch_handoff_failed", revision=handed[1])

    def _notify(self, revision: int) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(revision)
            except Exception:
                log.exception("commit_listener_failed", revision=revision)
