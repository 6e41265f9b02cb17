"""The registry's rules as the hub serves them over real TCP, in front of a real board.

What the sans-I/O split changed at the edges: the registrations file is written off the event
loop, yet an answer still means the change is on disk; a viewer whose last card ends is no
longer listed as a viewer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task, start_hub

pytestmark = pytest.mark.asyncio

FAST_WATCH = {"refresh_debounce": 0.03, "refresh_max_wait": 0.2, "refresh_floor": 0.05}


@pytest.fixture
async def whub(board: RunningBoard, tmp_path: Path) -> AsyncIterator[Hub]:
    running = await start_hub(board.url, board.token, registrations_path=tmp_path / "run" / "hub.registrations.json",
                              **FAST_WATCH)
    try:
        yield running
    finally:
        await running.stop()


async def _status(hub: Hub) -> list[dict[str, Any]]:
    raw = await RawClient.greeted(hub)
    try:
        await raw.send(hp.watch_status())
        return (await raw.recv())["registrations"]
    finally:
        await raw.close()


async def test_a_viewer_whose_last_card_ends_is_listed_no_more(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    one, two = await make_task(client), await make_task(client)
    await hub_caught_up(whub, board)
    owner = await RawClient.greeted(whub)
    await owner.send(hp.watch(cards=[{"ref": one["identifier"], "out": str(tmp_path / "one.md")},
                                     {"ref": two["identifier"], "out": str(tmp_path / "two.md")}]))
    assert (await owner.recv())["type"] == "registered"
    viewer = await RawClient.greeted(whub)
    await viewer.send(hp.watch(ref=two["id"], out=str(tmp_path / "two.md")))
    assert (await viewer.recv())["reason"] == hp.REASON_VIEWER
    (listed,) = await _status(whub)
    assert listed["viewers"] == 1
    reply = await client.post(f"/api/v1/tasks/{two['id']}/move", {"to": "canceled"})
    assert reply.status == 200, reply.body
    while (record := await viewer.recv())["type"] != "done":
        assert record["type"] in ("refresh", "heartbeat"), record
    assert record == {"type": "done"}
    assert await viewer.closed()
    (listed,) = await _status(whub)
    assert (listed["owner"], listed["viewers"]) == (True, 0), listed
    assert [card["task_id"] for card in listed["cards"]] == [one["id"]]
    await owner.close()


async def test_an_answer_means_the_registrations_file_is_written(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    path = tmp_path / "run" / "hub.registrations.json"
    tasks = [await make_task(client) for _ in range(5)]
    raw = await RawClient.greeted(whub)
    made = []
    for n, task in enumerate(tasks):
        await raw.send(hp.watch(ref=task["identifier"], out=str(tmp_path / f"{n}.md"), detach=True, ttl_ms=0))
        answer = await raw.recv()
        made.append(answer["registration_id"])
        # No wait: the file already lists every registration answered so far.
        assert [r["registration_id"] for r in json.loads(path.read_text())["registrations"]] == made
    for registration_id in made:
        await raw.send(hp.watch_stop(registration_id))
        assert (await raw.recv())["type"] == "watch-stopped"
        on_file = [r["registration_id"] for r in json.loads(path.read_text())["registrations"]]
        assert registration_id not in on_file
    assert whub.registrations.count() == 0
    await raw.close()
