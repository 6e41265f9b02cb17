"""A ``watch`` whose ``ttl_ms`` ends past any timestamp is refused; it no longer wedges every brief.

A registration reports when it ends (``expires_at`` in ``watch-status`` and in the registrations
file), and a timestamp ends at the year 9999. Before, ``ttl_ms: 100000000000000000`` (an integer
the protocol accepted) passed validation, had its first snapshot written, then failed formatting
that end: no ``registered`` ever came, ``watch-status`` closed the session, and every later
``watch`` of the hub's life waited behind the broken one. A real board, a real hub, raw TCP.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task
from .test_registrations import whub  # noqa: F401 (fixture)

pytestmark = pytest.mark.asyncio

#: Three million years, in milliseconds: an integer well inside the 64-bit range the wire carries.
PAST_ANY_TIMESTAMP = 10**17


@pytest.mark.parametrize("detach", [True, False], ids=["detached", "foreground"])
async def test_a_ttl_past_any_timestamp_is_refused_and_the_next_watch_is_served(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path, detach: bool  # noqa: F811
) -> None:
    task = await make_task(client)
    await hub_caught_up(whub, board)
    out = tmp_path / "far.md"
    raw = await RawClient.greeted(whub)
    try:
        await raw.send(hp.watch(ref=task["identifier"], out=str(out), ttl_ms=PAST_ANY_TIMESTAMP, detach=detach))
        try:
            answer = await raw.recv(5.0)
        except TimeoutError:
            raise AssertionError(f"watch with ttl_ms={PAST_ANY_TIMESTAMP} got no answer in 5 s") from None
        assert answer["type"] == "error" and answer["code"] == hp.VALIDATION_FAILED, answer
        assert answer["details"]["field"] == "ttl_ms", answer
        assert not out.exists()  # refused before anything is written

        # The session and the hub go on: the largest TTL allowed is served, and so is watch-status.
        await raw.send(hp.watch(ref=task["identifier"], out=str(out), ttl_ms=hp.MAX_WATCH_TTL_MS, detach=True))
        registered = await raw.recv(5.0)
        assert registered["type"] == "registered", registered
        await raw.send(hp.watch_status())
        status = await raw.recv(5.0)
        assert status["type"] == "watch-status", status
        (listed,) = status["registrations"]
        assert listed["ttl_ms"] == hp.MAX_WATCH_TTL_MS and listed["expires_at"] is not None
    finally:
        await raw.close()
