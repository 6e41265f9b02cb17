"""Fixed: ``taskd restore`` set the database it replaces aside (renamed ``board.sqlite`` to
``board.sqlite.replaced-<time>``) and only then renamed the restored file into place. A restore
killed between those renames (SIGKILL, a power cut, the OOM killer) left no ``board.sqlite`` at
all, and the next ``taskd serve`` made a fresh empty board there: the user saw every project gone,
neither the old state nor the backup's, and a later restore found no head to move past.

Expected: killed before any of the renames (or links) the restore makes in the data directory,
the board that starts next serves either the old state or the backup's, whole; and the old
state is never lost (it is ``board.sqlite`` or a ``board.sqlite.replaced-*`` beside it).
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.held_rename import hold_before_rename
from tests.support.waiting import wait_until

pytestmark = pytest.mark.sqlite_only

BEFORE = {"made before the backup"}
AFTER = BEFORE | {"made after the backup"}


def _titles_in(database: Path) -> set[str]:
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT title FROM tasks")}


def _served_titles(data_dir: Path, scratch: Path) -> set[str]:
    board = TaskdProcess(data_dir, scratch / "run", scratch / "taskd.log").start()
    try:
        listed = board.api("GET", "/api/v1/tasks?project=demo")
        return {task["title"] for task in listed["items"]}
    except OSError as exc:  # a 404 for the project: the board has no such project
        return {f"<{exc}>"}
    finally:
        board.stop()


def _attach(board: TaskdProcess, identifier: str, data: bytes) -> None:
    request = urllib.request.Request(
        f"{board.url}/api/v1/tasks/{identifier}/attachments?filename=notes.txt", method="POST", data=data,
        headers={"Authorization": f"Bearer {board.token}", "Content-Type": "application/octet-stream",
                 "X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201


def _source_board(tmp_path: Path) -> tuple[Path, Path]:
    """A stopped board (with an attachment and an archive of compacted rows) and a backup of it
    that lacks its last task."""
    data_dir = tmp_path / "pristine"
    board = TaskdProcess(data_dir, tmp_path / "run", tmp_path / "source.log").start()
    try:
        board.api("POST", "/api/v1/projects", {"id": "demo"})
        task = board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "made before the backup"})
        _attach(board, task["identifier"], b"the bytes of an attachment")
        for note in range(3):
            board.api("POST", f"/api/v1/tasks/{task['id']}/comments", {"body": f"note {note}"})
        head = board.api("GET", "/api/v1/meta")["revision"]
        board.api("POST", "/api/v1/admin/compact", {"through": head - 1})
        backup_file = tmp_path / "backup.sqlite"
        board.api("POST", "/api/v1/admin/backup", {"path": str(backup_file)})
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "made after the backup"})
    finally:
        assert board.stop() == 0
    assert list((data_dir / "archive").glob("activities-*.jsonl.gz")), "the source board has an archive"
    return data_dir, backup_file


def _restore_held_at(backup_file: Path, data_dir: Path, scratch: Path, nth: int) -> str | None:
    """``taskd restore`` killed before its ``nth`` rename or link in ``data_dir``: the rename it
    was held before, or None when it finished first (then it must have succeeded)."""
    held = hold_before_rename(scratch, data_dir, nth)
    restore = subprocess.Popen(
        [str(VENV_BIN / "taskd"), "restore", str(backup_file), "--data-dir", str(data_dir)],
        env=held.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: held.reached() or restore.poll() is not None, timeout=60,
                   what=f"the restore to reach rename {nth} or finish")
    finally:
        if restore.poll() is None:
            restore.send_signal(signal.SIGKILL)
        _, stderr = restore.communicate(timeout=20)
    reached = held.reached()
    if reached is None:
        assert restore.returncode == 0, stderr.decode()
    return reached


def test_a_restore_killed_before_any_rename_leaves_the_old_board_or_the_new_one(tmp_path: Path) -> None:
    pristine, backup_file = _source_board(tmp_path)
    outcomes: dict[str, int] = {"old": 0, "new": 0}
    nth = 0
    while True:
        nth += 1
        assert nth < 50, "the restore never finished"
        scratch = tmp_path / f"kill-{nth}"
        data_dir = scratch / "data"
        shutil.copytree(pristine, data_dir)
        reached = _restore_held_at(backup_file, data_dir, scratch, nth)
        finished = reached is None
        served = _served_titles(data_dir, scratch)
        where = f"killed before {reached}" if reached else "after the restore finished"
        assert served in (AFTER, BEFORE), f"{where}: the board serves {sorted(served)}"
        outcomes["old" if served == AFTER else "new"] += 1
        # The old state is never lost: the database serving it, or the one set aside.
        kept = [_titles_in(path) for path in data_dir.glob("board.sqlite.replaced-*")]
        assert served == AFTER or AFTER in kept, f"{where}: the replaced database is not kept ({kept})"
        if finished:
            break
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1, outcomes
