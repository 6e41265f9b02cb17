"""The board's ``GET /api/v1/events`` response on a plain asyncio protocol (HTTP/1.1, one request).

Why not aiohttp's client here: its response reader hands bytes to a task through a stream
buffer, so every board frame waited for a task wake-up, a per-read timeout context and the
library's own parsing before the hub could fan it out. This protocol decodes the body and feeds
the SSE parser in the very ``data_received`` callback that got the bytes, and hands the parsed
items to the link there, so a board frame is written to the followers in the callback it
arrived in. ``/api/v1/meta`` (one small JSON read per connect) still goes through aiohttp.

What the link relied on is kept: the board token in ``Authorization``, ``after`` in the query,
a connect deadline, and a watchdog that ends a connection that carries no byte for
``read_timeout`` seconds (one timer, re-armed lazily: O(1) per chunk). Before the request is
written, the socket answering on loopback must be this user's (``port_owner``). Bodies are decoded as
``Transfer-Encoding: chunked`` (what the board sends), by ``Content-Length``, or up to the close.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

from .port_owner import ForeignListener, check_listener

#: The response head (status line and headers) may be at most this large.
MAX_HEAD = 64 * 1024
#: A chunk-size line (hex size and extensions) may be at most this long.
MAX_CHUNK_LINE = 1024
#: An error body (read only for its JSON ``error.code``) is cut at this many bytes.
MAX_ERROR_BODY = 64 * 1024
#: Seconds to open the TCP (and TLS) connection, as aiohttp's ``sock_connect`` had.
CONNECT_TIMEOUT = 10.0


class StreamFailed(Exception):
    """The connection broke a rule of HTTP/1.1 or went silent; the ladder tries again."""


class Head:
    """A parsed response head: status and lower-cased header names."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers


def parse_head(raw: bytes) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise StreamFailed(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise StreamFailed(f"not an HTTP header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return Head(int(parts[1]), headers)


class BodyDecoder:
    """An HTTP/1.1 response body, fed in any split: ``feed`` returns the payload bytes it completed."""

    def __init__(self, head: Head) -> None:
        encoding = head.headers.get("transfer-encoding", "").lower()
        self.chunked = encoding.endswith("chunked")
        length = head.headers.get("content-length")
        if not self.chunked and length is not None and not length.isdigit():
            raise StreamFailed(f"bad Content-Length: {length[:40]!r}")
        #: Payload bytes still to come: of this chunk (chunked), of the body (a length), or None (to the close).
        self.remaining: int | None = 0 if self.chunked else (int(length) if length is not None else None)
        self.done = self.remaining == 0 and not self.chunked
        self._buf = bytearray()
        self._after_chunk = False  # chunked: the CRLF that closes a chunk's payload is next
        self._trailers = False  # chunked: past the last chunk, reading trailers to the blank line

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        if not self.chunked:
            if self.remaining is None:
                return data
            body = data[: self.remaining]
            self.remaining -= len(body)
            self.done = self.remaining == 0
            return body
        buf = self._buf
        if not buf and not self.remaining and not self._after_chunk and not self._trailers:
            # The usual read: exactly one whole chunk (one write of the board's), taken as it is.
            eol = data.find(b"\r\n")
            if eol > 0:
                size = _chunk_size(data[:eol])
                end = eol + 2 + size
                if size and len(data) == end + 2 and data.endswith(b"\r\n"):
                    return data[eol + 2 : end]
        buf += data
        out = bytearray()
        pos = 0
        while pos < len(buf):
            if self.remaining:
                take = min(self.remaining, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self._after_chunk = True
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > MAX_CHUNK_LINE:
                    raise StreamFailed("chunk-size line too long")
                break
            line = bytes(buf[pos:eol])
            pos = eol + 2
            if self._after_chunk:
                if line:
                    raise StreamFailed("chunk data longer than its size")
                self._after_chunk = False
            elif self._trailers:
                if not line:
                    self.done = True
                    break
            else:
                self.remaining = _chunk_size(line)
                if self.remaining == 0:
                    self._trailers = True
        del buf[:pos]
        return bytes(out)


def _chunk_size(line: bytes) -> int:
    """The size a chunk-size line gives (RFC 9112 §7.1), its extensions ignored."""
    size = line.split(b";", 1)[0].strip()
    try:
        value = int(size, 16)
    except ValueError:
        raise StreamFailed(f"bad chunk size: {size[:40]!r}") from None
    if value < 0:
        raise StreamFailed(f"bad chunk size: {size[:40]!r}")
    return value


class BoardStream(asyncio.Protocol):
    """One request and its response. ``head`` resolves with the status line and headers; once the
    caller ``deliver``s, body payload goes to ``on_body`` from ``data_received`` itself;
    ``ended`` resolves when the body ends, the peer closes, or the watchdog fires (its exception)."""

    def __init__(self, read_timeout: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._read_timeout = read_timeout
        self.head: asyncio.Future[Head] = self._loop.create_future()
        self.ended: asyncio.Future[None] = self._loop.create_future()
        for future in (self.head, self.ended):
            future.add_done_callback(_retrieved)  # a failure nobody awaits (the head's, say) is not news
        self.transport: asyncio.Transport | None = None
        self._raw = bytearray()  # the head, then body bytes that came before ``deliver``
        self._decoder: BodyDecoder | None = None
        self._on_body: Callable[[bytes], None] | None = None
        self._last_byte = self._loop.time()
        self._watchdog: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self._last_byte = self._loop.time()
        self._watchdog = self._loop.call_at(self._last_byte + self._read_timeout, self._watch)

    def data_received(self, data: bytes) -> None:
        self._last_byte = self._loop.time()
        if self.ended.done():
            return
        try:
            if not self.head.done():
                self._raw += data
                end = self._raw.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._raw) > MAX_HEAD:
                        raise StreamFailed(f"response head over {MAX_HEAD} bytes")
                    return
                head = parse_head(bytes(self._raw[:end]))
                self._decoder = BodyDecoder(head)
                del self._raw[: end + 4]
                self.head.set_result(head)
                return  # the caller decides what the body is for (``deliver`` or ``read_body``)
            if self._on_body is None:
                self._raw += data  # held until ``deliver``
                return
            self._body(data)
        except Exception as exc:  # noqa: BLE001 - a parse failure or the link's own: end this connection
            self._fail(exc)

    def eof_received(self) -> bool:
        self._finish(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if not self.head.done():
            self.head.set_exception(exc or ConnectionError("the board closed the connection before answering"))
        self._finish(exc)

    # -- what the link calls ----------------------------------------------------------------

    def deliver(self, on_body: Callable[[bytes], None]) -> None:
        """From now on, body payload goes to ``on_body`` in the callback that received it (what
        came with the head first)."""
        self._on_body = on_body
        held = bytes(self._raw)
        self._raw.clear()
        if held:
            try:
                self._body(held)
            except Exception as exc:  # noqa: BLE001 - as in data_received
                self._fail(exc)

    async def read_body(self, limit: int = MAX_ERROR_BODY) -> bytes:
        """The whole (short) body of a refusal, up to ``limit`` bytes."""
        parts: list[bytes] = []
        size = 0

        def collect(payload: bytes) -> None:
            nonlocal size
            if size < limit:
                parts.append(payload[: limit - size])
                size += len(parts[-1])

        self.deliver(collect)
        try:
            await self.ended
        except (StreamFailed, ConnectionError, OSError):
            pass  # a refusal whose body broke off is still a refusal
        return b"".join(parts)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.transport is not None:
            self.transport.abort()
        self._finish(None)

    # -- inside ------------------------------------------------------------------------------

    def _body(self, data: bytes) -> None:
        assert self._decoder is not None and self._on_body is not None
        payload = self._decoder.feed(data)
        if payload:
            self._on_body(payload)
        if self._decoder.done:
            self._finish(None)

    def _watch(self) -> None:
        """The board pings every 15 s: a connection silent for ``read_timeout`` is dead."""
        due = self._last_byte + self._read_timeout
        if self._loop.time() < due:
            self._watchdog = self._loop.call_at(due, self._watch)
            return
        self._watchdog = None
        self._fail(TimeoutError(f"no byte from the board for {self._read_timeout:g} s"))

    def _fail(self, exc: Exception) -> None:
        if not self.head.done():
            self.head.set_exception(exc)
        self._finish(exc)
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, exc: Exception | None) -> None:
        if self.ended.done():
            return
        if exc is None:
            self.ended.set_result(None)
        else:
            self.ended.set_exception(exc)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def open_stream(base_url: str, path: str, query: dict[str, str], headers: dict[str, str], *,
                      read_timeout: float) -> BoardStream:
    """Connect to the board, send ``GET path?query``, and return the protocol (its head pending)."""
    parts = urlsplit(base_url)
    secure = parts.scheme == "https"
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    loop = asyncio.get_running_loop()
    protocol = BoardStream(read_timeout)
    async with asyncio.timeout(CONNECT_TIMEOUT):
        await loop.create_connection(lambda: protocol, host, port,
                                     ssl=ssl.create_default_context() if secure else None,
                                     server_hostname=host if secure else None)
    assert protocol.transport is not None  # connection_made ran before create_connection returned
    try:
        check_listener(protocol.transport.get_extra_info("socket"))  # before the token goes out
    except ForeignListener:
        protocol.transport.abort()
        raise
    target = f"{parts.path.rstrip('/')}{path}?{urlencode(query)}"
    lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}", *(f"{k}: {v}" for k, v in headers.items()),
             "Connection: close"]
    protocol.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    return protocol
