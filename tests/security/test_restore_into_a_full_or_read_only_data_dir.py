"""Fixed: ``taskd restore FILE --data-dir DIR`` into a data directory on a read-only file system
died with a Python traceback (``OSError: [Errno 30] Read-only file system: …/board.lock``): the
lock it takes first was opened outside the errors it answers in one line. On a full disk it said
only ``Error: database or disk is full; nothing was changed``, naming neither the disk nor the
directory (the backup file's, or the board's?).

Expected: one line, exit 1, naming the data directory and the problem, saying nothing was
changed; the board's database is as it was, and serves its old state once the disk is writable.

Mounting needs root (or CAP_SYS_ADMIN): tests/support/disks.py.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.board import TaskdProcess, taskd_restore
from tests.support.disks import fill, remount, tmpfs

pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh 8 MiB tmpfs for the board's data directory."""
    with tmpfs(tmp_path / "disk", "8m") as where:
        yield where


def backed_up_board(disk: Path, tmp_path: Path) -> tuple[TaskdProcess, Path]:
    """A stopped board on ``disk`` with a task made after its backup (kept off ``disk``)."""
    board = TaskdProcess(disk / "data", tmp_path / "run", tmp_path / "taskd.log").start()
    try:
        board.api("POST", "/api/v1/projects", {"id": "demo"})
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "in the backup"})
        backup_file = tmp_path / "backup.sqlite"
        board.api("POST", "/api/v1/admin/backup", {"path": str(backup_file)})
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "after the backup"})
    finally:
        assert board.stop() == 0
    return board, backup_file


def one_clear_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "nothing was changed" in lines[0], lines[0]
    return lines[0]


def served_titles(board: TaskdProcess) -> set[str]:
    board.start()
    try:
        return {task["title"] for task in board.api("GET", "/api/v1/tasks?project=demo")["items"]}
    finally:
        board.stop()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_restore_into_a_read_only_data_dir_says_so_in_one_line(disk: Path, tmp_path: Path) -> None:
    board, backup_file = backed_up_board(disk, tmp_path)
    database = board.data_dir / "board.sqlite"
    before = digest(database)
    remount(disk, "ro")
    line = one_clear_line(taskd_restore(backup_file, board.data_dir))
    assert str(board.data_dir) in line and "read-only file system" in line, line
    remount(disk, "rw")
    assert digest(database) == before
    assert served_titles(board) == {"in the backup", "after the backup"}


def test_a_restore_onto_a_full_disk_names_the_data_dir_in_one_line(disk: Path, tmp_path: Path) -> None:
    board, backup_file = backed_up_board(disk, tmp_path)
    database = board.data_dir / "board.sqlite"
    before = digest(database)
    filler = fill(disk)
    line = one_clear_line(taskd_restore(backup_file, board.data_dir))
    assert str(board.data_dir) in line and "full" in line, line
    filler.unlink()
    assert digest(database) == before
    assert not list(board.data_dir.glob(".board.sqlite.restore-*")), "the restore's temp file is gone"
    assert served_titles(board) == {"in the backup", "after the backup"}
