"""One SSE stream's life: replay → live → (slow client) catch-up → live … → end (SPEC §6).

The request handler's task is the stream's only writer, so one flush runs at a time. The log
reader hands it pages through ``offer`` (synchronous, on the event loop); they wait in a bounded
queue. A client that does not drain its socket fills the queue, the stream leaves the live
fan-out and later reads what it missed from the database by its own cursor, page by page, before
rejoining: it is never dropped and never buffers without bound.

Cursor bookkeeping: ``position`` is the revision up to which every streamable row has been
queued, written or skipped; ``last_id`` is the last id the client has been told. A stream that
skips rows (wire noise, filters) ends each batch with an id-only frame, so the client's
``Last-Event-ID`` always equals the last row at or below ``position`` (SPEC §6.4).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Final

import orjson
import structlog
from aiohttp import web

from shared.sse import PING, encode_id_only, encode_named, encode_retry

from .conditions.signals import Signal
from .logreader import Frame, LogReader, Page, read_page
from .store import WriterStore

log = structlog.get_logger("taskd.stream")

#: Bytes a live stream may hold queued or in flight before it leaves the fan-out. A single
#: reader batch (at most LIVE_PAGE rows, shared with every other stream) is always taken.
LIVE_QUEUE_BYTES: Final = 1 << 20
#: Signals a stream that is catching up holds until it has sent the rows before them; more are
#: missed (its client reads /breaches, as after any gap).
HELD_SIGNALS: Final = 256
#: An idle stream whose socket buffer holds less than this is written straight from the fan-out.
DIRECT_WRITE_LIMIT: Final = 1 << 16
#: Rows per catch-up read (SPEC §6.3).
REPLAY_PAGE: Final = 500

#: Why a stream ends; the first two write a ``shutdown`` frame, the others write nothing.
LIFETIME: Final = "lifetime"
SERVER_STOPPING: Final = "server_stopping"
DISCONNECTED: Final = "disconnected"
READ_FAILED: Final = "read_failed"
#: The browser session the stream was opened with was logged out: close, and let the client's
#: reconnect meet the 401 (no shutdown frame, which would invite a prompt retry).
SESSION_ENDED: Final = "session_ended"
#: The board token was rotated: every stream was opened with the old token or a session it
#: signed, so each closes the same way and its reconnect must authenticate again.
TOKEN_ROTATED: Final = "token_rotated"
SHUTDOWN_REASONS: Final = frozenset({LIFETIME, SERVER_STOPPING})

HEADERS: Final = {
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


class ReadFailed(Exception):
    """The stream could not read the log; it closes without a shutdown frame."""


@dataclass(frozen=True, slots=True)
class Projection:
    """The optional filters of SPEC §6.4; None everywhere means every non-noise row."""

    project: str | None = None
    task_id: str | None = None
    events: frozenset[str] | None = None
    #: ``?signals=0`` leaves the id-less condition frames out.
    signals: bool = True

    def wants_signal(self, signal: Signal) -> bool:
        """The same filters as rows: project, task and event name (a condition's type)."""
        if not self.signals:
            return False
        if self.project is not None and signal.project_id != self.project:
            return False
        if self.task_id is not None and signal.task_id != self.task_id:
            return False
        return self.events is None or signal.type in self.events

    @property
    def everything(self) -> bool:
        return self.project is None and self.task_id is None and self.events is None

    def wants(self, frame: Frame) -> bool:
        if frame.noise:
            return False
        if self.project is not None and frame.project_id != self.project:
            return False
        if self.task_id is not None and frame.task_id != self.task_id:
            return False
        return self.events is None or frame.event in self.events


class Stream:
    """One open ``GET /api/v1/events`` response."""

    def __init__(
        self,
        request: web.Request,
        *,
        store: WriterStore,
        reader: LogReader,
        position: int,
        projection: Projection,
        retry_ms: int,
        ping_interval: float,
    ) -> None:
        self.request = request
        self.response = web.StreamResponse(headers=HEADERS)
        self.response.content_type = "text/event-stream"
        self.response.charset = "utf-8"
        self.store = store
        self.reader = reader
        self.projection = projection
        self.retry_ms = retry_ms
        self.position = position
        self.last_id = position
        self.live = False
        self.end_reason: str | None = None
        #: Catch-up reads this stream made from the database (the bench and tests read it).
        self.catch_up_reads = 0
        self.next_ping = asyncio.get_running_loop().time() + ping_interval
        self.finished = asyncio.Event()
        self._pending: deque[bytes] = deque()
        #: (the log reader's position when it came, the frame) of each signal that came while this
        #: stream was catching up: its cause is at or below that position, so it goes out after
        #: this stream has sent that far (docs/conditions.md §4.1).
        self._held_signals: deque[tuple[int, bytes]] = deque()
        self._held = 0  # bytes queued or being written
        self._ping_pending = False
        self._wake = asyncio.Event()
        self._parked = False  # the stream's task is waiting for work, not writing
        self._chunked = False  # known once the headers are out

    # -- called by the log reader and the registry (synchronously, on the loop) -----------------

    def offer(self, page: Page) -> bool:
        """Queue a live page; returns False when the stream leaves the fan-out instead."""
        if self.end_reason is not None:
            return False
        if page.end <= self.position:
            return True
        if not page.complete or page.after > self.position:
            return self._leave()  # a gap the page does not cover: read it from the database
        if self.projection.everything and page.after == self.position:
            parts = [page.wire] if page.wire else []
            last_id = page.last_id if page.wire else self.last_id
        else:
            parts, last_id = self.project(page.frames)
        size = sum(map(len, parts))
        if self._held and self._held + size > LIVE_QUEUE_BYTES:
            return self._leave()  # not advancing position: the catch-up starts where the queue ends
        self.position = page.end
        self.last_id = last_id
        if parts and not self._write_now(parts):
            self._pending.extend(parts)
            self._held += size
            self._wake.set()
        return True

    def offer_signal(self, signal: Signal, wire: bytes) -> None:
        """Queue a signal frame. It has no id and is never replayed: a stream whose client is
        too slow to hold it misses it and reads ``/breaches`` (docs/conditions.md)."""
        if self.end_reason is not None or not self.projection.wants_signal(signal):
            return
        if not self.live and (self.position < self.reader.position or self._held_signals):
            if len(self._held_signals) < HELD_SIGNALS:
                self._held_signals.append((self.reader.position, wire))
            return
        if self._held + len(wire) > LIVE_QUEUE_BYTES:
            return
        if self.response.prepared and self._write_now([wire]):
            return
        self._pending.append(wire)
        self._held += len(wire)
        self._wake.set()

    def _write_now(self, parts: list[bytes]) -> bool:
        """Write from the fan-out itself when the stream's task is idle and its socket drains.

        The common case on a live board: it spares a task switch and a queue per stream and event.
        Still one flush at a time: the task is parked, so nothing else is writing. The body is
        already chunked (``prepare`` ran and the first frame went out through aiohttp), so the
        chunk framing of RFC 9112 §7.1 is added here.
        """
        transport = self.request.transport
        if not self._parked or self._pending or transport is None or transport.is_closing():
            return False
        if transport.get_write_buffer_size() >= DIRECT_WRITE_LIMIT:
            return False
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if self._chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        transport.write(data)
        return True

    def _release_signals(self) -> None:
        """Queue the held signals whose cause this stream has now sent, after those rows."""
        held = self._held_signals
        while held and (self.live or held[0][0] <= self.position):
            wire = held.popleft()[1]
            self._pending.append(wire)
            self._held += len(wire)

    def fail(self) -> None:
        self.end(READ_FAILED)

    def _leave(self) -> bool:
        self.live = False
        self._wake.set()
        return False

    def ping(self, now: float, interval: float) -> None:
        """Queue a keep-alive comment unless one is already waiting to go out."""
        self.next_ping = now + interval
        if self._ping_pending or self.end_reason is not None or self._write_now([PING]):
            return
        self._ping_pending = True
        self._pending.append(PING)
        self._held += len(PING)
        self._wake.set()

    def end(self, reason: str) -> None:
        """Ask the stream to end; the first reason wins."""
        if self.end_reason is None:
            self.end_reason = reason
        self._wake.set()

    def abort(self) -> None:
        """Drop the connection of a stream that cannot even take its shutdown frame."""
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    @property
    def disconnected(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def project(self, frames: tuple[Frame, ...]) -> tuple[list[bytes], int]:
        """The parts this stream sends for ``frames``, and the id the client holds after them."""
        parts: list[bytes] = []
        last_id = self.last_id
        skipped = 0
        for frame in frames:
            if frame.revision <= self.position:
                continue
            if self.projection.wants(frame):
                parts.append(frame.wire)
                last_id = frame.revision
            else:
                skipped = frame.revision
        if skipped > last_id:
            parts.append(encode_id_only(skipped))
            last_id = skipped
        return parts, last_id

    # -- the stream's own task -------------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        """Serve until the client leaves, the server stops or the lifetime ends."""
        try:
            await self.response.prepare(self.request)
            # aiohttp chose the framing in prepare: chunked for HTTP/1.1, raw until close for 1.0.
            self._chunked = self.response.headers.get("Transfer-Encoding", "").lower() == "chunked"
            await self.response.write(encode_retry(self.retry_ms))
            while self.end_reason is None:
                if self._pending:
                    await self._flush()
                elif not self.live:
                    await self._catch_up()
                else:
                    self._parked = True
                    try:
                        await self._wake.wait()
                    finally:
                        self._parked = False
                    self._wake.clear()
            if self.end_reason in SHUTDOWN_REASONS:
                await self.response.write(encode_named("shutdown", orjson.dumps({"reason": self.end_reason})))
            if self.end_reason != DISCONNECTED:
                # A read failure ends here too: no shutdown frame, which would reset the client's
                # backoff and turn a broken board into a hot reconnect loop (SPEC §6.5).
                await self.response.write_eof()
        except ReadFailed:
            # Close without a shutdown frame, which would reset the client's backoff (SPEC §6.5).
            await self._close_quietly()
        except ConnectionError:
            self.end_reason = self.end_reason or DISCONNECTED  # the client is gone: write nothing
        except Exception:
            # The response is already under way: a JSON error cannot follow. Close it quietly and
            # let the client resume by its cursor.
            log.exception("stream_failed", position=self.position)
            self.end_reason = self.end_reason or READ_FAILED
            await self._close_quietly()
        finally:
            self.live = False
            self.reader.unsubscribe(self)
            self._pending.clear()
            self.finished.set()
        return self.response

    async def _close_quietly(self) -> None:
        try:
            if self.response.prepared:
                await self.response.write_eof()
        except ConnectionError:
            pass

    async def _flush(self) -> None:
        chunk = b"".join(self._pending)
        self._pending.clear()
        self._ping_pending = False
        try:
            await self.response.write(chunk)
        finally:
            self._held -= len(chunk)

    async def _catch_up(self) -> None:
        """Read what the fan-out has not handed us, page by page, then rejoin it (SPEC §6.3)."""
        stalled = False
        while self.end_reason is None:
            # Synchronous check-and-join: no page can be published between the two, and every
            # later page starts at or below our position, so the hand-over has no gap.
            if self.position >= self.reader.position:
                self.live = True
                self.reader.subscribe(self)
                self._release_signals()
                return
            try:
                page = await self.store.query(read_page, self.position, REPLAY_PAGE)
            except Exception as exc:
                log.warning("stream_read_failed", position=self.position, error=str(exc))
                raise ReadFailed from exc
            self.catch_up_reads += 1
            if page.end <= self.position:
                # The snapshot predates the reader's last read: one more read sees it. Twice in a
                # row means the file went backwards under us; the client reconnects and is told.
                if stalled:
                    log.warning("stream_no_progress", position=self.position, reader=self.reader.position)
                    raise ReadFailed
                stalled = True
                continue
            stalled = False
            if self.projection.everything and page.after == self.position:
                parts, self.last_id = ([page.wire] if page.wire else []), max(self.last_id, page.last_id)
            else:
                parts, self.last_id = self.project(page.frames)
            self.position = page.end
            self._pending.extend(parts)
            self._held += sum(map(len, parts))
            self._release_signals()
            if self._pending:
                await self._flush()
            else:
                await asyncio.sleep(0)  # yield between pages even when nothing was written
