"""The hub end to end: the real ``nc`` binary, and a board restart under a live ``taskctl`` follower."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from urllib.parse import urlsplit

import aiohttp
import pytest

from services.board.sqlite_store import SqliteStore
from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, BoardClient, RunningBoard, TaskdProcess

from .conftest import WRITER, Runtime, bulk_rows, hub_caught_up, make_task, write_rows

pytestmark = pytest.mark.asyncio

NC = shutil.which("nc")


async def nc(port: int, text: str, timeout: float = 20.0) -> list[dict]:
    assert NC, "the hub tests need nc (Debian: apt-get install netcat-openbsd)"
    # -N: shut down our sending side at the end of the input, then read until the hub closes.
    process = await asyncio.create_subprocess_exec(
        NC, "-N", "127.0.0.1", str(port), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(text.encode()), timeout)
    assert process.returncode == 0, err.decode()
    return [json.loads(line) for line in out.decode().splitlines()]


async def test_nc_completes_hello_follow_ping(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await write_rows(board, task, 3)
    await hub_caught_up(hub, board)
    typed = (
        f'{{"type":"hello","protocol":{hp.HUB_PROTOCOL},"token":"{hub.token}"}}\n'
        '\n'  # a stray Enter is fine
        '{"type":"ping"}\n'
        f'{{"type":"follow","after":{revisions[0]},"idle_ms":300}}\n'
    )
    lines = await nc(hub.port, typed)
    assert [line["type"] for line in lines] == ["welcome", "pong", "open", "event", "event", "idle"]
    assert lines[0]["board"]["board_id"] == hub.board_id
    assert lines[1]["revision"] == revisions[-1]
    assert lines[2] == {"type": "open", "revision": revisions[-1], "replay": "ring"}
    assert [line["revision"] for line in lines[3:5]] == revisions[1:]


async def test_nc_with_a_wrong_token_is_told_and_closed(hub: Hub, board: RunningBoard) -> None:
    lines = await nc(hub.port, '{"type":"hello","protocol":2,"token":"guess"}\n{"type":"ping"}\n')
    assert [(line["type"], line.get("code")) for line in lines] == [("error", hp.UNAUTHORIZED)]


async def test_board_restart_under_a_live_follower(taskd: TaskdProcess, runtime: Runtime) -> None:
    taskd.start()
    port = urlsplit(taskd.url).port
    env = runtime.env(taskd)
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)
        follower = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "taskctl"), "events", "follow", "--url", taskd.url, "--idle", "0",
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )
        runtime.processes.append(follower)
        assert (await runtime.line(follower))["type"] == "open"

        async def comment(text: str) -> None:
            reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": text})
            assert reply.status == 201, reply.body

        for n in range(3):
            await comment(f"before {n}")
        taskd.stop()
        # While the board is down another process writes the file: those rows must arrive too.
        store = SqliteStore(taskd.data_dir / "board.sqlite")
        store.open()
        try:
            during = await store.command(bulk_rows, WRITER, task["id"], task["project_id"], 5)
        finally:
            store.close()
        taskd.start(port=port)
        for n in range(3):
            await comment(f"after {n}")

        got = []
        missed = 0
        while len(got) < 11:
            line = await runtime.line(follower)
            assert line["type"] in ("event", "heartbeat", "signals_missed"), (
                f"the follower saw {line} across a board restart")
            if line["type"] == "event":
                got.append(line)
            missed += line["type"] == "signals_missed"
        # The restart is a pause, and the follower is told once that signals of it reached no one.
        assert missed == 1
        kinds = [m["activity"]["event"] for m in got]
        assert kinds == ["comment_added"] * 3 + ["task_updated"] * 5 + ["comment_added"] * 3
        assert [m["revision"] for m in got[3:8]] == during
        assert [m["revision"] for m in got] == sorted({m["revision"] for m in got})  # in order, no duplicate
        assert [m["activity"]["changes"].get("commentId") is not None for m in got[8:]] == [True] * 3
        assert follower.returncode is None  # the stream stayed open throughout
