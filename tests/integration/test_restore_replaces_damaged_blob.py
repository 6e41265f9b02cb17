"""Fixed: before, ``taskd restore`` does not repair a damaged attachment blob although the backup carries
its good bytes.

docs/operations.md: a blob "whose bytes no longer match its digest fails the backup with 409
CONFLICT … restore that blob", and a backup "is the whole board, attachments included"; the
restore writes the backup's blobs into ``attachments/`` but "a blob already there is the same
bytes and is kept". The restore checks the backup's bytes against the digest, but takes a file
that exists at the blob's path for the same bytes without reading it (backup._write_blobs,
``path.is_file()``). After bit rot or a stray write in ``attachments/`` (what a restore is for),
the restored board goes on serving the damaged bytes, and its next backup still fails.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from tests.support.board import API, BoardClient, make_task, start_board, taskd_restore

pytestmark = pytest.mark.asyncio

GOOD = b"%PDF-1.7 the signed contract\n" * 64


async def download(session: aiohttp.ClientSession, url: str, token: str, attachment_id: str) -> tuple[int, bytes]:
    async with session.get(f"{url}{API}/attachments/{attachment_id}",
                           headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status, await response.read()


async def test_a_restore_puts_back_the_good_bytes_of_a_damaged_blob(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "backup.sqlite"
    sha256 = hashlib.sha256(GOOD).hexdigest()
    blob = data_dir / "attachments" / sha256[:2] / sha256
    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client)
            added = await client.request("POST", f"{API}/tasks/{task['identifier']}/attachments?filename={quote('c.pdf')}",
                                         data=GOOD, headers={"Content-Type": "application/pdf"})
            assert added.status == 201, added.body
            attachment_id = added.body["id"]
            taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
            assert taken.status == 200 and taken.body["blobs"] == 1, taken.body

            # The disaster: the blob on disk is damaged. The board's own backup notices it.
            damaged = GOOD[:100] + b"\xff" * 16 + GOOD[116:]
            blob.write_bytes(damaged)
            refused = await client.post(f"{API}/admin/backup", {"path": str(tmp_path / "second.sqlite")})
            assert refused.status == 409 and refused.body["error"]["details"]["sha256"] == sha256, refused.body
    finally:
        await board.runner.cleanup()

    restored = taskd_restore(backup_file, data_dir)
    assert restored.returncode == 0, restored.stderr
    assert "1 attachment blobs" in restored.stderr, restored.stderr

    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            status, served = await download(session, board.url, board.token, attachment_id)
            assert status == 200
            assert hashlib.sha256(served).hexdigest() == sha256, (
                "the restored board serves the damaged bytes: the restore kept the file it found at the "
                "blob's path instead of the good bytes the backup carried"
            )
            again = await BoardClient(board.url, board.token, session).post(
                f"{API}/admin/backup", {"path": str(tmp_path / "third.sqlite")})
            assert again.status == 200, again.body
    finally:
        await board.runner.cleanup()
