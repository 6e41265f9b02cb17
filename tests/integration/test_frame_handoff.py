"""The writer's hand-off to the fan-out (``services/board/fanout.py``) over a real board.

A committed batch's frames reach the live streams without the log reader reading them back. The
hand-off is taken only when the reader's position equals the head the batch began on; a commit
by another process in between must make it fall back to reading, so that nothing is skipped and
nothing is sent twice. The other process here is a real one, writing the same SQLite file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from services.board.commands import tasks
from services.board.fanout import Handoff
from services.board.keys import LOG_READER
from services.board.store import Actor, Tx
from shared import events
from shared.errors import TaskloomError
from tests.support.board import BoardClient, RunningBoard, make_project, make_task, start_board
from tests.support.frames import FrameStream
from tests.support.gate import Gate
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

ANN = Actor("human", "ann")
REPO = Path(__file__).resolve().parents[2]

#: Another process committing comments to the board's file, ``count`` of them, as fast as it can.
EXTERNAL_WRITER = """
import sys
from pathlib import Path
from services.board.commands.comments import add_comment
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor

store = SqliteStore(Path(sys.argv[1]))
try:
    for n in range(int(sys.argv[3])):
        store.run_command(add_comment, Actor("codex", "elsewhere"), sys.argv[2], body=f"external {n}")
finally:
    store.close()
"""


def database_rows(board: RunningBoard) -> list[int]:
    """Every streamable revision in the file, through a connection of its own."""
    with closing(sqlite3.connect(board.store.path)) as conn:
        return [row[0] for row in conn.execute("SELECT revision FROM task_activities ORDER BY revision")]


def head(board: RunningBoard) -> int:
    with closing(sqlite3.connect(board.store.path)) as conn:
        revision: int = conn.execute("SELECT revision FROM global_revision").fetchone()[0]
        return revision


def handoff_of(board: RunningBoard) -> Handoff:
    handoff = board.store.handoff
    assert isinstance(handoff, Handoff)
    return handoff


async def live_streams(board: RunningBoard, count: int) -> None:
    async def joined() -> bool:
        return board.app[LOG_READER].subscribers == count

    await async_wait_until(joined, what=f"{count} streams in the live fan-out")


async def external_writer(board: RunningBoard, task_ref: str, count: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", EXTERNAL_WRITER, str(board.store.path), task_ref, str(count),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


@pytest.fixture
async def slow_poll_board(tmp_path: Path) -> AsyncIterator[RunningBoard]:
    """A board that would notice another process's commit only after a minute of polling: any
    such commit it streams sooner it found because the hand-off declined and the reader read."""
    running = await start_board(tmp_path / "data", external_poll_interval=60.0)
    try:
        yield running
    finally:
        await running.runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_handed_frames_are_byte_for_byte_the_frames_the_log_reader_reads(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    live = await FrameStream.open(session, board)
    await live_streams(board, 1)
    handoff = handoff_of(board)
    reader = board.app[LOG_READER]
    start, taken, read_before = head(board), handoff.taken, reader.rows_read
    try:
        task = await make_task(client, title="Ünïcode — \"quoted\" \\ back\nslash 🚀", labels=["x", "y"])
        ref = task["id"]
        await client.patch(f"/api/v1/tasks/{ref}", {"title": "a </script> <<title>>", "meta": {"n": 1.5e-7, "z": None}})
        await client.post(f"/api/v1/tasks/{ref}/comments", {"body": "line\r\nbreak \u2028 sep"})
        await client.post(f"/api/v1/tasks/{ref}/claim")
        await client.post(f"/api/v1/tasks/{ref}/move", {"status": "backlog"})
        end = head(board)
        got = await live.until(end)
    finally:
        live.close()
    assert [revision for revision, _ in got] == [r for r in database_rows(board) if r > start]
    assert handoff.taken > taken, "the writer's frames were published"
    # The reader reads a batch back only when its poll raced the hand-off to the loop.
    assert reader.rows_read - read_before < len(got)
    # A replay reads the same rows from the database and encodes them there (logreader.encode_row).
    replay = await FrameStream.open(session, board, f"?after={start}")
    try:
        assert await replay.until(end) == got
    finally:
        replay.close()


async def test_a_commit_from_another_process_before_a_batch_makes_the_reader_read_both(
    slow_poll_board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    board = slow_poll_board
    client = BoardClient(board.url, board.token, session)
    await make_project(client)
    task = await make_task(client)
    live = await FrameStream.open(session, board)
    await live_streams(board, 1)
    handoff = handoff_of(board)
    start = head(board)  # a stream without a cursor starts live here
    try:
        declined, taken = handoff.declined, handoff.taken
        process = await external_writer(board, task["identifier"], 1)
        _, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        # The board's own write now begins after a row the reader has not read: no hand-off.
        await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "after the other process"})
        got = await live.until(head(board), timeout=10)
        assert handoff.declined == declined + 1 and handoff.taken == taken
        rows = [orjson.loads(data) for _, data in got]
        assert [(row["event"], row["actor_id"]) for row in rows] == [
            ("comment_added", "elsewhere"), ("task_updated", "ann"),
        ]
        # The reader has caught up: the next batch starts where it stands and is handed over.
        await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "and again"})
        got = await live.until(head(board), timeout=10)
        assert handoff.taken == taken + 1
    finally:
        live.close()
    assert [revision for revision, _ in got] == [r for r in database_rows(board) if r > start]


async def test_an_external_writer_interleaved_with_the_board_loses_and_repeats_nothing(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    start = head(board)  # streams without a cursor start live here
    streams = [await FrameStream.open(session, board), await FrameStream.open(session, board, "?project=demo")]
    await live_streams(board, 2)
    handoff = handoff_of(board)
    reader = board.app[LOG_READER]
    taken, read_before = handoff.taken, reader.rows_read

    async def board_writer(n: int) -> None:
        me = client.as_actor("claude", f"worker-{n}")
        for round_ in range(30):
            reply = await me.patch(f"/api/v1/tasks/{task['id']}", {"title": f"w{n} r{round_}"})
            assert reply.status == 200

    try:
        process = await external_writer(board, task["identifier"], 150)
        await asyncio.gather(*(board_writer(n) for n in range(4)))
        _, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        end = head(board)
        expected = [revision for revision in database_rows(board) if revision > start]
        for stream in streams:
            got = await stream.until(end)
            assert [revision for revision, _ in got] == expected, "every row once, in revision order"
    finally:
        for stream in streams:
            stream.close()
    external = sum(1 for _, data in streams[0].frames if orjson.loads(data)["actor_id"] == "elsewhere")
    assert external == 150
    assert handoff.taken > taken, "board batches were handed over"
    assert reader.rows_read - read_before >= 150, "the other process's rows were read from the file"


def record_then_refuse(tx: Tx, ref: str) -> None:
    """An activity row, then a refusal: its savepoint undoes the row, and its frame must go too."""
    tasks.update_task(tx, ref, title="never committed")
    raise TaskloomError("VALIDATION_FAILED", "changed my mind after writing")


def bulk(tx: Tx, task_id: str, count: int) -> None:
    for n in range(count):
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {"n": n}}),
                  task_id=task_id, project_id="demo")


async def test_a_refused_command_in_a_handed_batch_sends_no_frame(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    live = await FrameStream.open(session, board)
    await live_streams(board, 1)
    handoff = handoff_of(board)
    store = board.store
    start, taken, overtaken = head(board), handoff.taken, handoff.overtaken
    gate = Gate()
    held = asyncio.ensure_future(store.command(gate, ANN))
    await asyncio.get_running_loop().run_in_executor(None, gate.started.wait, 10)
    calls: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(store.command(bulk, ANN, task["id"], 3)),
        asyncio.ensure_future(store.command(record_then_refuse, ANN, task["id"])),
        asyncio.ensure_future(store.command(bulk, ANN, task["id"], 2)),
    ]

    async def queued() -> bool:
        return store.queued >= len(calls)

    await async_wait_until(queued, what="three commands behind the gate")
    gate.release.set()
    await held
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(outcomes[1], TaskloomError) and outcomes[0] is None and outcomes[2] is None
    try:
        got = await live.until(head(board))
    finally:
        live.close()
    rows = [orjson.loads(data) for revision, data in got if revision > start]
    assert [row["changes"]["after"]["meta"]["n"] for row in rows] == [0, 1, 2, 0, 1]
    assert [row["revision"] for row in rows] == [r for r in database_rows(board) if r > start]
    # One batch, one hand-off (or, when the reader's poll saw the commit first, the reader's page).
    assert handoff.taken + handoff.overtaken == taken + overtaken + 1
