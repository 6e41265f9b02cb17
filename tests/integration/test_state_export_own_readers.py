"""Fixed: before, two state exports whose clients read slowly take every reader the board has.

docs/operations.md: "taskctl export state … any time; the board keeps serving". The export runs
on one of the store's reader threads (``store.query``) for as long as it streams, and only lets
go when the whole file is read or its client has read nothing for ``STALL_SECONDS`` (60 s). The
store has two reader threads (``READER_THREADS``), so two exports going to slow consumers (a
``taskctl export state`` piped into something slow, a far-away client) leave none for every other
read: ``GET /api/v1/meta``, the board page, ``taskctl`` lists, the opening of every stream all wait.

The exports here are held for real, by clients that stop reading after the first line; a plain
``GET /api/v1/meta`` must still be answered within a few seconds.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.board.commands import projects, tasks
from services.board.store import READER_THREADS, Actor
from tests.support.board import API, BoardClient, RunningBoard

pytestmark = pytest.mark.asyncio

FILLER_TASKS = 400
FILLER_CHARS = 60_000
#: Far longer than a read of the meta row takes, far shorter than the export's stall timeout.
ANSWER_WITHIN_S = 5.0


async def test_reads_are_answered_while_exports_stream_to_slow_clients(board: RunningBoard, client: BoardClient) -> None:
    def many(tx: Any) -> None:
        projects.create_project(tx, id="big", name="Big")
        for n in range(FILLER_TASKS):
            tasks.create_task(tx, project="big", title=f"Card {n}", description="x" * FILLER_CHARS)

    await board.store.command(many, Actor("human", "ann"))
    exports = []
    try:
        for _ in range(READER_THREADS):
            response = await client.session.get(f"{board.url}{API}/state",
                                                headers={"Authorization": f"Bearer {board.token}"})
            assert response.status == 200
            assert json.loads(await response.content.readline())["kind"] == "taskloom-state"
            exports.append(response)  # open, and read no further for now (a slow consumer)

        try:
            async with asyncio.timeout(ANSWER_WITHIN_S):
                meta = await client.get(f"{API}/meta")
        except TimeoutError:
            pytest.fail(
                f"GET /api/v1/meta got no answer within {ANSWER_WITHIN_S} s while {READER_THREADS} exports "
                "waited for their clients: the exports hold every reader thread of the board"
            )
        assert meta.status == 200, meta.body
    finally:
        for response in exports:
            response.close()
