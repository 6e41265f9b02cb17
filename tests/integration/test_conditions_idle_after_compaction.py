"""A fired card_idle after retention and a restart (docs/conditions.md §2.2, §3).

"A fired temporal condition whose episode still matches after a restart is not fired again." The
card_idle episode is the card's last activity row, and retention (POST /admin/compact) may delete
it: at the next start the episode, re-derived from the rows left, must still be the one the held
mark fired on (nothing can have happened on the card since: any activity drops the mark), not an
older row or the card's creation, which would fire the same idle card again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from shared.timestamps import parse_timestamp
from tests.support.board import API, BoardClient, make_project, make_task, start_board
from tests.support.signals import RawStream
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


async def _after(moment: float) -> bool:
    return time.time() >= moment


async def idle_rows(client: BoardClient, task_id: str) -> list[dict[str, Any]]:
    reply = await client.get(f"{API}/activities?event=card_idle&limit=1000")
    assert reply.status == 200, reply.body
    return [row for row in reply.body["items"] if row["task_id"] == task_id]


async def test_a_fired_card_idle_does_not_fire_again_after_compaction_and_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    board = await start_board(data_dir)
    async with aiohttp.ClientSession() as session:
        client = BoardClient(board.url, board.token, session)
        await make_project(client)
        reply = await client.patch(f"{API}/projects/demo", {"settings": {
            "monitors": {"idle_after": 1}, "persist_conditions": ["card_idle"]}})
        assert reply.status == 200, reply.body
        stream = await RawStream.open(session, board.url, board.token)
        task = await make_task(client)
        # The comment must come in a later millisecond than the creation, or the two episodes coincide.
        created = parse_timestamp(task["created_at"]).timestamp()
        await async_wait_until(lambda: _after(created + 0.005), timeout=2, what="the next milliseconds")
        comment = (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "still wanted"})).body
        fired = await stream.wait_for(
            lambda f: f.is_signal and f.data["type"] == "card_idle" and f.data["changes"]["since"] == comment["created_at"],
            timeout=6)
        stream.close()
        assert fired.data["task_id"] == task["id"]
        # A later row elsewhere (the newest row is always kept), then retention through the one before it.
        await make_task(client, "other", title="probe")
        head = (await client.get(f"{API}/meta")).body["revision"]
        compacted = await client.post(f"{API}/admin/compact", {"through": head - 1})
        assert compacted.status == 200, compacted.body
        assert await idle_rows(client, task["id"]) == []
        breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
        assert [(b["type"], b["changes"]["since"]) for b in breaches] == [("card_idle", comment["created_at"])], breaches
    await board.runner.cleanup()

    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            try:
                again = await async_wait_until(lambda: idle_rows(client, task["id"]), timeout=4,
                                               what="a second card_idle row")
            except AssertionError:
                return  # nothing fired again: the contract holds
            breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
            pytest.fail(
                "the card was idle and its card_idle had fired (since its last comment); nothing happened on it, yet "
                f"after retention and a restart card_idle fired again with changes {again[0]['changes']} "
                f"(created_at {task['created_at']}): the episode is re-derived from rows retention deleted. "
                f"breaches now: {breaches}"
            )
    finally:
        await board.runner.cleanup()
