"""One local session's protocol logic, with no I/O: bytes in, actions out (SPEC §7.3).

The connection handler in ``server.py`` feeds every chunk it reads to ``Session.feed`` and
carries out the actions it gets back: ``Send`` a message, serve a ``Request`` that needs the
hub's state, ``Close`` the session. Everything a peer can get wrong is decided here, so it is
tested without sockets.

Error policy (docs/hub-protocol.md): a line the framing cannot carry (over 1 MiB), a line that
is not a JSON object with a ``type``, anything but ``hello`` first, a wrong token and another
protocol generation are fatal: one ``error`` line, then the hub closes the session. A well-formed
request the hub does not know, or one with bad fields, gets an ``error`` and the session stays.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from shared import hub_protocol as hp
from shared.ndjson import MAX_LINE, LineFramer, LineTooLong, MessageError, decode_line


@dataclass(frozen=True, slots=True)
class Send:
    """Write this message to the peer."""

    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Request:
    """A validated request the hub must serve with its own state (``hello``, ``follow``, ``ping``…)."""

    type: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Close:
    """End the session after everything sent before it."""

    reason: str


Action: TypeAlias = Send | Request | Close


class RequestInvalid(ValueError):
    """A request with bad fields; the session survives it."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


Validator: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]


def _optional_count(message: dict[str, Any], name: str) -> int | None:
    value = message.get(name)
    # bool is an int in Python but never a count on the wire.
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise RequestInvalid(f"{name} must be a non-negative integer or absent", field=name, value=value)


def _refuse_unknown(message: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(message) - allowed - {"type"})
    if unknown:
        raise RequestInvalid(f"unknown field(s): {', '.join(unknown)}", unknown=unknown)


def validate_follow(message: dict[str, Any]) -> dict[str, Any]:
    _refuse_unknown(message, frozenset({"after", "idle_ms"}))
    idle_ms = _optional_count(message, "idle_ms")
    return {
        "after": _optional_count(message, "after"),
        "idle_ms": hp.DEFAULT_IDLE_MS if idle_ms is None else idle_ms,
    }


def validate_ping(message: dict[str, Any]) -> dict[str, Any]:
    _refuse_unknown(message, frozenset())
    return {}


#: The requests this hub serves, each with the validator that normalises its fields. Card-brief
#: registrations (SPEC §7.4) add ``watch``, ``watch-status`` and ``watch-stop`` here and a
#: handler in ``server.py``; until then they answer ``NOT_AVAILABLE``.
REQUEST_VALIDATORS: Final[Mapping[str, Validator]] = {
    "follow": validate_follow,
    "ping": validate_ping,
}


def _fatal(code: str, message: str, **details: Any) -> list[Action]:
    return [Send(hp.error(code, message, **details)), Close(code)]


class Session:
    """The protocol state of one connection: greeting, then requests, then closed."""

    def __init__(
        self,
        token: str,
        *,
        max_line: int = MAX_LINE,
        validators: Mapping[str, Validator] = REQUEST_VALIDATORS,
    ) -> None:
        self._token = token.encode()
        self._framer = LineFramer(max_line)
        self._validators = validators
        self.greeted = False
        self.following = False
        self.closed = False

    def feed(self, chunk: bytes) -> list[Action]:
        """Actions for the bytes just read, in order; nothing once the session is closed."""
        if self.closed:
            return []
        try:
            lines = self._framer.feed(chunk)
        except LineTooLong as exc:
            actions = self._lines(exc.lines)
            if not self.closed:
                actions += self._close_with(
                    _fatal(hp.PAYLOAD_TOO_LARGE, exc.message, max_line=self._framer.max_line)
                )
            return actions
        return self._lines(lines)

    def feed_eof(self) -> list[Action]:
        """The peer closed its side. A follow stream keeps going (``nc -N`` half-closes); else ``eof``."""
        if self.closed or self.following:
            return []
        if not self.greeted:
            return self._close_with([Close("eof")])
        return self._close_with([Send(hp.eof()), Close("eof")])

    def hello_timed_out(self) -> list[Action]:
        """The greeting deadline passed; only a session still waiting for ``hello`` is closed."""
        if self.closed or self.greeted:
            return []
        return self._close_with(_fatal(hp.HELLO_TIMEOUT_CODE, "no hello in time; say hello first"))

    def _close_with(self, actions: list[Action]) -> list[Action]:
        self.closed = True
        return actions

    def _lines(self, lines: list[bytes]) -> list[Action]:
        actions: list[Action] = []
        for line in lines:
            actions += self._line(line)
            if self.closed:
                break
        return actions

    def _line(self, line: bytes) -> list[Action]:
        try:
            message = decode_line(line)
        except MessageError as exc:
            return self._close_with(_fatal(hp.MALFORMED_LINE, exc.message))
        kind = message["type"]
        if not self.greeted:
            return self._hello(message)
        if kind == "hello":
            return [Send(hp.error(hp.VALIDATION_FAILED, "this session has already said hello"))]
        validator = self._validators.get(kind)
        if validator is None:
            if kind in hp.CLIENT_REQUESTS:
                return [Send(hp.error(hp.NOT_AVAILABLE, f"{kind!r} is not served by this hub yet", type=kind))]
            return [Send(hp.error(hp.UNKNOWN_TYPE, f"unknown message type {kind!r}", type=kind))]
        try:
            fields = validator(message)
        except RequestInvalid as exc:
            return [Send(hp.error(hp.VALIDATION_FAILED, str(exc), type=kind, **exc.details))]
        if kind == "follow":
            if self.following:
                return [Send(hp.error(hp.ALREADY_FOLLOWING, "this session is already following"))]
            self.following = True
        return [Request(kind, fields)]

    def _hello(self, message: dict[str, Any]) -> list[Action]:
        if message["type"] != "hello":
            return self._close_with(_fatal(hp.HELLO_REQUIRED, 'the first message must be {"type":"hello",…}'))
        protocol = message.get("protocol")
        if protocol != hp.HUB_PROTOCOL or isinstance(protocol, bool):
            return self._close_with(
                _fatal(
                    hp.PROTOCOL_MISMATCH,
                    f"this hub speaks protocol {hp.HUB_PROTOCOL}",
                    expected=hp.HUB_PROTOCOL,
                    got=protocol,
                )
            )
        token = message.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token):
            return self._close_with(_fatal(hp.UNAUTHORIZED, "wrong or missing hub token (see the hub pointer file)"))
        self.greeted = True
        return [Request("hello")]
