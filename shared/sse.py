"""Server-Sent Events wire codec: frame encoders and an incremental parser (SPEC §6.1).

Pure bytes in, values out; no I/O. The parser follows the WHATWG HTML "server-sent events"
interpretation rules (§9.2.6), with one deliberate widening: a block that sets ``id`` or
``retry`` but has no ``data`` is still reported, because the board's id-only frames move a
client's cursor (SPEC §6.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, TypeAlias

from .limits import SSE_MAX_LINE

#: Default cap on one line, and on one message's accumulated data, in bytes. Derived in
#: ``shared/limits.py``: the board's largest frame fits it, and whatever fits it, the hub can
#: forward as one NDJSON line.
MAX_LINE: Final = SSE_MAX_LINE

#: Keep-alive comment (SPEC §6.1); parses back as ``SSEComment("ping")``.
PING: Final = b": ping\n\n"

_BOM: Final = b"\xef\xbb\xbf"
_EOL: Final = re.compile(rb"[\r\n]")
# Split data on every terminator the parser recognises, so no payload can inject a field.
_DATA_LINES: Final = re.compile(rb"\r\n|\r|\n")


class SSEProtocolError(ValueError):
    """The stream broke a limit; discard the parser and close the connection.

    ``items`` holds what was parsed from the same ``feed`` before the fault: the cursor
    (``last_event_id``) has already moved past them, so the caller should still deliver them.
    """

    def __init__(self, message: str, items: list[SSEItem]):
        super().__init__(message)
        self.items = items


@dataclass(frozen=True, slots=True)
class SSEMessage:
    """One dispatched block. ``id``/``retry`` are what THIS block set; None when absent."""

    event: str | None = None
    data: str | None = None
    id: str | None = None
    retry: int | None = None


@dataclass(frozen=True, slots=True)
class SSEComment:
    """A ``:`` line, surfaced so a client can notice pings; one leading space is dropped."""

    text: str


#: What ``SSEParser.feed`` returns, in stream order.
SSEItem: TypeAlias = SSEMessage | SSEComment


# -- encoders ---------------------------------------------------------------------------------


def _data_lines(data: bytes) -> bytes:
    # CR and CRLF inside data come back as LF: SSE has no way to carry a bare CR.
    return b"".join(b"data: " + line + b"\n" for line in _DATA_LINES.split(data))


def encode_event(revision: int, data: bytes) -> bytes:
    """An activity frame: ``id`` + ``data``, no ``event`` so ``onmessage`` receives it."""
    return b"id: %d\n" % revision + _data_lines(data) + b"\n"


def encode_id_only(revision: int) -> bytes:
    """Move the client's cursor without firing a browser event (SPEC §6.4)."""
    return b"id: %d\n\n" % revision


def encode_named(event: str, data: bytes) -> bytes:
    """A named, id-less signal frame (``shutdown``, ``signal``): it never moves a cursor."""
    if "\r" in event or "\n" in event:
        raise ValueError(f"event name must be one line: {event!r}")
    return b"event: " + event.encode() + b"\n" + _data_lines(data) + b"\n"


def encode_retry(ms: int) -> bytes:
    """Set the client's reconnection delay."""
    if ms < 0:
        raise ValueError(f"retry must be >= 0 ms, got {ms}")  # the parser would ignore it
    return b"retry: %d\n\n" % ms


# -- parser -----------------------------------------------------------------------------------


class SSEParser:
    """Incremental SSE parser: ``feed`` any byte split, get dispatched messages and comments.

    ``last_event_id`` is the spec's "last event ID string": updated when a block is dispatched
    (at its blank line), not when its ``id`` line arrives, so a connection that dies mid-block
    never resumes past data it did not deliver. Pass the previous value when reconnecting.
    ``retry`` is the current reconnection time (None until the server sets one).
    """

    def __init__(self, *, max_line: int = MAX_LINE, last_event_id: str = "") -> None:
        self.max_line = max_line
        self.last_event_id = last_event_id
        self.retry: int | None = None
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no line terminator
        self._bom_pending = True  # only the stream's very first bytes may be a BOM
        self._skip_lf = False  # last chunk ended in CR: a leading LF belongs to it
        self._id_buffer = last_event_id
        # The block in progress, reset at every blank line.
        self._event: str | None = None
        self._data: list[str] = []
        self._data_size = 0  # bytes of data lines so far: a block is capped like a line
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEItem]:
        """Consume ``chunk``; return the messages and comments it completed, in order."""
        buf = self._buf
        buf += chunk
        if self._bom_pending:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return []  # could still be a split BOM
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._bom_pending = False

        out: list[SSEItem] = []
        if not self._skip_lf and b"\r" not in chunk:
            # LF-only bytes (what the board sends): one split instead of a search per line. The
            # held tail never holds a terminator, so a chunk without LF completes no line (and a
            # line trickling in is not scanned again on every feed).
            if b"\n" in chunk:
                *lines, tail = buf.split(b"\n")
                for raw in lines:
                    self._check(len(raw), out)
                    self._line(raw, out)
                del buf[: len(buf) - len(tail)]
            self._scanned = len(buf)
            self._check(len(buf), out)
            return out
        pos = 0
        while True:
            if self._skip_lf and pos < len(buf):
                if buf[pos] == 0x0A:
                    pos += 1
                self._skip_lf = False
            match = _EOL.search(buf, max(pos, self._scanned))
            if match is None:
                break
            end = match.start()
            nxt = end + 1
            if buf[end] == 0x0D:
                if nxt == len(buf):
                    self._skip_lf = True  # the LF of a CRLF may come in the next chunk
                elif buf[nxt] == 0x0A:
                    nxt += 1
            self._check(end - pos, out)
            self._line(bytes(buf[pos:end]), out)
            pos = nxt
        del buf[:pos]
        self._scanned = len(buf)
        # Reject the unterminated tail now rather than buffer without bound (anti-DoS).
        self._check(len(buf), out)
        return out

    def _check(self, size: int, out: list[SSEItem]) -> None:
        if size > self.max_line:
            raise SSEProtocolError(f"line longer than {self.max_line} bytes", out)

    def _line(self, raw: bytes | bytearray, out: list[SSEItem]) -> None:
        """Interpret one complete line (WHATWG "process the field")."""
        if not raw:
            self._dispatch(out)
            return
        line = raw.decode("utf-8", "replace")  # the spec decodes with replacement, never fails
        if line[0] == ":":
            out.append(SSEComment(_strip_space(line[1:])))
            return
        field, colon, value = line.partition(":")
        if colon:
            value = _strip_space(value)
        if field == "data":
            self._data_size += len(raw)
            if self._data_size > self.max_line:
                raise SSEProtocolError(f"message data longer than {self.max_line} bytes", out)
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:  # the spec ignores an id containing NUL
                self._id = self._id_buffer = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self._retry = self.retry = int(value)
        # Any other field name is ignored, as the spec requires.

    def _dispatch(self, out: list[SSEItem]) -> None:
        self.last_event_id = self._id_buffer
        if self._data or self._id is not None or self._retry is not None:
            data = "\n".join(self._data) if self._data else None
            out.append(SSEMessage(event=self._event, data=data, id=self._id, retry=self._retry))
        self._reset_block()

    def _reset_block(self) -> None:
        """Forget the block in progress; ``last_event_id`` and ``retry`` are sticky."""
        self._event = None
        self._data = []
        self._data_size = 0
        self._id = None
        self._retry = None


def _strip_space(value: str) -> str:
    """Drop exactly one leading space, as the spec does after the colon."""
    return value[1:] if value.startswith(" ") else value
