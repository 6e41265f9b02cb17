"""Running one continue turn: the resident-pool check, the continue lock, the ``--on-wake`` command.

Files in the loop's state directory (shared with the agent supervisor):

- ``sessions.state.json`` — the supervisor's resident session pool, written by the supervisor::

      {"version": 1, "sessions": [{"pid": 4242, "agent": "worker-1", "session_id": "…"}]}

  Only ``sessions[].pid`` is read; other keys are the supervisor's own. The pool is live when at
  least one of those pids is a running process. A missing, unreadable or differently shaped file
  is no pool: the turn is logged and skipped (SPEC §9), since with nobody to dispatch to a turn
  could do nothing and the supervisor's own continue clock remains the patrol path.
- ``continue.lock`` — an advisory ``flock`` the supervisor holds while it runs a continue turn of
  its own. The subscriber takes it without waiting; if it is held, the turn is refused and the
  coalescer retries it (5 s later by default). The subscriber holds it for the whole of its
  command and releases it when the command exits; the command does not inherit the descriptor
  (a daemon it leaves behind would otherwise hold the lock for ever), so it must not take
  ``continue.lock`` itself.

The command runs through the shell (``/bin/sh -c``) in a session of its own, with the wake in its
environment: ``TASKLOOM_WAKE_REVISION`` (the highest revision the turn covers) and
``TASKLOOM_WAKE_EVENTS`` (comma list of distinct event names, oldest first; ``reset`` when the hub
could not replay a gap and the supervisor should rescan everything).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .coalesce import Turn
from .files import NotOwned, read_small_file
from .process import lock_file, pid_alive

SESSIONS_FILE: Final = "sessions.state.json"
#: The largest pool file read: a pool lists a handful of sessions; more is not the supervisor's.
MAX_POOL_BYTES: Final = 1 << 20
CONTINUE_LOCK: Final = "continue.lock"
WAKE_REVISION_ENV: Final = "TASKLOOM_WAKE_REVISION"
WAKE_EVENTS_ENV: Final = "TASKLOOM_WAKE_EVENTS"
#: After SIGTERM, how long a turn's process group gets before SIGKILL, seconds.
KILL_GRACE: Final = 3.0

RAN: Final = "ran"
REFUSED: Final = "refused"
SKIPPED: Final = "skipped"


@dataclass(frozen=True, slots=True)
class Pool:
    """The resident pool as read from ``sessions.state.json``: live pids, or why there are none."""

    live: tuple[int, ...]
    reason: str  # ``live``, ``missing``, ``unreadable``, ``malformed``, ``empty``, ``dead``

    def __bool__(self) -> bool:
        return bool(self.live)


def read_pool(state_dir: Path) -> Pool:
    """The live pids ``<state_dir>/sessions.state.json`` lists.

    The file is the supervisor's, and whatever is in its place is read without trusting it: only
    a regular file (a symlink to one is followed) of at most ``MAX_POOL_BYTES``, opened without
    blocking, so a FIFO, a device (``/dev/zero``) or a huge file is ``unreadable`` at once rather
    than a subscriber that hangs in the event loop or reads until the OOM killer comes.
    """
    path = state_dir / SESSIONS_FILE
    try:
        data = read_small_file(path, MAX_POOL_BYTES)
    except FileNotFoundError:
        return Pool((), "missing")
    except OSError:
        return Pool((), "unreadable")
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        # A supervisor mid-write without a rename, garbage, or nesting deeper than the parser goes.
        return Pool((), "unreadable")
    sessions = record.get("sessions") if isinstance(record, dict) else None
    if not isinstance(sessions, list):
        return Pool((), "malformed")
    listed = [entry.get("pid") for entry in sessions if isinstance(entry, dict)]
    pids = [pid for pid in listed if isinstance(pid, int) and not isinstance(pid, bool)]
    if not pids:
        return Pool((), "empty")
    live = tuple(pid for pid in pids if pid_alive(pid))
    return Pool(live, "live" if live else "dead")


def waiting_for(state_dir: Path) -> dict[str, str] | None:
    """``{file, reason}`` while ``state_dir`` lists no live resident pool (a turn would be skipped), else None.

    The subscriber says it at start and publishes it; ``taskctl loop status`` reads it afresh.
    """
    pool = read_pool(state_dir)
    return None if pool else {"file": str(state_dir / SESSIONS_FILE), "reason": pool.reason}


class ContinueLock:
    """The supervisor's ``continue.lock``, taken without waiting and held for one turn."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @classmethod
    def try_take(cls, path: Path) -> ContinueLock | None:
        """The lock, or None when another process holds it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = lock_file(path)
        return None if fd is None else cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing our only descriptor drops the flock
            self._fd = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What became of a turn. ``started`` is on the caller's monotonic clock (None unless ran)."""

    outcome: str  # ran | refused | skipped
    reason: str
    started: float | None = None
    exit_code: int | None = None
    seconds: float | None = None


def wake_environment(turn: Turn, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env[WAKE_REVISION_ENV] = str(turn.revision)
    env[WAKE_EVENTS_ENV] = ",".join(turn.events)
    return env


class TurnRunner:
    """Runs ``command`` as a continue turn, one at a time, and can stop the one that runs."""

    def __init__(
        self,
        command: str,
        state_dir: Path,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] | None = None,
        umask: int | None = None,
    ) -> None:
        self.command = command
        self.state_dir = state_dir
        #: The umask the command runs with (the subscriber's own is owner-only); None inherits it.
        self.umask = umask
        self._environ = environ
        self._clock = clock
        self._process: asyncio.subprocess.Process | None = None
        self._holding = False

    def _shell_command(self) -> str:
        """The command, given back the umask the subscriber started with: uvloop's spawn takes no
        ``umask``, and a ``preexec_fn`` is not safe in a process with threads."""
        if self.umask is None:
            return self.command
        return f"umask {self.umask:04o}\n{self.command}"

    @property
    def running(self) -> bool:
        """True from taking the continue lock until it is let go again."""
        return self._holding

    async def run(self, turn: Turn, *, on_start: Callable[[Turn, float], Any] | None = None) -> TurnResult:
        """Check the pool, take the lock, run the command to its end; never raises for the command."""
        pool = read_pool(self.state_dir)
        if not pool:
            return TurnResult(SKIPPED, f"no live resident pool ({pool.reason})")
        path = self.state_dir / CONTINUE_LOCK
        try:
            lock = ContinueLock.try_take(path)
        except (OSError, NotOwned) as exc:
            # A directory in its place, a full or read-only disk that cannot create it, another
            # user's file: no lock means no turn, but the wake must survive it, so this is a
            # refusal (retried, the wakes kept), not an error that ends the subscriber.
            return TurnResult(REFUSED, f"continue.lock cannot be opened ({path}): {exc}")
        if lock is None:
            return TurnResult(REFUSED, "continue.lock is held")
        clock = self._clock or asyncio.get_running_loop().time
        self._holding = True
        try:
            started = clock()
            env = wake_environment(turn, os.environ if self._environ is None else self._environ)
            try:
                self._process = await asyncio.create_subprocess_shell(
                    self._shell_command(), env=env, stdin=asyncio.subprocess.DEVNULL, start_new_session=True
                )
            except OSError as exc:
                # Counted as run: a command that cannot start must not be retried in a hot loop.
                return TurnResult(RAN, f"the command did not start: {exc}", started, None, clock() - started)
            if on_start is not None:
                on_start(turn, started)
            code = await self._process.wait()
            return TurnResult(RAN, "exited", started, code, clock() - started)
        finally:
            self._process = None
            lock.release()
            self._holding = False

    async def stop(self, *, grace: float = KILL_GRACE) -> None:
        """SIGTERM the running command's process group, SIGKILL after ``grace``; wait for it."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        self._signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            self._signal_group(process.pid, signal.SIGKILL)
            await process.wait()

    @staticmethod
    def _signal_group(pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)  # the command leads its own session, so its pid is its group id
        except (ProcessLookupError, PermissionError):
            pass
