"""A state export is read from one snapshot while the board keeps serving (docs/operations.md,
State export and import). On SQLite the attachment bytes are read from ``attachments/`` when the
export reaches them, and nothing held back the purge of a blob that an attachment removal
(committed after the export's snapshot began) released: the export broke off. Now the export pins
the blobs as a backup does (``attachments.blobs_held``).

The export is held mid-way by a client that stops reading (the reader thread blocks on its
bounded queue with its snapshot open), the attachment is removed through the API, and the export
is then read to its end: it must be the whole snapshot (the attachment with its bytes, the end
line), not a stream cut short; the purge runs after it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from services.board.commands import projects, tasks
from services.board.store import Actor
from tests.support.board import API, BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

#: Card state ahead of the attachment lines, far more than the export's queue (8 × 256 KiB) and the
#: loopback socket buffers hold: the reader thread is still before the attachments when it blocks.
FILLER_TASKS = 400
FILLER_CHARS = 60_000


async def test_an_export_under_way_keeps_the_bytes_of_an_attachment_removed_meanwhile(
    board: RunningBoard, client: BoardClient
) -> None:
    def many(tx: Any) -> str:
        projects.create_project(tx, id="big", name="Big")
        first = None
        for n in range(FILLER_TASKS):
            task, _ = tasks.create_task(tx, project="big", title=f"Card {n}", description="x" * FILLER_CHARS)
            first = first or task
        assert first is not None
        return str(first["identifier"])

    identifier = await board.store.command(many, Actor("human", "ann"))
    data = b"bytes the export's snapshot names"
    sha256 = hashlib.sha256(data).hexdigest()
    added = await client.request("POST", f"{API}/tasks/{identifier}/attachments?filename={quote('kept.bin')}",
                                 data=data, headers={"Content-Type": "application/octet-stream"})
    assert added.status == 201, added.body
    blob = board.data_dir / "attachments" / sha256[:2] / sha256
    assert blob.is_file()

    response = await client.session.get(f"{board.url}{API}/state", headers={"Authorization": f"Bearer {board.token}"})
    try:
        assert response.status == 200
        head = await response.content.readline()
        assert json.loads(head)["kind"] == "taskloom-state", "the export's snapshot is open"

        # While the export is under way the attachment goes; its removal answers once its blob's
        # purge has run (held back while the export reads).
        removed = await client.request("DELETE", f"{API}/attachments/{added.body['id']}")
        assert removed.status == 200, removed.body

        rest = b""
        cut = None
        try:
            async for chunk in response.content.iter_any():
                rest += chunk
        except aiohttp.ClientPayloadError as exc:
            cut = exc
    finally:
        response.close()

    assert cut is None, (
        f"the export was cut short after {len((head + rest).splitlines())} lines ({cut}): a removal committed "
        "after its snapshot began took the blob it still named"
    )
    lines = [json.loads(line) for line in (head + rest).splitlines()]
    attachments = [line for line in lines if line["kind"] == "attachment"]
    assert lines[-1]["kind"] == "end", (
        f"the export was cut short after {len(lines)} lines (no end line, no attachment line: "
        f"{len(attachments)}): a removal committed after its snapshot began took the blob it still named"
    )
    assert [base64.b64decode(line["data"]) for line in attachments] == [data]
    assert lines[-1]["counts"]["attachment"] == 1 and lines[-1]["counts"]["task"] == FILLER_TASKS

    async def purged() -> bool:
        return not blob.exists()

    # Held back, not lost: once the export has ended, the purge it deferred runs.
    await async_wait_until(purged, what="the removed attachment's blob to be purged after the export", timeout=10)
