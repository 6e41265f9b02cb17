"""A follower whose connection died must leave ``pong.clients`` at once, not ~40 s later.

The hub runs with its production heartbeat (15 s): the old code noticed a vanished follower only
when its second heartbeat write failed. The followers here die the ways real ones do: a process
SIGKILLed mid-stream (its kernel sends FIN, exactly like a half-close) and a socket closed with
``SO_LINGER`` 0 (RST). A live half-closed follower (``nc -N``) must keep its stream.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from services.hub import server
from services.hub.server import Hub, HubSettings
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

from .support_rotation import API, RawSession

pytestmark = pytest.mark.asyncio

#: "Well under the old 40 s": a dead follower must be gone from ``clients`` within this.
GONE_DEADLINE = 5.0

#: A follower in its own process: hello, follow, say "ready" once the stream is open, then read on.
FOLLOWER = r"""
import json, socket, sys
port, token = int(sys.argv[1]), sys.argv[2]
sock = socket.create_connection(("127.0.0.1", port))
sock.sendall((json.dumps({"type": "hello", "protocol": 2, "token": token}) + "\n"
              + json.dumps({"type": "follow", "idle_ms": 0}) + "\n").encode())
buffer = b""
while b'"open"' not in buffer:
    buffer += sock.recv(65536)
print("ready", flush=True)
while sock.recv(65536):
    pass
"""


@pytest.fixture
async def hub(board: RunningBoard) -> AsyncIterator[Hub]:
    # Production heartbeat and idle bound: only the dead-peer detection may make the difference.
    running = Hub(HubSettings(board_url=board.url, board_token=board.token, reconnect_min=0.05, reconnect_max=0.2))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def clients(hub: Hub, pinger: RawSession) -> int:
    """``pong.clients`` as a user asks for it, over the wire (the asking session included)."""
    await pinger.send(hp.ping())
    return (await pinger.recv_until("pong", skip=("heartbeat",)))["clients"]


async def wait_clients(hub: Hub, pinger: RawSession, expected: int, *, timeout: float, what: str) -> float:
    """Poll ``ping`` until ``clients`` is ``expected``; returns how long it took, seconds."""
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def reached() -> bool:
        return await clients(hub, pinger) == expected

    await async_wait_until(reached, timeout=timeout, interval=0.05, what=what)
    return loop.time() - started


async def start_follower_process(hub: Hub) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FOLLOWER, str(hub.port), hub.token,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 20)
    assert line.strip() == b"ready", (line, await process.stderr.read() if process.stderr else b"")
    return process


async def make_task(client: BoardClient) -> dict:
    if (await client.get(f"{API}/projects/demo")).status == 404:
        assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
    reply = await client.post(f"{API}/tasks", {"project": "demo", "title": "Count only the living"})
    assert reply.status == 201, reply.body
    return reply.body


@pytest.mark.parametrize("board_activity", ["quiet", "busy"])
async def test_a_sigkilled_follower_leaves_clients_at_once(
    hub: Hub, board: RunningBoard, client: BoardClient, board_activity: str
) -> None:
    task = await make_task(client)
    pinger = await RawSession.greeted(hub.port, hub.token)
    follower = await start_follower_process(hub)
    assert await clients(hub, pinger) == 2
    follower.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(follower.wait(), 20) == -signal.SIGKILL

    writer: asyncio.Task[None] | None = None
    if board_activity == "busy":
        # Events keep flowing to the dead peer: the failed writes must end its session.
        async def comment_on() -> None:
            n = 0
            while True:
                reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"still here? {n}"})
                assert reply.status == 201, reply.body
                n += 1
                await asyncio.sleep(0.1)  # pacing the writes, not synchronising on them

        writer = asyncio.create_task(comment_on())
    try:
        took = await wait_clients(hub, pinger, 1, timeout=GONE_DEADLINE, what="the killed follower to leave clients")
    finally:
        if writer is not None:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
    assert took < GONE_DEADLINE
    assert len(hub.connections) == 1 and len(hub.followers) == 0
    pinger.close()


async def test_a_follower_that_resets_leaves_clients_at_once(hub: Hub, board: RunningBoard) -> None:
    pinger = await RawSession.greeted(hub.port, hub.token)
    follower = await RawSession.greeted(hub.port, hub.token)
    await follower.send(hp.follow(idle_ms=0))
    await follower.recv_until("open", skip=("heartbeat",))
    assert await clients(hub, pinger) == 2
    sock = follower.writer.get_extra_info("socket")
    # SO_LINGER {on, 0}: closing aborts the connection, RST instead of FIN (RFC 9293 §3.10.5, ABORT).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    follower.writer.transport.abort()
    await wait_clients(hub, pinger, 1, timeout=GONE_DEADLINE, what="the reset follower to leave clients")
    pinger.close()


async def test_a_half_closed_follower_that_lives_keeps_its_stream(
    hub: Hub, board: RunningBoard, client: BoardClient
) -> None:
    """``printf … | nc -N``: a half-close is not a departure; the probes must not end it."""
    task = await make_task(client)
    pinger = await RawSession.greeted(hub.port, hub.token)
    follower = await RawSession.greeted(hub.port, hub.token)
    await follower.send(hp.follow(idle_ms=0))
    await follower.recv_until("open", skip=("heartbeat",))
    follower.writer.write_eof()
    # Two probes (the hub heartbeats a half-closed follower every second) and it is still counted.
    for _ in range(2):
        assert (await follower.recv(timeout=5))["type"] == "heartbeat"
    assert await clients(hub, pinger) == 2
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "for the half-closed follower"})
    assert reply.status == 201
    event = await follower.recv_until("event", skip=("heartbeat",))
    assert event["activity"]["event"] == "comment_added"
    follower.close()
    pinger.close()


async def test_accepted_sockets_carry_short_tcp_keepalive(hub: Hub, board: RunningBoard) -> None:
    """A peer whose host stops answering (no FIN, no RST) is reset by the kernel in seconds."""
    session = await RawSession.greeted(hub.port, hub.token)
    (connection,) = list(hub.connections)
    sock = connection.writer.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    expected = {idle: server.KEEPALIVE_IDLE, getattr(socket, "TCP_KEEPINTVL", None): server.KEEPALIVE_INTERVAL,
                getattr(socket, "TCP_KEEPCNT", None): server.KEEPALIVE_COUNT}
    present = {option: value for option, value in expected.items() if option is not None}
    assert present, "this platform exposes no TCP keepalive timer"
    assert {option: sock.getsockopt(socket.IPPROTO_TCP, option) for option in present} == present
    assert server.KEEPALIVE_IDLE + server.KEEPALIVE_INTERVAL * server.KEEPALIVE_COUNT < 40
    session.close()
