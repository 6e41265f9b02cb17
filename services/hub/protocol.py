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
import os.path
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
    _refuse_unknown(message, frozenset({"after", "idle_ms", "signals", "board_id"}))
    idle_ms = _optional_count(message, "idle_ms")
    # The board's ``?signals=0``, one hop on: a follower that only wants facts opts out.
    signals = message.get("signals", True)
    if not isinstance(signals, bool):
        raise RequestInvalid("signals must be true or false", field="signals", value=signals)
    # The board the cursor belongs to: a cursor of another board, or of a history a restore
    # replaced, is never replayed from this board's ring.
    board_id = message.get("board_id")
    if board_id is not None and (not isinstance(board_id, str) or not 0 < len(board_id) <= hp.MAX_BOARD_ID):
        raise RequestInvalid(f"board_id must be a string of 1 to {hp.MAX_BOARD_ID} characters or absent",
                             field="board_id", value=board_id)
    return {
        "after": _optional_count(message, "after"),
        "idle_ms": hp.DEFAULT_IDLE_MS if idle_ms is None else idle_ms,
        "signals": signals,
        "board_id": board_id,
    }


def validate_ping(message: dict[str, Any]) -> dict[str, Any]:
    _refuse_unknown(message, frozenset())
    return {}


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RequestInvalid(f"{name} must be a non-empty string", field=name, value=value)
    return value.strip()


def _absolute(value: Any, name: str, *, directory: bool = False) -> str:
    """An absolute path, normalised. A file path ending in ``/`` means a directory: refused."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise RequestInvalid(f"{name} must be an absolute path", field=name, value=value)
    if not os.path.isabs(value):
        raise RequestInvalid(f"{name} must be an absolute path, not {value!r}", field=name, value=value)
    if not directory and value.endswith(("/", "/.", "/..")):
        raise RequestInvalid(f"{name} names a directory; a brief is a file", field=name, value=value)
    return os.path.normpath(value)


def _no_twice(values: list[str], name: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise RequestInvalid(f"{value!r} is named twice in {name}", field=name, value=value)
        seen.add(value)


_WATCH_FIELDS = frozenset({"cards", "ref", "out", "refs", "dir", "ttl_ms", "detach"})


def validate_watch(message: dict[str, Any]) -> dict[str, Any]:
    """``watch`` in its three spellings, normalised to ``cards`` or ``refs`` + ``dir`` (SPEC §7.4).

    Only what the message itself says is checked here; the filesystem and the board are the
    registry's to check, still before anything is written.
    """
    _refuse_unknown(message, _WATCH_FIELDS)
    given = {name for name in ("cards", "ref", "out", "refs", "dir") if name in message}
    if "cards" in given and given - {"cards"}:
        raise RequestInvalid(
            "cards cannot be combined with ref/out/refs/dir: a path is derived one way per request",
            field="cards", conflicting=sorted(given - {"cards"}),
        )
    if given & {"ref", "out"} and given & {"refs", "dir"}:
        raise RequestInvalid("ref/out and refs/dir are two spellings; use one", field="ref", conflicting=sorted(given))
    detach = message.get("detach", False)
    if not isinstance(detach, bool):
        raise RequestInvalid("detach must be true or false", field="detach", value=detach)
    ttl_ms = _optional_count(message, "ttl_ms")
    if ttl_ms is not None and ttl_ms > hp.MAX_WATCH_TTL_MS:
        # Its end would lie past any timestamp: it could be neither reported nor persisted.
        raise RequestInvalid(f"ttl_ms must be at most {hp.MAX_WATCH_TTL_MS} (36500 days); 0 never ends",
                             field="ttl_ms", value=ttl_ms)
    fields: dict[str, Any] = {
        "cards": None, "refs": None, "dir": None,
        "ttl_ms": hp.DEFAULT_WATCH_TTL_MS if ttl_ms is None else ttl_ms, "detach": detach,
    }
    if "cards" in given:
        cards = message["cards"]
        if not isinstance(cards, list) or not cards:
            raise RequestInvalid("cards must be a non-empty list of {ref, out}", field="cards")
        if len(cards) > hp.MAX_WATCH_CARDS:
            raise RequestInvalid(f"at most {hp.MAX_WATCH_CARDS} cards per request", field="cards", count=len(cards))
        normal = []
        for index, card in enumerate(cards):
            where = f"cards[{index}]"
            if not isinstance(card, dict):
                raise RequestInvalid(f"{where} must be an object {{ref, out}}", field=where)
            unknown = sorted(set(card) - {"ref", "out"})
            if unknown:
                raise RequestInvalid(f"unknown field(s) in {where}: {', '.join(unknown)}", field=where, unknown=unknown)
            normal.append({"ref": _text(card.get("ref"), f"{where}.ref"), "out": _absolute(card.get("out"), f"{where}.out")})
        fields["cards"] = normal
    elif given & {"ref", "out"}:
        if given != {"ref", "out"}:
            raise RequestInvalid("ref and out go together", field=sorted({"ref", "out"} - given)[0])
        fields["cards"] = [{"ref": _text(message["ref"], "ref"), "out": _absolute(message["out"], "out")}]
    elif given:
        if given != {"refs", "dir"}:
            raise RequestInvalid("refs and dir go together", field=sorted({"refs", "dir"} - given)[0])
        refs = message["refs"]
        if not isinstance(refs, list) or not refs:
            raise RequestInvalid("refs must be a non-empty list of task refs", field="refs")
        if len(refs) > hp.MAX_WATCH_CARDS:
            raise RequestInvalid(f"at most {hp.MAX_WATCH_CARDS} cards per request", field="refs", count=len(refs))
        fields["refs"] = [_text(ref, f"refs[{n}]") for n, ref in enumerate(refs)]
        fields["dir"] = _absolute(message["dir"], "dir", directory=True)
    else:
        raise RequestInvalid("name the cards: cards: [{ref, out}], or ref + out, or refs + dir", field="cards")
    if fields["cards"] is not None:
        _no_twice([card["ref"] for card in fields["cards"]], "refs")
        _no_twice([card["out"] for card in fields["cards"]], "paths")
    else:
        _no_twice(fields["refs"], "refs")
    return fields


def validate_watch_status(message: dict[str, Any]) -> dict[str, Any]:
    _refuse_unknown(message, frozenset())
    return {}


def validate_watch_stop(message: dict[str, Any]) -> dict[str, Any]:
    _refuse_unknown(message, frozenset({"registration_id"}))
    return {"registration_id": _text(message.get("registration_id"), "registration_id")}


#: The requests this hub serves, each with the validator that normalises its fields. A declared
#: request (``hp.CLIENT_REQUESTS``) without a validator here answers ``NOT_AVAILABLE``.
REQUEST_VALIDATORS: Final[Mapping[str, Validator]] = {
    "follow": validate_follow,
    "ping": validate_ping,
    "watch": validate_watch,
    "watch-status": validate_watch_status,
    "watch-stop": validate_watch_stop,
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
        self._token = token
        self._framer = LineFramer(max_line)
        self._validators = validators
        self.greeted = False
        self.following = False
        #: A foreground ``watch`` was accepted: this session is its registration's stream.
        self.watching = False
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
        """The peer closed its side. A follow stream keeps going (``nc -N`` half-closes); else ``eof``.

        A foreground watch belongs to its session (SPEC §7.4): the end of its input is the owner
        leaving, so the session closes without a word (the hub cannot tell a half-close from a
        departure, and a registration must not outlive an owner that has gone).
        """
        if self.closed:
            return []
        # A last request with no newline after it is a request all the same.
        actions = self._lines(self._framer.finish())
        if self.closed or self.following:
            return actions
        if self.watching:
            return actions + self._close_with([Close("eof")])
        if not self.greeted:
            return actions + self._close_with([Close("eof")])
        return actions + self._close_with([Send(hp.eof()), Close("eof")])

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
            if self.watching:
                return [Send(hp.error(hp.ALREADY_STREAMING, "this session is a watch stream; open another for follow"))]
            if self.following:
                return [Send(hp.error(hp.ALREADY_FOLLOWING, "this session is already following"))]
            self.following = True
        elif kind == "watch" and not fields["detach"]:
            if self.following or self.watching:
                return [Send(hp.error(
                    hp.ALREADY_STREAMING, "this session already carries a stream; open another, or detach", type=kind,
                ))]
            self.watching = True
        return [Request(kind, fields)]

    def watch_refused(self) -> None:
        """The hub refused the foreground ``watch`` it was handed: the session is free again."""
        self.watching = False

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
        nonce = message.get("nonce")
        if nonce is not None and not hp.valid_nonce(nonce):
            return self._close_with(_fatal(hp.UNAUTHORIZED, "nonce must be 32 to 128 lower-case hex digits"))
        if "proof" in message:
            # A client library: the token never crosses the wire, only an HMAC of its nonce.
            proven = nonce is not None and hp.proves(hp.hello_proof(self._token, nonce), message["proof"])
        else:
            token = message.get("token")
            proven = isinstance(token, str) and hmac.compare_digest(token.encode(), self._token.encode())
        if not proven:
            return self._close_with(_fatal(hp.UNAUTHORIZED, "wrong or missing hub token (see the hub pointer file)"))
        self.greeted = True
        # The answer proves this end holds the token too: only the hub can compute it.
        return [Request("hello", {"proof": None if nonce is None else hp.welcome_proof(self._token, nonce)})]
