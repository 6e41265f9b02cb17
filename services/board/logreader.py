"""The board's one log reader: every new activity row is read once, encoded once, fanned out once.

After an in-process commit the store's commit listener wakes the reader at once (when no stream
is live it only moves the reader's position: there is nobody to read for). Commits made by other
processes are the engine's business (:meth:`WriterStore.follow_log`): on SQLite the reader polls
``PRAGMA data_version`` (it changes whenever any *other* connection commits); on PostgreSQL every
writing transaction sends a ``NOTIFY`` that the store turns into the same commit listener call, and
the poll is only a slow safety net. Each wake reads the rows
after the reader's position in one snapshot, encodes their SSE frames on the reader's thread and
hands the same bytes to every live stream (SPEC §6.3): the database work per event does not depend
on how many streams are open.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

import orjson
import structlog

from shared.events import WIRE_NOISE
from shared.sse import encode_event, encode_id_only

from .dialect import Connection, Row
from .queries import activities
from .store import LogFollower, WriterStore

log = structlog.get_logger("taskd.logreader")

#: Rows per read of the live log; a longer backlog is read in several batches, oldest first.
LIVE_PAGE: Final = 500
#: Pause after a failed read before the reader tries again, seconds.
RETRY_AFTER_FAILURE: Final = 1.0
#: Calls held for ``LogReader.after`` beyond which the oldest is made at once: a reader that cannot
#: read for long loosens the order of what waits on it rather than holding without bound.
MOST_WAITING: Final = 10_000


class Frame(NamedTuple):
    """One activity row, encoded: ``wire`` is its complete SSE frame. (A tuple: replay builds
    tens of thousands a second, and a frozen dataclass costs several times more to create.)"""

    revision: int
    event: str
    task_id: str | None
    project_id: str | None
    wire: bytes

    @property
    def noise(self) -> bool:
        return self.event in WIRE_NOISE


@dataclass(frozen=True, slots=True)
class Page:
    """Rows with ``after < revision <= end`` in revision order; nothing else streamable is in that range.

    ``end`` is the snapshot's head when the page is not full (revisions that belong to other tables
    hold no row), else the last row's revision. ``complete`` is False when the rows were not read
    (nobody was listening): such a page only moves the reader's position.
    """

    after: int
    end: int
    frames: tuple[Frame, ...]
    full: bool = False
    complete: bool = True
    #: Every frame a stream without filters receives, joined once (noise left out, see ``wire_for``).
    wire: bytes = b""
    #: The id a stream without filters has announced once it has written ``wire``.
    last_id: int = 0


def encode_row(row: Row) -> Frame:
    try:
        frame = activities.to_frame(row)
    except orjson.JSONDecodeError:
        # A row some other writer stored with broken JSON must not wedge every stream behind it:
        # it is still a signal that something changed, so it goes out with empty changes.
        log.warning("activity_changes_unreadable", revision=row["revision"])
        frame = activities.to_frame(_with_changes(row, "{}"))
    revision = frame["revision"]
    wire = encode_event(revision, orjson.dumps(frame))
    return Frame(revision, frame["event"], frame["task_id"], frame["project_id"], wire)


def _with_changes(row: Row, changes_json: str) -> dict[str, object]:
    # A row iterates over values, not names: keys() is needed here.
    replaced: dict[str, object] = {key: row[key] for key in row.keys()}  # noqa: SIM118
    replaced["changes_json"] = changes_json
    return replaced


def unfiltered_wire(frames: Iterable[Frame], last_id: int) -> tuple[bytes, int]:
    """What a stream without filters sends for ``frames``: noise is left out, but an id-only
    frame after trailing noise moves the client's cursor past it (SPEC §6.4)."""
    parts: list[bytes] = []
    skipped = 0
    for frame in frames:
        if frame.noise:
            skipped = frame.revision
        else:
            parts.append(frame.wire)
            last_id = frame.revision
    if skipped > last_id:
        parts.append(encode_id_only(skipped))
        last_id = skipped
    return b"".join(parts), last_id


def read_page(conn: Connection, after: int, limit: int = activities.REPLAY_PAGE) -> Page:
    """Streamable rows after ``after``, encoded; one call is one snapshot (``store.query``).

    A stream's own read: a position below the retention floor (a compaction ran while the stream
    was behind) is refused, never read past: the stream closes and its client's reconnect is
    answered 410.
    """
    activities.check_not_expired(conn, after)
    return _page(conn, after, limit)


def read_live_page(conn: Connection, position: int, limit: int = LIVE_PAGE) -> Page:
    """The log reader's read for the fan-out: the rows after ``position``, or after the floor
    when a compaction has raised it past rows the reader had not read yet.

    The reader is not a client and is not held to the floor: refusing it would close every live
    stream, those above the floor too, and leave it stuck below the floor. A page that starts at
    the floor is past the position of every stream still below it, so each of those leaves the
    fan-out and reads by its own cursor (``read_page``: refused, its client gets the 410 it is
    owed); the others take the page as usual.
    """
    return _page(conn, max(position, activities.floor(conn)), limit)


def _page(conn: Connection, after: int, limit: int) -> Page:
    rows = activities.replay_after(conn, after, limit)
    frames = tuple(encode_row(row) for row in rows)
    full = len(frames) == limit
    end = frames[-1].revision if full else max(activities.head(conn), after)
    wire, last_id = unfiltered_wire(frames, after)
    return Page(after, end, frames, full=full, wire=wire, last_id=last_id)


class Subscriber(Protocol):
    def offer(self, page: Page) -> bool:
        """Take a live page; False means the subscriber has left the fan-out."""

    def fail(self) -> None:
        """The reader could not read the log; the subscriber closes (its client resumes by cursor)."""


class LogReader:
    """Follows the log for the whole process; streams subscribe once they have caught up to it."""

    def __init__(self, store: WriterStore, *, poll_interval: float) -> None:
        self.store = store
        self.poll_interval = poll_interval
        #: Every streamable row at or below this revision has been handed to the subscribers.
        self.position = 0
        #: Counters for tests and the bench: rows read and reads made by the reader itself.
        self.rows_read = 0
        self.reads = 0
        #: The live streams in the order they joined (a dict, not a set): every page is offered to
        #: them in that order, not in an order the objects' addresses decide anew in every process.
        self._subscribers: dict[Subscriber, None] = {}
        #: (revision, call) held by ``after`` until the fan-out has passed the revision, in order.
        self._waiting: deque[tuple[int, Callable[[], None]]] = deque()
        self._wake = asyncio.Event()
        self._force = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="taskloom-logreader")
        self._follower: LogFollower | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.position = await loop.run_in_executor(self._executor, self._open)
        self.store.add_commit_listener(self.notify)
        self._task = asyncio.create_task(self._run(), name="taskloom-logreader")
        self._passed()

    async def stop(self) -> None:
        self._stopped = True
        self.store.remove_commit_listener(self.notify)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)
        self._subscribers.clear()
        self._waiting.clear()

    def _open(self) -> int:
        self._follower = self.store.follow_log()
        self._follower.changed()
        with self._follower.snapshot() as conn:
            return activities.head(conn)

    def _close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    # -- fan-out --------------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber) -> None:
        """Join the live fan-out; the caller has already seen everything up to ``position``."""
        self._subscribers[subscriber] = None

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.pop(subscriber, None)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def notify(self, revision: int) -> None:
        """The store's commit listener: an in-process commit is read at once, with no poll delay.

        With nobody live there is nothing to read for: the position moves to the committed
        revision and the reader stays asleep. A stream that joins later reads up to ``position``
        from the database itself before it subscribes (``Stream._catch_up``), and the commit is
        already visible to that read, since the store calls its listeners after ``COMMIT``.
        """
        if self._stopped or revision <= self.position:
            return
        if not self._subscribers:
            self.position = revision
            self._passed()
            return
        self._force = True
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def publish(self, page: Page) -> None:
        """Fan out a page read elsewhere: the writer's hand-off (``services/board/fanout.py``)."""
        self._publish(page)

    def _publish(self, page: Page) -> None:
        self.position = max(self.position, page.end)
        leavers = [subscriber for subscriber in self._subscribers if not subscriber.offer(page)]
        for subscriber in leavers:
            self._subscribers.pop(subscriber, None)
        self._passed()

    def after(self, revision: int, call: Callable[[], None]) -> None:
        """Make ``call`` once every row up to ``revision`` has gone to the live streams.

        What a commit caused besides its rows (its signals) then reaches each stream after the
        commit's own frames, whichever board process made the commit: another process's word
        arrives by its own notification and would otherwise overtake the read of the rows. Calls
        are made in the order they came, a later one never before an earlier one.
        """
        self._waiting.append((revision, call))
        if len(self._waiting) > MOST_WAITING:
            log.warning("log_reader_behind", position=self.position, waiting=len(self._waiting))
            self._make(self._waiting.popleft()[1])
        self._passed()

    def _passed(self) -> None:
        """The position moved: make the held calls it has passed, oldest first."""
        while self._waiting and self._waiting[0][0] <= self.position:
            self._make(self._waiting.popleft()[1])

    @staticmethod
    def _make(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:
            log.exception("log_reader_after_failed")

    def fail_subscribers(self) -> None:
        """After a failed read every live stream closes quietly; its client reconnects with its cursor."""
        subscribers, self._subscribers = self._subscribers, {}
        for subscriber in subscribers:
            subscriber.fail()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._wake.is_set():
                try:
                    async with asyncio.timeout(self.poll_interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            force, self._force = self._force, False
            try:
                page = await loop.run_in_executor(
                    self._executor, self._read, self.position, force, bool(self._subscribers)
                )
            except Exception:
                log.exception("log_read_failed", position=self.position)
                self._force = True  # read again next time whatever the engine says
                self.fail_subscribers()
                await asyncio.sleep(RETRY_AFTER_FAILURE)
                continue
            if page is None:
                continue
            self._publish(page)
            if page.full:
                # A backlog: read the next batch straight away, whatever data_version says.
                self._force = True
                self._wake.set()

    def _read(self, position: int, force: bool, fan_out: bool) -> Page | None:
        """On the reader's thread: nothing when no commit happened, else the rows after ``position``."""
        follower = self._follower
        assert follower is not None
        # Asked before the snapshot: a commit that lands in between is read now and counts as a
        # change again next time, so at worst we read once more for nothing, never miss one.
        if not follower.changed() and not force:
            return None
        with follower.snapshot() as conn:
            if not fan_out:
                # Nobody is live: only the head moves. A stream joining meanwhile sees the page
                # marked incomplete and reads the gap itself.
                end = max(activities.head(conn), position)
                return Page(position, end, (), complete=False) if end > position else None
            page = read_live_page(conn, position)
        self.reads += 1
        self.rows_read += len(page.frames)
        return page if page.end > position else None
