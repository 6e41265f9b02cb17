"""Fixed: before, ``taskd restore`` of a backup written by a newer Taskloom is refused (right), but the
message names the restore's own temp file, which no longer exists, and tells the operator to
"point --data-dir elsewhere" (the advice for ``taskd serve``): the file at fault, the backup, is
not named at all. The schema check runs on the temp copy (backup.restore → migrate(incoming))
instead of on the backup before it is copied.
"""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import API, VENV_BIN, BoardClient, make_task, start_board

pytestmark = pytest.mark.asyncio


async def test_a_newer_backup_is_refused_naming_the_backup(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "from-a-newer-taskloom.sqlite"
    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            await make_task(client)
            taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
            assert taken.status == 200, taken.body
    finally:
        await board.runner.cleanup()
    with closing(sqlite3.connect(backup_file, isolation_level=None)) as conn:
        conn.execute("PRAGMA user_version = 999")
    before = {p.name: p.read_bytes() for p in data_dir.iterdir() if p.is_file() and p.name != "board.lock"}

    refused = subprocess.run([str(VENV_BIN / "taskd"), "restore", str(backup_file), "--data-dir", str(data_dir)],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1
    assert "newer than this Taskloom" in refused.stderr and "nothing was changed" in refused.stderr
    after = {p.name: p.read_bytes() for p in data_dir.iterdir() if p.is_file() and p.name != "board.lock"}
    assert after == before, "nothing in the data directory changed"
    assert str(backup_file) in refused.stderr, f"the refusal does not name the backup: {refused.stderr.strip()!r}"
    assert ".restore-" not in refused.stderr, "it names a temp file of the restore that no longer exists"
