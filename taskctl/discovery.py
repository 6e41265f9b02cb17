"""Finding the board and its token, and starting a local one (SPEC §4.1, §10).

Board discovery: ``--url`` → ``TASKLOOM_URL`` → the pointer a running board writes
(``board.json`` in the runtime directory; trusted only when its pid is alive and ``/health``
answers) → autostart a local ``taskd serve --port 0`` (refused when ``TASKLOOM_NO_AUTOSTART=1``).
Token: ``--token`` → ``TASKLOOM_TOKEN`` → the token file the pointer names, else
``<data_dir>/token``; long-lived commands re-read it with :func:`current_token` before every
reconnect, so a ``token rotate`` reaches them. The token is a secret: :class:`Board` never shows
it in a ``repr``.
"""

from __future__ import annotations

import json as jsonlib
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.board.process import lock_file, pid_alive
from shared.paths import BOARD_POINTER, data_dir, runtime_dir

from .errors import TaskctlError, redact, remember_secret
from .http import health

if TYPE_CHECKING:
    import subprocess

#: How long an autostarted board may take to write its pointer and answer /health, seconds.
AUTOSTART_TIMEOUT = 20.0
AUTOSTART_LOCK = "board-start.lock"


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
    secret: str | None
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


def _spawn_board(directory: Path, environ: Mapping[str, str], log_fd: int, *, umask: int) -> subprocess.Popen[bytes]:
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
    child: subprocess.Popen[bytes], environ: Mapping[str, str], log_path: Path, *, announce: Callable[[str], None] | None
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
    """An advisory file lock, waited for (no-op where fcntl is missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> _start_lock:
        self.fd = lock_file(self.path, wait=True)
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
