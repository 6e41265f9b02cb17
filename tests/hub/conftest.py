"""Hub fixtures: an in-process hub on a free loopback port in front of a real board, raw TCP clients."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from services.board.app import BoardSettings, create_app
from services.board.store import Actor, Tx
from services.hub.pointer import HubFiles, pid_alive
from services.hub.server import Hub, HubSettings
from shared import events
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard, database_for

WRITER = Actor("human", "ann")
#: Follow records that carry no event: a wait for events or for one record type passes over them.
NO_EVENT = frozenset({"heartbeat", hp.SIGNALS_MISSED})

#: Fast timers for tests; production defaults are in shared/hub_protocol.py.
FAST = {"hello_timeout": 0.3, "heartbeat_interval": 5.0, "reconnect_min": 0.05, "reconnect_max": 0.2}


class Closed(Exception):
    """The hub closed the connection."""


def _left(deadline: float, waiting_for: str) -> float:
    """Seconds until ``deadline`` on the running loop; a wait already past it fails, naming what it waited for."""
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise TimeoutError(f"no {waiting_for} before the deadline")
    return left


class RawClient:
    """A bare NDJSON client on a socket: what a person with ``nc`` does, in Python."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int, *, rcvbuf: int | None = None) -> RawClient:
        if rcvbuf is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 << 20)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, min(rcvbuf, 4096))
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            # A small reader limit too: asyncio would otherwise keep reading into its own buffer.
            reader, writer = await asyncio.open_connection(sock=sock, limit=rcvbuf)
        return cls(reader, writer)

    @classmethod
    async def greeted(cls, hub: Hub, **kw: Any) -> RawClient:
        client = await cls.connect(hub.port, **kw)
        await client.send(hp.hello(hub.token))
        welcome = await client.recv()
        assert welcome["type"] == "welcome", welcome
        return client

    @classmethod
    async def following(cls, hub: Hub, **kw: Any) -> RawClient:
        """A greeted session that follows the live stream from now (``follow``, idle heartbeats off)."""
        raw = await cls.greeted(hub, **kw)
        await raw.send(hp.follow(idle_ms=0))
        await raw.recv_type("open")
        return raw

    def throttle_on(self, hub: Hub) -> None:
        """Shrink the hub's send buffers for this connection, so not reading blocks it quickly."""
        local = self.writer.get_extra_info("sockname")
        (connection,) = [c for c in hub.connections if c.writer.get_extra_info("peername") == local]
        connection.writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        connection.writer.transport.set_write_buffer_limits(high=4096)

    async def send(self, message: Any) -> None:
        self.writer.write(message if isinstance(message, bytes) else orjson.dumps(message) + b"\n")
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        if not line:
            raise Closed()
        return orjson.loads(line)

    async def recv_type(self, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next message of ``kind`` within ``timeout`` in all, skipping heartbeats and
        ``signals_missed`` (each board reconnect's) only: a hub that sends nothing but those fails
        the wait instead of holding it open for ever."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            message = await self.recv(_left(deadline, f"a {kind} message"))
            if message["type"] == kind:
                return message
            assert message["type"] in NO_EVENT, f"expected {kind}, got {message}"

    async def events(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The next ``count`` events within ``timeout`` in all, skipping heartbeats."""
        deadline = asyncio.get_running_loop().time() + timeout
        got: list[dict[str, Any]] = []
        while len(got) < count:
            message = await self.recv(_left(deadline, f"{count} events (got {len(got)})"))
            if message["type"] in NO_EVENT:
                continue
            assert message["type"] == "event", message
            got.append(message)
        return got

    async def closed(self, timeout: float = 10.0) -> bool:
        """True once the hub has closed the connection (everything left is read first)."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), timeout):
                pass
        except (ConnectionError, OSError):
            pass
        return True

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def start_hub(board_url: str, token: str, **overrides: Any) -> Hub:
    hub = Hub(HubSettings(board_url=board_url, board_token=token, **{**FAST, **overrides}))
    await hub.start()
    return hub


@pytest.fixture
async def hub(board: RunningBoard) -> AsyncIterator[Hub]:
    running = await start_hub(board.url, board.token)
    try:
        yield running
    finally:
        await running.stop()


async def start_board_on(data_dir: Path, port: int) -> tuple[web.AppRunner, str]:
    """A board on a chosen port (to swap the board behind one URL)."""
    app = create_app(BoardSettings(data_dir=data_dir, port=port, database=database_for(data_dir)))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    return runner, app


async def make_task(client: BoardClient, project: str = "demo", **fields: Any) -> dict[str, Any]:
    """A new task (its project made on first use); ``fields`` go into the create body."""
    if (await client.get(f"/api/v1/projects/{project}")).status == 404:
        assert (await client.post("/api/v1/projects", {"id": project, "name": project.title()})).status == 201
    reply = await client.post("/api/v1/tasks", {"project": project, "title": "Keep the hub honest", **fields})
    assert reply.status == 201, reply.body
    return reply.body


async def block(client: BoardClient, blocker: dict[str, Any], card: dict[str, Any]) -> dict[str, Any]:
    """``blocker`` blocks ``card``; the relation."""
    reply = await client.post(f"/api/v1/tasks/{blocker['id']}/relations", {"type": "blocks", "target": card["id"]})
    assert reply.status == 201, reply.body
    return reply.body


def bulk_rows(tx: Tx, task_id: str, project_id: str, count: int, size: int = 0) -> list[int]:
    revisions = []
    for n in range(count):
        changes = events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * size}})
        revisions.append(tx.record(events.TASK_UPDATED, changes, task_id=task_id, project_id=project_id))
    return revisions


async def write_rows(board: RunningBoard, task: dict[str, Any], count: int, size: int = 0) -> list[int]:
    """``count`` activity rows in one command; returns their revisions."""
    return await board.store.command(bulk_rows, WRITER, task["id"], task["project_id"], count, size)


async def activity_count(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT count(*) FROM task_activities").fetchone()[0])


async def last_revision(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT max(revision) FROM task_activities").fetchone()[0] or 0)


async def hub_caught_up(hub: Hub, board: RunningBoard) -> int:
    """Wait until the hub has seen the board's newest activity row; return its revision."""
    from tests.support.waiting import async_wait_until

    target = await last_revision(board)

    async def seen() -> bool:
        return hub.revision is not None and hub.revision >= target

    await async_wait_until(seen, what=f"the hub to reach revision {target}")
    return target


def hub_pids(board_url: str) -> list[int]:
    """Live hub processes serving ``board_url``, found the way ``ps`` would."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"services.hub.cli" in argv and board_url.encode() in argv and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


class Runtime:
    """A private runtime directory, the environment that points taskctl/taskhub at it, and cleanup."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "run"
        self.processes: list[Any] = []
        self.urls: list[str] = []

    def env(self, board: RunningBoard, **extra: str) -> dict[str, str]:
        self.urls.append(board.url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
        env.update(
            TASKLOOM_RUNTIME_DIR=str(self.dir),
            TASKLOOM_TOKEN=board.token,
            TASKLOOM_NO_AUTOSTART="1",
            TASKLOOM_HUB_RECONNECT_MIN="0.05",
            TASKLOOM_HUB_RECONNECT_MAX="0.3",
            TASKLOOM_HUB_IDLE_EXIT="60",
        )
        env.update(extra)
        return env

    def files(self, board: RunningBoard) -> HubFiles:
        return HubFiles(self.dir, hp.hub_key(board.url, board.token))

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every hub log here, for a failure message."""
        out = []
        for log in sorted(self.dir.glob("hub-*.log")):
            out.append(f"--- {log.name}")
            out += log.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out) or "(no hub log)"

    async def line(self, process: Any, timeout: float = 20.0) -> dict[str, Any]:
        """The next NDJSON record a ``taskctl events follow`` printed; a stall fails with the hub's log."""
        try:
            raw = await asyncio.wait_for(process.stdout.readline(), timeout)
        except TimeoutError:
            raise AssertionError(f"no record from the follower in {timeout:g} s; hub log:\n{self.log_tail()}") from None
        if not raw:
            err = await process.stderr.read()
            raise AssertionError(f"the follower ended (rc={process.returncode}): {err.decode()}\n{self.log_tail()}")
        return orjson.loads(raw)

    async def cleanup(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                try:
                    process.kill()
                except ProcessLookupError:
                    pass
            await process.wait()
        for url in self.urls:
            for pid in hub_pids(url):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = Runtime(tmp_path)
    yield rt
    await rt.cleanup()


