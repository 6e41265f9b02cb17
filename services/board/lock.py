"""The data-directory lock: one board per data directory, held for the board's whole life.

Two boards on one SQLite file would each think they own the pointer, the token and the stream,
and the second's exit would remove the first's pointer. The lock is two ``flock``s, so the
kernel releases them when the holder dies (SIGKILL included) and a dead board never blocks a
restart:

- on the **data directory itself** (an ``O_RDONLY`` descriptor of it; Linux and the BSDs, macOS
  among them, lock any vnode). A name inside the directory can be removed; the directory cannot
  while it holds the database, so deleting a file never frees it.
- on **``board.lock``**, which names the holder's pid and, once it listens, its URL: what a
  second ``taskd serve`` reports before it exits, having changed nothing. (It is also the whole
  lock of older boards, which never lock the directory.) After the ``flock`` the name is checked
  to still be the inode locked, else the lock is taken again: a file unlinked between our
  ``open`` and our ``flock`` would otherwise be a lock on nothing.

While the board runs a thread checks every ``CHECK_INTERVAL`` that ``board.lock`` still names
the inode it holds. When the name is gone or another file (a cleanup script, ``git clean``, a
tmp reaper), it logs ``data_dir_lock_replaced`` at error level and writes a fresh ``board.lock``
naming this board again; the directory lock kept the data directory this board's meanwhile.
Our own code never unlinks the file: removing a file someone is about to lock would let two
processes each lock a different inode.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from typing import Any, Final

import structlog

from .process import lock_file, try_flock

LOCK_FILE: Final = "board.lock"
#: Seconds between checks that ``board.lock`` still names the inode this board holds.
CHECK_INTERVAL: Final = 5.0
#: A name replaced this many times in a row between our ``flock`` and our ``stat`` is not ours to win.
LOCK_ATTEMPTS: Final = 10
#: What ``flock`` answers on a file system that cannot lock a directory (the file lock then stands alone).
_NO_DIRECTORY_LOCKS: Final = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EISDIR, errno.ENOLCK})

log = structlog.get_logger("taskd.lock")


class DataDirBusy(RuntimeError):
    """Another live board holds the data directory."""

    def __init__(self, data_dir: Path, holder: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.pid = holder.get("pid")
        self.url = holder.get("url")
        if self.pid:
            where = f"pid {self.pid}" + (f", {self.url}" if self.url else ", still starting")
        else:  # board.lock was just removed: the holder names itself again within CHECK_INTERVAL
            where = "pid unknown: its board.lock is missing"
        super().__init__(
            f"another board ({where}) already serves {data_dir}; stop it first or choose another --data-dir"
        )


class DataDirLock:
    """The ``flock``s on ``<data_dir>`` and ``<data_dir>/board.lock``; the holder names itself in the file."""

    def __init__(self, path: Path, fd: int, directory_fd: int | None) -> None:
        self.path = path
        self.fd = fd
        self.directory_fd = directory_fd
        self.url: str | None = None
        self._guard = threading.Lock()  # the watch thread may swap ``fd`` under a ``stamp``
        self._stopped = threading.Event()
        self._watch: threading.Thread | None = None

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock without waiting; :class:`DataDirBusy` when a live board holds it."""
        path = data_dir / LOCK_FILE
        directory_fd = _lock_directory(data_dir)
        if directory_fd == -1:
            raise DataDirBusy(data_dir, _read(path))
        try:
            fd = _lock_named(path)
        except BaseException:
            _close(directory_fd)
            raise
        if fd is None:
            _close(directory_fd)
            raise DataDirBusy(data_dir, _read(path))
        lock = cls(path, fd, directory_fd)
        lock.stamp(url=None)
        lock._watch = threading.Thread(target=lock._watch_name, name="data-dir-lock", daemon=True)
        lock._watch.start()
        return lock

    def stamp(self, *, url: str | None) -> None:
        """Name this process (and, once it listens, its URL) for a board that finds the lock held."""
        with self._guard:
            self.url = url
            _write_record(self.fd, url)

    def check(self) -> bool:
        """Whether ``board.lock`` still names the inode we hold; if not, put a fresh one there."""
        with self._guard:
            if self.fd < 0 or _names(self.path, self.fd):
                return True
            replacement = _lock_named(self.path)
            if replacement is None:
                # Only a board that locks the file alone (an older one) gets here past our directory lock.
                log.error("data_dir_lock_replaced", path=str(self.path), holder=_read(self.path),
                          hint="another board serves this data directory too: stop it")
                return False
            os.close(self.fd)
            self.fd = replacement
            _write_record(self.fd, self.url)
        log.error("data_dir_lock_replaced", path=str(self.path), recreated=True,
                  locked_directory=self.directory_fd is not None,
                  hint="something removed or replaced board.lock while this board ran; it names this board "
                       "again. Keep cleanup scripts out of the data directory")
        return False

    def release(self) -> None:
        self._stopped.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join()
        with self._guard:
            if self.fd >= 0:
                os.close(self.fd)  # closing our only descriptor drops the flock
                self.fd = -1
            _close(self.directory_fd)
            self.directory_fd = None

    def _watch_name(self) -> None:
        while not self._stopped.wait(CHECK_INTERVAL):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a failed check is reported, and the next one runs
                log.exception("data_dir_lock_check_failed", path=str(self.path))


def _lock_directory(data_dir: Path) -> int | None:
    """A locked descriptor of the directory; -1 when another holder has it; None when this file
    system cannot lock a directory (or there is no ``O_DIRECTORY``)."""
    if not hasattr(os, "O_DIRECTORY"):  # pragma: no cover - Windows: no directory descriptors
        return None
    fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if try_flock(fd):
            return fd
    except OSError as exc:
        os.close(fd)
        if exc.errno in _NO_DIRECTORY_LOCKS:
            return None
        raise
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return -1


def _lock_named(path: Path) -> int | None:
    """``lock_file(path)``, taken again while the name stops naming the inode just locked."""
    for _ in range(LOCK_ATTEMPTS):
        fd = lock_file(path)
        if fd is None or _names(path, fd):
            return fd
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} was replaced {LOCK_ATTEMPTS} times while it was being locked", str(path))


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` is the file open as ``fd`` (same device and inode)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _write_record(fd: int, url: str | None) -> None:
    data = json.dumps({"pid": os.getpid(), "url": url}).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _close(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        os.close(fd)


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as holder:
            record = json.loads(holder.read(4096) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
