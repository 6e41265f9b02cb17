"""``?after=`` and ``Last-Event-ID`` together: the later one wins, both are validated (SPEC §6.2).

A native ``EventSource`` opened on ``/api/v1/events?after=N`` resends ``?after=N`` with the
``Last-Event-ID`` of its own progress on every reconnect. When the query won, each reconnect
replayed everything since N again. The client here is a raw HTTP/1.0 socket (the board then
streams without chunked framing), so nothing between the test and the board rewrites headers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.board.keys import STREAMS
from shared import events
from shared.sse import SSEMessage, SSEParser
from tests.support.board import BoardClient, RunningBoard, activity_count, make_task

from .support_http import host_port

pytestmark = pytest.mark.asyncio

READ_TIMEOUT = 10.0


async def streamable_revisions(board: RunningBoard) -> list[int]:
    """Every revision an unfiltered stream delivers as data, in order."""
    noise = tuple(events.WIRE_NOISE)
    marks = ",".join("?" * len(noise))
    return await board.store.query(
        lambda conn: [
            row[0]
            for row in conn.execute(
                f"SELECT revision FROM task_activities WHERE revision IS NOT NULL AND event NOT IN ({marks})"
                " ORDER BY revision",
                noise,
            )
        ]
    )


class RawStream:
    """``GET /api/v1/events`` written by hand over a socket; the body read as SSE."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.parser = SSEParser()
        self.pending: list[Any] = []

    @classmethod
    async def request(cls, board: RunningBoard, query: str, last_event_id: str | None) -> tuple[int, Any, RawStream]:
        reader, writer = await asyncio.open_connection(*host_port(board.url))
        lines = [
            f"GET /api/v1/events{query} HTTP/1.0",
            f"Host: {board.url.removeprefix('http://')}",
            f"Authorization: Bearer {board.token}",
            "Accept: text/event-stream",
        ]
        if last_event_id is not None:
            lines.append(f"Last-Event-ID: {last_event_id}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        stream = cls(reader, writer)
        async with asyncio.timeout(READ_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            body: Any = None
            if status != 200:
                body = json.loads(await reader.read())
        return status, body, stream

    async def data_ids_until(self, revision: int) -> list[int]:
        """The ids of the data frames received until the cursor reaches ``revision``."""
        ids: list[int] = []
        cursor = 0
        async with asyncio.timeout(READ_TIMEOUT):
            while cursor < revision:
                if not self.pending:
                    chunk = await self.reader.read(65536)
                    assert chunk, "the board ended the stream early"
                    self.pending.extend(self.parser.feed(chunk))
                    continue
                item = self.pending.pop(0)
                if isinstance(item, SSEMessage) and item.id:
                    cursor = int(item.id)
                    if item.data is not None and item.event is None:
                        ids.append(cursor)
        return ids

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def four_tasks(client: BoardClient, board: RunningBoard) -> list[int]:
    for n in range(4):
        await make_task(client, title=f"t{n}")
    return await streamable_revisions(board)


@pytest.mark.parametrize("later", ["Last-Event-ID", "after"])
async def test_the_later_of_query_and_header_wins(board: RunningBoard, client: BoardClient, later: str) -> None:
    revisions = await four_tasks(client, board)
    early, late = revisions[0], revisions[2]
    query, header = (early, late) if later == "Last-Event-ID" else (late, early)
    status, body, stream = await RawStream.request(board, f"?after={query}", str(header))
    try:
        assert status == 200, body
        ids = await stream.data_ids_until(revisions[-1])
        assert ids == [revision for revision in revisions if revision > late], "resumed after the later cursor"
    finally:
        await stream.close()


async def test_a_reconnect_with_both_does_not_replay_what_it_saw(board: RunningBoard, client: BoardClient) -> None:
    """What an EventSource does: open on ?after=N, read, reconnect with ?after=N and its Last-Event-ID."""
    revisions = await four_tasks(client, board)
    opened_at = revisions[0]
    status, body, first = await RawStream.request(board, f"?after={opened_at}", None)
    assert status == 200, body
    seen = await first.data_ids_until(revisions[-1])
    await first.close()
    await make_task(client, title="after the reconnect")
    head = (await streamable_revisions(board))[-1]
    status, body, again = await RawStream.request(board, f"?after={opened_at}", str(seen[-1]))
    try:
        assert status == 200, body
        resumed = await again.data_ids_until(head)
    finally:
        await again.close()
    assert not set(seen) & set(resumed), "no frame is delivered twice"
    assert seen + resumed == [revision for revision in await streamable_revisions(board) if revision > opened_at]


@pytest.mark.parametrize(
    ("query", "header", "code", "detail"),
    [
        ("?after=abc", "{low}", "VALIDATION_FAILED", "value"),
        ("?after={low}", "garbage", "VALIDATION_FAILED", "last_event_id"),
        ("?after={low}", "-1", "VALIDATION_FAILED", "last_event_id"),
        ("?after=-1", "{low}", "VALIDATION_FAILED", "value"),
        ("?after={low}", "{ahead}", "CURSOR_AHEAD", "after"),
        ("?after={ahead}", "{low}", "CURSOR_AHEAD", "after"),
    ],
)
async def test_both_cursors_are_validated(
    board: RunningBoard, client: BoardClient, query: str, header: str, code: str, detail: str
) -> None:
    revisions = await four_tasks(client, board)
    values = {"low": revisions[0], "ahead": revisions[-1] + 100}
    before = await activity_count(board)
    status, body, stream = await RawStream.request(board, query.format(**values), header.format(**values))
    await stream.close()
    assert status == 400 and body["error"]["code"] == code, body
    assert detail in body["error"]["details"]
    if code == "CURSOR_AHEAD":
        assert body["error"]["details"]["after"] == values["ahead"]
    assert await activity_count(board) == before
    assert len(board.app[STREAMS]) == 0
