"""Fixed: before, ``taskd restore`` of a backup written by a newer Taskloom is refused (right), but the
message names the restore's own temp file, which no longer exists, and tells the operator to
"point --data-dir elsewhere" (the advice for ``taskd serve``): the file at fault, the backup, is
not named at all. The schema check runs on the temp copy (backup.restore → migrate(incoming))
instead of on the backup before it is copied.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.board import board_backed_up, taskd_restore

pytestmark = pytest.mark.asyncio


async def test_a_newer_backup_is_refused_naming_the_backup(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "from-a-newer-taskloom.sqlite"
    await board_backed_up(data_dir, backup_file)
    with closing(sqlite3.connect(backup_file, isolation_level=None)) as conn:
        conn.execute("PRAGMA user_version = 999")
    before = {p.name: p.read_bytes() for p in data_dir.iterdir() if p.is_file() and p.name != "board.lock"}

    refused = taskd_restore(backup_file, data_dir)
    assert refused.returncode == 1
    assert "newer than this Taskloom" in refused.stderr and "nothing was changed" in refused.stderr
    after = {p.name: p.read_bytes() for p in data_dir.iterdir() if p.is_file() and p.name != "board.lock"}
    assert after == before, "nothing in the data directory changed"
    assert str(backup_file) in refused.stderr, f"the refusal does not name the backup: {refused.stderr.strip()!r}"
    assert ".restore-" not in refused.stderr, "it names a temp file of the restore that no longer exists"
