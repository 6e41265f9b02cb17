"""Shared by the bounds tests: a real ``taskd`` and the checks that a refusal left the board whole."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from shared.sse import SSEMessage, SSEParser
from tests.support.board import API, BoardClient, TaskdProcess


def start_taskd(base: Path) -> TaskdProcess:
    """``taskd serve`` as a user runs it, on a free port, in ``base``."""
    base.mkdir(parents=True, exist_ok=True)
    process = TaskdProcess(data_dir=base / "data", runtime_dir=base / "run", log_path=base / "taskd.log")
    return process.start()


def stop_taskd(process: TaskdProcess) -> None:
    if process.process is not None and process.process.poll() is None:
        process.stop()


async def head(client: BoardClient) -> int:
    reply = await client.get(f"{API}/meta")
    assert reply.status == 200, reply.body
    return int(reply.body["revision"])


async def sse_frames(url: str, token: str, *, after: int, until: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    """Activity frames of ``/events?after=`` through the shared SSE parser, up to revision ``until``."""
    parser = SSEParser(last_event_id=str(after))
    frames: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(timeout):
            async with session.get(f"{url}{API}/events?after={after}", headers=headers) as response:
                assert response.status == 200, await response.text()
                while True:
                    chunk = await response.content.readany()
                    assert chunk, f"the stream ended before revision {until}: {frames[-1:]}"
                    for item in parser.feed(chunk):
                        if isinstance(item, SSEMessage) and item.event is None and item.data is not None:
                            frames.append(json.loads(item.data))
                    if frames and frames[-1]["revision"] >= until:
                        return frames


async def assert_board_whole(client: BoardClient, revision: int) -> None:
    """Nothing was written since ``revision``, and every reader still answers: the task list, the
    activity list, and the live stream (which replays the newest row)."""
    assert await head(client) == revision, "a refused request moved the revision"
    tasks = await client.get(f"{API}/tasks?limit=1000")
    assert tasks.status == 200, tasks.body
    rows = await client.get(f"{API}/activities?order=desc&limit=1000")
    assert rows.status == 200, rows.body
    newest = rows.body["items"][0]
    frames = await sse_frames(client.url, client.token or "", after=max(newest["revision"] - 1, 0), until=newest["revision"])
    assert frames[-1] == newest
