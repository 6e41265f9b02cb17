"""A cursor from before a board restore is never replayed from the restored board's ring.

A follower that was away during a restore (a loop subscriber between two hub sessions, ``taskctl
events follow`` started again) comes back with a cursor of the replaced history. ``taskd restore``
moves the restored board's counter past that history's head, so the board itself refuses such a
cursor (``410``, reason ``restored``); the hub must not replay it from its ring either: it
answers with a ``reset``, never events that would skip rows silently. A follower that names its
cursor's board (``follow.board_id``) is judged by it: one of the old board is reset even by a hub
that never saw it, and a cursor of the new board is replayed. (A restore that keeps the counter —
a PostgreSQL ``pg_restore`` by hand — is what the hub's own record of replaced revision ranges
covers: ``tests/hub/test_histories.py``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from shared import hub_protocol as hp
from tests.hub.conftest import RawClient, make_task, start_board_on, start_hub
from tests.support.board import API, BoardClient, start_board, taskd_restore
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


async def _true(value: bool) -> bool:
    return value


async def comment(client: BoardClient, task: dict[str, Any], body: str) -> None:
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": body})
    assert reply.status == 201, reply.body


async def first_records(client: RawClient, head: int) -> list[dict[str, Any]]:
    """The stream's records up to a ``reset`` or an event at ``head`` (heartbeats skipped)."""
    records: list[dict[str, Any]] = []
    while not records or (records[-1]["type"] != "reset" and records[-1].get("revision", 0) < head):
        message = await client.recv()
        if message["type"] != "heartbeat":
            records.append(message)
    return records


@pytest.mark.sqlite_only  # taskd restore is the SQLite file's; a PostgreSQL board is restored with pg_restore
async def test_a_cursor_from_before_a_restore_gets_a_reset_and_one_of_the_new_board_is_replayed(tmp_path: Path) -> None:
    data_dir = tmp_path / "a"
    backup_file = tmp_path / "board.backup"
    first = await start_board(data_dir)
    port = int(first.url.rsplit(":", 1)[1])
    url, token = first.url, first.token
    async with aiohttp.ClientSession() as session:
        client = BoardClient(url, token, session)
        task = await make_task(client)
        taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
        assert taken.status == 200, taken.body
        hub = await start_hub(url, token)
        runner = None
        late_hub = None
        try:
            old_board = hub.board_id
            follower = await RawClient.following(hub)
            for n in range(5):
                await comment(client, task, f"lost {n}")
            cursor = (await follower.events(5))[-1]["revision"]  # then the follower goes away
            await follower.close()

            await first.runner.cleanup()
            done = taskd_restore(backup_file, data_dir)
            assert done.returncode == 0, done.stderr
            runner, _ = await start_board_on(data_dir, port)
            await async_wait_until(lambda: _true(hub.board_id not in (None, old_board)), what="the hub to see the new board")
            restored_at = hub.revision
            assert restored_at is not None and restored_at > cursor, "the restored board numbers past the replaced head"
            for n in range(8):  # the restored board's own history
                await comment(client, task, f"new {n}")
            head = (await client.get(f"{API}/meta")).body["revision"]
            await async_wait_until(lambda: _true(hub.revision is not None and hub.revision >= head), what="the hub")

            for board_id in (None, old_board):
                back = await RawClient.greeted(hub)
                named = {} if board_id is None else {"board_id": board_id}
                await back.send({**hp.follow(after=cursor, idle_ms=0), **named})
                opened = await back.recv_type("open")
                records = await first_records(back, head)
                await back.close()
                assert opened["replay"] == "live" and records[0]["type"] == "reset", (
                    f"follow after={cursor} board_id={board_id} (a cursor of board {old_board}) on the hub now following "
                    f"{hub.board_id} (restored, numbering from {restored_at}): opened {opened['replay']!r}, then "
                    f"{records[:3]}: a follower of the replaced history must be reset, never replayed"
                )
                if board_id is not None:
                    assert records[0] == hp.reset(reason=hp.RESET_BOARD_CHANGED, revision=head), records[0]

            # A cursor of the new board itself: replayed, no spurious reset.
            back = await RawClient.greeted(hub)
            await back.send(hp.follow(after=restored_at, idle_ms=0, board_id=hub.board_id))
            opened = await back.recv_type("open")
            records = await first_records(back, head)
            await back.close()
            assert opened["replay"] == "ring" and all(r["type"] == "event" for r in records), records
            held = hub.ring.since(restored_at)
            assert held and [r["revision"] for r in records] == [revision for revision, _ in held]

            # A hub started after the restore never saw the old board: the follower's board_id tells it.
            late_hub = await start_hub(url, token)
            back = await RawClient.greeted(late_hub)
            await back.send(hp.follow(after=restored_at, idle_ms=0, board_id=old_board))
            await back.recv_type("open")
            assert (await back.recv_type("reset")) == hp.reset(reason=hp.RESET_BOARD_CHANGED, revision=late_hub.revision)
            await back.close()
        finally:
            await hub.stop()
            if late_hub is not None:
                await late_hub.stop()
            if runner is not None:
                await runner.cleanup()
