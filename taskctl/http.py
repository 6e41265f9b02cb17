"""Talking HTTP to the board: a small keep-alive JSON client (SPEC §4.1).

Only the standard library is used for HTTP: ``taskctl`` starts many times a minute and must not
pay for aiohttp. The token is a secret: it travels only in the ``Authorization`` header, and every
refusal is a :class:`~taskctl.errors.TaskctlError`, whose texts are redacted.
"""

from __future__ import annotations

import json as jsonlib
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import TaskctlError, quotable

if TYPE_CHECKING:
    import http.client

    from .actors import Actor
    from .discovery import Board

#: How long a pointer's /health may take before the pointer is not trusted, seconds.
HEALTH_TIMEOUT = 2.0
#: Default timeout of one HTTP request to the board, seconds.
REQUEST_TIMEOUT = 30.0
#: Upload chunk size; the progress bar moves once per chunk.
UPLOAD_CHUNK = 64 * 1024
USER_AGENT = "taskctl/0.1"


def segment(value: str) -> str:
    """``value`` (a ref, an id the user typed) as one path segment: ``#``, ``?``, ``/`` and spaces
    in it mean nothing to the URL, so a ref no task holds is asked about as given and answered
    NOT_FOUND, never a fragment dropped or another route reached."""
    return urllib.parse.quote(_utf8(value), safe="")


def _utf8(value: str) -> bytes:
    """``value`` as the UTF-8 a URL carries. Bytes of an argument that were not UTF-8 reach Python
    as lone surrogates, which no board text can hold: refused as the user's, not taskctl's bug."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise TaskctlError(
            "VALIDATION_FAILED", f"{quotable(value)} is not UTF-8 text",
            hint="check the terminal's or the script's encoding: the board takes UTF-8 only",
        ) from None


@dataclass
class Reply:
    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def error(self) -> dict[str, Any] | None:
        if self.status >= 400 and isinstance(self.body, dict) and isinstance(error := self.body.get("error"), dict):
            return error
        return None


# ``http.client`` is imported on first use, by the functions below: it pulls in email and ssl
# (~25 ms).


def _connection(url: str, timeout: float | None) -> http.client.HTTPConnection:
    import http.client

    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout)
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)


def connect(url: str, timeout: float | None) -> http.client.HTTPConnection:
    """An open connection to the board at ``url`` whose listener is this user's.

    Checked once, after the connect and before the first request (and the token in it) goes
    out (docs/security.md, *Who listens on the board's port*); a kept-alive connection stays the
    socket that was checked. :class:`NotSent` when nothing answers, ``BOARD_IMPOSTOR`` when
    another user's socket does.
    """
    from services.hub.port_owner import ForeignListener, check_listener

    conn = _connection(url, timeout)
    try:
        conn.connect()
    except OSError as exc:
        conn.close()
        raise NotSent(exc.errno, exc.strerror or str(exc)) from exc
    try:
        check_listener(conn.sock)
    except ForeignListener as exc:
        conn.close()
        raise TaskctlError(
            "BOARD_IMPOSTOR",
            f"refusing to talk to the board at {url}: {exc}",
            details={"url": url, "port": exc.port, "uid": exc.uid},
            hint=f"another local user holds port {exc.port}, maybe while the board was down: "
            f"find it with `ss -ltnpe 'sport = :{exc.port}'`; the token was not sent",
        ) from None
    return conn


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether a kept-alive connection was closed by the board meanwhile (a restart): readable
    while no request is out means its end of file (or a reset) is waiting. Checked before reuse,
    so a write is never sent on a connection that cannot carry it."""
    import select

    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class NotSent(OSError):
    """The board could not be reached at all (no connection): nothing of the request went out."""


def _unreachable() -> tuple[type[Exception], ...]:
    """What a failed exchange with the board raises: the socket's errors and the HTTP protocol's."""
    import http.client

    return (OSError, http.client.HTTPException)


def _decode(response: http.client.HTTPResponse, raw: bytes) -> Any:
    content_type = response.getheader("Content-Type", "") or ""
    if "json" in content_type:
        try:
            return jsonlib.loads(raw) if raw else None
        except ValueError:
            return raw
    return raw


def _one_request(url: str, method: str, path: str, *, timeout: float) -> tuple[int, Any, dict[str, str]]:
    conn = _connection(url, timeout)
    try:
        conn.request(method, urllib.parse.urlsplit(url).path + path, headers={"User-Agent": USER_AGENT})
        response = conn.getresponse()
        raw = response.read()
        return response.status, _decode(response, raw), dict(response.getheaders())
    finally:
        conn.close()


def health(url: str, *, timeout: float = HEALTH_TIMEOUT) -> bool:
    """True when ``GET /health`` answers ``{"ok": true}``."""
    try:
        status, body, _ = _one_request(url, "GET", "/health", timeout=timeout)
    except _unreachable():
        return False
    return status == 200 and isinstance(body, dict) and body.get("ok") is True


def encode_query(query: Mapping[str, Any] | None) -> str:
    """None is left out, lists become comma lists, booleans true/false."""
    if not query:
        return ""
    pairs: list[tuple[str, bytes]] = []
    for name, value in query.items():
        if value is None or value == () or value == []:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        pairs.append((name, _utf8(str(value))))
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


class BoardHttp:
    """A small keep-alive JSON client of the board's HTTP API (standard library only)."""

    def __init__(self, board: Board, actor: Actor | None = None, *, timeout: float = REQUEST_TIMEOUT) -> None:
        self.board = board
        self.actor = actor
        self.timeout = timeout
        self._base = urllib.parse.urlsplit(board.url).path
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> BoardHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str | bytes]:
        sent: dict[str, str | bytes] = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.board.token:
            sent["Authorization"] = f"Bearer {self.board.token}"
        if self.actor is not None:
            # As UTF-8 bytes, which the board reads them as: http.client would send a str as
            # latin-1 (an é the board refuses) or fail on anything past it (a 工).
            sent["X-Taskloom-Actor"] = self.actor.id.encode("utf-8")
            sent["X-Taskloom-Actor-Kind"] = self.actor.kind.encode("utf-8")
        sent.update(extra or {})
        return sent

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        data: bytes | None = None,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One request; returns ``(status, body)`` with JSON bodies decoded, others as bytes."""
        reply = self.request_raw(method, path, json=json, data=data, query=query, headers=headers)
        return reply.status, reply.body

    def request_raw(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Reply:
        extra = dict(headers or {})
        if json is not None:
            data = jsonlib.dumps(json).encode()
            extra.setdefault("Content-Type", "application/json")
        target = self._base + path + encode_query(query)
        sent = self.headers(extra)
        # A kept-alive connection the board has closed fails on first use; one retry is safe for
        # reads only, since a write may have been received.
        attempts = 2 if method in ("GET", "HEAD") else 1
        for attempt in range(attempts):
            reused = self._conn is not None
            try:
                return self._send(method, target, data, sent, progress)
            except BaseException as exc:
                if not isinstance(exc, _unreachable()):
                    # Whatever broke off the request left the connection half-written: never reused.
                    self.close()
                    raise
                self.close()
                if reused and attempt + 1 < attempts:
                    continue
                # ``sent``: whether any of the request may have reached a board (a caller may
                # send a write again elsewhere only when it cannot have).
                reached = not isinstance(exc, NotSent)
                details = {"url": self.board.url, "sent": reached}
                if reached and method not in ("GET", "HEAD"):
                    # The board went away holding a change it may have committed before it could
                    # answer: "is it running?" would send the person to run it again, twice.
                    raise TaskctlError(
                        "BOARD_UNREACHABLE",
                        f"the board at {self.board.url} went away before it answered ({exc}): "
                        "the change may or may not have been made",
                        details=details,
                        hint="look before sending it again (`taskctl activity list` shows the board's latest changes); "
                        "start the board with `taskd serve` if it is not running",
                    ) from None
                raise TaskctlError(
                    "BOARD_UNREACHABLE",
                    f"cannot reach the board at {self.board.url}: {exc}",
                    details=details,
                    hint="is it running? start it with `taskd serve`, or name another with --url / TASKLOOM_URL",
                ) from None
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        target: str,
        data: bytes | None,
        headers: dict[str, str | bytes],
        progress: Callable[[int], None] | None,
    ) -> Reply:
        if self._conn is not None and _dropped(self._conn):
            self.close()
        if self._conn is None:
            self._conn = connect(self.board.url, self.timeout)
        conn = self._conn
        if progress is None or data is None:
            conn.request(method, target, body=data, headers=headers)
        else:
            conn.putrequest(method, target, skip_accept_encoding=True)
            for name, value in {**headers, "Content-Length": str(len(data))}.items():
                conn.putheader(name, value)
            conn.endheaders()
            view = memoryview(data)
            for start in range(0, len(data), UPLOAD_CHUNK):
                chunk = view[start:start + UPLOAD_CHUNK]
                conn.send(chunk)
                progress(len(chunk))
        response = conn.getresponse()
        raw = response.read()
        if response.will_close:
            self.close()
        return Reply(response.status, _decode(response, raw), {k.lower(): v for k, v in response.getheaders()})

    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: bytes | None = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> Any:
        """Like :meth:`request`, but a refusal raises :class:`TaskctlError` with the board's code and hint."""
        reply = self.request_raw(method, path, json=json, data=data, query=query, headers=headers, progress=progress)
        if reply.status < 400:
            return reply.body
        raise self.refusal(reply)

    def refusal(self, reply: Reply) -> TaskctlError:
        error = reply.error
        if error is None:
            text = reply.body.decode("utf-8", "replace")[:200] if isinstance(reply.body, bytes) else str(reply.body)
            return TaskctlError("HTTP_ERROR", f"the board answered {reply.status}: {text}", status=reply.status)
        code = str(error.get("code") or "HTTP_ERROR")
        hint = error.get("hint")
        if code == "UNAUTHORIZED" and not self.board.token and self.board.token_problem:
            hint = f"the token file was not read: {self.board.token_problem}"
        elif code == "UNAUTHORIZED" and not self.board.token:
            where = self.board.token_file or "the board's token file"
            hint = f"no token found: pass --token-file FILE (or --token - to read it from stdin) or set TASKLOOM_TOKEN (looked in {where})"
        return TaskctlError(
            code, str(error.get("message") or code), details=error.get("details") or {}, hint=hint, status=reply.status
        )


def paginate(http: BoardHttp, path: str, query: Mapping[str, Any] | None = None, *, limit: int | None = None) -> Iterable[Any]:
    """Every item of a keyset-paged list, following ``next_cursor``; stops after ``limit`` items."""
    params = dict(query or {})
    seen = 0
    while True:
        page = http.call("GET", path, query=params)
        for item in page.get("items", []):
            yield item
            seen += 1
            if limit is not None and seen >= limit:
                return
        cursor = page.get("next_cursor")
        if not cursor:
            return
        params["cursor"] = cursor
