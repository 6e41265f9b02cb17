"""A follower that never reads while events flow costs the hub one outbox, and the others lose nothing.

docs/hub-protocol.md, *Behaviour worth knowing*: "Each follower has a bounded outbox (1024 lines)
… The hub never buffers more than the outbox per follower."
"""

from __future__ import annotations

import pytest

from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

from .conftest import RawClient, hub_caught_up, make_task, start_hub, write_rows

pytestmark = pytest.mark.asyncio

MAX_PENDING = 256
ROW_PAD = 1000


async def test_a_stuck_follower_costs_the_hub_at_most_one_outbox(board: RunningBoard, client: BoardClient) -> None:
    hub = await start_hub(board.url, board.token, max_pending=MAX_PENDING)
    try:
        task = await make_task(client)
        await hub_caught_up(hub, board)
        stuck = await RawClient.greeted(hub, rcvbuf=4096)
        stuck.throttle_on(hub)
        fast = await RawClient.following(hub)
        await stuck.send(hp.follow(idle_ms=0))
        await stuck.recv_type("open")  # and never reads again
        revisions = []
        for _ in range(8):
            revisions += await write_rows(board, task, 250, size=ROW_PAD)
        assert [m["revision"] for m in await fast.events(len(revisions))] == revisions  # others unharmed
        (conn,) = [c for c in hub.followers if c.writer.get_extra_info("peername") == stuck.writer.get_extra_info("sockname")]

        async def lagging() -> bool:
            return conn.lagging

        await async_wait_until(lagging, what="the stuck follower to leave the live fan-out")
        line = len(hub.ring.since(revisions[-2])[0][1])
        held = conn.transport.get_write_buffer_size() + sum(len(x) for x in conn.outbox)
        bound = MAX_PENDING * line + 64 * 1024  # one outbox, plus the transport's high-water mark
        assert held <= bound, (
            f"the hub holds {held} bytes ({held // line} lines) for one follower that reads nothing; "
            f"the outbox is {MAX_PENDING} lines ({MAX_PENDING * line} bytes)"
        )
        await stuck.close()
        await fast.close()
    finally:
        await hub.stop()
