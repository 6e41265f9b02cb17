"""The hub client ``taskctl`` uses: find or start the hub, follow through it, stop it (SPEC §7.1).

Finding: a pointer is trusted only when its pid is a live process of this user and a ``ping``
answers on its port from a hub that proved it holds the pointer's token: the client sends a fresh
nonce and an HMAC of it, never the token, and the ``welcome`` must carry the hub's own HMAC of
the nonce (a hub that died leaves its pointer, and anyone may bind its port). A pointer that fails
is stale: the owner lock is free, so a new hub is started.
Starting: whoever takes the owner lock spawns the hub, detached, with the locked descriptor
inherited and the board token in the child's environment (never argv); everyone else polls for
the pointer. A hub of another protocol generation is stopped (only when the pointer and the lock
name the same live pid) and replaced. A same-generation hub that is slow is left alone.

Tokens: the hub's key hides a fingerprint of the board token, so a rotated token means another
hub. Long-lived consumers pass a ``TokenSource`` (re-read on every reconnect, as ``taskctl``
resolves it) rather than a string: when a hub says ``error UNAUTHORIZED`` (its board refused its
token) or a starting hub exits with ``EXIT_UNAUTHORIZED``, the next attempt uses the token the
file now holds, and so finds or starts the hub keyed by it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from shared import hub_protocol as hp
from shared.limits import HUB_MAX_LINE
from shared.ndjson import LineFramer, encode_line
from shared.paths import runtime_dir as default_runtime_dir

from .files import PRIVATE_UMASK, ensure_private_dir, open_private
from .pointer import HubFiles, OwnerLock, pid_alive, process_of_ours, read_lock_pid, read_pointer
from .process import Backoff

#: How long find-or-start may take before giving up, seconds.
START_TIMEOUT = 20.0
#: An authenticated ping must answer this fast for a pointer to be trusted, seconds.
PING_TIMEOUT = 3.0
#: How long a signalled hub gets to exit before SIGKILL (generation replacement), seconds.
STOP_TIMEOUT = 10.0
#: Polling step while another starter spawns the hub, seconds.
POLL_STEP = 0.02
#: ``taskhub serve`` exits with this when the board refuses its token (sysexits.h ``EX_NOPERM``).
EXIT_UNAUTHORIZED = 77

#: Reads the board token afresh (the token file may have been rotated since the last call).
TokenSource = Callable[[], "str | None"]

_TERMINAL = frozenset({"idle", "eof"})


class HubError(Exception):
    """The hub refused us with a stable code (``UNAUTHORIZED``, ``PROTOCOL_MISMATCH``…)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BoardUnauthorized(HubError):
    """The board refused the token the hub was given (a rotation): it will not work until re-read."""

    def __init__(self, message: str) -> None:
        super().__init__(hp.UNAUTHORIZED, message)


class HubUnavailable(Exception):
    """No hub could be found, started or reached in time."""


class HubNotProven(ConnectionError):
    """The listener answered ``welcome`` without proving it holds the hub token: not our hub."""


@dataclass(frozen=True)
class HubAddress:
    port: int
    token: str = ""  # the hub's own per-process token
    pid: int = 0
    key: str = ""

    def __repr__(self) -> str:  # keep the hub token out of tracebacks and logs
        return f"HubAddress(port={self.port}, pid={self.pid}, key={self.key!r})"


class HubSession:
    """One NDJSON session with the hub, after ``hello``/``welcome``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, welcome: dict[str, Any]) -> None:
        self.reader = reader
        self.writer = writer
        self.welcome = welcome
        self._framer = LineFramer(HUB_MAX_LINE)
        self._pending: list[bytes] = []

    @classmethod
    async def connect(cls, address: HubAddress, *, timeout: float = PING_TIMEOUT, protocol: int = hp.HUB_PROTOCOL) -> HubSession:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", address.port), timeout)
        session = cls(reader, writer, {})
        nonce = hp.new_nonce()
        try:
            await session.send(hp.hello(address.token, protocol=protocol, nonce=nonce))
            answer = await asyncio.wait_for(session.receive(), timeout)
        except BaseException:
            session.close()
            raise
        if answer is None:
            session.close()
            raise ConnectionError("the hub closed the session during hello")
        if answer.get("type") == "error":
            session.close()
            raise HubError(str(answer.get("code")), str(answer.get("message")))
        if answer.get("type") != "welcome":
            session.close()
            raise ConnectionError(f"expected welcome, got {answer.get('type')!r}")
        if not hp.proves(hp.welcome_proof(address.token, nonce), answer.get("proof")):
            session.close()
            raise HubNotProven(
                f"the listener on 127.0.0.1:{address.port} did not prove it holds the hub token: not this user's hub"
            )
        session.welcome = answer
        return session

    @property
    def board_id(self) -> str | None:
        """The board the hub followed when it said ``welcome`` (None before it reached one)."""
        board = self.welcome.get("board")
        board_id = board.get("board_id") if isinstance(board, dict) else None
        return board_id if isinstance(board_id, str) else None

    async def send(self, message: dict[str, Any]) -> None:
        self.writer.write(encode_line(message))
        await self.writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the hub closed the connection."""
        while not self._pending:
            chunk = await self.reader.read(64 * 1024)
            if not chunk:
                return None
            self._pending = self._framer.feed(chunk)
        message = orjson.loads(self._pending.pop(0))
        return message if isinstance(message, dict) else {}

    async def request(self, message: dict[str, Any], *, timeout: float = PING_TIMEOUT) -> dict[str, Any]:
        await self.send(message)
        answer = await asyncio.wait_for(self.receive(), timeout)
        if answer is None:
            raise ConnectionError("the hub closed the session")
        return answer

    def close(self) -> None:
        self.writer.close()


# -- finding, starting, stopping ----------------------------------------------------------------


def hub_files(
    board_url: str, board_token: str, *, runtime: Path | None = None, environ: Mapping[str, str] | None = None
) -> HubFiles:
    env = os.environ if environ is None else environ
    directory = runtime if runtime is not None else default_runtime_dir(env, Path.home())
    return HubFiles(directory, hp.hub_key(board_url, board_token))


async def ping(address: HubAddress, *, timeout: float = PING_TIMEOUT) -> dict[str, Any] | None:
    """``pong`` from the hub at ``address``, or None if nothing trustworthy answers in time.

    Only a live process of this user is asked: another user's (a reused pid) cannot be our hub.
    """
    if not process_of_ours(address.pid):
        return None
    try:
        session = await HubSession.connect(address, timeout=timeout)
    except (TimeoutError, OSError, HubError, ValueError):
        return None
    try:
        answer = await session.request(hp.ping(), timeout=timeout)
    except (TimeoutError, OSError, ValueError):
        return None
    finally:
        session.close()
    return answer if answer.get("type") == "pong" else None


def _address(record: dict[str, Any], key: str) -> HubAddress:
    return HubAddress(port=record["port"], token=str(record.get("token", "")), pid=record["pid"], key=key)


async def find_or_start(
    board_url: str,
    board_token: str,
    *,
    runtime: Path | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT,
    hub_args: tuple[str, ...] = (),
) -> HubAddress:
    """The address of a live, current-generation hub for this board, starting one if needed."""
    env = dict(os.environ if environ is None else environ)
    files = hub_files(board_url, board_token, runtime=runtime, environ=env)
    ensure_private_dir(files.runtime)
    deadline = time.monotonic() + timeout
    slow_pid: int | None = None
    while True:
        record = read_pointer(files)
        if record is not None and record.get("protocol") == hp.HUB_PROTOCOL:
            address = _address(record, files.key)
            if await ping(address) is not None:
                return address
        lock = OwnerLock.try_acquire(files, role="starter")
        if lock is not None:
            try:
                return await _start_holding_lock(files, lock, board_url, board_token, env, deadline, hub_args)
            finally:
                lock.release()
        # Someone holds the lock: a starter at work, or a running hub.
        holder = read_lock_pid(files)
        record = read_pointer(files)
        if record is not None and record.get("pid") == holder and holder is not None and pid_alive(holder):
            if record.get("protocol") != hp.HUB_PROTOCOL:
                await stop_pid(holder)  # another generation: replaced, never reused (SPEC §7.1)
                continue
            slow_pid = holder  # same generation, alive, not answering: slow, not dead
        if time.monotonic() > deadline:
            if slow_pid is not None:
                raise HubUnavailable(
                    f"the hub (pid {slow_pid}) does not answer; stop it with `taskctl events hub --stop`"
                )
            raise HubUnavailable(f"no hub answered within {timeout:.0f} s (lock held by pid {holder}); see {files.log}")
        await asyncio.sleep(POLL_STEP)


async def _start_holding_lock(
    files: HubFiles,
    lock: OwnerLock,
    board_url: str,
    board_token: str,
    env: dict[str, str],
    deadline: float,
    hub_args: tuple[str, ...],
) -> HubAddress:
    # Another starter may have finished between our look and our lock.
    record = read_pointer(files)
    if record is not None and record.get("protocol") == hp.HUB_PROTOCOL:
        address = _address(record, files.key)
        if await ping(address) is not None:
            return address
    if (
        record is not None
        and record.get("protocol") != hp.HUB_PROTOCOL
        and record.get("pid") == lock.previous_pid
        and pid_alive(record["pid"])
    ):
        # An older hub that does not hold the flock itself: pointer and lock still agree on it.
        await stop_pid(record["pid"])
    child = spawn_hub(files, lock, board_url, board_token, env, hub_args)
    while True:
        record = read_pointer(files)
        if record is not None and record.get("pid") == child.pid:
            address = _address(record, files.key)
            if await ping(address) is not None:
                return address
        if child.poll() is not None:
            if child.returncode == EXIT_UNAUTHORIZED:
                raise BoardUnauthorized(
                    f"the board refused the token (401): was it rotated? re-read the token file; see {files.log}"
                )
            raise HubUnavailable(f"the hub exited with status {child.returncode}: {_log_tail(files.log)}")
        if time.monotonic() > deadline:
            raise HubUnavailable(f"the hub (pid {child.pid}) did not publish its pointer in time; see {files.log}")
        await asyncio.sleep(POLL_STEP)


def spawn_hub(
    files: HubFiles,
    lock: OwnerLock,
    board_url: str,
    board_token: str,
    env: dict[str, str],
    hub_args: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``taskhub serve`` detached, handing it the locked descriptor; the token goes in its env."""
    child_env = dict(env)
    child_env["TASKLOOM_TOKEN"] = board_token
    child_env["TASKLOOM_RUNTIME_DIR"] = str(files.runtime)
    package_root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    log_fd = open_private(files.log, os.O_WRONLY | os.O_APPEND)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "services.hub.cli", "serve", "--board", board_url, "--lock-fd", str(lock.fd), *hub_args],
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            pass_fds=(lock.fd,),
            start_new_session=True,  # detached: no terminal signals, outlives the starter
            umask=PRIVATE_UMASK,  # owner-only from its first file on (docs/security.md)
            cwd="/",
        )
    finally:
        os.close(log_fd)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def stop_pid(pid: int, *, timeout: float = STOP_TIMEOUT, kill: bool = True) -> bool:
    """SIGTERM ``pid`` and wait for it to go; SIGKILL after ``timeout`` if ``kill``. True if gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            if not kill:
                return False
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return True
            kill = False
            deadline = time.monotonic() + timeout
        await asyncio.sleep(POLL_STEP)
    return True


@dataclass(frozen=True)
class StopResult:
    key: str
    pid: int | None
    stopped: bool
    message: str


async def stop_hub(files: HubFiles, *, timeout: float = STOP_TIMEOUT) -> StopResult:
    """Signal the hub that both the pointer and the lock name (this user's own files and process:
    ``pointer.read_own_json``); never speaks the socket protocol, so it works on a hub of any
    generation."""
    record = read_pointer(files)
    holder = read_lock_pid(files)
    if record is None:
        return StopResult(files.key, None, False, "no hub is running for this board")
    pid = record["pid"]
    if not pid_alive(pid):
        files.pointer.unlink(missing_ok=True)
        return StopResult(files.key, pid, False, f"the hub (pid {pid}) is not running; removed its stale pointer")
    if holder != pid:
        return StopResult(files.key, pid, False, f"pointer names pid {pid} but the lock names {holder}; not signalling")
    if not process_of_ours(pid):
        # A hub that died leaves both naming its pid, which another user's process may now hold.
        return StopResult(files.key, pid, False, f"pid {pid} is not a process of this user; not signalling")
    gone = await stop_pid(pid, timeout=timeout, kill=False)
    return StopResult(files.key, pid, gone, f"stopped the hub (pid {pid})" if gone else f"the hub (pid {pid}) is still stopping")


def all_hub_files(runtime: Path) -> list[HubFiles]:
    """Every hub pointer in the runtime directory (for ``hub --stop --all``)."""
    return sorted(
        (HubFiles(runtime, path.name[len("hub-"):-len(".json")]) for path in runtime.glob("hub-*.json")),
        key=lambda files: files.key,
    )


def board_hub_files(runtime: Path, board_url: str, board_token: str | None = None) -> list[HubFiles]:
    """The hubs of one board whatever token they hold: pointers that name the board in clear.

    A pointer written before the board was recorded there is found by the key of
    ``board_token`` only. The hub keyed by ``board_token`` (the current one) comes first.
    """
    board = hp.resolve_board_url(board_url)
    current = hp.hub_key(board, board_token) if board_token else None
    found = [
        files for files in all_hub_files(runtime)
        if (record := read_pointer(files)) is not None
        and (record.get("board") == board or (current is not None and files.key == current))
    ]
    return sorted(found, key=lambda files: files.key != current)


# -- following ------------------------------------------------------------------------------


class CursorBoard:
    """The board a follower's cursor comes from, sent as ``follow.board_id`` when it resumes.

    The records of a session belong to the board its ``welcome`` named; after a ``reset`` the
    hub may follow another board whose id the stream does not say, so none is claimed until the
    next session's ``welcome``. Claiming none is safe (the hub then judges by revision alone).

    ``board_id``: the board of a cursor an earlier process saved (the loop subscriber's state
    file), so the first ``follow`` after a restart names it too: a board replaced meanwhile then
    answers ``reset`` instead of replaying its own revisions after a number of the old one.
    """

    def __init__(self, board_id: str | None = None) -> None:
        self.board_id: str | None = board_id
        self._session_board: str | None = None

    def opened(self, session: HubSession) -> None:
        self._session_board = session.board_id

    def follow(self, *, after: int | None, **fields: Any) -> dict[str, Any]:
        """The ``follow`` request resuming after ``after``, naming its board when known."""
        named = self.board_id if after is not None else None
        if self._session_board is None:
            # A hub that has not reached its board yet compares the named board at first contact
            # and resets us if it is another: what comes without a reset is of the named board.
            self._session_board = named
        return hp.follow(after=after, board_id=named, **fields)

    def saw(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "reset":
            self._session_board = self.board_id = None
        elif kind in ("event", "heartbeat") and isinstance(record.get("revision"), int):
            self.board_id = self._session_board


async def follow(
    board_url: str,
    board_token: str | TokenSource,
    *,
    after: int | None = None,
    idle_ms: int | None = None,
    runtime: Path | None = None,
    environ: Mapping[str, str] | None = None,
    on_state: Callable[[str], None] | None = None,
    on_problem: Callable[[str], None] | None = None,
    reconnect_min: float = hp.RECONNECT_MIN,
    reconnect_max: float = hp.RECONNECT_MAX,
) -> AsyncGenerator[dict[str, Any], None]:
    """Every record of a follow stream, across hub restarts: yields until ``idle``.

    On a lost connection or a hub ``shutdown`` it finds or starts the hub again on a 1 s → 30 s
    ladder and resumes with the last revision it saw (events, heartbeats and resets move it).
    ``board_token`` may be a ``TokenSource``, read before every connect: after an ``error
    UNAUTHORIZED`` (yielded like any record) it reconnects at once when the token has changed
    since (a rotation). A fatal ``error`` otherwise raises ``HubError``.
    """
    read_token: TokenSource = board_token if callable(board_token) else (lambda: board_token)
    cursor = after
    history = CursorBoard()
    ladder = Backoff(reconnect_min, reconnect_max)
    report = on_state or (lambda state: None)
    report("starting")
    while True:
        session: HubSession | None = None
        problem: str | None = None
        at_once = False
        token = read_token()
        if not token:
            raise HubError(hp.UNAUTHORIZED, "no board token: set TASKLOOM_TOKEN or pass --token-file FILE")
        try:
            try:
                address = await find_or_start(board_url, token, runtime=runtime, environ=environ)
            except BoardUnauthorized:
                if read_token() in (None, token):
                    raise
                raise HubUnavailable("the board refused the token the hub was started with; it has changed since") from None
            session = await HubSession.connect(address)
            history.opened(session)
            await session.send(history.follow(after=cursor, idle_ms=idle_ms))
            while (record := await session.receive()) is not None:
                history.saw(record)
                kind = record.get("type")
                if kind == "open":
                    ladder.reset()
                    report("streaming")
                elif kind in ("event", "heartbeat", "reset") and isinstance(record.get("revision"), int):
                    cursor = record["revision"]
                yield record
                if kind in _TERMINAL:
                    return
                if kind == "error":
                    if record.get("code") == hp.UNAUTHORIZED and read_token() not in (None, token):
                        at_once = True  # the hub's board refused the old token; the new one keys another hub
                        break
                    raise HubError(str(record.get("code")), str(record.get("message")))
                if kind == "shutdown":
                    at_once = True  # the hub is going away on purpose: start the next one at once
                    break
        except (TimeoutError, OSError, HubUnavailable, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        finally:
            if session is not None:
                session.close()
        if at_once:
            ladder.reset()
        delay = 0.0 if at_once else ladder.next()
        if problem is not None and on_problem is not None:
            on_problem(f"{problem}; retrying in {delay:g} s")
        report("reconnecting")
        await asyncio.sleep(delay)


# -- card-brief registrations (SPEC §7.4) ----------------------------------------------------

#: How long a ``watch`` may take to be answered: it renders and writes every card first, seconds.
WATCH_ANSWER_TIMEOUT = 120.0
#: Records after which a foreground watch stream is over.
WATCH_TERMINAL = frozenset({"done", "ttl", "shutdown", "error"})


async def request_once(
    board_url: str,
    board_token: str,
    message: dict[str, Any],
    *,
    runtime: Path | None = None,
    environ: Mapping[str, str] | None = None,
    timeout: float = WATCH_ANSWER_TIMEOUT,
) -> dict[str, Any]:
    """Find or start the hub, send one request (``watch`` with ``detach``, ``watch-status``,
    ``watch-stop``) and return its answer (an ``error`` record is returned, not raised)."""
    address = await find_or_start(board_url, board_token, runtime=runtime, environ=environ)
    session = await HubSession.connect(address)
    try:
        return await session.request(message, timeout=timeout)
    finally:
        session.close()


async def watch_stream(
    board_url: str,
    board_token: str | TokenSource,
    message: dict[str, Any],
    *,
    runtime: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """A foreground ``watch``: every record until ``done``, ``ttl``, ``shutdown`` or ``error``.

    The registration belongs to this session (SPEC §7.4): it ends when the iterator is closed.
    A hub that goes away without a last record raises ``ConnectionError``. With a
    ``TokenSource``, an ``error UNAUTHORIZED`` (the hub's board refused its token) after which
    the token reads differently is not the end: the watch is sent again to the hub keyed by the
    new token, which answers ``registered`` again and rewrites the snapshots.
    """
    read_token: TokenSource = board_token if callable(board_token) else (lambda: board_token)
    token = read_token() or ""
    while True:
        address = await find_or_start(board_url, token, runtime=runtime, environ=environ)
        session = await HubSession.connect(address)
        try:
            await session.send(message)
            record = await asyncio.wait_for(session.receive(), WATCH_ANSWER_TIMEOUT)
            while record is not None:
                if record.get("type") == "error" and record.get("code") == hp.UNAUTHORIZED:
                    fresh = read_token()
                    if fresh and fresh != token:
                        token = fresh
                        break  # rotated: register again where the new token leads
                yield record
                if record.get("type") in WATCH_TERMINAL:
                    return
                record = await session.receive()
            else:
                raise ConnectionError("the hub closed the watch session without a last record")
        finally:
            session.close()
