"""An attachment's ``sha256`` names its blob's file under ``<data_dir>/attachments``: text that is
not a digest never reaches a file outside the board.

A backup whose ``backup_blobs`` table was dropped (the shape of one from an earlier release, or a
crafted file) and whose attachment row named an absolute path as its digest used to restore: the
board then served that file as the attachment's bytes and unlinked it when the attachment was
removed (``root / sha256[:2] / sha256`` is the path itself when it is absolute). Now the restore
refuses such a backup, the schema refuses such a row from any writer (generation 9), and the
board's own path function refuses to make a path of it.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import pytest

from services.board.commands.attachments import blob_path
from tests.support.board import API, BoardClient, RunningBoard, make_task, taskd_restore

pytestmark = pytest.mark.asyncio


async def test_a_backup_naming_an_attachment_by_a_path_is_refused_and_nothing_installed(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    victim = tmp_path / "outside" / "secret.txt"
    victim.parent.mkdir()
    victim.write_bytes(b"a file of the operator's, outside the data directory")
    task = await make_task(client)
    added = await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename={quote('notes.txt')}",
                                 data=b"notes", headers={"Content-Type": "text/plain"})
    assert added.status == 201, added.body
    backup = tmp_path / "board.taskloom-backup"
    assert (await client.post(f"{API}/admin/backup", {"path": str(backup)})).status == 200
    with closing(sqlite3.connect(backup, isolation_level=None)) as conn:
        conn.execute("DROP TABLE backup_blobs")
        for name in ("attachments_sha256_is_a_digest_insert", "attachments_sha256_is_a_digest_update"):
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")  # a crafted file holds no such rule
        conn.execute("UPDATE attachments SET sha256 = ?", (str(victim),))
    data_dir = tmp_path / "restored"
    restored = taskd_restore(backup, data_dir)
    assert restored.returncode == 1, (restored.returncode, restored.stdout, restored.stderr)
    assert "not a SHA-256 digest" in restored.stderr, restored.stderr
    assert not (data_dir / "board.sqlite").exists(), "a refused restore installs nothing"
    assert victim.is_file()


@pytest.mark.parametrize("text", ["/etc/passwd", "../../../etc/passwd", "AB" * 32, "ab" * 31, ""])
async def test_no_writer_stores_an_attachment_named_by_anything_but_a_digest(board: RunningBoard, text: str) -> None:
    with closing(sqlite3.connect(board.data_dir / "board.sqlite", isolation_level=None)) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="ATTACHMENT_DIGEST"):
            conn.execute(
                "INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
                " VALUES ('att', 'nope', 'x.txt', 'text/plain', 1, ?, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
                (text,),
            )
    with pytest.raises(ValueError, match="not a SHA-256 digest"):
        blob_path(board.data_dir / "attachments", text)
    assert blob_path(Path("/r"), "ab" * 32) == Path("/r/ab") / ("ab" * 32)
