"""The hub's file plumbing: owner-only files and directories, replaced atomically.

One of three deliberate copies (``services/board``, ``services/hub``, ``services/subscriber``):
the services share only ``shared/``, which does no I/O (SPEC §2). ``tests/unit/test_atomic_files.py``
runs one suite against every copy and fails when their code drifts apart.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Final

#: Whatever the process creates is owner-only: no group or other bits (docs/security.md).
PRIVATE_UMASK: Final = 0o077
PRIVATE_FILE: Final = 0o600
PRIVATE_DIR: Final = 0o700


class NotOwned(RuntimeError):
    """A file or directory we would use belongs to another user: refuse rather than trust it."""


def restrict_umask() -> int:
    """Make every file and directory this process creates from now on owner-only.

    Returns the umask the process started with, for children that should get it back.
    """
    inherited = os.umask(PRIVATE_UMASK)
    os.umask(inherited | PRIVATE_UMASK)
    return inherited


def tighten(path: Path) -> bool:
    """Drop the group and other bits of ``path`` if it exists; True if its mode changed.

    Raises :class:`NotOwned` when another user owns it: we could not tighten it, and a file
    someone else controls is not ours to trust.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    if info.st_uid != os.geteuid():
        raise NotOwned(
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}); "
            "refusing to use it (chown it or choose another directory)"
        )
    mode = stat.S_IMODE(info.st_mode)
    if not mode & PRIVATE_UMASK:
        return False
    os.chmod(path, mode & ~PRIVATE_UMASK)
    return True


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (0700) or tighten an existing one; refuse one another user owns."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    tighten(path)


def open_private(path: Path, flags: int) -> int:
    """Open ``path``, creating it 0600; an existing file of ours is forced to 0600 too."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise NotOwned(f"{path} belongs to another user; refusing to use it")
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


class NotARegularFile(OSError):
    """What is in a file's place is not one we read: a FIFO, a device, a directory, or too big."""


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` (a symlink is followed) when it is a regular file of at most
    ``limit`` bytes; else :class:`NotARegularFile` (an ``OSError``), as for any file we cannot read.

    For files another process writes and this one only reads: a FIFO in their place would block
    the reader for ever (the open is O_NONBLOCK, which a regular file ignores), and ``/dev/zero``
    or a huge file would be read until memory ran out.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(f"{path} is not a regular file")
        if info.st_size > limit:
            raise NotARegularFile(f"{path} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise NotARegularFile(f"{path} is larger than {limit} bytes")  # it grew meanwhile
    finally:
        os.close(fd)
    return b"".join(chunks)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); Windows cannot open a directory."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a file another writer (SQLite's backup, say) has finished to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: Path, *, mode: int = PRIVATE_FILE) -> Iterator[BinaryIO]:
    """Write ``path`` through a handle: a unique temp file beside it, fsync, rename, fsync the directory.

    For output produced piece by piece (an export, an archive); a reader sees the old bytes or
    the new ones, never half a file. An exception inside the block leaves the target untouched
    and no temp file behind; a crash at most one (``.<name>.*.tmp``), never a torn target.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_atomic(path: Path, data: bytes, *, mode: int = PRIVATE_FILE) -> None:
    """Replace ``path`` with ``data`` atomically (:func:`atomic_writer`)."""
    with atomic_writer(path, mode=mode) as handle:
        handle.write(data)


def move_atomic(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target`` in one step (same file system), then fsync the directory."""
    os.replace(source, target)
    fsync_directory(Path(target).parent)
