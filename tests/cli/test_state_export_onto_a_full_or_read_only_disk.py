"""Fixed: ``taskctl export state --out FILE`` onto a full disk said ``BOARD_UNREACHABLE: the
export from http://… broke off: [Errno 28] No space left on device`` with the hint "run it
again", blaming a board that was fine; into a directory on a read-only file system it said
``INTERNAL: taskctl failed: OSError: …`` as if taskctl had a bug. The file's own writes were
inside the handler meant for the board's reads.

Expected: ``VALIDATION_FAILED: cannot write the export to FILE: no space left on device`` (or
``read-only file system``), saying nothing was written, and no file or temp file left.

Mounting needs root (or CAP_SYS_ADMIN): tests/support/disks.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.board import TaskdProcess
from tests.support.disks import fill, remount, tmpfs

from .conftest import Taskctl


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh 1 MiB tmpfs for the export file."""
    with tmpfs(tmp_path / "exports", "1m") as where:
        yield where


def seed(taskctl: Taskctl) -> None:
    taskctl.ok("project", "create", "demo")
    taskctl.ok("task", "create", "--project", "demo", "A card worth moving")


def test_an_export_onto_a_full_disk_names_the_file_and_the_full_disk(
    taskd: TaskdProcess, taskctl: Taskctl, disk: Path
) -> None:
    seed(taskctl)
    filler = fill(disk)
    out = disk / "state.jsonl"
    run = taskctl.refused("VALIDATION_FAILED", "export", "state", "--out", str(out))
    assert f"cannot write the export to {out}: no space left on device" in run.stderr, run
    assert "nothing was written" in run.stderr and "BOARD_UNREACHABLE" not in run.stderr, run
    assert sorted(disk.iterdir()) == [filler]


def test_an_export_into_a_read_only_directory_names_the_file(taskd: TaskdProcess, taskctl: Taskctl, disk: Path) -> None:
    seed(taskctl)
    remount(disk, "ro")
    out = disk / "state.jsonl"
    run = taskctl.refused("VALIDATION_FAILED", "export", "state", "--out", str(out))
    assert f"cannot write the export to {out}: read-only file system" in run.stderr, run
    assert "INTERNAL" not in run.stderr, run
    assert list(disk.iterdir()) == []
