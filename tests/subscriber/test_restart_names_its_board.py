"""A loop subscriber restarted after its board was replaced is told so; it never resumes by number.

The subscriber saves its cursor across restarts. A revision counts in one board's history only:
when another board answers on the same URL while the subscriber is stopped, the saved number
names other rows there. The state file keeps the ``board_id`` beside the cursor and the first
``follow`` names it, so the hub answers ``reset`` (``board_changed``: a rescan turn) instead of
replaying the new board's ring after the old board's number, which silently skips the new rows
up to it. Before, the restarted subscriber named no board, and a hub whose ring reached below
the saved number replayed from it.

Real taskd boards, a real ``taskhub`` and real ``taskctl loop subscribe`` processes; every wait is
a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.hub import client as hub_client
from services.hub.pointer import HubFiles, pid_alive, read_pointer
from shared import hub_protocol as hp
from tests.subscriber.test_loop_e2e import API, TASKHUB, SubscriberProcess, board, head, subscriber  # noqa: F401
from tests.support.board import BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until, wait_until

pytestmark = pytest.mark.asyncio


async def board_id(client: BoardClient) -> str:
    return str((await client.get(f"{API}/meta")).body["board_id"])


async def write_tasks(client: BoardClient, count: int) -> None:
    if (await client.get(f"{API}/projects/demo")).status == 404:
        assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    for n in range(count):
        assert (await client.post(f"{API}/tasks", {"project": "demo", "title": f"Task {n}"})).status == 201


def resets(sub: SubscriberProcess) -> list[dict[str, Any]]:
    """The ``hub_reset`` lines of the subscriber's JSON log."""
    found = []
    for line in sub.log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "hub_reset":
            found.append(record)
    return found


async def hub_revision(files: HubFiles) -> int | None:
    """The head the hub behind ``files`` has seen, by an authenticated ``ping`` (None: none answers)."""
    record = read_pointer(files)
    if record is None:
        return None
    address = hub_client.HubAddress(port=record["port"], token=str(record.get("token", "")), pid=record["pid"],
                                    key=files.key)
    pong = await hub_client.ping(address)
    return pong.get("revision") if pong is not None else None


async def test_a_restart_after_the_board_was_replaced_is_reset_not_resumed(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess, tmp_path: Path  # noqa: F811
) -> None:
    first, first_client = board
    port = int(first.url.rsplit(":", 1)[1])

    # 1. The subscriber follows board A, handles its work, saves cursor and board, and stops.
    await subscriber.start()
    await subscriber.ready()
    await write_tasks(first_client, 3)
    cursor = await head(first_client)
    await subscriber.settled(cursor)
    old_board = await board_id(first_client)
    await subscriber.wait_state(lambda s: s.get("board_id") == old_board, "the state file to name board A")
    assert await subscriber.terminate() == 0
    subscriber.skip += len(subscriber.wakes())  # board A's turns are done with
    saved = subscriber.state()
    assert (saved["state"], saved["revision"], saved["board_id"]) == ("stopped", cursor, old_board)
    hub_pid = subscriber.hub_pid()
    assert hub_pid is not None
    os.kill(hub_pid, signal.SIGTERM)
    wait_until(lambda: not pid_alive(hub_pid), timeout=20, what="board A's hub to exit")
    first.stop()

    # 2. Another board answers on the same URL (its own data, token and board_id). A hub reaches
    #    it while its head is still below the saved cursor, so its ring reaches below that number.
    second = TaskdProcess(data_dir=tmp_path / "b-data", runtime_dir=first.runtime_dir, log_path=tmp_path / "b.log")
    second.start(port=port)
    hub = None
    try:
        assert second.url == first.url
        subscriber.taskd = second  # the subscriber reads the token of the board now at the URL
        env = {**subscriber.env(), "TASKLOOM_TOKEN": second.token}
        with open(tmp_path / "taskhub.log", "ab") as log:
            hub = subprocess.Popen([TASKHUB, "serve", "--board", second.url, "--idle-exit", "0"],
                                   env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        subscriber.hub_pids.add(hub.pid)
        files = subscriber.hub_files()

        async def hub_at(revision: int) -> bool:
            seen = await hub_revision(files)
            return seen is not None and seen >= revision

        async with aiohttp.ClientSession() as session:
            second_client = BoardClient(second.url, second.token, session)
            new_board = await board_id(second_client)
            assert new_board != old_board
            start = await head(second_client)
            assert start < cursor
            await async_wait_until(lambda: hub_at(start), timeout=20, what="the hub to reach board B")
            await write_tasks(second_client, cursor - start + 2)  # board B's head passes the saved number
            replaced_head = await head(second_client)
            assert replaced_head > cursor
            await async_wait_until(lambda: hub_at(replaced_head), timeout=20, what="the hub to see board B's writes")

            # 3. The restart names board A with its cursor: the hub resets it, one rescan turn.
            await subscriber.start()
            [turn] = await subscriber.wait_wakes(1, timeout=20)
            assert turn["events"] == "reset" and turn["revision"] == replaced_head, (
                f"restarted after revision {cursor} of board {old_board} on board {new_board} (head {replaced_head}): "
                f"the first turn was {turn}, not a rescan; resets logged {resets(subscriber)}"
            )
            assert [r["reason"] for r in resets(subscriber)] == [hp.RESET_BOARD_CHANGED]
            await subscriber.settled(replaced_head)
            # After a reset the stream does not say which board follows: none is claimed.
            assert subscriber.state().get("board_id") is None
            assert await subscriber.terminate() == 0

            # 4. Restarted again, the cursor is board B's: resumed (no second reset), and the
            #    board it counts in is learned from the hub and saved with it.
            await subscriber.start()
            await subscriber.wait_state(lambda s: s.get("state") == "streaming" and s.get("board_id") == new_board,
                                        "the state file to name board B")
            await write_tasks(second_client, 1)
            [_, resumed] = await subscriber.wait_wakes(2, timeout=20)
            assert resumed["events"] == "task_created" and resumed["revision"] == await head(second_client)
            assert len(resets(subscriber)) == 1
            assert await subscriber.terminate() == 0
    finally:
        if hub is not None:
            hub.terminate()
            hub.wait(20)
        second.stop()
