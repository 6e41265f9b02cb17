"""Live streaming machinery of the board: the log reader and the registry of open streams.

``setup(app, ...)`` attaches both to the application's lifecycle: the reader and the registry's
sweeper start with the app and are cancelled and awaited at cleanup; on shutdown (which aiohttp
runs before cleanup) every open stream gets ``event: shutdown`` and is closed (SPEC §6.5).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final

import structlog
from aiohttp import web

from shared.errors import TaskloomError

from .client_stream import DISCONNECTED, LIFETIME, SERVER_STOPPING, SESSION_ENDED, Stream
from .conditions.signals import Signal
from .descriptors import fewer_free_than
from .fanout import Handoff
from .logreader import LogReader
from .settings import BoardSettings
from .store import WriterStore

log = structlog.get_logger("taskd.streaming")

#: Seconds a client is told to wait after 503 TOO_MANY_STREAMS.
RETRY_AFTER_SECONDS: Final = 5
#: Seconds the streams get to write their shutdown frame before their sockets are dropped.
SHUTDOWN_GRACE: Final = 2.0
#: Longest pause between two sweeps (pings, dead peers), seconds.
SWEEP_MAX: Final = 1.0


class StreamRegistry:
    """The open streams: admission against ``max_streams``, pings, lifetimes, dead peers, shutdown."""

    def __init__(
        self, *, max_streams: int, ping_interval: float, lifetime: float | None, descriptor_reserve: int = 0
    ) -> None:
        self.max_streams = max_streams
        self.descriptor_reserve = descriptor_reserve
        self.ping_interval = ping_interval
        self.lifetime = lifetime
        self.stopping = False
        self._streams: set[Stream] = set()
        self._timers: dict[Stream, asyncio.TimerHandle] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._streams)

    def __iter__(self) -> Iterator[Stream]:
        return iter(list(self._streams))

    def end_where(self, reason: str, keep: Callable[[Stream], bool] = lambda stream: False) -> int:
        """End every open stream ``keep`` does not spare, telling each ``reason``; how many ended.

        Credentials that stop being valid (a rotated token, a logged-out session) end the streams
        they opened: a stream is authenticated once, when it starts.
        """
        ending = [stream for stream in self._streams if not keep(stream)]
        for stream in ending:
            stream.end(reason)
        return len(ending)

    def check_capacity(self) -> None:
        if len(self._streams) >= self.max_streams:
            raise TaskloomError(
                "TOO_MANY_STREAMS",
                f"this board serves at most {self.max_streams} streams at once",
                details={"max_streams": self.max_streams, "retry_after": RETRY_AFTER_SECONDS},
                hint="close an idle stream, or start taskd with a larger --max-streams",
            )
        # A stream holds its descriptor for as long as it lives; the last ones are kept for
        # /health and ordinary requests, which give theirs back.
        if fewer_free_than(self.descriptor_reserve, known_open=len(self._streams)):
            raise TaskloomError(
                "TOO_MANY_STREAMS",
                "this board is short of file descriptors and takes no new stream now",
                details={
                    "reason": "descriptors",
                    "descriptor_reserve": self.descriptor_reserve,
                    "retry_after": RETRY_AFTER_SECONDS,
                },
                hint="close idle streams, or raise the board's open-file limit (LimitNOFILE= in its unit)",
            )

    async def serve(self, stream: Stream, *, session_left: float | None = None) -> web.StreamResponse:
        """Run ``stream`` as a registered stream; capacity was checked by the caller, synchronously.

        ``session_left``: seconds until the browser session the stream was opened with expires. A
        stream is authenticated once, when it starts, so it ends then (``session_ended``), or it
        would outlive the session's limits however long it stayed open.
        """
        self.check_capacity()
        self._streams.add(stream)
        ends = [(self.lifetime, LIFETIME)] if self.lifetime is not None else []
        if session_left is not None:
            ends.append((session_left, SESSION_ENDED))
        if ends:
            delay, reason = min(ends)
            self._timers[stream] = asyncio.get_running_loop().call_later(delay, stream.end, reason)
        if self.stopping:
            stream.end(SERVER_STOPPING)
        try:
            return await stream.run()
        finally:
            self._streams.discard(stream)
            timer = self._timers.pop(stream, None)
            if timer is not None:
                timer.cancel()

    def broadcast_signal(self, signal: Signal) -> None:
        """A condition's id-less frame to every open stream that wants it, encoded once."""
        if not self._streams:
            return
        wire = signal.wire()
        for stream in self._streams:
            stream.offer_signal(signal, wire)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep(), name="taskloom-stream-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass

    async def close_all(self, reason: str = SERVER_STOPPING, *, grace: float = SHUTDOWN_GRACE) -> None:
        """End every stream with a shutdown frame; drop the sockets of those that cannot take it."""
        self.stopping = True
        streams = list(self._streams)
        for stream in streams:
            stream.end(reason)
        if not streams:
            return
        waits = [asyncio.ensure_future(stream.finished.wait()) for stream in streams]
        _, pending = await asyncio.wait(waits, timeout=grace)
        if pending:
            log.warning("streams_aborted", count=len(pending))
            for stream in streams:
                if not stream.finished.is_set():
                    stream.abort()
            await asyncio.wait(pending, timeout=grace)
        for wait in waits:
            wait.cancel()

    async def _sweep(self) -> None:
        """One timer for all streams: pings when due, and streams whose peer has gone away."""
        loop = asyncio.get_running_loop()
        tick = min(SWEEP_MAX, self.ping_interval / 4)
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            for stream in list(self._streams):
                if stream.disconnected:
                    stream.end(DISCONNECTED)
                elif now >= stream.next_ping:
                    stream.ping(now, self.ping_interval)


def setup(app: web.Application, *, settings: BoardSettings, store: WriterStore) -> tuple[LogReader, StreamRegistry]:
    """A log reader and a stream registry tied to the app's lifecycle; the app keeps both under
    its keys (``keys.LOG_READER``, ``keys.STREAMS``), so this module needs none of them."""
    reader = LogReader(store, poll_interval=settings.external_poll_interval)
    registry = StreamRegistry(
        max_streams=settings.max_streams,
        ping_interval=settings.ping_interval,
        lifetime=settings.stream_lifetime,
        descriptor_reserve=settings.descriptor_reserve,
    )

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        # Runs after the store's own cleanup context has opened it, and ends before it closes it.
        await reader.start()
        # Committed batches reach the live streams from the writer's own frames (fanout.py).
        Handoff(reader).attach(store)
        registry.start()
        try:
            yield
        finally:
            await registry.close_all(SERVER_STOPPING)
            await registry.stop()
            Handoff.detach(store)
            await reader.stop()

    async def on_shutdown(app: web.Application) -> None:
        await registry.close_all(SERVER_STOPPING)

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    return reader, registry
