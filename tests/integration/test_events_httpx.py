"""An independent SSE client (httpx + httpx-sse) receives the stream and resumes with Last-Event-ID."""

from __future__ import annotations

import json

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from tests.support.board import BoardClient, RunningBoard

pytestmark = pytest.mark.asyncio


async def make_activity(client: BoardClient, count: int) -> list[int]:
    reply = await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})
    assert reply.status == 201
    for n in range(count):
        assert (await client.post("/api/v1/tasks", {"project": "demo", "title": f"t{n}"})).status == 201
    rows = (await client.get("/api/v1/activities")).body["items"]
    return [row["revision"] for row in rows]


async def read_until(source: object, revision: int) -> list[ServerSentEvent]:
    got: list[ServerSentEvent] = []
    async for sse in source.aiter_sse():  # type: ignore[attr-defined]
        got.append(sse)
        if sse.id and int(sse.id) >= revision:
            break
    return got


async def test_httpx_sse_receives_and_resumes(board: RunningBoard, client: BoardClient) -> None:
    revisions = await make_activity(client, 5)
    headers = {"Authorization": f"Bearer {board.token}"}
    async with httpx.AsyncClient(base_url=board.url, headers=headers, timeout=10) as http:
        async with aconnect_sse(http, "GET", "/api/v1/events?after=0") as source:
            assert source.response.headers["content-type"] == "text/event-stream; charset=utf-8"
            first = await read_until(source, revisions[2])
        data = [sse for sse in first if sse.data]
        assert [int(sse.id) for sse in data] == revisions[:3]
        assert all(sse.event == "message" for sse in data), "no event: field, so onmessage-style handlers fire"
        assert [json.loads(sse.data)["revision"] for sse in data] == revisions[:3]
        assert first[0].retry == 1000

        # Resume where the first connection stopped, then follow one live write.
        async with aconnect_sse(http, "GET", "/api/v1/events", headers={"Last-Event-ID": first[-1].id}) as source:
            live = await client.post("/api/v1/tasks", {"project": "demo", "title": "live"})
            row = (await client.get(f"/api/v1/tasks/{live.body['id']}/activities")).body["items"][-1]
            resumed = await read_until(source, row["revision"])
        data = [sse for sse in resumed if sse.data]
        assert [int(sse.id) for sse in data] == [*revisions[3:], row["revision"]]
        assert json.loads(data[-1].data) == row


async def test_httpx_sees_refusals_as_json(board: RunningBoard) -> None:
    headers = {"Authorization": f"Bearer {board.token}", "Last-Event-ID": "12"}
    async with httpx.AsyncClient(base_url=board.url, headers=headers, timeout=10) as http:
        reply = await http.get("/api/v1/events")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "CURSOR_AHEAD"
    assert reply.json()["error"]["details"] == {"after": 12, "head": 0}
