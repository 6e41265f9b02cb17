"""State export and import over real boards: deterministic bytes, and a round trip that rebuilds
the same card state (projects, epics, relations, comments, reports, attachments, archived cards)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from tests.support.board import API, BoardClient, RunningBoard, row_counts
from tests.support.state_builder import build_random_board
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


async def export(client: BoardClient) -> bytes:
    reply = await client.get(f"{API}/state")
    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith("application/x-ndjson")
    assert isinstance(reply.body, bytes)
    return reply.body


def lines(data: bytes) -> list[bytes]:
    return data.splitlines()


@pytest.mark.parametrize("seed", [7, 1201, 424242])
async def test_export_import_export_gives_the_same_card_state(
    client: BoardClient, board: RunningBoard, empty_board: tuple[RunningBoard, BoardClient], seed: int
) -> None:
    made = await build_random_board(client, seed)
    assert made["archived"] and made["attachments"] and made["relations"] and made["reports"], made
    first = await export(client)
    header = json.loads(lines(first)[0])
    meta = (await client.get(f"{API}/meta")).body
    assert header["kind"] == "taskloom-state" and header["version"] == 1
    assert header["board_id"] == meta["board_id"] and header["revision"] == meta["revision"]

    target, target_client = empty_board
    reply = await target_client.request("POST", f"{API}/state", data=first,
                                        headers={"Content-Type": "application/x-ndjson"})
    assert reply.status == 201, reply.body
    assert reply.body["imported"]["task"] == made["tasks"]
    assert reply.body["imported"]["attachment"] == made["attachments"]

    second = await export(target_client)
    assert lines(second)[1:] == lines(first)[1:], "the imported board exports the same card state"
    again = json.loads(lines(second)[0])
    assert again["board_id"] != header["board_id"]

    # The import wrote exactly one activity row: import_completed by system:state-import, last.
    rows = (await target_client.get(f"{API}/activities")).body["items"]
    assert [(r["event"], r["actor_kind"], r["actor_id"]) for r in rows] == [("import_completed", "system", "state-import")]
    counts = rows[0]["changes"]
    assert counts["tasks"] == made["tasks"] and counts["projects"] == 2
    assert rows[0]["revision"] == (await target_client.get(f"{API}/meta")).body["revision"]


async def test_identifiers_counters_and_blobs_survive_the_trip(
    client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]
) -> None:
    await build_random_board(client, 99, projects=1, tasks=6)
    data = await export(client)
    target, target_client = empty_board
    assert (await target_client.request("POST", f"{API}/state", data=data)).status == 201
    old_tasks = (await client.get(f"{API}/tasks?archived=true&limit=200")).body["items"]
    for task in old_tasks:
        moved = (await target_client.get(f"{API}/tasks/{task['identifier']}")).body
        assert moved["id"] == task["id"] and moved["title"] == task["title"] and moved["status"] == task["status"]
        old_files = (await client.get(f"{API}/tasks/{task['id']}/attachments")).body["items"]
        for item in old_files:
            original = await client.get(f"{API}/attachments/{item['id']}")
            copied = await target_client.get(f"{API}/attachments/{item['id']}")
            assert copied.status == 200 and copied.body == original.body
    project = old_tasks[0]["project_id"]
    highest = max(task["number"] for task in old_tasks)
    new = await target_client.post(f"{API}/tasks", {"project": project, "title": "After the import"})
    assert new.status == 201 and new.body["number"] == highest + 1, "the per-project counter was kept"


async def test_the_same_board_exports_the_same_bytes(client: BoardClient) -> None:
    await build_random_board(client, 5, projects=1, tasks=5)
    first, second = await export(client), await export(client)
    assert lines(first)[1:] == lines(second)[1:]
    end = json.loads(lines(first)[-1])
    assert end["kind"] == "end" and sum(end["counts"].values()) == len(lines(first)) - 2


async def test_the_activity_log_is_not_exported(client: BoardClient, board: RunningBoard) -> None:
    await build_random_board(client, 3, projects=1, tasks=4)
    (activities,) = await row_counts(board, "task_activities")
    assert activities > 10
    kinds = {json.loads(line)["kind"] for line in lines(await export(client))}
    assert not kinds & {"activity", "task_activity", "event"}
    assert kinds <= {"taskloom-state", "project", "label", "actor", "task", "comment", "relation", "report",
                     "acceptance_item", "session", "attachment", "end"}


async def test_an_empty_board_exports_header_and_end(client: BoardClient, empty_board: tuple[RunningBoard, BoardClient]) -> None:
    data = await export(client)
    assert len(lines(data)) == 2
    _, target_client = empty_board
    reply = await target_client.request("POST", f"{API}/state", data=data)
    assert reply.status == 201 and sum(reply.body["imported"].values()) == 0


async def test_a_client_that_leaves_mid_export_frees_the_reader(client: BoardClient, board: RunningBoard) -> None:
    """The export holds a reader thread while it streams; a client gone mid-way gives it back."""
    from services.board.commands import projects, tasks
    from services.board.store import Actor

    def many(tx: Any) -> None:
        projects.create_project(tx, id="big", name="Big")
        for n in range(3000):
            tasks.create_task(tx, project="big", title=f"Card {n}", description="x" * 500)

    await board.store.command(many, Actor("human", "ann"))
    response = await client.session.get(f"{board.url}{API}/state", headers={"Authorization": f"Bearer {board.token}"})
    assert response.status == 200
    first = await response.content.read(1024)
    assert first.startswith(b'{"board_id"')
    response.close()  # gone, with most of the export unread

    async def readers_free() -> bool:
        # Two queries that each wait for the other: they finish only when both reader threads
        # are free, i.e. the export's thread was handed back.
        meeting = threading.Barrier(2, timeout=0.5)

        def meet(conn: Any) -> bool:
            try:
                meeting.wait()
            except threading.BrokenBarrierError:
                return False
            return True

        return all(await asyncio.gather(board.store.query(meet), board.store.query(meet)))

    await async_wait_until(readers_free, what="the reader threads", timeout=20)
    assert (await client.get(f"{API}/meta")).status == 200
