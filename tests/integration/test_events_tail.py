"""``taskctl events tail`` as a user runs it, against a real board: NDJSON records and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.board.keys import STREAMS
from tests.support.board import BoardClient, RunningBoard, start_board
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

TASKCTL = str(Path(sys.executable).parent / "taskctl")


class Tail:
    """A running ``taskctl events tail`` whose stdout is read record by record."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.records: list[dict[str, Any]] = []

    @classmethod
    async def start(cls, board: RunningBoard, tmp_path: Path, *args: str) -> Tail:
        env = dict(os.environ)
        env.update(TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_NO_AUTOSTART="1", TASKLOOM_TOKEN=board.token)
        env.pop("TASKLOOM_URL", None)
        process = await asyncio.create_subprocess_exec(
            TASKCTL, "events", "tail", "--url", board.url, *args,
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def record(self, timeout: float = 10.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            stderr = await self.process.stderr.read() if self.process.stderr else b""
            raise AssertionError(f"tail ended early: {stderr.decode()}")
        record = json.loads(line)
        self.records.append(record)
        return record

    async def exit_code(self, timeout: float = 10.0) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout)

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


async def seed(client: BoardClient, count: int) -> list[dict[str, Any]]:
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    for n in range(count):
        assert (await client.post("/api/v1/tasks", {"project": "demo", "title": f"t{n}"})).status == 201
    return (await client.get("/api/v1/activities")).body["items"]


async def test_tail_replays_follows_and_exits_0_on_shutdown(tmp_path: Path) -> None:
    board = await start_board(tmp_path / "data")
    stopped = False
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            rows = await seed(client, 2)
            tail = await Tail.start(board, tmp_path, "--after", "0")
            try:
                meta = (await client.get("/api/v1/meta")).body
                assert await tail.record() == {"type": "open", "after": 0, "board_id": meta["board_id"]}
                for row in rows:
                    assert await tail.record() == {"type": "event", "revision": row["revision"], "activity": row}
                await client.post("/api/v1/tasks", {"project": "demo", "title": "live"})
                live = await tail.record()
                assert live["type"] == "event" and live["activity"]["event"] == "task_created"
                await board.runner.cleanup()
                stopped = True
                assert await tail.record() == {"type": "shutdown", "reason": "server_stopping"}
                assert await tail.exit_code() == 0
            finally:
                tail.kill()
    finally:
        if not stopped:
            await board.runner.cleanup()


async def test_tail_starts_at_the_head_and_filters(board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    rows = await seed(client, 2)
    tail = await Tail.start(board, tmp_path, "--event", "comment_added")
    try:
        board_id = (await client.get("/api/v1/meta")).body["board_id"]
        assert await tail.record() == {"type": "open", "after": rows[-1]["revision"], "board_id": board_id}
        await async_wait_until(lambda: _true(len(board.app[STREAMS]) == 1), what="the tail's stream")
        await client.post(f"/api/v1/tasks/{rows[-1]['task_id']}/comments", {"body": "hello"})
        await client.post(f"/api/v1/tasks/{rows[-1]['task_id']}/move", {"to": "backlog"})
        await client.post(f"/api/v1/tasks/{rows[-1]['task_id']}/comments", {"body": "again"})
        first, second = await tail.record(), await tail.record()
        assert [first["activity"]["event"], second["activity"]["event"]] == ["comment_added", "comment_added"]
        assert second["revision"] > first["revision"]
    finally:
        tail.kill()


async def test_tail_refusal_is_an_error_record_and_exit_1(board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    tail = await Tail.start(board, tmp_path, "--after", "999")
    record = await tail.record()
    assert record["type"] == "error" and record["code"] == "CURSOR_AHEAD" and record["resume_after"] == 999
    assert await tail.exit_code() == 1
    assert board.token not in json.dumps(tail.records)


async def test_tail_broken_stream_prints_where_to_resume(board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    rows = await seed(client, 1)
    tail = await Tail.start(board, tmp_path, "--after", "0")
    try:
        assert (await tail.record())["type"] == "open"
        for _ in rows:
            await tail.record()
        for stream in board.app[STREAMS]:
            stream.abort()  # the connection drops without the end of the chunked body
        record = await tail.record()
        assert record["type"] == "error" and record["code"] == "STREAM_BROKEN"
        assert record["resume_after"] == rows[-1]["revision"]
        assert await tail.exit_code() == 1
    finally:
        tail.kill()


async def test_tail_without_a_board_is_an_error_record(tmp_path: Path) -> None:
    env = dict(os.environ, TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_NO_AUTOSTART="1", TASKLOOM_TOKEN="tl_x")
    process = await asyncio.create_subprocess_exec(
        TASKCTL, "events", "tail", "--url", "http://127.0.0.1:9", "--after", "3",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 20)
    record = json.loads(out.splitlines()[0])
    assert record["type"] == "error" and record["code"] == "BOARD_UNREACHABLE" and record["resume_after"] == 3
    assert process.returncode == 1


async def _true(value: bool) -> bool:
    return value
