"""Newline-delimited JSON framing for the hub's local protocol (SPEC §7.3).

Pure bytes in, lines out, in the spirit of aiorpcX's ``NewlineFramer``: the framer caps the
partial line it buffers so a peer that never sends a newline cannot grow our memory.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from shared.errors import TaskloomError
from shared.limits import HUB_MAX_LINE

#: Longest line either side may send, in bytes before the ``\n`` (SPEC §7.3; ``shared/limits.py``).
MAX_LINE: Final = HUB_MAX_LINE


class MessageError(TaskloomError):
    """A line that is not a protocol message; ``code`` is a stable error code."""


class LineTooLong(MessageError):
    """A line exceeded the cap; the session must be closed (SPEC §7.3).

    ``lines`` holds the complete lines that arrived before it in the same ``feed``.
    """

    def __init__(self, max_line: int, lines: list[bytes]):
        super().__init__("PAYLOAD_TOO_LARGE", f"line longer than {max_line} bytes", details={"max_line": max_line})
        self.lines = lines


def encode_line(obj: Any) -> bytes:
    """One message as one line; orjson escapes every newline inside strings."""
    return orjson.dumps(obj) + b"\n"


class LineFramer:
    """Split a byte stream into lines; ``feed`` accepts any split of the stream."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the lines ``chunk`` completed, without ``\\n`` or a trailing ``\\r``.

        Blank lines are skipped, so a person typing into ``nc`` may press Enter freely.
        Raises ``LineTooLong`` once a line, complete or not, passes ``max_line``.
        """
        buf = self._buf
        # Only the new bytes can hold a newline: the old tail was searched already.
        start = len(buf)
        buf += chunk
        lines: list[bytes] = []
        pos = 0
        while (end := buf.find(b"\n", start)) != -1:
            # Same limit whether or not the newline came in this chunk: splits never matter.
            if end - pos > self.max_line:
                raise LineTooLong(self.max_line, lines)
            line = bytes(buf[pos:end])
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.strip():
                lines.append(line)
            pos = start = end + 1
        del buf[:pos]
        if len(buf) > self.max_line:
            raise LineTooLong(self.max_line, lines)
        return lines

    def finish(self) -> list[bytes]:
        """At the end of the stream: its last line if no newline ended it (``printf '{…}' | nc -N``),
        as ``feed`` would have returned it with one."""
        return self.feed(b"\n") if self._buf else []


def decode_line(line: bytes) -> dict[str, Any]:
    """Parse one line into a message: a JSON object with a non-empty string ``type``."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise MessageError("VALIDATION_FAILED", f"line is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise MessageError("VALIDATION_FAILED", f"message must be a JSON object, not {_json_kind(message)}")
    kind = message.get("type")
    if not isinstance(kind, str) or not kind:
        raise MessageError("VALIDATION_FAILED", 'message needs a non-empty string "type"')
    return message


def _json_kind(value: Any) -> str:
    """Name a decoded value by its JSON type, for people typing into ``nc``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"
