"""Several ``taskd serve --database postgresql://…`` processes on one database, and a stream reader."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import orjson

from shared.sse import SSEMessage, SSEParser
from tests.support.board import TaskdProcess


def board_process(tmp_path: Path, name: str, url: str) -> TaskdProcess:
    """One board process with its own data and runtime directories, serving database ``url``."""
    root = tmp_path / name
    process = TaskdProcess(data_dir=root / "data", runtime_dir=root / "run", log_path=root / "taskd.log")
    root.mkdir(parents=True, exist_ok=True)
    return process.start("--database", url)


class Follower:
    """One SSE stream from revision ``after``: records every data frame's revision, in arrival order."""

    def __init__(self, session: aiohttp.ClientSession, url: str, token: str, *, after: int = 0) -> None:
        self.session, self.url, self.token, self.after = session, url, token, after
        self.revisions: list[int] = []
        self.arrivals: dict[int, float] = {}
        self.cursor = after
        self.opened = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Follower:
        self.task = asyncio.ensure_future(self._run())
        return self

    async def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.session.get(f"{self.url}/api/v1/events?after={self.after}", headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as response:
            assert response.status == 200, await response.text()
            parser = SSEParser()
            self.opened.set()
            async for chunk in response.content.iter_any():
                now = time.perf_counter()
                for item in parser.feed(chunk):
                    if not isinstance(item, SSEMessage) or item.id is None or not item.id.isdigit():
                        continue
                    revision = int(item.id)
                    self.cursor = revision
                    if item.data is not None and item.event is None:
                        frame = orjson.loads(item.data)
                        self.revisions.append(frame["revision"])
                        self.arrivals[frame["revision"]] = now

    async def until(self, revision: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.cursor < revision:
            if self.task is not None and self.task.done():
                self.task.result()
                raise AssertionError("the stream ended early")
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream reached {self.cursor}, not {revision}, within {timeout}s")
            await asyncio.sleep(0.005)  # polling a condition with a deadline, not synchronising on time

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, aiohttp.ClientError):
                pass
