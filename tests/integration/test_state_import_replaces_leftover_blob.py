"""Fixed: before, a state import into a board whose ``attachments/`` holds a leftover file at a blob's path
keeps that file, whatever its bytes, instead of the bytes the import checked.

The import refuses "an attachment whose bytes do not match its sha256" (docs/operations.md), then
writes each blob with ``attachments.write_blob``, which returns at once when a file exists at the
blob's path without reading it. A board without projects (all an import accepts) names no blob,
so every file already there is a leftover (a damaged disk, an earlier board's directory reused):
the imported board then serves bytes that are not the attachment's, and cannot be backed up
(``409 CONFLICT``: the blob does not match its digest).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from tests.support.board import API, BoardClient, RunningBoard, make_task, start_board

pytestmark = pytest.mark.asyncio

GOOD = b"the attachment's real bytes\n" * 50


async def test_an_import_writes_the_checked_bytes_over_a_leftover_blob(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    task = await make_task(client)
    added = await client.request("POST", f"{API}/tasks/{task['identifier']}/attachments?filename={quote('a.txt')}",
                                 data=GOOD, headers={"Content-Type": "text/plain"})
    assert added.status == 201, added.body
    exported = await client.get(f"{API}/state")
    assert exported.status == 200 and isinstance(exported.body, bytes)

    target = await start_board(tmp_path / "target")
    try:
        sha256 = hashlib.sha256(GOOD).hexdigest()
        leftover = target.data_dir / "attachments" / sha256[:2] / sha256
        leftover.parent.mkdir(parents=True, exist_ok=True)
        leftover.write_bytes(b"not the attachment's bytes")
        async with aiohttp.ClientSession() as session:
            own = BoardClient(target.url, target.token, session)
            imported = await own.request("POST", f"{API}/state", data=exported.body,
                                         headers={"Content-Type": "application/x-ndjson"})
            assert imported.status == 201, imported.body
            async with session.get(f"{target.url}{API}/attachments/{added.body['id']}",
                                   headers={"Authorization": f"Bearer {target.token}"}) as response:
                assert response.status == 200
                served = await response.read()
            assert served == GOOD, f"the imported board serves the leftover file's bytes: {served[:40]!r}"
            backup = await own.post(f"{API}/admin/backup", {"path": str(tmp_path / "after-import.sqlite")})
            assert backup.status == 200, backup.body
    finally:
        await target.runner.cleanup()
