"""A state import the database refuses must leave no attachment blob behind (SPEC §1.8, §12).

``routes/state.py`` writes every attachment's bytes to ``<data_dir>/attachments`` *before* the
import's transaction. ``parse_state`` checks types, references and digests, but the schema's own
CHECKs and triggers (a title of 1–500 characters, the relation rules, …) are judged only inside
the transaction. When one of them refuses, the rows roll back and the answer is a clear
``400 VALIDATION_FAILED`` — and the blobs stayed on disk, named by no row, and nothing ever
removed them; now the route removes them again when the command is refused.
``tests/integration/test_state_import_refusals.py`` holds every refused import to "no row and no
blob file"; this file is refused by the database rather than by the parser.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import API, BoardClient, RunningBoard, make_task, row_counts, start_board

pytestmark = pytest.mark.asyncio

TABLES = ("projects", "tasks", "comments", "attachments", "labels", "actors", "task_activities")


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    board = await start_board(tmp_path / "target")
    try:
        async with aiohttp.ClientSession() as session:
            yield board, BoardClient(board.url, board.token, session)
    finally:
        await board.runner.cleanup()


async def exported_with_an_attachment(client: BoardClient) -> list[dict]:
    task = await make_task(client, title="has a file")
    await make_task(client, title="another card")
    added = await client.request("POST", f"{API}/tasks/{task['id']}/attachments?filename=a.bin", data=b"\x00\x01 bytes",
                                 headers={"Content-Type": "application/octet-stream"})
    assert added.status == 201, added.body
    reply = await client.get(f"{API}/state")
    assert reply.status == 200
    records = [json.loads(line) for line in reply.body.splitlines()]
    assert any(record["kind"] == "attachment" for record in records)
    return records


async def test_an_import_the_schema_refuses_leaves_no_blob(
    client: BoardClient, target: tuple[RunningBoard, BoardClient]
) -> None:
    records = await exported_with_an_attachment(client)
    # The last task gets an empty title: a text (so parse_state takes it), refused by the schema's
    # CHECK (length(title) BETWEEN 1 AND 500) inside the import's transaction.
    last_task = max(i for i, record in enumerate(records) if record["kind"] == "task")
    records[last_task]["row"]["title"] = ""
    board, tclient = target

    reply = await tclient.request("POST", f"{API}/state",
                                  data=b"".join(json.dumps(record).encode() + b"\n" for record in records))

    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert await row_counts(board, *TABLES) == (0,) * len(TABLES), "the refused import wrote no row"
    blobs = board.data_dir / "attachments"
    left = sorted(str(p.relative_to(blobs)) for p in blobs.rglob("*") if p.is_file()) if blobs.exists() else []
    assert left == [], f"the refused import left attachment blobs on disk: {left}"
