"""``GET /api/v1/tasks/{ref}/history``: the brief's History as data, entry for line.

The golden card (every event the brief phrases, heartbeat runs, a reopen) is read both ways and
the JSON, rendered as the brief renders it, must be the brief's History section byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from services.board.queries.history import history_line
from tests.integration.test_export import GOLDEN, activity_count, clocked_board, make_task, seed_golden_card
from tests.support.board import BoardClient, RunningBoard


def history_section(markdown: str) -> list[str]:
    return markdown.split("\n## History\n\n", 1)[1].rstrip("\n").split("\n")


async def test_the_golden_cards_history_is_its_briefs_history_section(tmp_path: Path) -> None:
    async with clocked_board(tmp_path / "data") as board, aiohttp.ClientSession() as session:
        await seed_golden_card(board.store)
        client = BoardClient(board.url, board.token, session)
        reply = await client.get("/api/v1/tasks/DEMO-0001/history")
        exported = (await client.post("/api/v1/export", {"ref": "DEMO-0001"})).body
        rows = (await client.get("/api/v1/tasks/DEMO-0001/activities?limit=1000")).body["items"]
    assert reply.status == 200, reply.body
    assert reply.body["task"] == exported["task"]
    items: list[dict[str, Any]] = reply.body["items"]
    assert [history_line(entry) for entry in items] == history_section(exported["markdown"])
    # The brief on disk is the same brief (the golden fixture), so this is not a tautology of one render.
    assert [history_line(entry) for entry in items] == history_section(GOLDEN.read_text(encoding="utf-8"))

    # Every activity row is in exactly one entry, in log order; runs of heartbeats fold into one.
    assert [row_id for entry in items for row_id in entry["activity_ids"]] == [row["id"] for row in rows]
    runs = [entry for entry in items if entry["event"] == "task_heartbeat" and len(entry["activity_ids"]) > 1]
    assert [len(entry["activity_ids"]) for entry in runs] == [3, 2]
    first_run = runs[0]
    assert first_run["text"] == f"3 heartbeats, last at {first_run['last_at']}"
    assert first_run["at"] < first_run["last_at"]

    # Structured enough to resume from without parsing text: the raw changes ride along.
    reopened = next(entry for entry in items if entry["event"] == "task_reopened")
    assert reopened["changes"]["reason"] == "The docs miss the --json output shape"
    assert reopened["actor"] == {"kind": "human", "id": "ann"}
    assert reopened["text"].startswith("reopened (done → todo), round 3 begins")


async def test_history_follows_the_real_commands(client: BoardClient, board: RunningBoard) -> None:
    card = await make_task(client, "Write the docs")
    worker = client.as_actor("claude", "worker-1")
    assert (await worker.post(f"/api/v1/tasks/{card['id']}/claim", {})).status == 200
    for _ in range(2):
        assert (await worker.post(f"/api/v1/tasks/{card['id']}/heartbeat", {})).status == 200
    assert (await worker.post(f"/api/v1/tasks/{card['id']}/ask", {"body": "Which shells?"})).status == 200

    by_uuid = await client.get(f"/api/v1/tasks/{card['id']}/history")
    by_identifier = await client.get("/api/v1/tasks/demo-0001/history")
    assert by_uuid.status == by_identifier.status == 200
    assert by_uuid.body == by_identifier.body
    texts = [(entry["event"], entry["text"]) for entry in by_uuid.body["items"]]
    assert texts[1:] == [
        ("task_claimed", "claimed (todo → in_progress)"),
        ("task_heartbeat", f"2 heartbeats, last at {by_uuid.body['items'][2]['last_at']}"),
        ("comment_added", 'asked: "Which shells?"'),
        ("task_moved", 'moved in_progress → awaiting: "Which shells?"'),
    ]
    assert texts[0][0] == "task_created"
    assert by_uuid.body["task"]["status"] == "awaiting"


async def test_history_is_a_read_and_an_unknown_ref_is_404(client: BoardClient, board: RunningBoard) -> None:
    card = await make_task(client, "Write the docs")
    before = await activity_count(board)
    reply = await client.get(f"/api/v1/tasks/{card['id']}/history", actor=None)
    assert reply.status == 200 and [entry["event"] for entry in reply.body["items"]] == ["task_created"]
    for ref in ("DEMO-0999", "00000000-0000-0000-0000-000000000000"):
        missing = await client.get(f"/api/v1/tasks/{ref}/history")
        assert missing.status == 404 and missing.error == "NOT_FOUND"
    refused = await client.get(f"/api/v1/tasks/{card['id']}/history?limit=5")
    assert refused.status == 400 and refused.error == "VALIDATION_FAILED"
    assert await activity_count(board) == before
