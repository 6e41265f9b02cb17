"""Deadlines for the board's HTTP connections, and room for new ones when descriptors run short.

aiohttp closes a connection that sits idle between requests (``keepalive_timeout``) but puts no
deadline on reading a request: a client that sends its head a byte at a time (Slowloris), or
stops halfway through a body, holds its descriptor for ever. ``BoardRunner`` serves the app
through ``GuardedRequestHandler``, which adds the two read deadlines:

- **head**: a request head must be complete within ``header_timeout`` of its first byte, however
  steadily it trickles in (nginx ``client_header_timeout``, Apache ``RequestReadTimeout header=``);
- **body**: a body must make progress at least every ``body_timeout`` (nginx
  ``client_body_timeout``); time while the board itself has paused reading does not count.

Both answer ``408 REQUEST_TIMEOUT`` where a response can still be written, and close the
connection (RFC 9110 §15.5.9). When free descriptors fall below half the reserve, each new
connection first closes the oldest connections that are waiting for a request (idle keep-alive
or a head still arriving), as nginx drains its reusable connections when it runs out, so
``/health`` and ordinary requests still find a descriptor. RFC 9112 §9.3 lets a server close an
idle connection at any time; a client retries on a new one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

import orjson
import structlog
from aiohttp import web
from aiohttp.streams import StreamReader

from shared.errors import TaskloomError

from .descriptors import fewer_free_than, free_descriptors
from .httpserver import BoardRequestHandler, RequestWarnings, ThrottledWarning, redact_aiohttp_server_log

log = structlog.get_logger("taskd.connections")

#: Seconds a handler that ignores its stalled body gets to answer before its socket is dropped.
ABORT_GRACE: Final = 1.0
#: The listen backlog is at most this, and at most a quarter of the reserve: uvloop accepts the
#: whole queue before any connection can make room, so one burst must fit in the reserve.
MAX_LISTEN_BACKLOG: Final = 128
MIN_LISTEN_BACKLOG: Final = 8


@dataclass(frozen=True)
class ConnectionLimits:
    """Seconds a connection may idle, take over its head, stall its body; descriptors kept free."""

    idle_timeout: float
    header_timeout: float
    body_timeout: float
    descriptor_reserve: int

    @property
    def reap_below(self) -> int:
        """Idle connections are closed while fewer descriptors than this are free."""
        return self.descriptor_reserve // 2


def listen_backlog(limits: ConnectionLimits) -> int:
    return max(MIN_LISTEN_BACKLOG, min(MAX_LISTEN_BACKLOG, limits.descriptor_reserve // 4))


def timeout_error(message: str) -> TaskloomError:
    return TaskloomError(
        "REQUEST_TIMEOUT",
        message,
        hint="send the whole request promptly; the deadlines are taskd serve --header-timeout/--body-timeout",
    )


def raw_error_response(error: TaskloomError) -> bytes:
    """A complete ``Connection: close`` response, for a connection with no request handler to write it."""
    body = orjson.dumps(error.body())
    head = (
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedRequestHandler(BoardRequestHandler):
    """aiohttp's connection handler with deadlines on reading a request's head and body."""

    __slots__ = ("_body", "_body_deadline", "_body_timer", "_head_timer", "_limits")

    def __init__(self, manager: web.Server, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_deadline = 0.0

    @property
    def awaiting_request(self) -> bool:
        """Nothing to answer: idle between requests, or a head not yet complete."""
        waiter = self._waiter
        return waiter is not None and not waiter.done() and not self._messages and self._body is None

    def data_received(self, data: bytes) -> None:
        if not data or self._force_close or self._close or self._upgraded:
            super().data_received(data)
            return
        if self._body is None and self._head_timer is None:
            # These bytes begin a request head: from now on the head deadline governs, not the idle one
            # (aiohttp re-arms its keep-alive timer once the response is written).
            self._head_timer = self._loop.call_later(self._limits.header_timeout, self._head_too_slow)
            if self._keepalive_handle is not None:
                self._keepalive_handle.cancel()
                self._keepalive_handle = None
        heads_before = self._request_count
        super().data_received(data)
        if self._body is not None:
            if self._body.is_eof():
                self._end_body()
            else:
                self._body_deadline = self._loop.time() + self._limits.body_timeout
        if self._request_count != heads_before:
            self._cancel_head_timer()
            payload = self._messages[-1][1] if self._messages else None
            if payload is not None and not payload.is_eof() and self._body is None:
                self._start_body(payload)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        self._end_body()
        super().connection_lost(exc)

    # -- the head ---------------------------------------------------------------------------------

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport is None or self._force_close:
            return
        if not self._request_in_progress and not self._messages:
            # No handler is writing on this connection, so the 408 cannot interleave with a response.
            error = timeout_error(f"the request head was not complete within {self._limits.header_timeout:g} s")
            self.transport.write(raw_error_response(error))
        self.force_close()

    # -- the body ---------------------------------------------------------------------------------

    def _start_body(self, payload: StreamReader) -> None:
        self._body = payload
        self._body_deadline = self._loop.time() + self._limits.body_timeout
        self._body_timer = self._loop.call_at(self._body_deadline, self._check_body)

    def _end_body(self) -> None:
        self._body = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _check_body(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof() or self.transport is None:
            self._end_body()
            return
        now = self._loop.time()
        if self._reading_paused or self._buffer_paused:
            # The board has stopped reading (its buffer is full): the stall is ours, not the client's.
            self._body_deadline = now + self._limits.body_timeout
        if now < self._body_deadline:
            self._body_timer = self._loop.call_at(self._body_deadline, self._check_body)
            return
        self._end_body()
        if not self._request_in_progress:
            self.force_close()  # the handler has answered; only aiohttp's lingering read is waiting
            return
        # The handler's read raises this, so it answers 408 (errors middleware); no lingering
        # for the rest of a body that is not coming, and no further request on this connection.
        self._lingering_time = 0.0
        self.close()
        body.set_exception(timeout_error(f"the request body made no progress for {self._limits.body_timeout:g} s"))
        self._loop.call_later(ABORT_GRACE, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if self.transport is not None:
            self.force_close()


class BoardServer(web.Server):
    """aiohttp's connection manager, making ``GuardedRequestHandler``s and room for new connections."""

    def __init__(self, handler: Any, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        self.reaped = 0
        # Under a flood every new connection closes an idle one: a line per interval, not per connection.
        self._reaping = ThrottledWarning("idle_connections_closed", logger=log)
        self.warnings = RequestWarnings()

    def __call__(self) -> GuardedRequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, limits=self.limits, warnings=self.warnings, **self._kwargs)

    async def shutdown(self, timeout: float | None = None) -> None:
        await super().shutdown(timeout)
        self._reaping.close()
        self.warnings.close()

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self.make_room(keep=handler)

    def make_room(self, *, keep: web.RequestHandler) -> int:
        """Close the oldest connections awaiting a request while descriptors are short; how many."""
        reap_below = self.limits.reap_below
        if not fewer_free_than(reap_below, known_open=len(self._connections)):
            return 0
        free = free_descriptors() or 0
        wanted = max(1, reap_below - free)
        closed = 0
        for other in list(self._connections):  # dicts keep insertion order: oldest first
            if closed >= wanted:
                break
            if other is not keep and isinstance(other, GuardedRequestHandler) and other.awaiting_request:
                other.force_close()
                closed += 1
        self.reaped += closed
        self._reaping.note("descriptors_short", closed_total=self.reaped, free_descriptors=free,
                           connections=len(self._connections), hint="descriptors are short: raise LimitNOFILE")
        return closed


class BoardRunner(web.AppRunner):
    """``AppRunner`` whose server applies ``limits`` to every connection."""

    __slots__ = ("_limits",)

    def __init__(self, app: web.Application, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=limits.idle_timeout, **kwargs)
        self._limits = limits
        redact_aiohttp_server_log()

    async def _make_server(self) -> web.Server:
        # The app builds its own server (startup signals, request factory, handler arguments);
        # the same parts go into a BoardServer.
        plain = await super()._make_server()
        return BoardServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            limits=self._limits,
            **plain._kwargs,
        )
