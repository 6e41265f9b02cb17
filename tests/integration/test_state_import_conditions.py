"""A state import (``POST /api/v1/state``) and the conditions (docs/conditions.md §3, §4.3, §5).

The import is a command of the running board, in one transaction, like any other write, so the
conditions hold on the imported board at once: ``/breaches`` "is read from condition_marks, which
every command keeps equal to its state", the temporal ones are armed without a restart, the keys
conditions read are refused in a file as in a project write, and the clock of ``status_timeout``
(``status_since``) travels with the card.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.board import API, BoardClient, RunningBoard, make_project, make_task, start_board
from tests.support.signals import RawStream

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def fresh(tmp_path: Path, session: aiohttp.ClientSession) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    board = await start_board(tmp_path / "fresh")
    try:
        yield board, BoardClient(board.url, board.token, session)
    finally:
        await board.runner.cleanup()


async def export(client: BoardClient) -> bytes:
    reply = await client.get(f"{API}/state")
    assert reply.status == 200, reply.body
    return bytes(reply.body)


async def import_into(client: BoardClient, data: bytes) -> Any:
    return await client.request("POST", f"{API}/state", data=data, headers={"Content-Type": "application/x-ndjson"})


def breach_keys(items: list[dict[str, Any]]) -> list[tuple[str, str | None, Any]]:
    return sorted((b["type"], b["task_id"], json.dumps(b["changes"], sort_keys=True)) for b in items)


async def test_an_imported_board_lists_the_conditions_its_state_holds(
    client: BoardClient, fresh: tuple[RunningBoard, BoardClient]
) -> None:
    await make_project(client)
    assert (await client.patch(f"{API}/projects/demo", {"settings": {"wip_limits": {"in_progress": 1}}})).status == 200
    one, two = await make_task(client, title="one"), await make_task(client, title="two")
    blocker, blocked = await make_task(client, title="blocker"), await make_task(client, title="blocked")
    for task in (one, two):
        assert (await client.post(f"{API}/tasks/{task['id']}/claim", {})).status == 200
    assert (await client.post(f"{API}/tasks/{blocker['id']}/relations",
                              {"type": "blocks", "target": blocked["id"]})).status == 201
    source = (await client.get(f"{API}/breaches")).body["items"]
    assert {b["type"] for b in source} == {"wip_exceeded", "card_blocked"}, source

    _, target = fresh
    assert (await import_into(target, await export(client))).status == 201
    imported = (await target.get(f"{API}/breaches")).body["items"]
    assert breach_keys(imported) == breach_keys(source), (
        "after a state import the board's state holds a WIP limit over its limit and a blocked card, "
        f"but GET /breaches (the catch-up, 'kept equal to its state' by every command) lists {imported}; "
        f"the exporting board lists {source}"
    )


async def test_an_imported_stale_claim_fires_claim_stale_without_a_restart(
    client: BoardClient, board: RunningBoard, fresh: tuple[RunningBoard, BoardClient], session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    assert (await client.patch(f"{API}/projects/demo", {"settings": {"monitors": {"claim_stale_after": 1}}})).status == 200
    task = await make_task(client)
    stream = await RawStream.open(session, board.url, board.token)
    assert (await client.as_actor("claude", "worker-1").post(f"{API}/tasks/{task['id']}/claim", {})).status == 200
    fired = await stream.signal("claim_stale", timeout=5)  # the source board's own timer: the claim is stale
    assert fired["task_id"] == task["id"]
    stream.close()

    target_board, target = fresh
    target_stream = await RawStream.open(session, target_board.url, target_board.token)
    assert (await import_into(target, await export(client))).status == 201
    # The imported card is in_progress with a heartbeat more than a second old, and it has no mark
    # on this board: its deadline has passed, so it must fire at once (as at a start, §3).
    try:
        got = await target_stream.signal("claim_stale", timeout=5)
    except TimeoutError:
        breaches = (await target.get(f"{API}/breaches")).body["items"]
        pytest.fail(
            "an imported in_progress card whose heartbeat is past claim_stale_after never fires claim_stale: "
            "the import arms no deadline, so a dead worker's card stays silent until the board restarts "
            f"(breaches: {breaches})"
        )
    assert got["task_id"] == task["id"]


async def test_a_state_import_refuses_condition_settings_the_api_refuses(
    client: BoardClient, fresh: tuple[RunningBoard, BoardClient]
) -> None:
    await make_project(client)
    bad = {"wip_limits": {"in_progress": -3}, "monitors": {"idle_after": 0.01}}
    refused = await client.patch(f"{API}/projects/demo", {"settings": bad})
    assert refused.status == 400 and refused.error == "VALIDATION_FAILED", refused.body
    lines = (await export(client)).splitlines()
    edited = []
    for line in lines:
        record = json.loads(line)
        if record.get("kind") == "project":
            record["row"]["settings"] = bad
            line = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        edited.append(line)
    _, target = fresh
    reply = await import_into(target, b"\n".join(edited) + b"\n")
    stored = (await target.get(f"{API}/projects/demo")).body if reply.status == 201 else None
    assert reply.status == 400, (
        "a state import whose project settings hold a negative WIP limit and a 0.01 s threshold must be refused "
        "like the same settings on a project create/update (400 VALIDATION_FAILED, docs/conditions.md §5); "
        f"it was accepted ({reply.status}) and the board now holds settings it silently ignores: "
        f"{stored and stored.get('settings')}"
    )


async def test_a_state_round_trip_keeps_when_each_card_entered_its_status(
    client: BoardClient, fresh: tuple[RunningBoard, BoardClient]
) -> None:
    """status_timeout counts from tasks.status_since (§2.2); the export does not carry it, so an
    imported card counts from its last update (any edit) or from nothing at all."""
    await make_project(client)
    assert (await client.patch(f"{API}/projects/demo", {"settings": {
        "monitors": {"max_time_in_status": {"blocked": 86400}}}})).status == 200
    task = await make_task(client)
    moved = (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "blocked", "reason": "waiting on CI"})).body
    # An edit after the move: updated_at moves on, status_since stays at the move.
    edited = (await client.patch(f"{API}/tasks/{task['id']}", {"title": "Write the docs, again"})).body
    assert edited["status_since"] == moved["status_since"], edited

    _, target = fresh
    assert (await import_into(target, await export(client))).status == 201
    imported = (await target.get(f"{API}/tasks/{task['id']}")).body
    assert imported["status_since"] == moved["status_since"], (
        "a state export/import loses tasks.status_since (the status_timeout clock): the card entered blocked at "
        f"{moved['status_since']}, the imported card says status_since={imported['status_since']!r} "
        f"(its status_timeout would count from updated_at {imported['updated_at']})"
    )


async def test_an_export_written_before_status_since_was_carried_is_still_imported(
    client: BoardClient, fresh: tuple[RunningBoard, BoardClient]
) -> None:
    """Files written by a board before the export carried ``status_since`` stay readable: the card
    counts from its last update, as the schema migration that added the column counted."""
    await make_project(client)
    task = await make_task(client)
    lines = (await export(client)).splitlines()
    older = []
    for line in lines:
        record = json.loads(line)
        if record.get("kind") == "task":
            del record["row"]["status_since"]
        older.append(json.dumps(record).encode())
    _, target = fresh
    reply = await import_into(target, b"\n".join(older) + b"\n")
    assert reply.status == 201, reply.body
    imported = (await target.get(f"{API}/tasks/{task['id']}")).body
    assert imported["status_since"] == imported["updated_at"], imported
