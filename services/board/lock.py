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

import json
import os
from pathlib import Path
from typing import Any, Final

from .process import lock_file

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
        fd = lock_file(path)
        if fd is None:
            raise DataDirBusy(data_dir, _read(path))
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


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as holder:
            record = json.loads(holder.read(4096) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
