"""The board's one log reader: every new activity row is read once, encoded once, fanned out once.

After an in-process commit the store's commit listener wakes the reader at once (when no stream
is live it only moves the reader's position: there is nobody to read for). Commits made by
other processes on the same file are noticed by polling ``PRAGMA data_version`` on the reader's
own connection (it changes whenever any *other* connection commits). Each wake reads the rows
after the reader's position in one statement (one snapshot) on that connection — an aiosqlite
one, whose thread also encodes their SSE frames — and hands the same bytes to every live stream
(SPEC §6.3): the database work per event does not depend on how many streams are open. Streams
that replay or fell behind read their pages through ``fetch_after``, on a small pool of catch-up
connections beside the reader's own.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

import structlog

from .pages import Frame, Page, encode_row, read_page, unfiltered_wire
from .readers import ActivityReader, ReaderPool
from .store import SqliteStore

__all__ = ["LIVE_PAGE", "Frame", "LogReader", "Page", "Subscriber", "encode_row", "read_page", "unfiltered_wire"]

log = structlog.get_logger("taskd.logreader")

#: Rows per read of the live log; a longer backlog is read in several batches, oldest first.
LIVE_PAGE: Final = 500
#: Pause after a failed read before the reader tries again, seconds.
RETRY_AFTER_FAILURE: Final = 1.0


class Subscriber(Protocol):
    def offer(self, page: Page) -> bool:
        """Take a live page; False means the subscriber has left the fan-out."""

    def fail(self) -> None:
        """The reader could not read the log; the subscriber closes (its client resumes by cursor)."""


class LogReader:
    """Follows the log for the whole process; streams subscribe once they have caught up to it."""

    def __init__(self, store: SqliteStore, *, poll_interval: float) -> None:
        self.store = store
        self.poll_interval = poll_interval
        #: Every streamable row at or below this revision has been handed to the subscribers.
        self.position = 0
        #: Counters for tests and the bench: rows read and reads made by the reader itself.
        self.rows_read = 0
        self.reads = 0
        self._subscribers: set[Subscriber] = set()
        self._wake = asyncio.Event()
        self._force = False
        #: The reader's own connection (its data_version is the one polled) and the catch-up pool.
        self._follower: ActivityReader | None = None
        self._pages: ReaderPool | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        follower = self._follower = await self.store.open_reader()
        try:
            self._pages = await ReaderPool.open(self.store.open_reader)
            # The head notes its snapshot's data_version: a later commit is seen by the first poll.
            self.position = await follower.head()
        except BaseException:
            await self.stop()
            raise
        self.store.add_commit_listener(self.notify)
        self._task = asyncio.create_task(self._run(), name="taskloom-logreader")

    async def stop(self) -> None:
        self._stopped = True
        self.store.remove_commit_listener(self.notify)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        # Each connection finishes the reads already queued on it, then its thread ends.
        for closing in (self._pages, self._follower):
            if closing is not None:
                await closing.close()
        self._pages = self._follower = None
        self._subscribers.clear()

    async def fetch_after(self, revision: int, limit: int) -> Page:
        """A stream's own read of the log (replay, catch-up), on the catch-up connections."""
        if self._pages is None:
            raise RuntimeError("the log reader is not running")
        return await self._pages.fetch_after(revision, limit)

    # -- fan-out --------------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber) -> None:
        """Join the live fan-out; the caller has already seen everything up to ``position``."""
        self._subscribers.add(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

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
            return
        self._force = True
        self._wake.set()

    def _publish(self, page: Page) -> None:
        self.position = max(self.position, page.end)
        leavers = [subscriber for subscriber in self._subscribers if not subscriber.offer(page)]
        for subscriber in leavers:
            self._subscribers.discard(subscriber)

    def fail_subscribers(self) -> None:
        """After a failed read every live stream closes quietly; its client reconnects with its cursor."""
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            subscriber.fail()

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
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
                page = await self._read(self.position, force, bool(self._subscribers))
            except Exception:
                log.exception("log_read_failed", position=self.position)
                if self._follower is not None:
                    self._follower.forget()  # read again next time whatever data_version says
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

    async def _read(self, position: int, force: bool, fan_out: bool) -> Page | None:
        """Nothing when no commit happened, else the rows after ``position`` (one statement each)."""
        follower = self._follower
        assert follower is not None
        # A commit listener's wake reads at once, in one statement: the page notes the
        # data_version of its own snapshot, so a commit it did not see still counts as a change.
        if not force and not await follower.changed():
            return None
        if not fan_out:
            # Nobody is live: only the head moves. A stream joining meanwhile sees the page
            # marked incomplete and reads the gap itself.
            end = max(await follower.head(), position)
            return Page(position, end, (), complete=False) if end > position else None
        page = await follower.fetch_after(position, LIVE_PAGE)
        self.reads += 1
        self.rows_read += len(page.frames)
        return page if page.end > position else None
