"""Real small disks for the tests of full and read-only file systems: a size-limited tmpfs,
filled until the kernel answers ENOSPC, or remounted read-only.

Mounting needs root (or CAP_SYS_ADMIN), which the test suite has here and in CI. A test that
cannot mount fails, loudly: it never skips and never falls back to a pretend disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a {size} tmpfs at {where}: {done.stderr.strip() or done.returncode}. "
            "The disk-full tests need root or CAP_SYS_ADMIN (run the suite as root, or in a container "
            "started with --cap-add SYS_ADMIN); they do not skip."
        )


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A fresh, empty tmpfs of ``size`` at ``where``; unmounted (lazily, if a process still holds
    it) on the way out."""
    mount_tmpfs(where, size)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount(disk: Path, mode: str) -> None:
    """Make ``disk`` read-only (``"ro"``) or writable again (``"rw"``)."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(disk)], check=True, capture_output=True)


def fill(disk: Path) -> Path:
    """Write to ``disk`` until the kernel refuses with ENOSPC, down to the last byte."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            chunk = b"\0" * size
            try:
                while os.write(fd, chunk):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler
