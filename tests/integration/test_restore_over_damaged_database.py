"""Fixed: before, ``taskd restore`` is how a board comes back when its database is lost or damaged, yet it
refuses to install a good backup over a damaged ``board.sqlite``. Before installing, the restore
"sets aside" the database it replaces by opening it with SQLite and checkpointing its WAL
(backup._set_aside); on a torn or overwritten file that raises, and the restore exits 1 with
SQLite's message (``database disk image is malformed; nothing was changed``), which reads as if the
*backup* were bad. The operator is left with no documented way back.

Expected: the good backup is installed (new epoch), and the damaged file is kept beside it,
byte for byte, as ``board.sqlite.replaced-<time>``, as docs/operations.md says of the file a
restore replaces.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.board import board_backed_up, taskd_restore

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("damage", ["torn", "overwritten"])
async def test_a_good_backup_restores_over_a_damaged_database(tmp_path: Path, damage: str) -> None:
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "backup.sqlite"
    task, taken = await board_backed_up(data_dir, backup_file)
    old_board = taken["board_id"]

    database = data_dir / "board.sqlite"
    whole = database.read_bytes()
    # The disaster a restore is for: the file torn after its first pages, or overwritten.
    damaged = whole[: 4096 + 100] if damage == "torn" else b"\x00garbage" * 2048
    database.write_bytes(damaged)
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)

    restored = taskd_restore(backup_file, data_dir)
    assert restored.returncode == 0, (
        f"the restore refused to replace the damaged database: {restored.stderr.strip()!r}"
    )
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        meta = dict(conn.execute("SELECT key, value FROM board_meta").fetchall())
        assert conn.execute("SELECT id FROM tasks").fetchall() == [(task["id"],)]
    assert meta["previous_board_id"] == old_board and meta["board_id"] != old_board
    kept = list(data_dir.glob("board.sqlite.replaced-*"))
    assert [p.read_bytes() for p in kept] == [damaged], "the damaged file is kept beside it, as it was"
