"""The hub's local NDJSON protocol (SPEC §7.3): its generation, limits, message constructors, key.

Pure: no sockets, no asyncio. The hub (``services/hub``) and every client (``taskctl``, the loop
subscriber) build and read the same messages through this module, so the wire has one spelling.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any, Final
from urllib.parse import urlsplit

#: The protocol generation. A peer of another generation is refused, never half-understood;
#: a client that finds a hub of another generation replaces it (SPEC §7.1).
HUB_PROTOCOL: Final = 2

#: Version of the ``hub-<key>.json`` pointer record.
POINTER_VERSION: Final = 1

#: A session must say ``hello`` this soon after connecting, seconds.
HELLO_TIMEOUT: Final = 10.0
#: Connections still waiting for their ``hello`` the hub holds at once; a new one past this drops
#: the oldest of them, so token-less connections cannot take the descriptors a ``hello`` needs.
MAX_AWAITING_HELLO: Final = 64
#: Random bytes in a client's ``hello.nonce`` (sent as hex), which the hub's ``welcome.proof`` answers.
NONCE_BYTES: Final = 16
#: A ``board_id`` a follower may name is at most this long (the board's are 20 characters).
MAX_BOARD_ID: Final = 128
#: A follow stream with nothing else to say writes a ``heartbeat`` this often, seconds.
HEARTBEAT_INTERVAL: Final = 15.0
#: A follow stream with no ``event`` for this long writes ``idle`` and ends (0 disables), ms.
DEFAULT_IDLE_MS: Final = 45_000
#: Event frames the hub keeps for replay to a (re)connecting follower.
RING_SIZE: Final = 4096
#: The hub exits after this long with no clients and no registrations, seconds.
IDLE_EXIT: Final = 300.0
#: Reconnect ladder for the hub's board connection and for hub clients, seconds (SPEC §7.2).
RECONNECT_MIN: Final = 1.0
RECONNECT_MAX: Final = 30.0

#: Every message type a client may send after ``welcome``. ``watch``/``watch-status``/``watch-stop``
#: are card-brief registrations (SPEC §7.4).
CLIENT_REQUESTS: Final = frozenset({"follow", "ping", "watch", "watch-status", "watch-stop"})

# -- card-brief registrations (SPEC §7.4) --------------------------------------------------------

#: Version of the ``hub-<key>.registrations.json`` record (SPEC §7.4).
REGISTRATIONS_VERSION: Final = 2
#: A registration without ``ttl_ms`` ends after this long; ``ttl_ms: 0`` never ends by time, ms.
DEFAULT_WATCH_TTL_MS: Final = 120 * 60 * 1000
#: The longest ``ttl_ms`` a ``watch`` may ask for: 36,500 days. A registration's end is reported
#: as a timestamp (``expires_at``), and a timestamp ends at the year 9999; ``ttl_ms: 0`` is the way
#: to say "never".
MAX_WATCH_TTL_MS: Final = 36_500 * 86_400 * 1000
#: Refresh cadence, seconds: a batch waits for this much quiet after the last event naming a card…
REFRESH_DEBOUNCE: Final = 0.3
#: …but never longer than this after the first one…
REFRESH_MAX_WAIT: Final = 2.0
#: …and starts no sooner than this after the previous batch of the same registration started.
REFRESH_FLOOR: Final = 5.0
#: Most cards one ``watch`` request may name.
MAX_WATCH_CARDS: Final = 1000
#: A card in one of these statuses is written once more and dropped from its registration.
TERMINAL_STATUSES: Final = frozenset({"done", "canceled"})

#: ``registered.reason`` values: why no new registration was made for (some of) the cards.
REASON_COVERED: Final = "covered"  # a live detached registration already keeps the file
REASON_VIEWER: Final = "viewer"  # a live registration keeps it; this session watches alongside
REASON_TERMINAL: Final = "terminal"  # every card was done/canceled: written once, nothing to keep
#: ``shutdown.reason`` for the sessions of a registration ended by ``watch-stop``.
SHUTDOWN_WATCH_STOPPED: Final = "watch_stopped"

#: ``reset.reason`` values: why a follower must rescan state instead of trusting its cursor.
RESET_RING: Final = "ring"  # the cursor is older than the replay ring (or fell behind it)
RESET_CURSOR_AHEAD: Final = "cursor_ahead"  # the cursor is newer than anything the hub has seen
RESET_BOARD_CHANGED: Final = "board_changed"  # /meta names another board_id than before
RESET_BOARD_CURSOR_AHEAD: Final = "board_cursor_ahead"  # the board answered 400 CURSOR_AHEAD
RESET_BOARD_CURSOR_EXPIRED: Final = "board_cursor_expired"  # the board answered 410 CURSOR_EXPIRED
RESET_REASONS: Final = frozenset(
    {RESET_RING, RESET_CURSOR_AHEAD, RESET_BOARD_CHANGED, RESET_BOARD_CURSOR_AHEAD, RESET_BOARD_CURSOR_EXPIRED}
)

#: ``error.code`` values the hub sends; ``FATAL_ERRORS`` are followed by the hub closing the session.
UNAUTHORIZED: Final = "UNAUTHORIZED"
PROTOCOL_MISMATCH: Final = "PROTOCOL_MISMATCH"
HELLO_REQUIRED: Final = "HELLO_REQUIRED"
HELLO_TIMEOUT_CODE: Final = "HELLO_TIMEOUT"
MALFORMED_LINE: Final = "MALFORMED_LINE"
PAYLOAD_TOO_LARGE: Final = "PAYLOAD_TOO_LARGE"
UNKNOWN_TYPE: Final = "UNKNOWN_TYPE"
VALIDATION_FAILED: Final = "VALIDATION_FAILED"
ALREADY_FOLLOWING: Final = "ALREADY_FOLLOWING"
ALREADY_STREAMING: Final = "ALREADY_STREAMING"
NOT_AVAILABLE: Final = "NOT_AVAILABLE"
NOT_FOUND: Final = "NOT_FOUND"
WATCH_CONFLICT: Final = "WATCH_CONFLICT"
BOARD_UNAVAILABLE: Final = "BOARD_UNAVAILABLE"
WRITE_FAILED: Final = "WRITE_FAILED"
HUB_ERRORS: Final = frozenset(
    {
        UNAUTHORIZED,
        PROTOCOL_MISMATCH,
        HELLO_REQUIRED,
        HELLO_TIMEOUT_CODE,
        MALFORMED_LINE,
        PAYLOAD_TOO_LARGE,
        UNKNOWN_TYPE,
        VALIDATION_FAILED,
        ALREADY_FOLLOWING,
        ALREADY_STREAMING,
        NOT_AVAILABLE,
        NOT_FOUND,
        WATCH_CONFLICT,
        BOARD_UNAVAILABLE,
        WRITE_FAILED,
    }
)
FATAL_ERRORS: Final = frozenset(
    {UNAUTHORIZED, PROTOCOL_MISMATCH, HELLO_REQUIRED, HELLO_TIMEOUT_CODE, MALFORMED_LINE, PAYLOAD_TOO_LARGE}
)


# -- identity ---------------------------------------------------------------------------------


def token_fingerprint(token: str) -> str:
    """A short, non-reversible name for a board token; the same rule as the board's."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def resolve_board_url(url: str) -> str:
    """One spelling per board address: lower-case scheme and host, explicit port, no trailing ``/``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not a board URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}:{port}{parts.path.rstrip('/')}"


def hub_key(board_url: str, board_token: str) -> str:
    """The hub's coordinate: a hash of the resolved board URL and the token's fingerprint.

    A rotated token or a board on another address therefore finds a different hub (SPEC §7.1).
    """
    material = f"{resolve_board_url(board_url)}\n{token_fingerprint(board_token)}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]


# -- proving both ends (docs/hub-protocol.md, "Proving the hub") ------------------------------
# A listener on the pointer's port need not be the hub: the hub may have died and another local
# user bound the port. So a client never sends the hub token to a listener: it sends a fresh nonce
# and an HMAC of it keyed by the token, and the hub answers with another HMAC of the same nonce,
# which only a holder of the token can compute. The labels differ, so neither proof is the other.

_NONCE = re.compile(r"[0-9a-f]{32,128}")


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def valid_nonce(value: object) -> bool:
    return isinstance(value, str) and _NONCE.fullmatch(value) is not None


def _proof(label: bytes, token: str, nonce: str) -> str:
    return hmac.new(token.encode(), label + b"\n" + nonce.encode(), hashlib.sha256).hexdigest()


def hello_proof(token: str, nonce: str) -> str:
    """The client's proof that it holds the hub token, for its own ``nonce``."""
    return _proof(b"taskhub hello", token, nonce)


def welcome_proof(token: str, nonce: str) -> str:
    """The hub's proof that it holds the hub token, answering the client's ``nonce``."""
    return _proof(b"taskhub welcome", token, nonce)


def proves(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())


# -- messages ---------------------------------------------------------------------------------
# One constructor per message; clients and the hub both use them, so a field is spelled once.


def hello(token: str, *, protocol: int = HUB_PROTOCOL, nonce: str | None = None) -> dict[str, Any]:
    """``hello`` with the token in clear (a person with ``nc``), or, with ``nonce``, a proof of it:
    what every client library sends, so a listener that is not the hub never learns the token."""
    if nonce is None:
        return {"type": "hello", "protocol": protocol, "token": token}
    return {"type": "hello", "protocol": protocol, "nonce": nonce, "proof": hello_proof(token, nonce)}


def welcome(
    *, board_url: str, board_id: str | None, revision: int | None, proof: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "welcome", "protocol": HUB_PROTOCOL, "board": {"url": board_url, "board_id": board_id},
        "revision": revision,
    }
    if proof is not None:
        body["proof"] = proof
    return body


def follow(
    *,
    after: int | None = None,
    idle_ms: int | None = None,
    signals: bool | None = None,
    board_id: str | None = None,
) -> dict[str, Any]:
    """``board_id``: the board whose history ``after`` comes from (a cursor of another board, or
    of a history the board replaced by a restore, gets ``reset`` instead of a replay)."""
    message: dict[str, Any] = {"type": "follow"}
    if after is not None:
        message["after"] = after
    if board_id is not None:
        message["board_id"] = board_id
    if idle_ms is not None:
        message["idle_ms"] = idle_ms
    if signals is not None:
        message["signals"] = signals
    return message


def ping() -> dict[str, Any]:
    return {"type": "ping"}


def pong(*, revision: int | None, clients: int, registrations: int) -> dict[str, Any]:
    return {"type": "pong", "revision": revision, "clients": clients, "registrations": registrations}


def open_(*, revision: int | None, replay: str) -> dict[str, Any]:
    if replay not in ("ring", "live"):
        raise ValueError(f"replay must be ring or live, not {replay!r}")
    return {"type": "open", "revision": revision, "replay": replay}


def event(*, revision: int, activity: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event", "revision": revision, "activity": activity}


def signal(*, signal: dict[str, Any]) -> dict[str, Any]:
    """A board condition signal (``event: signal`` on the board's stream), forwarded as it came.

    It has no ``revision``: a signal is a statement about state now, never held in the ring and
    never replayed; a follower that missed some reads ``GET /api/v1/breaches`` instead.
    """
    return {"type": "signal", "signal": signal}


#: The record type, and the wake name the loop subscriber gives it (TASKLOOM_WAKE_EVENTS).
SIGNALS_MISSED: Final = "signals_missed"


def signals_missed() -> dict[str, Any]:
    """The hub's link to the board was down and has opened again: the signals the board sent
    meanwhile, and those its own start fired (a restart fires every deadline that passed while it
    was down, before any stream is open), reached no follower. Like a signal it has no
    ``revision`` and is never replayed; the follower reads ``GET /api/v1/breaches``."""
    return {"type": SIGNALS_MISSED}


def heartbeat(*, revision: int | None) -> dict[str, Any]:
    return {"type": "heartbeat", "revision": revision}


def reset(*, reason: str, revision: int | None) -> dict[str, Any]:
    if reason not in RESET_REASONS:
        raise ValueError(f"undeclared reset reason {reason!r}")
    return {"type": "reset", "reason": reason, "revision": revision}


def idle(*, idle_ms: int) -> dict[str, Any]:
    return {"type": "idle", "idle_ms": idle_ms}


def shutdown(*, reason: str) -> dict[str, Any]:
    return {"type": "shutdown", "reason": reason}


def eof() -> dict[str, Any]:
    return {"type": "eof"}


#: An ``error`` line quotes what the peer sent, never all of it: its message is cut to this many
#: characters; in ``details`` a string to ``ECHO_TEXT_CHARS``, a list or an object to its first
#: ``ECHO_ITEMS`` entries, and what is nested inside those is named, not shown. An answer then
#: always fits a line (``HUB_MAX_LINE``: a few fields of at most about 26 KB each) and always
#: encodes (orjson reads 1024 levels of nesting, but writes only 254).
ERROR_MESSAGE_CHARS: Final = 1000
ECHO_TEXT_CHARS: Final = 200
ECHO_ITEMS: Final = 64


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def echo(value: Any, *, nested: bool = False) -> Any:
    """``value`` as an error may quote it back: scalars as they are, strings cut to
    ``ECHO_TEXT_CHARS``, a list or an object to its first ``ECHO_ITEMS`` entries, whose own lists
    and objects (``nested``) are only named."""
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        # orjson writes integers of 64 bits only; a larger one (a client library's) is quoted as text.
        return value if -(1 << 63) <= value < (1 << 64) else _clip(str(value), ECHO_TEXT_CHARS)
    if isinstance(value, str):
        return _clip(value, ECHO_TEXT_CHARS)
    if isinstance(value, list | tuple):
        if nested:
            return f"<a list of {len(value)}>"
        shown = [echo(item, nested=True) for item in value[:ECHO_ITEMS]]
        return [*shown, f"<{len(value) - ECHO_ITEMS} more>"] if len(value) > ECHO_ITEMS else shown
    if isinstance(value, dict):
        if nested:
            return f"<an object of {len(value)}>"
        entries = list(value.items())
        shown_entries = {_clip(str(key), ECHO_TEXT_CHARS): echo(item, nested=True) for key, item in entries[:ECHO_ITEMS]}
        if len(entries) > ECHO_ITEMS:
            shown_entries["…"] = f"<{len(entries) - ECHO_ITEMS} more>"
        return shown_entries
    return _clip(repr(value), ECHO_TEXT_CHARS)


def error(code: str, message: str, **details: Any) -> dict[str, Any]:
    """An ``error`` line; ``message`` and ``details`` may quote the peer's request, so both are cut
    down here (``echo``), for every error the hub sends."""
    if code not in HUB_ERRORS:
        raise ValueError(f"undeclared hub error code {code!r}")
    body: dict[str, Any] = {"type": "error", "code": code, "message": _clip(message, ERROR_MESSAGE_CHARS)}
    if details:
        body["details"] = {name: echo(value) for name, value in details.items()}
    return body


# -- card-brief registrations -------------------------------------------------------------------


def watch(
    *,
    cards: list[dict[str, str]] | None = None,
    ref: str | None = None,
    out: str | None = None,
    refs: list[str] | None = None,
    dir: str | None = None,
    ttl_ms: int | None = None,
    detach: bool | None = None,
) -> dict[str, Any]:
    """``watch`` in one of its three spellings: ``cards``, ``ref`` + ``out``, or ``refs`` + ``dir``."""
    message: dict[str, Any] = {"type": "watch"}
    for name, value in (("cards", cards), ("ref", ref), ("out", out), ("refs", refs), ("dir", dir),
                        ("ttl_ms", ttl_ms), ("detach", detach)):
        if value is not None:
            message[name] = value
    return message


def registered(
    *,
    registration_id: str | None,
    refs: list[str],
    reused: bool,
    running: bool,
    reason: str | None = None,
    cards: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "registered", "registration_id": registration_id, "refs": refs, "reused": reused, "running": running,
    }
    if reason is not None:
        body["reason"] = reason
    if cards is not None:
        body["cards"] = cards
    return body


def refresh(*, ref: str, path: str, revision: int | None, status: str | None = None) -> dict[str, Any]:
    """A brief was written (or found current) with everything up to ``revision`` in it."""
    body: dict[str, Any] = {"type": "refresh", "ref": ref, "path": path, "revision": revision}
    if status is not None:
        body["status"] = status
    return body


def refresh_failed(*, ref: str, path: str, code: str, message: str) -> dict[str, Any]:
    """A refresh failed; the previous file is kept."""
    return {"type": "refresh", "ref": ref, "path": path, "ok": False, "error": {"code": code, "message": message}}


def done() -> dict[str, Any]:
    return {"type": "done"}


def ttl(*, ttl_ms: int) -> dict[str, Any]:
    return {"type": "ttl", "ttl_ms": ttl_ms}


def watch_status(registrations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The request (no argument) and its answer (the list) share the type ``watch-status``."""
    body: dict[str, Any] = {"type": "watch-status"}
    if registrations is not None:
        body["registrations"] = registrations
    return body


def watch_stop(registration_id: str) -> dict[str, Any]:
    return {"type": "watch-stop", "registration_id": registration_id}


def watch_stopped(*, registration_id: str, refs: list[str]) -> dict[str, Any]:
    return {"type": "watch-stopped", "registration_id": registration_id, "refs": refs}
