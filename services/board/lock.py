"""``<data_dir>/board.lock``: one board per data directory, held for the board's whole life.

Two boards on one SQLite file would each think they own the pointer, the token and the stream,
and the second's exit would remove the first's pointer. The lock is an ``flock`` on the file,
so the kernel releases it when the holder dies (SIGKILL included): a file left by a dead board
never blocks a restart. The file names the holder's pid and, once it listens, its URL; that is
what a second ``taskd serve`` on the same directory reports before it exits, having changed
nothing. The file is never unlinked: removing a file someone is about to lock would let two
processes each lock a different inode.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Final

from .files import open_private

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the data-dir lock needs a msvcrt port
    fcntl = None  # type: ignore[assignment]

LOCK_FILE: Final = "board.lock"


class DataDirBusy(RuntimeError):
    """Another live board holds the data directory."""

    def __init__(self, data_dir: Path, holder: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.pid = holder.get("pid")
        self.url = holder.get("url")
        where = f"pid {self.pid}" if self.pid else "pid unknown"
        where += f", {self.url}" if self.url else ", still starting"
        super().__init__(
            f"another board ({where}) already serves {data_dir}; stop it first or choose another --data-dir"
        )


class DataDirLock:
    """The ``flock`` on ``<data_dir>/board.lock``; the holder writes its pid and URL into it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock without waiting; :class:`DataDirBusy` when a live board holds it."""
        path = data_dir / LOCK_FILE
        fd = open_private(path, os.O_RDWR)
        if fcntl is None:  # pragma: no cover
            return cls(path, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirBusy(data_dir, holder) from None
            raise
        lock = cls(path, fd)
        lock.stamp(url=None)
        return lock

    def stamp(self, *, url: str | None) -> None:
        """Name this process (and, once it listens, its URL) for a board that finds the lock held."""
        data = json.dumps({"pid": os.getpid(), "url": url}).encode() + b"\n"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing our only descriptor drops the flock
            self.fd = -1


def _read(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
