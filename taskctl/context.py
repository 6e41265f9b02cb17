"""Finding the board, the token and the actor, and talking HTTP to the board (SPEC §4.1, §10).

Board discovery: ``--url`` → ``TASKLOOM_URL`` → the pointer a running board writes
(``board.json`` in the runtime directory; trusted only when its pid is alive and ``/health``
answers) → autostart a local ``taskd serve --port 0`` (refused when ``TASKLOOM_NO_AUTOSTART=1``).
Token: ``--token`` → ``TASKLOOM_TOKEN`` → the token file the pointer names, else
``<data_dir>/token``; long-lived commands re-read it with :func:`current_token` before every
reconnect, so a ``token rotate`` reaches them. Actor: ``--actor``/``--actor-kind`` → ``TASKLOOM_ACTOR``/
``TASKLOOM_ACTOR_KIND`` → the user name as ``human``.

Only the standard library is used for HTTP: ``taskctl`` starts many times a minute and must not
pay for aiohttp. The token is a secret: every text this module hands back is passed through
:func:`redact`, and :class:`Board` never shows it in a ``repr``.
"""

from __future__ import annotations

import json as jsonlib
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import http.client

from shared.paths import BOARD_POINTER, data_dir, runtime_dir

#: How long an autostarted board may take to write its pointer and answer /health, seconds.
AUTOSTART_TIMEOUT = 20.0
#: How long a pointer's /health may take before the pointer is not trusted, seconds.
HEALTH_TIMEOUT = 2.0
#: Default timeout of one HTTP request to the board, seconds.
REQUEST_TIMEOUT = 30.0
#: Upload chunk size; the progress bar moves once per chunk.
UPLOAD_CHUNK = 64 * 1024
AUTOSTART_LOCK = "board-start.lock"
USER_AGENT = "taskctl/0.1"

_TOKEN_PATTERN = re.compile(r"tl_[0-9a-fA-F]{16,}")
_SECRETS: set[str] = set()


class TaskctlError(Exception):
    """A refusal, from the board or from taskctl itself, with a stable code and maybe a hint."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        hint: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(redact(message))
        self.code = code
        self.message = redact(message)
        self.details = dict(details or {})
        self.hint = redact(hint) if hint else None
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details, "hint": self.hint}


def remember_secret(secret: str | None) -> None:
    """Register a value that must never appear in any output."""
    if secret:
        _SECRETS.add(secret)


def redact(text: str) -> str:
    """Hide every known secret and anything shaped like a board token."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return _TOKEN_PATTERN.sub("tl_[redacted]", text)


# -- actors ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    kind: str
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


def resolve_actor(actor: str | None = None, kind: str | None = None, *, environ: Mapping[str, str] | None = None) -> Actor:
    """``--actor``/``--actor-kind`` → ``TASKLOOM_ACTOR``/``TASKLOOM_ACTOR_KIND`` → the user as ``human``."""
    env = os.environ if environ is None else environ
    actor_id = actor or env.get("TASKLOOM_ACTOR") or _user_name()
    actor_kind = kind or env.get("TASKLOOM_ACTOR_KIND") or "human"
    return Actor(actor_kind, actor_id)


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): still a person at a shell
        return "user"


# -- discovery ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Board:
    """Where the board is and how to authenticate; ``token`` never shows in a repr."""

    url: str
    token: str | None = field(default=None, repr=False)
    #: How the URL was found: option, env, pointer or autostart.
    source: str = "option"
    pointer: dict[str, Any] | None = None
    token_file: Path | None = None
    #: Where the token came from: ``option`` (--token), ``env`` (TASKLOOM_TOKEN) or ``file``.
    token_source: str = "file"

    @property
    def pid(self) -> int | None:
        return self.pointer.get("pid") if self.pointer else None

    @property
    def data_dir(self) -> str | None:
        return self.pointer.get("data_dir") if self.pointer else None


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TaskctlError("VALIDATION_FAILED", f"not a board URL: {url}", details={"url": url},
                           hint="a board URL looks like http://127.0.0.1:7431")
    return url


def pointer_path(environ: Mapping[str, str] | None = None) -> Path:
    return runtime_dir(os.environ if environ is None else environ, Path.home()) / BOARD_POINTER


def read_pointer(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    try:
        record = jsonlib.loads(pointer_path(environ).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        return None
    return record


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return False
    return True


def health(url: str, *, timeout: float = HEALTH_TIMEOUT) -> bool:
    """True when ``GET /health`` answers ``{"ok": true}``."""
    try:
        status, body, _ = _one_request(url, "GET", "/health", timeout=timeout)
    except (OSError, _client().HTTPException):
        return False
    return status == 200 and isinstance(body, dict) and body.get("ok") is True


def live_pointer(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The pointer of a running board: its pid is alive and its /health answers."""
    record = read_pointer(environ)
    url = _pointer_url(record)
    if record is None or url is None or not pid_alive(record.get("pid")):
        return None
    return record if health(url) else None


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    return data_dir(os.environ if environ is None else environ, Path.home(), platform=sys.platform)


def _pointer_url(pointer: dict[str, Any] | None) -> str | None:
    """The pointer's board URL, normalised; None for a damaged pointer."""
    if not pointer:
        return None
    try:
        return normalise_url(str(pointer.get("url", "")))
    except TaskctlError:
        return None


def _same_board(pointer: dict[str, Any] | None, url: str) -> bool:
    return _pointer_url(pointer) == url


def _token_file_for(url: str, pointer: dict[str, Any] | None, environ: Mapping[str, str]) -> Path:
    if pointer and pointer.get("token_file") and _same_board(pointer, url):
        return Path(pointer["token_file"])
    return default_data_dir(environ) / "token"


def read_token_file(path: Path) -> str | None:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


def resolve_board(
    url: str | None = None,
    token: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    autostart: bool = True,
    announce: Callable[[str], None] | None = None,
) -> Board:
    """Find the board and its token in the documented order; may start a local board."""
    env = os.environ if environ is None else environ
    pointer: dict[str, Any] | None = None
    if url:
        source, chosen = "option", normalise_url(url)
    elif env.get("TASKLOOM_URL"):
        source, chosen = "env", normalise_url(env["TASKLOOM_URL"])
    else:
        pointer = live_pointer(env)
        if pointer is not None:
            source, chosen = "pointer", normalise_url(pointer["url"])
        else:
            refused = env.get("TASKLOOM_NO_AUTOSTART", "") not in ("", "0")
            if refused or not autostart:
                raise TaskctlError(
                    "NO_BOARD",
                    "no running board found" + (" and autostart is off (TASKLOOM_NO_AUTOSTART=1)" if refused else ""),
                    details={"pointer": str(pointer_path(env))},
                    hint="start one with `taskd serve`, or name one with --url / TASKLOOM_URL",
                )
            pointer = start_local_board(env, announce=announce)
            source, chosen = "autostart", normalise_url(pointer["url"])
    if pointer is None:
        record = read_pointer(env)
        if _same_board(record, chosen):
            pointer = record
    token_file: Path | None = None
    if token:
        secret, token_source = token.strip(), "option"
    elif env.get("TASKLOOM_TOKEN"):
        secret, token_source = env["TASKLOOM_TOKEN"].strip(), "env"
    else:
        token_file = _token_file_for(chosen, pointer, env)
        secret, token_source = read_token_file(token_file), "file"
    remember_secret(secret)
    return Board(chosen, secret, source, pointer, token_file, token_source)


def current_token(board: Board, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The board token as :func:`resolve_board` would find it now (after a ``token rotate``).

    A token given with ``--token`` or ``TASKLOOM_TOKEN`` is what this process was handed and
    stays as it is; one from a file is read again, from the file the board's pointer names now.
    """
    if board.token_source != "file":
        return board.token
    env = os.environ if environ is None else environ
    pointer = read_pointer(env)
    if pointer and pointer.get("token_file") and _same_board(pointer, board.url):
        path = Path(pointer["token_file"])
    else:  # the board is restarting (no pointer yet): the file we found at start
        path = board.token_file or _token_file_for(board.url, None, env)
    secret = read_token_file(path)
    if secret is None:
        return board.token  # unreadable for a moment: the last token we had is the best guess
    remember_secret(secret)
    return secret


def start_local_board(environ: Mapping[str, str], *, announce: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start ``taskd serve --port 0`` detached, logging to ``<data_dir>/logs/taskd.log``.

    A lock in the runtime directory makes concurrent starters spawn one board; whoever waited
    re-reads the pointer first.
    """
    from services.board.files import PRIVATE_UMASK, NotOwned, ensure_private_dir, open_private

    runtime = pointer_path(environ).parent
    directory = default_data_dir(environ).absolute()
    logs = directory / "logs"
    log_path = logs / "taskd.log"
    try:
        # Owner-only before the board itself sets its umask: the log may hold what it says at start.
        for private in (runtime, directory, logs):
            ensure_private_dir(private)
        log_fd = open_private(log_path, os.O_WRONLY | os.O_APPEND)
    except NotOwned as exc:
        raise TaskctlError("BOARD_START_FAILED", str(exc), details={"data_dir": str(directory)}) from None
    with _start_lock(runtime / AUTOSTART_LOCK):
        try:
            record = live_pointer(environ)
            if record is not None:
                return record
            child = _spawn_board(directory, environ, log_fd, umask=PRIVATE_UMASK)
        finally:
            os.close(log_fd)
        # Still under the start lock: a starter that waited for it finds this board's pointer.
        return _wait_for_board(child, environ, log_path, announce=announce)


def _spawn_board(directory: Path, environ: Mapping[str, str], log_fd: int, *, umask: int) -> Any:
    """``taskd serve --port 0`` in a session of its own, its output appended to the board's log."""
    import subprocess

    command = [sys.executable, "-m", "services.board.cli", "serve", "--port", "0", "--data-dir", str(directory)]
    detach: dict[str, Any] = {"start_new_session": True}
    if sys.platform == "win32":  # pragma: no cover - no sessions on Windows
        detach = {"creationflags": subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP}
    else:
        detach["umask"] = umask
    return subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=dict(environ), close_fds=True, **detach
    )


def _wait_for_board(
    child: Any, environ: Mapping[str, str], log_path: Path, *, announce: Callable[[str], None] | None
) -> dict[str, Any]:
    """The pointer of the board ``child`` once it answers /health, or why it did not start."""
    deadline = time.monotonic() + AUTOSTART_TIMEOUT
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise TaskctlError(
                "BOARD_START_FAILED",
                f"the local board exited with status {child.returncode} while starting",
                details={"log": str(log_path), "tail": _tail(log_path)},
                hint=f"see {log_path}",
            )
        record = read_pointer(environ)
        if record is not None and record.get("pid") == child.pid and health(record["url"]):
            if announce:
                announce(f"started a local board at {record['url']} (pid {child.pid}, log {log_path})")
            return record
        time.sleep(0.05)
    child.terminate()
    raise TaskctlError(
        "BOARD_START_FAILED",
        f"the local board did not answer within {AUTOSTART_TIMEOUT:.0f} s",
        details={"log": str(log_path), "tail": _tail(log_path)},
        hint=f"see {log_path}",
    )


class _start_lock:
    """An advisory file lock (no-op where fcntl is missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> "_start_lock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None


def _tail(path: Path, lines: int = 10) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return redact("\n".join(text.splitlines()[-lines:]))


# -- HTTP --------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def error(self) -> dict[str, Any] | None:
        if self.status >= 400 and isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"]
        return None


def _client() -> Any:
    """``http.client``, imported on first use: it pulls in email and ssl (~25 ms)."""
    import http.client

    return http.client


def _connection(url: str, timeout: float) -> "http.client.HTTPConnection":
    client = _client()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout)
    return client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)


def _decode(response: "http.client.HTTPResponse", raw: bytes) -> Any:
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


def encode_query(query: Mapping[str, Any] | None) -> str:
    """None is left out, lists become comma lists, booleans true/false."""
    if not query:
        return ""
    pairs: list[tuple[str, str]] = []
    for name, value in query.items():
        if value is None or value == () or value == []:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        pairs.append((name, str(value)))
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""


class BoardHttp:
    """A small keep-alive JSON client of the board's HTTP API (standard library only)."""

    def __init__(self, board: Board, actor: Actor | None = None, *, timeout: float = REQUEST_TIMEOUT) -> None:
        self.board = board
        self.actor = actor
        self.timeout = timeout
        self._base = urllib.parse.urlsplit(board.url).path
        self._conn: "http.client.HTTPConnection | None" = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "BoardHttp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        sent = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.board.token:
            sent["Authorization"] = f"Bearer {self.board.token}"
        if self.actor is not None:
            sent["X-Taskloom-Actor"] = self.actor.id
            sent["X-Taskloom-Actor-Kind"] = self.actor.kind
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
            except (OSError, _client().HTTPException) as exc:
                self.close()
                if reused and attempt + 1 < attempts:
                    continue
                raise TaskctlError(
                    "BOARD_UNREACHABLE",
                    f"cannot reach the board at {self.board.url}: {exc}",
                    details={"url": self.board.url},
                    hint="is it running? start it with `taskd serve`, or name another with --url / TASKLOOM_URL",
                ) from None
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        target: str,
        data: bytes | None,
        headers: dict[str, str],
        progress: Callable[[int], None] | None,
    ) -> Reply:
        if self._conn is None:
            self._conn = _connection(self.board.url, self.timeout)
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
        if code == "UNAUTHORIZED" and not self.board.token:
            where = self.board.token_file or "the board's token file"
            hint = f"no token found: pass --token or set TASKLOOM_TOKEN (looked in {where})"
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
