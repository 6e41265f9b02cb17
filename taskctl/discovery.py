"""Finding the board and its token, and starting a local one (SPEC §4.1, §10).

Board discovery: ``--url`` → ``TASKLOOM_URL`` → the pointer a running board writes
(``board.json`` in the runtime directory; trusted only when its pid is alive and ``/health``
answers) → autostart a local ``taskd serve --port 0`` (refused when ``TASKLOOM_NO_AUTOSTART=1``).
Token: ``--token`` → ``TASKLOOM_TOKEN`` → the token file the pointer names, else
``<data_dir>/token``; long-lived commands re-read it with :func:`current_token` before every
reconnect, so a ``token rotate`` reaches them. The token is a secret: :class:`Board` never shows
it in a ``repr``.

Only this user's files are believed (docs/security.md, *Who listens on the board's port*): a
runtime directory or pointer that another uid owns, or that group or others may write, is no
pointer at all; a pointer's pid must be a process of this uid; a token file is read only when
this uid owns it and nobody else may read it.
"""

from __future__ import annotations

import json as jsonlib
import os
import stat
import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.board.process import lock_file, pid_alive
from shared.paths import BOARD_POINTER, board_pointer_for, data_dir, runtime_dir

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
    #: Where the token came from: ``option`` (--token -), ``given_file`` (--token-file FILE, the
    #: file in ``token_file``), ``env`` (TASKLOOM_TOKEN) or ``file`` (the board's token file).
    token_source: str = "file"
    #: Why the token file was not read (another user's, or readable by others), if it was not.
    token_problem: str | None = None

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
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a port past 65535, or not a number, raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise TaskctlError("VALIDATION_FAILED", f"not a board URL: {url}", details={"url": url},
                           hint="a board URL looks like http://127.0.0.1:7431")
    return url


def pointer_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where this client looks for its board: with ``TASKLOOM_DATA_DIR`` set, the pointer of the
    board serving that data directory; else ``board.json``, the board started last."""
    env = os.environ if environ is None else environ
    runtime = runtime_dir(env, Path.home())
    if env.get("TASKLOOM_DATA_DIR"):
        return runtime / board_pointer_for(default_data_dir(env).resolve())
    return runtime / BOARD_POINTER


def read_pointer(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The board pointer, when this user's: in a directory and a file this uid owns and that
    nobody else may write (anyone may create ``/tmp/x`` first and name it the runtime directory)."""
    path = pointer_path(environ)
    return _pointer_at(path)


def _pointer_at(path: Path) -> dict[str, Any] | None:
    if _unsafe(path.parent, GROUP_OTHER_WRITE):
        return None
    try:
        record = jsonlib.loads(_read_own_file(path, GROUP_OTHER_WRITE))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("url"), str):
        return None
    return record


def live_pointer(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The pointer of a running board: its pid is a live process of this user and its /health answers."""
    record = read_pointer(environ)
    url = _pointer_url(record)
    if record is None or url is None or not pid_alive(record.get("pid")) or not own_process(record.get("pid")):
        return None
    return record if health(url) else None


#: Mode bits that let another user change a file or a directory's entries.
GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: Mode bits that let another user see or change a file (the token must be owner-only).
GROUP_OTHER_ANY = 0o077


def own_process(pid: object) -> bool:
    """Whether ``pid`` (already known alive) runs as this uid: the owner of ``/proc/<pid>``, where
    there is no procfs whether it may be signalled (as root, everything may: taken as ours)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not hasattr(os, "geteuid"):
        return isinstance(pid, int)
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False  # PermissionError: another user's process
    return True


def _unsafe(path: Path, loose: int) -> str | None:
    """Why ``path`` (followed if a link) is not this user's alone, or None when it is."""
    if not hasattr(os, "geteuid"):
        return None  # pragma: no cover - Windows: the ACLs of the profile directory decide
    try:
        info = os.stat(path)
    except OSError:
        return None  # missing: nothing is read from it anyway
    return _why(path, info, loose)


def _why(path: Path, info: os.stat_result, loose: int) -> str | None:
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & loose:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}: other users may {'read' if loose & 0o044 else 'change'} it"
    return None


def _read_own_file(path: Path, loose: int) -> str:
    """The text of the regular file ``path`` (not a link), if this uid owns it and no ``loose``
    bit is set; :class:`UntrustedFile` (an ``OSError``) otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        problem = f"{path} is not a regular file" if not stat.S_ISREG(info.st_mode) else None
        if hasattr(os, "geteuid"):
            problem = problem or _why(path, info, loose)
        if problem:
            raise UntrustedFile(problem)
        with os.fdopen(fd, encoding="utf-8", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


class UntrustedFile(OSError):
    """A file another user owns or may change (or read, for the token): not believed."""


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


def read_given_token(path: Path) -> str:
    """The token in a file a user named (``--token-file``): its first line, stripped (empty when
    there is none). Raises OSError or UnicodeDecodeError as reading it does."""
    with open(path, encoding="utf-8") as handle:
        return handle.readline().strip()


def read_token_file(path: Path) -> str | None:
    """The token in ``path`` when this uid owns the file and nobody else may read it."""
    return token_file_state(path)[0]


def token_file_state(path: Path) -> tuple[str | None, str | None]:
    """``(token, why not)``: the token, or why the file at ``path`` was not used (None: no file)."""
    try:
        token = _read_own_file(path, GROUP_OTHER_ANY).strip()
    except UntrustedFile as exc:
        return None, f"{exc}; make it owner-only (chmod 600) or pass the token another way"
    except OSError:
        return None, None
    return token or None, None


def resolve_board(
    url: str | None = None,
    token: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    autostart: bool = True,
    announce: Callable[[str], None] | None = None,
    token_path: Path | None = None,
) -> Board:
    """Find the board and its token in the documented order; may start a local board.
    ``token_path``: the file ``token`` was read from (``--token-file FILE``), read again later."""
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
    problem: str | None = None
    if token:
        secret, token_source = token.strip(), "option"
        if token_path is not None:
            token_file, token_source = token_path, "given_file"
    elif env.get("TASKLOOM_TOKEN"):
        secret, token_source = env["TASKLOOM_TOKEN"].strip(), "env"
    else:
        token_file = _token_file_for(chosen, pointer, env)
        (secret, problem), token_source = token_file_state(token_file), "file"
    remember_secret(secret)
    return Board(chosen, secret, source, pointer, token_file, token_source, problem)


def current_token(board: Board, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The board token as :func:`resolve_board` would find it now (after a ``token rotate``).

    A token given with ``--token -`` or ``TASKLOOM_TOKEN`` is what this process was handed and
    stays as it is; one from a file is read again: a ``--token-file`` from that file (whoever
    rotates the token puts the new one there), else from the file the board's pointer names now.
    """
    if board.token_source == "given_file" and board.token_file is not None:
        try:
            given = read_given_token(board.token_file)
        except (OSError, UnicodeDecodeError):
            given = None
        if not given:
            return board.token  # unreadable or empty for a moment (being rewritten): the last one
        remember_secret(given)
        return given
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
