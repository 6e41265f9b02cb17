"""The board's one log reader when a compaction raises the floor past rows it has not read yet.

Rows another process commits are read at the reader's next poll or the next in-process commit.
If a compaction commits in between (``POST /admin/compact`` into those rows), the reader's
position is below the new floor. The reader is not a client: it moves to the floor and reads on,
so a live stream above the floor keeps streaming, while a stream below it closes and its
client's reconnect is answered ``410 CURSOR_EXPIRED`` (SPEC §6.2), as if it had been behind on
its own.

A long poll interval (the real ``--poll-interval`` knob) only makes the window deterministic: at
the default 50 ms the same state arises whenever the compaction commits between another
process's commit and the reader's next read, or while the reader works through a backlog.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from services.board.keys import LOG_READER
from services.board.logreader import LogReader
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx
from shared import events
from shared.sse import SSEMessage, SSEParser
from tests.support.board import API, BoardClient, RunningBoard, make_project, make_task, start_board
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

OTHER = Actor("codex", "elsewhere")
#: Rows the other process writes; the compaction takes the first half of them.
WRITTEN_ELSEWHERE = 40

#: ``write(board, task_id, count)``: commit ``count`` activity rows as another process would,
#: without waking this board's reader; their revisions.
WriteElsewhere = Callable[[RunningBoard, str, int], Awaitable[list[int]]]


def bulk_rows(tx: Tx, task_id: str, project_id: str, count: int) -> list[int]:
    return [
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {"n": n}}),
                  task_id=task_id, project_id=project_id)
        for n in range(count)
    ]


async def rows_from_another_process(board: RunningBoard, task_id: str, count: int) -> list[int]:
    """A second store on the board's file, as a script or ``taskctl`` on the file would open one."""

    def write() -> list[int]:
        store = SqliteStore(board.data_dir / "board.sqlite")
        try:
            return store.run_command(bulk_rows, OTHER, task_id, "demo", count)[0]
        finally:
            store.close()

    return await asyncio.to_thread(write)


class Stream:
    """One SSE response read with the shared parser; ``closed`` once the board ends it."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.parser = SSEParser()
        self.items: list[Any] = []
        self.closed = False

    async def data_frames_until(self, wanted: Callable[[dict[str, Any]], bool],
                                timeout: float = 10.0) -> list[dict[str, Any]]:
        """Activity frames until ``wanted(frame)``; stops early (returns what came) if the board closes."""
        got: list[dict[str, Any]] = []
        async with asyncio.timeout(timeout):
            while True:
                while self.items:
                    item = self.items.pop(0)
                    if isinstance(item, SSEMessage) and item.data is not None and item.event is None:
                        frame = orjson.loads(item.data)
                        got.append(frame)
                        if wanted(frame):
                            return got
                chunk = await self.response.content.readany()
                if not chunk:
                    self.closed = True
                    return got
                self.items.extend(self.parser.feed(chunk))


async def a_floor_past_unread_rows_moves_the_reader_on(tmp_path: Path, write_elsewhere: WriteElsewhere,
                                                       **settings: Any) -> None:
    board = await start_board(tmp_path / "data", external_poll_interval=60.0, **settings)
    session = aiohttp.ClientSession()
    try:
        client = BoardClient(board.url, board.token, session)
        await make_project(client)
        task = await make_task(client, title="target")
        reader: LogReader = board.app[LOG_READER]
        headers = {"Authorization": f"Bearer {board.token}"}

        async def subscribers(count: int) -> bool:
            return reader.subscribers == count

        # A live stream, so the reader is in fan-out mode (it reads rows, not only the head).
        below_at = (await client.get(f"{API}/meta")).body["revision"]
        below = Stream(await session.get(f"{board.url}{API}/events?after={below_at}", headers=headers))
        assert below.response.status == 200
        await async_wait_until(lambda: subscribers(1), what="the first stream live")

        written = await write_elsewhere(board, task["id"], WRITTEN_ELSEWHERE)
        assert reader.position < written[0], "precondition: the reader has not read the other process's rows"

        # The board's own compaction raises the floor into those rows.
        through = written[WRITTEN_ELSEWHERE // 2]
        reply = await client.post(f"{API}/admin/compact", {"through": through})
        assert reply.status == 200 and reply.body["floor"] == through, reply.body

        # A stream above the floor: at the head, as /meta says.
        head = (await client.get(f"{API}/meta")).body["revision"]
        assert head > through
        at_head = Stream(await session.get(f"{board.url}{API}/events?after={head}", headers=headers))
        assert at_head.response.status == 200
        await async_wait_until(lambda: subscribers(2), what="the second stream live")

        # The next in-process commit wakes the reader, still below the floor.
        note = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "after the compaction"})
        assert note.status == 201, note.body

        def is_comment(frame: dict[str, Any]) -> bool:
            return bool(frame["event"] == "comment_added")

        live = await at_head.data_frames_until(is_comment)
        assert not at_head.closed and [frame["event"] for frame in live] == ["comment_added"], (
            f"a stream above the floor (after={head} > floor {through}) did not get the live comment: "
            f"{[frame['event'] for frame in live]} (closed: {at_head.closed})"
        )

        # The stream below the floor missed rows that are gone: it is closed without a frame, and
        # its client's reconnect with its cursor is told so.
        missed = await below.data_frames_until(lambda frame: False)
        assert below.closed and missed == [], [frame["revision"] for frame in missed]
        again = await session.get(f"{board.url}{API}/events?after={below_at}", headers=headers)
        body = await again.json()
        assert again.status == 410 and body["error"]["code"] == "CURSOR_EXPIRED", body
        assert body["error"]["details"] == {"after": below_at, "floor": through}, body
        await async_wait_until(lambda: subscribers(1), what="the stream below the floor gone")
        assert reader.position >= head, "the reader moved on past the floor"

        # What is left above the floor is all there: a stream resuming at the floor replays it.
        at_floor = Stream(await session.get(f"{board.url}{API}/events?after={through}", headers=headers))
        assert at_floor.response.status == 200
        replayed = await at_floor.data_frames_until(is_comment)
        assert not at_floor.closed
        assert [frame["revision"] for frame in replayed[:-1]] == written[WRITTEN_ELSEWHERE // 2 + 1:]
        for stream in (at_floor, at_head):
            stream.response.close()
    finally:
        await session.close()
        await board.runner.cleanup()


async def test_a_floor_raised_past_unread_rows_cuts_only_the_streams_below_it(tmp_path: Path) -> None:
    """A compaction that raises the floor past rows the log reader has not read yet closes the
    live streams below the floor (their reconnect is 410, they missed rows that are gone) and no
    other: the reader moves to the floor and reads on, and streams above it follow live."""
    await a_floor_past_unread_rows_moves_the_reader_on(tmp_path, rows_from_another_process)
