"""The subscriber's process plumbing: liveness, file locks, logging, signals, the reconnect ladder.

The three services may not import each other (SPEC §2), so ``services/{board,hub,subscriber}/
process.py`` are deliberate copies, checked equal apart from this docstring by
``tests/unit/test_process_plumbing.py``; ``taskctl`` imports them. ``asyncio`` and ``structlog``
are imported where they are used, so ``taskctl``'s start does not pay for them.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO

from shared.hub_protocol import RECONNECT_MAX, RECONNECT_MIN

from .files import open_private

if TYPE_CHECKING:
    import asyncio

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; a lock is then always free
    fcntl = None  # type: ignore[assignment]

#: The signals that stop the process; the first gracefully, a second takes the forced path
#: (uvicorn's ``HANDLED_SIGNALS``).
HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: The exit status of a forced stop: 128 + SIGINT, what a shell reports after a Ctrl-C.
FORCED_EXIT: Final = 128 + signal.SIGINT
#: What ``flock`` answers when another open file description holds the lock.
_HELD: Final = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})
#: proc(5) states of a process that has ended but not been reaped yet.
_DEAD_STATES: Final = frozenset({"Z", "X"})


# -- liveness -----------------------------------------------------------------------------------


def pid_alive(pid: object) -> bool:
    """Whether ``pid`` names a running process (a zombie waiting to be reaped counts as dead)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and not ours to signal
    except (OSError, OverflowError):
        # OverflowError: too big for a pid_t (a pid read from a file someone else wrote names
        # no process, and must not crash the reader).
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): kill(0) is the best answer there is
    # The state letter follows the parenthesised command name, which may itself hold spaces.
    return stat.rpartition(")")[2].split()[0] not in _DEAD_STATES


# -- file locks ---------------------------------------------------------------------------------


def try_flock(fd: int, *, wait: bool = False) -> bool:
    """An exclusive ``flock`` on ``fd``: True once held, False when another holder has it (only
    without ``wait``). The kernel drops it when the last descriptor of the description closes,
    the holder's death included."""
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if not wait and exc.errno in _HELD:
            return False
        raise
    return True


def lock_file(path: Path, *, wait: bool = False) -> int | None:
    """Open ``path`` (created 0600, ours) and lock it: the descriptor, or None when it is held.

    The file is never unlinked by its holders: removing a file someone is about to lock would let
    two processes each lock a different inode.
    """
    fd = open_private(path, os.O_RDWR)
    try:
        if try_flock(fd, wait=wait):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


# -- logging ------------------------------------------------------------------------------------


def configure_logging(
    stream: TextIO | None = None,
    *,
    json: bool | None = None,
    secret: str = "",
    level: int = logging.INFO,
) -> None:
    """structlog lines on ``stream`` (stderr): JSON when it is not a TTY (journald friendly),
    console lines on one. ``secret`` is scrubbed from every line as a last line of defence."""
    import structlog

    out = sys.stderr if stream is None else stream
    if json is None:
        try:
            json = not out.isatty()
        except (AttributeError, ValueError):
            json = True
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)

    def render(logger: Any, method: str, event: MutableMapping[str, Any]) -> str:
        # Scrubbed after rendering, so the secret is caught in whichever field it hid.
        line: str = renderer(logger, method, event)
        return line.replace(secret, "[redacted]") if secret else line

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


# -- signals ------------------------------------------------------------------------------------


class ShutdownSignals:
    """``HANDLED_SIGNALS`` on the running loop: the first calls ``stop`` and sets ``requested``;
    any later one calls ``force`` (uvicorn's ``handle_exit``: a second Ctrl-C forces exit)."""

    def __init__(self, *, stop: Callable[[], None] | None = None, force: Callable[[], None]) -> None:
        import asyncio

        self._stop = stop
        self._force = force
        self.requested = asyncio.Event()
        self.received: list[signal.Signals] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed: list[signal.Signals] = []

    def install(self) -> ShutdownSignals:
        """Wire the handlers on the running loop (before anything names this pid to others)."""
        import asyncio

        self._loop = asyncio.get_running_loop()
        for sig in HANDLED_SIGNALS:
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - no signals here
                continue
            self._installed.append(sig)
        return self

    def remove(self) -> None:
        if self._loop is not None:
            for sig in self._installed:
                self._loop.remove_signal_handler(sig)
        self._installed.clear()

    def __enter__(self) -> ShutdownSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @property
    def forced(self) -> bool:
        return len(self.received) > 1

    def _on_signal(self, sig: signal.Signals) -> None:
        self.received.append(sig)
        if len(self.received) > 1:
            self._force()
            return
        self.requested.set()
        if self._stop is not None:
            self._stop()


def exit_forced(*cleanups: Callable[[], object]) -> NoReturn:
    """The forced path: each cleanup (close the listeners, remove our pointer) runs, whatever the
    others did, then the process ends with ``FORCED_EXIT`` without waiting for anything else."""
    for cleanup in cleanups:
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - a failed cleanup must not keep the process alive
            pass
    for out in (sys.stdout, sys.stderr):
        try:
            out.flush()
        except (OSError, ValueError):
            pass
    os._exit(FORCED_EXIT)  # not SystemExit: that would unwind through the graceful path's awaits


# -- the reconnect ladder -----------------------------------------------------------------------


class Backoff:
    """The reconnect ladder: ``first`` doubling to ``most`` (SPEC §7.2, §9: 1 s doubling to 30 s);
    ``reset`` once a connection opened, so the next failure waits ``first`` again."""

    def __init__(self, first: float = RECONNECT_MIN, most: float = RECONNECT_MAX) -> None:
        if first <= 0 or most < first:
            raise ValueError("the ladder needs 0 < first <= most")
        self.first = first
        self.most = most
        self._next = first

    def next(self) -> float:
        """The wait before the next attempt; the one after it doubles, up to ``most``."""
        delay = self._next
        self._next = min(delay * 2, self.most)
        return delay

    def reset(self) -> None:
        self._next = self.first
