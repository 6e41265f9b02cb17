"""Cursors the stream must refuse rather than resolve (SPEC §6.2): a cursor the board cannot place
exactly in its own history is an error the client acts on, never a position it guesses.

Raw HTTP/1.0 sockets, so nothing between the test and the board folds or rewrites headers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.board.keys import STREAMS
from shared import events
from shared.sse import SSEMessage, SSEParser
from tests.support.board import BoardClient, RunningBoard, make_task
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

READ_TIMEOUT = 10.0


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


async def streamable_revisions(board: RunningBoard) -> list[int]:
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


async def raw_events(
    board: RunningBoard, query: str, header_lines: list[str]
) -> tuple[int, Any, asyncio.StreamReader, asyncio.StreamWriter]:
    """Send GET /api/v1/events by hand; the status, the JSON body of a refusal, and the socket pair."""
    reader, writer = await asyncio.open_connection(*host_port(board.url))
    lines = [
        f"GET /api/v1/events{query} HTTP/1.0",
        f"Host: {board.url.removeprefix('http://')}",
        f"Authorization: Bearer {board.token}",
        "Accept: text/event-stream",
        *header_lines,
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    async with asyncio.timeout(READ_TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        body: Any = None
        if status != 200:
            body = json.loads(await reader.read())
    return status, body, reader, writer


async def data_ids_until(reader: asyncio.StreamReader, revision: int) -> list[int]:
    """The ids of the activity frames the stream sends until its cursor reaches ``revision``."""
    parser = SSEParser()
    pending: list[Any] = []
    ids: list[int] = []
    cursor = 0
    async with asyncio.timeout(READ_TIMEOUT):
        while cursor < revision:
            if not pending:
                chunk = await reader.read(65536)
                assert chunk, "the board ended the stream early"
                pending.extend(parser.feed(chunk))
                continue
            item = pending.pop(0)
            if isinstance(item, SSEMessage) and item.id:
                cursor = int(item.id)
                if item.data is not None and item.event is None:
                    ids.append(cursor)
    return ids


async def test_two_last_event_id_headers_are_refused_naming_both(board: RunningBoard, client: BoardClient) -> None:
    """A request carrying ``Last-Event-ID`` twice names two positions. Taking either one can resume
    past rows the client never had (with the later first, every row between the two is skipped),
    so it is ``400 VALIDATION_FAILED`` with both values in ``details``, as the same two values
    folded into one header and a repeated ``?after=`` are; no stream is opened."""
    for n in range(5):
        await make_task(client, title=f"t{n}")
    revisions = await streamable_revisions(board)
    high, low = revisions[3], revisions[1]

    folded, folded_body, _, writer = await raw_events(board, "", [f"Last-Event-ID: {high}, {low}"])
    writer.close()
    assert folded == 400 and folded_body["error"]["code"] == "VALIDATION_FAILED", folded_body

    status, body, reader, writer = await raw_events(board, "", [f"Last-Event-ID: {high}", f"Last-Event-ID: {low}"])
    try:
        if status == 200:
            got = await data_ids_until(reader, revisions[-1])
            skipped = [r for r in revisions if low < r <= high and r not in got]
            pytest.fail(f"two Last-Event-ID headers ({high}, then {low}) were answered 200 and resumed after "
                        f"{high}: revisions {skipped} were skipped")
        assert status == 400 and body["error"]["code"] == "VALIDATION_FAILED", body
        assert body["error"]["details"]["last_event_id"] == [str(high), str(low)], body
    finally:
        writer.close()

    # One header is still a cursor: the stream resumes after it and sends every later row.
    status, body, reader, writer = await raw_events(board, "", [f"Last-Event-ID: {low}"])
    try:
        assert status == 200, body
        assert await data_ids_until(reader, revisions[-1]) == [r for r in revisions if r > low]
    finally:
        writer.close()

    async def no_stream_open() -> bool:
        return len(board.app[STREAMS]) == 0

    await async_wait_until(no_stream_open, what="no stream left open")
