"""A foreground watch session that stops reading costs the hub at most one outbox.

docs/hub-protocol.md, *Behaviour worth knowing*: "The hub never buffers more than the outbox per
follower." A ``taskctl export watch`` suspended in its terminal (Ctrl-Z) is such a session: it
holds its registration and reads nothing, while every batch queues one ``refresh`` per card for
it. Before, those records piled up for the registration's whole life (``ttl_ms: 0``: for ever).
A real board, a real hub, raw TCP clients.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

from .conftest import RawClient, hub_caught_up, make_task, start_hub

pytestmark = pytest.mark.asyncio

MAX_PENDING = 32
CARDS = 24
FAST_WATCH = {"refresh_debounce": 0.0, "refresh_max_wait": 0.0, "refresh_floor": 0.0}


async def small_window_client(hub: Hub) -> RawClient:
    """A greeted session with a 4 KiB receive window, whose reader still takes a long line (the
    ``registered`` answer names every card)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", hub.port))
    raw = RawClient(*await asyncio.open_connection(sock=sock, limit=1 << 20))
    await raw.send(hp.hello(hub.token))
    assert (await raw.recv())["type"] == "welcome"
    return raw


async def test_a_watcher_that_reads_nothing_costs_at_most_one_outbox_and_still_hears_the_end(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    hub = await start_hub(board.url, board.token, max_pending=MAX_PENDING, **FAST_WATCH)
    try:
        tasks = [await make_task(client) for _ in range(CARDS)]
        await hub_caught_up(hub, board)
        stuck = await small_window_client(hub)
        stuck.throttle_on(hub)
        cards = [{"ref": task["identifier"], "out": str(tmp_path / f"{n}.md")} for n, task in enumerate(tasks)]
        await stuck.send(hp.watch(cards=cards, ttl_ms=0))
        registered = await stuck.recv(30.0)
        assert registered["type"] == "registered", registered
        stuck.writer.transport.pause_reading()  # and it reads nothing more (Ctrl-Z)
        (conn,) = [c for c in hub.connections if c.watcher is not None]
        viewer = await RawClient.greeted(hub)  # a second session on one card: it must keep hearing
        await viewer.send(hp.watch(ref=tasks[0]["identifier"], out=cards[0]["out"]))
        assert (await viewer.recv(30.0))["reason"] == hp.REASON_VIEWER
        await viewer.recv_type("refresh")

        # Each project edit is a task-less row: every card is re-rendered and told to the watcher.
        renders = hub.registrations.renders
        target = renders + 20 * (MAX_PENDING + CARDS)
        edits = 0

        async def rendered_enough() -> bool:
            nonlocal edits
            if hub.registrations.renders < target and not hub.registrations.registry.pending():
                edits += 1
                reply = await client.patch("/api/v1/projects/demo", {"name": f"Demo {edits}"})
                assert reply.status == 200, reply.body
            return hub.registrations.renders >= target

        await async_wait_until(rendered_enough, timeout=60, what=f"{target - renders} renders")
        await viewer.recv_type("refresh")  # the viewer is still served
        assert len(conn.outbox) <= MAX_PENDING, (
            f"the hub holds {len(conn.outbox)} unsent records for one watch session that reads nothing; "
            f"the outbox is {MAX_PENDING} lines"
        )

        # The record that ends the stream is never among those shed: resumed (fg), the watcher
        # reads what was kept, then its shutdown.
        other = await RawClient.greeted(hub)
        await other.send(hp.watch_stop(registered["registration_id"]))
        assert (await other.recv())["type"] == "watch-stopped"
        await other.close()
        stuck.writer.transport.resume_reading()
        while (record := await stuck.recv())["type"] != "shutdown":
            assert record["type"] in ("refresh", "heartbeat"), record
        assert record == hp.shutdown(reason=hp.SHUTDOWN_WATCH_STOPPED)
        await stuck.close()
        await viewer.close()
    finally:
        await hub.stop()

