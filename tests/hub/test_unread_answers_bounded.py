"""A session that sends requests and never reads the answers is read no further: it held the hub's
memory without bound.

The hub's reader read and served every request while the writer was stuck on a peer that does not
read, and every answer went into ``Connection.outbox`` (``send`` → ``_queue``), which had no bound:
only the live fan-out checked ``max_pending``. docs/hub-protocol.md promises "The hub never buffers
more than the outbox per follower" (1024 lines); a pipelining client (``yes '{"type":"ping"}' | nc``
after a hello, or a stuck script) made one hub, shared by every follower and brief of the board,
hold tens of MiB per few MiB sent, until the OOM killer took it. Now the reader waits
until the answers it made have gone out.

Real board, real hub, a raw TCP client.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.board import RunningBoard
from tests.support.waiting import async_wait_until

from .conftest import RawClient, start_hub

pytestmark = pytest.mark.asyncio

#: What the client pipelines, at most: 4 MiB of pings (262,144 requests).
SEND_BYTES = 4 << 20
#: What the hub may hold for one session that does not read: generously, 4x the 1024-line
#: follower outbox at 512 bytes a line, plus the transport's own buffer.
BOUND = 2 << 20


async def test_pipelined_requests_with_no_reader_do_not_grow_the_hub_without_bound(board: RunningBoard) -> None:
    hub = await start_hub(board.url, board.token)
    try:
        raw = await RawClient.greeted(hub, rcvbuf=4096)
        raw.throttle_on(hub)
        (session,) = [c for c in hub.connections if c.session.greeted]

        def held() -> int:
            return sum(len(line) for line in session.outbox) + session.transport.get_write_buffer_size()

        chunk = b'{"type":"ping"}\n' * 4096  # 64 KiB
        sent = 0
        while sent < SEND_BYTES:
            raw.writer.write(chunk)
            try:
                await asyncio.wait_for(raw.writer.drain(), 2.0)
            except TimeoutError:
                break  # the hub stopped reading us: backpressure, which is the fix
            sent += len(chunk)

        async def over_bound() -> bool:
            return held() > BOUND

        try:
            await async_wait_until(over_bound, timeout=8.0, interval=0.05, what="the hub to pass the bound")
        except AssertionError:
            return  # bounded: the hub held at most BOUND bytes for this session
        await async_wait_until(lambda: _settled(session), timeout=8.0, interval=0.05, what="the hub to read it all")
        raise AssertionError(
            f"one non-reading session made the hub hold {held() / 2**20:.1f} MiB in {len(session.outbox)} queued "
            f"lines (sent {sent / 2**20:.1f} MiB of pings; bound {BOUND / 2**20:.0f} MiB, max_pending "
            f"{hub.settings.max_pending})"
        )
    finally:
        await asyncio.wait_for(hub.stop(), 15)


_last: dict[int, int] = {}


async def _settled(session: object) -> bool:
    """The outbox stopped growing between two looks (the hub has read what we sent)."""
    size = len(session.outbox)  # type: ignore[attr-defined]
    previous = _last.get(id(session))
    _last[id(session)] = size
    return previous == size
