"""A board condition that fires while the hub's link to the board is down still wakes the loop.

A condition travels as a signal, which is never replayed. When the board restarts, its start
re-derives every condition and fires the deadlines that passed while it was down — before any
stream can be open — and whatever it notices while the hub is still on its reconnect ladder goes
to no stream either. The loop subscriber kept following the hub all along, so nothing told it:
a worker that died while the board was down (its ``claim_stale`` fired at the board's start) never
woke the supervisor. The hub now says so to its followers when its board link opens again
(``signals_missed``), and the subscriber takes it as a wake.

Real taskd (stopped and started again on the same port), the hub the subscriber starts, a real
``taskctl loop subscribe``; every wait is a condition with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from shared.timestamps import parse_timestamp
from tests.support.board import BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until

from .test_loop_e2e import API, SubscriberProcess

pytestmark = pytest.mark.asyncio

#: The project's claim freshness window: long enough to stop the board before it passes.
STALE_AFTER = 4


@pytest.fixture
async def stale_board(taskd: TaskdProcess) -> AsyncIterator[tuple[TaskdProcess, aiohttp.ClientSession]]:
    taskd.start()
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        created = await client.post(f"{API}/projects", {"id": "demo", "name": "Demo",
                                                         "settings": {"monitors": {"claim_stale_after": STALE_AFTER}}})
        assert created.status == 201, created.body
        yield taskd, session


@pytest.fixture
async def loop_process(stale_board: tuple[TaskdProcess, aiohttp.ClientSession],
                       tmp_path: Path) -> AsyncIterator[SubscriberProcess]:
    async with SubscriberProcess.with_this_pool(tmp_path / "sub", stale_board[0]) as process:
        yield process


async def _after(moment: float) -> bool:
    return time.time() >= moment


async def test_a_claim_that_went_stale_while_the_board_was_down_wakes_the_loop(
    stale_board: tuple[TaskdProcess, aiohttp.ClientSession], loop_process: SubscriberProcess
) -> None:
    taskd, session = stale_board
    client = BoardClient(taskd.url, taskd.token, session)
    await loop_process.start()
    await loop_process.ready()
    task = (await client.post(f"{API}/tasks", {"project": "demo", "title": "Dig the well"})).body
    assert (await loop_process.wait_wakes(1))[0]["events"] == "task_created"

    # Another loop's worker claims the card and beats once; then the board stops, and the worker
    # dies while it is down.
    worker = client.as_actor("claude", "worker-9")
    assert (await worker.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    beat = (await worker.post(f"{API}/tasks/{task['id']}/heartbeat")).body
    due = parse_timestamp(beat["heartbeat_at"]).timestamp() + STALE_AFTER
    port = urlsplit(taskd.url).port
    assert port is not None
    taskd.stop()
    assert time.time() < due, "the board took too long to stop for this case"
    await async_wait_until(lambda: _after(due + 0.2), timeout=STALE_AFTER + 5, interval=0.05,
                           what="the claim's freshness window to pass while the board is down")

    # The board comes back on the same URL; its start fires the stale claim.
    restarted = time.time()
    taskd.start(port=port)
    client = BoardClient(taskd.url, taskd.token, session)
    [breach] = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert breach["type"] == "claim_stale" and parse_timestamp(breach["since"]).timestamp() >= restarted - 0.5, breach

    # The supervisor is woken for it: the card is work again.
    [_, missed] = await loop_process.wait_wakes(2, timeout=15)
    assert "signals_missed" in missed["events"].split(","), missed
    assert await loop_process.terminate() == 0
