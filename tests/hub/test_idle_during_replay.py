"""``follow.idle_ms`` ends a stream that has had no ``event`` for that long, never one still replaying.

A follower reading more slowly than the hub writes, replaying from the ring, is being sent events
the whole time. The idle bound used to count from the start of the stream, so it cut the replay
after the first catch-up batch; it now waits while the ring still holds events for the follower,
and counts again from the last event once the follower has caught up.
"""

from __future__ import annotations

import asyncio

import pytest

from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task, start_hub, write_rows

pytestmark = pytest.mark.asyncio

ROWS = 1500
IDLE_MS = 1000
#: What the consumer spends on each record (it is a program doing work, not a sync point).
WORK_PER_EVENT = 0.002


async def test_idle_does_not_cut_a_ring_replay_that_is_still_being_delivered(
    board: RunningBoard, client: BoardClient
) -> None:
    hub = await start_hub(board.url, board.token)
    try:
        task = await make_task(client)
        cursor = await hub_caught_up(hub, board)
        revisions = await write_rows(board, task, ROWS, size=1000)
        await hub_caught_up(hub, board)
        assert hub.ring.covers(cursor)

        slow = await RawClient.greeted(hub, rcvbuf=16384)
        slow.throttle_on(hub)
        await slow.send(hp.follow(after=cursor, idle_ms=IDLE_MS))
        opened = await slow.recv()
        assert opened == {"type": "open", "revision": revisions[-1], "replay": "ring"}, opened

        seen: list[int] = []
        while True:
            message = await slow.recv()
            if message["type"] != "event":
                break
            seen.append(message["revision"])
            await asyncio.sleep(WORK_PER_EVENT)  # the consumer's own work per record
        assert seen == revisions[: len(seen)], "replayed out of order"
        assert len(seen) == len(revisions), (
            f"'{message['type']}' after {len(seen)} of {len(revisions)} replayed events: the hub had the rest "
            f"queued from its ring and ended the stream as idle while it was still sending events"
        )
        assert message["type"] == "idle", f"caught up, the stream ends as idle: {message}"
        await slow.close()
    finally:
        await hub.stop()
