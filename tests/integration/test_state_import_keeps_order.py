"""An imported board lists its cards and comments in the order the old board made them.

Lists read in creation order (the tasks and the ready queue, a task's comments and reports,
"oldest first") follow the order rows were inserted in. The file holds each kind in primary-key
order (projects, then numbers; comment ids are random), so an import that inserted in file order
listed a task's comments shuffled and every card of one project before any card of the next.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.test_export import clocked_board
from tests.support.board import API, BoardClient, RunningBoard
from tests.support.state_files import encode, exported

pytestmark = pytest.mark.asyncio


async def test_an_import_keeps_the_creation_order_of_tasks_and_comments(
    tmp_path: Path, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    # Each commit a minute after the last: no two rows share a created_at, so the order is the
    # one the old board made them in, not a tie the clock left.
    async with clocked_board(tmp_path / "source") as board, aiohttp.ClientSession() as session:
        await _check_order_survives(BoardClient(board.url, board.token, session), empty_board[1])


async def _check_order_survives(client: BoardClient, target: BoardClient) -> None:
    for project in ("alpha", "beta"):
        assert (await client.post(f"{API}/projects", {"id": project})).status == 201
    made = []
    for n in range(3):  # interleaved: ALPHA-0001, BETA-0001, ALPHA-0002, …
        for project in ("beta", "alpha") if n % 2 else ("alpha", "beta"):
            reply = await client.post(f"{API}/tasks", {"project": project, "title": f"card {n}"})
            assert reply.status == 201, reply.body
            made.append(reply.body["identifier"])
    first = made[0]
    for n in range(10):  # random ids: ten in id order by chance is one in 3,628,800
        assert (await client.post(f"{API}/tasks/{first}/comments", {"body": f"comment {n}"})).status == 201

    async def orders(board: BoardClient) -> tuple[list[str], list[str], list[str]]:
        listed = (await board.get(f"{API}/tasks?limit=100")).body["items"]
        ready = (await board.get(f"{API}/tasks?ready=true&limit=100")).body["items"]
        comments = (await board.get(f"{API}/tasks/{first}/comments?limit=100")).body["items"]
        return [t["identifier"] for t in listed], [t["identifier"] for t in ready], [c["body"] for c in comments]

    before = await orders(client)
    assert before == (made, made, [f"comment {n}" for n in range(10)])
    reply = await target.request("POST", f"{API}/state", data=encode(await exported(client)),
                                 headers={"Content-Type": "application/x-ndjson"})
    assert reply.status == 201, reply.body
    assert await orders(target) == before
