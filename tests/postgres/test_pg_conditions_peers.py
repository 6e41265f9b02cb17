"""Conditions on two ``taskd`` processes serving one PostgreSQL database (docs/conditions.md §4).

A signal is an id-less frame of the process whose commit noticed it, and a deadline was armed
only in the process whose commit set it: a stream on the other process never heard the signal,
and a deadline armed by a process that then died never fired. Each commit now sends its signals
and deadlines to the other processes with its COMMIT.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient
from tests.support.signals import RawStream, of

TIMEOUT_S = 3
#: Commits on A whose signal B must order after their frames: enough that an order left to the
#: race between B's read of the rows and A's notification would show.
CROSSINGS = 12


async def test_signals_and_deadlines_reach_every_board_process(tmp_path: Path, postgres_url: str) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a, on_b = BoardClient(a.url, a.token, session), BoardClient(b.url, b.token, session)
            settings = {"wip_limits": {"in_progress": 1}, "monitors": {"max_time_in_status": {"in_progress": TIMEOUT_S}}}
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": settings})).status == 201
            cards = [(await on_a.post("/api/v1/tasks", {"project": "demo", "title": f"card {n}"})).body for n in range(2)]
            on_stream_a = await RawStream.open(session, a.url, a.token)
            on_stream_b = await RawStream.open(session, b.url, b.token)

            # A's commit goes over the limit: both processes' streams hear it, once each.
            for card in cards:
                reply = await on_a.post(f"/api/v1/tasks/{card['id']}/claim", {})
                assert reply.status == 200, reply.body
            claimed = time.monotonic()
            for stream in (on_stream_a, on_stream_b):
                exceeded = await stream.signal("wip_exceeded")
                assert exceeded["changes"] == {"status": "in_progress", "count": 2, "limit": 1}

            # Both cards' timeouts were armed by A's commits. A dies before they come due; B fires them.
            a.stop(signal.SIGKILL)
            assert time.monotonic() - claimed < TIMEOUT_S, "A outlived the deadline: the test proves nothing"
            fired = {(await on_stream_b.signal("status_timeout", timeout=TIMEOUT_S + 10))["task_id"] for _ in cards}
            assert fired == {card["id"] for card in cards}
            breaches = (await on_b.get("/api/v1/breaches?project=demo")).body["items"]
            assert sorted((item["type"], item["task_id"]) for item in breaches if item["task_id"]) == sorted(
                ("status_timeout", card["id"]) for card in cards
            )

            # A later signal of B's own: every earlier one has arrived, none twice.
            reply = await on_b.post(f"/api/v1/tasks/{cards[0]['id']}/move", {"to": "todo"})
            assert reply.status == 200, reply.body
            await on_stream_b.signal("wip_cleared")
            assert len(of(on_stream_b, "wip_exceeded")) == 1 and len(of(on_stream_b, "status_timeout")) == 2
            assert len(of(on_stream_a, "wip_exceeded")) == 1, "A heard its own signal again through the database"
            on_stream_a.close()
            on_stream_b.close()
    finally:
        if a.process is not None and a.process.poll() is None:
            a.stop()
        b.stop()


async def test_a_peer_signal_follows_the_frames_of_its_commit(tmp_path: Path, postgres_url: str) -> None:
    """A's commit reaches B twice: its rows, which B's log reader reads back from the database, and
    its signals, in a notification that carries them whole. A stream on B hears each signal after
    the frame of the event that caused it, as a stream on A does."""
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(a.url, a.token, session)
            settings = {"wip_limits": {"in_progress": 1}}
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": settings})).status == 201
            held = (await on_a.post("/api/v1/tasks", {"project": "demo", "title": "held"})).body
            card = (await on_a.post("/api/v1/tasks", {"project": "demo", "title": "over the limit"})).body
            assert (await on_a.post(f"/api/v1/tasks/{held['id']}/claim", {})).status == 200
            on_stream_b = await RawStream.open(session, b.url, b.token)

            for _ in range(CROSSINGS):
                reply = await on_a.post(f"/api/v1/tasks/{card['id']}/claim", {})
                assert reply.status == 200, reply.body
                await on_stream_b.signal("wip_exceeded")
                reply = await on_a.post(f"/api/v1/tasks/{card['id']}/move", {"to": "todo"})
                assert reply.status == 200, reply.body
                await on_stream_b.signal("wip_cleared")

            # The k-th wip_exceeded after the k-th claim of the card, the k-th wip_cleared after its
            # k-th move back to todo.
            claims = moves = exceeded = cleared = 0
            for frame in on_stream_b.frames:
                if frame.is_signal and frame.data["type"] == "wip_exceeded":
                    exceeded += 1
                    assert exceeded <= claims, f"wip_exceeded #{exceeded} came before claim #{exceeded}'s frame"
                elif frame.is_signal and frame.data["type"] == "wip_cleared":
                    cleared += 1
                    assert cleared <= moves, f"wip_cleared #{cleared} came before move #{cleared}'s frame"
                elif not frame.is_signal and frame.data and frame.data.get("task_id") == card["id"]:
                    event = frame.data["event"]
                    claims += event == "task_claimed"
                    moves += event == "task_moved" and frame.data["changes"].get("to") == "todo"
            assert (exceeded, cleared, claims, moves) == (CROSSINGS,) * 4
            on_stream_b.close()
    finally:
        a.stop()
        b.stop()


#: A project id of the most characters a slug may have, so each blocker's identifier is long.
LONG_PROJECT = "p" * 32
#: Open blockers enough that the card's signal is larger than one notification may carry.
BLOCKERS = 230


async def test_a_signal_too_large_for_one_notification_reaches_the_other_process(tmp_path: Path, postgres_url: str) -> None:
    """A card with hundreds of open blockers: its ``card_blocked`` signal is over 8,000 bytes, the
    most one notification may carry. It was left out of what A sent B, and B's streams never heard
    it; now it goes in parts and B's stream hears it as A's does, and what follows as well."""
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(a.url, a.token, session)
            assert (await on_a.post("/api/v1/projects", {"id": LONG_PROJECT})).status == 201

            async def create(title: str) -> dict[str, Any]:
                reply = await on_a.post("/api/v1/tasks", {"project": LONG_PROJECT, "title": title})
                assert reply.status == 201, reply.body
                return dict(reply.body)

            async def block(blocker: dict[str, Any]) -> None:
                reply = await on_a.post(f"/api/v1/tasks/{blocker['id']}/relations", {"type": "blocks", "target": card["id"]})
                assert reply.status == 201, reply.body

            card = await create("waits on everything")
            blockers = [task for start in range(0, BLOCKERS, 16)
                        for task in await asyncio.gather(*(create(f"blocker {n}") for n in range(start, min(start + 16, BLOCKERS))))]
            for start in range(0, BLOCKERS - 1, 16):
                await asyncio.gather(*(block(blocker) for blocker in blockers[start:min(start + 16, BLOCKERS - 1)]))
            on_stream_a = await RawStream.open(session, a.url, a.token)
            on_stream_b = await RawStream.open(session, b.url, b.token)

            await block(blockers[-1])
            heard_on_a = await on_stream_a.signal("card_blocked", project=LONG_PROJECT)
            assert len(orjson.dumps(heard_on_a)) > 8000, "the signal fits one notification: the test proves nothing"
            assert sorted(heard_on_a["changes"]["blockers"]) == sorted(task["identifier"] for task in blockers)
            assert await on_stream_b.signal("card_blocked", project=LONG_PROJECT) == heard_on_a

            # What A sends after the split note is read as before.
            for blocker in blockers:
                reply = await on_a.post(f"/api/v1/tasks/{blocker['id']}/move", {"to": "canceled"})
                assert reply.status == 200, reply.body
            cleared = await on_stream_b.signal("card_unblocked", project=LONG_PROJECT, timeout=30)
            assert cleared == await on_stream_a.signal("card_unblocked", project=LONG_PROJECT, timeout=30)
            assert of(on_stream_b, "card_blocked", LONG_PROJECT) == of(on_stream_a, "card_blocked", LONG_PROJECT)
            on_stream_a.close()
            on_stream_b.close()
    finally:
        a.stop()
        b.stop()
