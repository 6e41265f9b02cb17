"""The hub's one board connection: ``GET /api/v1/events`` followed for ever (SPEC §7.2).

Every (re)connect first reads ``/api/v1/meta``: a different ``board_id`` than before, or a board
that refuses the cursor (``400 CURSOR_AHEAD``, ``410 CURSOR_EXPIRED``), becomes a reset for the
followers, never a silent gap. Between attempts it waits on a ladder, 1 s doubling to 30 s, and
resumes from the last revision it saw. The board's ``shutdown`` frame is not forwarded: a board
restart is invisible to local followers apart from the pause. Its ``signal`` frames (conditions,
docs/conditions.md) are handed on as they come; they carry no ``id:`` and never move the cursor.

The stream itself is read by ``board_stream.BoardStream`` (HTTP/1.1 on a plain protocol), which
hands each read's SSE items to the link in the callback that received them; ``/meta`` goes
through aiohttp.

Every connection to a loopback board is checked before a request goes on it: the socket that
answers must be this user's (``port_owner``; docs/security.md, *Who listens on the board's port*).
Another user's listener on the board's port (the board is restarting) is logged as
``board_impostor`` and sent nothing; the ladder keeps trying until the board is back.

A ``401`` is the one answer no ladder can fix: the board no longer takes this hub's token (it
was rotated). The link tells the hub once and ends; the hub says so to its sessions and exits,
and its clients, who re-read the token, start a hub keyed by the new one (SPEC §7.1).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import orjson
import structlog

from shared import hub_protocol as hp
from shared.limits import SSE_MAX_LINE
from shared.sse import SSEMessage, SSEParser, SSEProtocolError

from .board_stream import BoardStream, StreamFailed, open_stream
from .port_owner import ForeignListener, check_listener
from .process import Backoff
from .settings import READ_TIMEOUT  # re-exported: the deadline is a settings default

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.client_reqrep import ClientRequest
    from aiohttp.tracing import Trace

log = structlog.get_logger("taskhub")

#: The SSE event name of the board's condition frames (docs/conditions.md): data, no ``id:``.
SIGNAL_EVENT = "signal"

#: The board's answer to a token it does not take (RFC 9110 §15.5.2).
HTTP_UNAUTHORIZED = 401

_RESET_FOR_ERROR = {
    "CURSOR_AHEAD": hp.RESET_BOARD_CURSOR_AHEAD,
    "CURSOR_EXPIRED": hp.RESET_BOARD_CURSOR_EXPIRED,
}


class BoardSink(Protocol):
    """What the link tells the hub; called on the event loop, in stream order."""

    def board_contact(self, board_id: str, head: int) -> None:
        """First contact with a board: live from ``head``."""

    def board_reset(self, reason: str, board_id: str, head: int) -> None:
        """The cursor cannot continue (another board, a refused cursor): live again from ``head``."""

    def board_event(self, revision: int, activity: dict[str, Any], data: str | None = None) -> None:
        """One activity frame, revisions strictly increasing; ``data`` is the frame's JSON as the
        board sent it (the hub forwards those bytes instead of encoding ``activity`` again). The
        sink may hold it until ``board_flush``."""

    def board_flush(self) -> None:
        """The end of what one read from the board carried: send what ``board_event`` held."""

    def board_signal(self, signal: dict[str, Any]) -> None:
        """A condition signal (``event: signal``): id-less, so it never moves the cursor."""

    def board_cursor(self, revision: int) -> None:
        """An id-only frame: the cursor moved past rows that are not sent (SPEC §6.4)."""

    def board_streaming(self, connects: int) -> None:
        """A stream opened (``connects`` counts them): after a reconnect, registrations re-render."""

    def board_unauthorized(self, message: str) -> None:
        """The board refused the token with 401; the link has ended and will not try again."""


class OwnListenerConnector(aiohttp.TCPConnector):
    """aiohttp's connector, refusing a new connection whose loopback listener is another user's.

    ``_create_connection`` is where aiohttp opens a socket, before any request is written on it.
    """

    async def _create_connection(
        self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        handler = await super()._create_connection(req, traces, timeout)
        try:
            check_listener(handler.transport.get_extra_info("socket") if handler.transport else None)
        except ForeignListener:
            handler.close()
            raise
        return handler


class BoardUnavailable(Exception):
    """One attempt failed; the ladder decides when to try again."""


class BoardUnauthorized(Exception):
    """The board answered 401: this token is no longer the board's, and retrying cannot help."""


class BoardLink:
    def __init__(
        self,
        url: str,
        token: str,
        sink: BoardSink,
        *,
        reconnect_min: float = hp.RECONNECT_MIN,
        reconnect_max: float = hp.RECONNECT_MAX,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        self._sink = sink
        self._reconnect_min = reconnect_min
        self._reconnect_max = reconnect_max
        self._read_timeout = read_timeout
        self.board_id: str | None = None
        self.cursor: int | None = None
        self.state = "connecting"
        self.connects = 0
        #: Set once the first attempt has an answer, good or bad (the hub waits for it at start).
        self.first_attempt = asyncio.Event()

    async def run(self) -> None:
        """Follow the board until cancelled or refused with 401; any other failure only slows the ladder."""
        ladder = Backoff(self._reconnect_min, self._reconnect_max)
        # The session reads /meta only; the stream has its own connection (board_stream.py).
        # force_close: a fresh connection per request, never a pooled keep-alive one.
        timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_connect=10.0, sock_read=self._read_timeout)
        connector = OwnListenerConnector(force_close=True, limit=4)
        async with aiohttp.ClientSession(timeout=timeout, headers=self._headers, connector=connector) as session:
            while True:
                opened_before = self.connects
                try:
                    await self._attempt(session)
                except BoardUnauthorized as exc:
                    self.state = "unauthorized"
                    log.error("board_unauthorized", board=self.url, reason=str(exc))
                    self._sink.board_unauthorized(str(exc))
                    return
                except ForeignListener as exc:
                    log.error("board_impostor", board=self.url, port=exc.port, uid=exc.uid, reason=str(exc))
                except BoardUnavailable as exc:
                    log.info("board_unavailable", board=self.url, reason=str(exc))
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                    log.info("board_unavailable", board=self.url, reason=f"{type(exc).__name__}: {exc}")
                except Exception:
                    # A bug here or in a library must not leave the hub deaf with its followers
                    # waiting: say so in the log and go round the ladder like any other failure.
                    log.exception("board_link_failed", board=self.url)
                finally:
                    self.first_attempt.set()
                if self.connects > opened_before:
                    ladder.reset()  # a stream that opened, however it ended, restarts the ladder
                self.state = "reconnecting"
                delay = ladder.next()
                log.info("board_reconnect_in", board=self.url, seconds=delay)
                await asyncio.sleep(delay)

    async def _attempt(self, session: aiohttp.ClientSession) -> None:
        """One connect: ``/meta``, then the stream until it ends."""
        meta = await self._meta(session)
        board_id, head = meta["board_id"], meta["revision"]
        if not isinstance(board_id, str) or not isinstance(head, int):
            raise BoardUnavailable("the board's /meta is not a Taskloom meta record")
        if self.board_id is None:
            self.board_id, self.cursor = board_id, head
            log.info("board_contact", board=self.url, board_id=board_id, revision=head)
            self._sink.board_contact(board_id, head)
        elif board_id != self.board_id:
            log.warning("board_changed", board=self.url, was=self.board_id, now=board_id, revision=head)
            self._reset(hp.RESET_BOARD_CHANGED, board_id, head)
        for attempt in range(2):
            stream = await open_stream(self.url, "/api/v1/events", {"after": str(self.cursor)}, self._headers,
                                       read_timeout=self._read_timeout)
            try:
                answer = await stream.head
                if answer.status == 200:
                    self.connects += 1
                    self.state = "streaming"
                    log.info("board_streaming", board=self.url, after=self.cursor, connects=self.connects)
                    self.first_attempt.set()
                    self._sink.board_streaming(self.connects)
                    await self._read(stream)
                    return
                code = _code_in(await stream.read_body())
            finally:
                stream.close()
            if answer.status == HTTP_UNAUTHORIZED:
                raise BoardUnauthorized(f"GET /api/v1/events answered 401 {code or ''}".strip())
            reason = _RESET_FOR_ERROR.get(code or "")
            if reason is None or attempt:
                raise BoardUnavailable(f"GET /api/v1/events answered {answer.status} {code or ''}".strip())
            log.warning("board_refused_cursor", board=self.url, code=code, cursor=self.cursor, revision=head)
            # The refusal was about our cursor: retry at once, live from the head /meta named.
            self._reset(reason, board_id, head)

    async def _meta(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        async with session.get(f"{self.url}/api/v1/meta", headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                code = await _error_code(response)
                if response.status == HTTP_UNAUTHORIZED:
                    raise BoardUnauthorized(f"GET /api/v1/meta answered 401 {code or ''}".strip())
                raise BoardUnavailable(f"GET /api/v1/meta answered {response.status} {code or ''}".strip())
            body = orjson.loads(await response.read())
        if not isinstance(body, dict) or "board_id" not in body or "revision" not in body:
            raise BoardUnavailable("the board's /meta is not a Taskloom meta record")
        return body

    def _reset(self, reason: str, board_id: str, head: int) -> None:
        self.board_id, self.cursor = board_id, head
        self._sink.board_reset(reason, board_id, head)

    async def _read(self, stream: BoardStream) -> None:
        """Until the stream ends: each chunk is parsed and delivered in the callback that received it."""
        parser = SSEParser(max_line=SSE_MAX_LINE, last_event_id=str(self.cursor))

        def on_body(payload: bytes) -> None:
            try:
                items = parser.feed(payload)
            except SSEProtocolError as exc:
                self._deliver(exc.items)
                raise BoardUnavailable(f"bad stream from the board: {exc}") from None
            self._deliver(items)

        stream.deliver(on_body)
        try:
            await stream.ended
        except StreamFailed as exc:
            raise BoardUnavailable(f"bad response from the board: {exc}") from None
        log.info("board_stream_ended", board=self.url, cursor=self.cursor)

    def _deliver(self, items: list[Any]) -> None:
        """Hand one read's items to the sink, then let it send them (one write per follower)."""
        try:
            self._deliver_items(items)
        finally:
            self._sink.board_flush()

    def _deliver_items(self, items: list[Any]) -> None:
        for item in items:
            if not isinstance(item, SSEMessage):
                continue  # ": ping" comments only prove the board is alive
            if item.event is not None and item.event != "message":
                # Named frames are id-less signals. ``shutdown`` means the board is going away
                # on purpose; followers keep their streams, the ladder brings the board back.
                if item.event == "shutdown":
                    log.info("board_shutdown_frame", board=self.url, data=item.data)
                elif item.event == SIGNAL_EVENT:
                    self._signal(item.data)
                continue
            revision = _revision(item.id)
            if item.data is None:
                if revision is not None and self.cursor is not None and revision > self.cursor:
                    self.cursor = revision
                    self._sink.board_cursor(revision)
                continue
            try:
                activity = orjson.loads(item.data)
            except orjson.JSONDecodeError:
                log.warning("board_frame_unreadable", board=self.url, id=item.id)
                continue
            if revision is None and isinstance(activity, dict):
                revision = activity.get("revision") if isinstance(activity.get("revision"), int) else None
            if revision is None or not isinstance(activity, dict):
                log.warning("board_frame_without_revision", board=self.url, id=item.id)
                continue
            if self.cursor is not None and revision <= self.cursor:
                continue  # a replayed duplicate: at-least-once upstream, exactly-in-order here
            self.cursor = revision
            self._sink.board_event(revision, activity, item.data)


    def _signal(self, data: str | None) -> None:
        try:
            signal = orjson.loads(data) if data is not None else None
        except orjson.JSONDecodeError:
            signal = None
        if not isinstance(signal, dict) or not isinstance(signal.get("type"), str):
            log.warning("board_signal_unreadable", board=self.url)
            return
        self._sink.board_signal(signal)


def _revision(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit():
        return None
    return int(value)


async def _error_code(response: aiohttp.ClientResponse) -> str | None:
    try:
        return _code_in(await response.read())
    except aiohttp.ClientError:
        return None


def _code_in(body: bytes) -> str | None:
    """``error.code`` of a refusal's JSON body (SPEC §4.3), if it has one."""
    try:
        code = orjson.loads(body)["error"]["code"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None
