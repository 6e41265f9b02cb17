"""The hub's files in the runtime directory: pointer, owner lock, log (SPEC §7.1).

- ``hub-<key>.json``: where the running hub listens and its per-process token (0600).
- ``hub-<key>.lock``: the owner lock. Its holder is the one process allowed to start or be the
  hub for this key. It is an ``flock`` on the file, so the kernel releases it when the holder
  dies: a lock "held" by a dead starter is simply free. The file also names the holder's pid,
  which is what ``--stop`` and generation replacement compare with the pointer's pid.
  A starter takes the lock, spawns the hub with the locked descriptor inherited, and the hub
  keeps holding it for its whole life. The file is never unlinked: removing a file someone is
  about to lock would let two processes each lock a different inode.
- ``hub-<key>.log``: structlog JSON lines.
- ``hub-<key>.registrations.json``: detached card-brief registrations (SPEC §7.4).

The pointer and the lock name a pid that ``--stop`` signals and a port a client sends its proof
to, so they are believed only as this uid's own files in a directory of this uid that nobody else
may write (:func:`read_own_json`): the runtime directory is whatever ``TASKLOOM_RUNTIME_DIR``
says, and another user may create ``/tmp/x`` before it is named there (docs/security.md).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import ensure_private_dir, write_atomic
from .process import lock_file, try_flock
from .process import pid_alive as pid_alive  # where the hub's callers have always found it


@dataclass(frozen=True)
class HubFiles:
    runtime: Path
    key: str

    @property
    def pointer(self) -> Path:
        return self.runtime / f"hub-{self.key}.json"

    @property
    def lock(self) -> Path:
        return self.runtime / f"hub-{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.runtime / f"hub-{self.key}.log"

    @property
    def registrations(self) -> Path:
        return self.runtime / f"hub-{self.key}.registrations.json"


def write_json_atomic(path: Path, record: dict[str, Any]) -> None:
    """Write owner-only through a temp file and rename, so readers never see half a record."""
    ensure_private_dir(path.parent)
    write_atomic(path, (json.dumps(record, indent=2) + "\n").encode())


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file, or None if it is missing or unreadable (a crash mid-write, or
    nesting deeper than the parser's recursion allows)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


#: Mode bits that let another user change a file, or a directory's entries.
GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _ours_alone(info: os.stat_result) -> bool:
    """Whether this uid owns what ``info`` describes and no other user may change it."""
    if not hasattr(os, "geteuid"):
        return True  # pragma: no cover - Windows: the ACLs of the profile directory decide
    return info.st_uid == os.geteuid() and not info.st_mode & GROUP_OTHER_WRITE


def read_own_json(path: Path) -> dict[str, Any] | None:
    """:func:`read_json` of a regular file (not a link) that this uid owns and nobody else may
    write, in a directory likewise; None for anything else, as for a missing file."""
    try:
        if not _ours_alone(os.stat(path.parent)):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _ours_alone(info):
            return None
        with os.fdopen(fd, encoding="utf-8", closefd=False) as handle:
            record = json.loads(handle.read())
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None


def read_pointer(files: HubFiles) -> dict[str, Any] | None:
    record = read_own_json(files.pointer)
    if record is None or not isinstance(record.get("pid"), int) or not isinstance(record.get("port"), int):
        return None
    return record


def remove_pointer_if_mine(files: HubFiles, pid: int) -> None:
    """A newer hub may have replaced the pointer while this one was stopping: leave that one be."""
    record = read_json(files.pointer)
    if record is not None and record.get("pid") == pid:
        files.pointer.unlink(missing_ok=True)


def process_of_ours(pid: object) -> bool:
    """Whether ``pid`` is a live process of this user: only such a pointer can name our hub.

    A hub that was killed leaves its pointer, and its pid may be reused by another user's process.
    """
    if not pid_alive(pid):
        return False
    assert isinstance(pid, int)
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        if os.path.isdir("/proc/self"):
            return False  # gone since
    # No procfs (macOS): kill(0) tells another user's process by refusing.
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False  # the kernel says it is another user's (root may signal anyone, so is not told)
    except OSError:
        return False
    return True


def read_lock_pid(files: HubFiles) -> int | None:
    """The pid the lock file names (its holder, if that process still holds it)."""
    record = read_own_json(files.lock)
    pid = record.get("pid") if record else None
    return pid if isinstance(pid, int) else None


class OwnerLock:
    """The ``flock`` on ``hub-<key>.lock``; the holder writes its pid (and role) into the file."""

    def __init__(self, files: HubFiles, fd: int, *, previous_pid: int | None = None) -> None:
        self.files = files
        self.fd = fd
        #: The pid the file named before we took it (a dead starter, an older hub…).
        self.previous_pid = previous_pid

    @classmethod
    def try_acquire(cls, files: HubFiles, *, role: str) -> OwnerLock | None:
        """Take the lock without waiting; None when a live process holds it."""
        ensure_private_dir(files.runtime)
        fd = lock_file(files.lock)
        if fd is None:
            return None
        lock = cls(files, fd, previous_pid=read_lock_pid(files))
        lock.stamp(os.getpid(), role=role)
        return lock

    @classmethod
    def inherit(cls, files: HubFiles, fd: int) -> OwnerLock:
        """Adopt a descriptor a starter locked and passed down; the flock came with it."""
        os.set_inheritable(fd, False)
        # A non-blocking re-lock of our own open file description succeeds only if we hold it.
        if not try_flock(fd):
            raise OSError(errno.EWOULDBLOCK, f"descriptor {fd} does not hold {files.lock}")
        lock = cls(files, fd)
        lock.stamp(os.getpid(), role="hub")
        return lock

    def stamp(self, pid: int, *, role: str) -> None:
        data = json.dumps({"pid": pid, "role": role, "since": time.time()}).encode() + b"\n"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        """Close our descriptor; the flock goes once no process holds the description open."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
