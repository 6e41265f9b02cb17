"""The loop subscriber in front of a real board and a real hub, both in-process on loopback.

``Loop`` runs ``Subscriber`` on the test's event loop, following a real ``Hub`` through the real
hub client session; its ``--on-wake`` command is a real shell command that appends one JSON line
per turn to a file. The hub can be stopped and replaced (``Loop.stop_hub``/``start_hub``) to
exercise the reconnect ladder.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services.hub.client import HubAddress, HubSession
from services.hub.server import Hub, HubSettings
from services.subscriber.classify import LoopIdentity
from services.subscriber.runner import Subscriber, Timing
from services.subscriber.state import Publisher, state_path
from services.subscriber.turns import SESSIONS_FILE, TurnRunner
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

API = "/api/v1"
OWN_AGENT = "worker-1"
DIRECTOR = "Director"

#: One JSON line per turn: what the supervisor would see in its environment.
ON_WAKE = (
    "printf '{\"revision\": %s, \"events\": \"%s\", \"note\": \"%s\"}\\n' "
    "\"$TASKLOOM_WAKE_REVISION\" \"$TASKLOOM_WAKE_EVENTS\" \"${WAKE_NOTE:-}\" >> \"$WAKES_FILE\""
)

FAST = Timing(
    debounce=0.05,
    max_wait=0.5,
    min_interval=0.0,
    lock_retry=0.3,
    reconnect_min=0.05,
    reconnect_max=0.2,
    silence_timeout=5.0,
    state_flush=0.05,
    stop_grace=2.0,
)


def write_pool(state_dir: Path, pids: list[int]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    sessions = [{"pid": pid, "agent": OWN_AGENT} for pid in pids]
    (state_dir / SESSIONS_FILE).write_text(json.dumps({"version": 1, "sessions": sessions}))


async def start_hub(board: RunningBoard, **overrides: Any) -> Hub:
    settings = {"hello_timeout": 1.0, "heartbeat_interval": 1.0, "reconnect_min": 0.05, "reconnect_max": 0.2}
    hub = Hub(HubSettings(board_url=board.url, board_token=board.token, **{**settings, **overrides}))
    await hub.start()
    return hub


@dataclass
class Loop:
    board: RunningBoard
    client: BoardClient
    dir: Path
    timing: Timing
    hub: Hub | None = None
    subscriber: Subscriber | None = None
    task: asyncio.Task[int] | None = None
    hub_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    @property
    def wakes_file(self) -> Path:
        return self.dir / "wakes.jsonl"

    # -- the hub ---------------------------------------------------------------------------

    async def start_hub(self, **overrides: Any) -> Hub:
        self.hub = await start_hub(self.board, **{**self.hub_overrides, **overrides})
        return self.hub

    async def stop_hub(self) -> None:
        hub, self.hub = self.hub, None
        if hub is not None:
            await hub.stop()

    async def open_stream(self, after: int | None) -> AsyncIterator[dict[str, Any]]:
        """What ``taskctl loop subscribe`` hands the runner, minus the pointer discovery."""
        if self.hub is None:
            raise ConnectionRefusedError("no hub is running")
        session = await HubSession.connect(HubAddress(port=self.hub.port, token=self.hub.token))
        try:
            await session.send(hp.follow(after=after, idle_ms=0))
            while (record := await session.receive()) is not None:
                yield record
        finally:
            session.close()

    # -- the subscriber ----------------------------------------------------------------------

    def start(self, *, command: str = ON_WAKE, after: int | None = None, director: str | None = DIRECTOR,
              env: dict[str, str] | None = None) -> Subscriber:
        environ = {**os.environ, "WAKES_FILE": str(self.wakes_file), **(env or {})}
        publisher = Publisher(state_path(self.state_dir), {"board": self.board.url, "agents": [OWN_AGENT]},
                              flush_interval=self.timing.state_flush)
        runner = TurnRunner(command, self.state_dir, environ=environ)
        self.subscriber = Subscriber(
            self.open_stream,
            LoopIdentity(agents=frozenset({OWN_AGENT}), director=director),
            runner,
            publisher,
            timing=self.timing,
            after=after,
        )
        self.task = asyncio.create_task(self.subscriber.run())
        return self.subscriber

    async def streaming(self) -> None:
        async def ready() -> bool:
            self._check_alive()
            return self.state().get("state") == "streaming"

        await async_wait_until(ready, what="the subscriber to stream")

    async def stop(self) -> int:
        assert self.subscriber is not None and self.task is not None
        self.subscriber.request_stop()
        return await asyncio.wait_for(self.task, 10)

    def _check_alive(self) -> None:
        if self.task is not None and self.task.done():
            raise AssertionError(f"the subscriber ended: {self.task.result()!r}")

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(state_path(self.state_dir).read_text())
        except (OSError, ValueError):
            return {}

    # -- observing turns ---------------------------------------------------------------------

    def wakes(self) -> list[dict[str, Any]]:
        try:
            lines = self.wakes_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines]

    async def wait_wakes(self, count: int, *, timeout: float = 10.0) -> list[dict[str, Any]]:
        async def enough() -> list[dict[str, Any]] | None:
            self._check_alive()
            found = self.wakes()
            assert len(found) <= count, f"more turns than expected: {found}"
            return found if len(found) == count else None

        return await async_wait_until(enough, timeout=timeout, what=f"{count} turn(s)")

    async def settled(self, revision: int) -> None:
        """The subscriber has dealt with every event up to ``revision`` and has no turn coming."""
        subscriber = self.subscriber
        assert subscriber is not None

        async def done() -> bool:
            self._check_alive()
            return (
                subscriber.cursor is not None
                and subscriber.cursor >= revision
                and not subscriber.coalescer.pending
                and not subscriber.turns.running
            )

        await async_wait_until(done, what=f"the subscriber to settle at revision {revision}")

    # -- board helpers -----------------------------------------------------------------------

    async def head(self) -> int:
        return (await self.client.get(f"{API}/meta")).body["revision"]

    async def make_task(self, title: str = "Wire the loop", **fields: Any) -> dict[str, Any]:
        if (await self.client.get(f"{API}/projects/demo")).status == 404:
            assert (await self.client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
        reply = await self.client.post(f"{API}/tasks", {"project": "demo", "title": title, **fields})
        assert reply.status == 201, reply.body
        return reply.body


@pytest.fixture
async def loop_env(board: RunningBoard, client: BoardClient, tmp_path: Path) -> AsyncIterator[Loop]:
    """A board, a hub in front of it, a live resident pool (this process); the subscriber not yet started."""
    harness = Loop(board, client, tmp_path, FAST)
    write_pool(harness.state_dir, [os.getpid()])
    await harness.start_hub()
    try:
        yield harness
    finally:
        if harness.task is not None and not harness.task.done():
            assert harness.subscriber is not None
            harness.subscriber.abandon()
            await asyncio.wait_for(harness.task, 10)
        await harness.stop_hub()
