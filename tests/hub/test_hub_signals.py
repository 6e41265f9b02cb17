"""Condition signals through the hub, over raw TCP, from a real board (docs/hub-protocol.md *Signals*).

The board emits a signal when a card gains its first open blocker (``card_blocked``) and when it
loses its last (``card_unblocked``), with no project setting needed: a ``blocks`` relation added
and removed is the cause the tests use. A signal reaches every live follower as
``{"type":"signal","signal":{…}}``, with no revision; it is not in the ring, never replayed, moves
no cursor, and ``follow {"signals": false}`` leaves it out.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import orjson
import pytest

import services.hub.server as hub_server
from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, block, hub_caught_up, make_task

pytestmark = pytest.mark.asyncio

API = "/api/v1"


async def follower(hub: Hub, **follow: Any) -> RawClient:
    client = await RawClient.greeted(hub)
    await client.send(hp.follow(idle_ms=0, **follow))
    opened = await client.recv_type("open")
    assert opened["replay"] == ("ring" if follow.get("after") is not None else "live"), opened
    return client


async def raw_records(client: RawClient, *wanted: Any, timeout: float = 10.0) -> list[bytes]:
    """Raw lines (heartbeats dropped) until every predicate in ``wanted`` has matched one of them.

    A signal goes out when its transaction commits, an event when the log is read: the two may
    reach a follower in either order, so the tests ask for both without fixing it.
    """
    lines: list[bytes] = []
    pending = list(wanted)
    while pending:
        line = await asyncio.wait_for(client.reader.readline(), timeout)
        assert line, f"the hub closed the stream after {lines}"
        record = orjson.loads(line)
        if record["type"] == "heartbeat":
            continue
        lines.append(line)
        pending = [match for match in pending if not match(record)]
    return lines


def is_event(name: str) -> Any:
    return lambda record: record["type"] == "event" and record["activity"]["event"] == name


def is_signal(name: str) -> Any:
    return lambda record: record["type"] == "signal" and record["signal"]["type"] == name


async def unblock(client: BoardClient, blocker: dict[str, Any], relation: dict[str, Any]) -> None:
    reply = await client.request("DELETE", f"{API}/tasks/{blocker['id']}/relations/{relation['id']}")
    assert reply.status in (200, 204), reply.body


async def test_a_signal_reaches_every_follower_once_encoded_without_a_revision(
    hub: Hub, board: RunningBoard, client: BoardClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker, card = await make_task(client), await make_task(client)
    await hub_caught_up(hub, board)
    followers = [await follower(hub) for _ in range(3)]
    encoded: list[dict[str, Any]] = []
    real_encode = hub_server.encode_line

    def counting_encode(message: dict[str, Any]) -> bytes:
        encoded.append(message)
        return real_encode(message)

    real_event_line = hub_server.event_line

    def counting_event_line(revision: int, activity: dict[str, Any], data: str | None = None) -> bytes:
        encoded.append({"type": "event"})  # the event line splices the frame's JSON (encode_line unused)
        return real_event_line(revision, activity, data)

    monkeypatch.setattr(hub_server, "encode_line", counting_encode)
    monkeypatch.setattr(hub_server, "event_line", counting_event_line)
    await block(client, blocker, card)
    streams = [await raw_records(f, is_signal("card_blocked"), is_event("relation_added")) for f in followers]

    # Every follower got the same bytes: the cause (relation_added) and the signal.
    assert streams[0] == streams[1] == streams[2]
    records = [orjson.loads(line) for line in streams[0]]
    assert sorted(r["type"] for r in records) == ["event", "signal"], records
    [signal] = [r for r in records if r["type"] == "signal"]
    [event] = [r for r in records if r["type"] == "event"]
    assert set(signal) == {"type", "signal"}, "a signal record carries no revision"
    body = signal["signal"]
    assert set(body) == {"type", "project_id", "task_id", "changes", "at"}
    assert (body["type"], body["project_id"], body["task_id"]) == ("card_blocked", "demo", card["id"])
    assert body["changes"]["blockers"] == [blocker["identifier"]]
    # One encode for the signal line whatever the number of followers (and one for the event).
    assert sorted(m["type"] for m in encoded) == ["event", "signal"]

    # The signal moved no cursor: the hub's head is still the cause's revision.
    assert hub.revision == event["revision"]
    for f in followers:
        await f.close()


async def test_signals_are_not_in_the_ring_and_a_replay_never_repeats_them(
    hub: Hub, board: RunningBoard, client: BoardClient
) -> None:
    blocker, card = await make_task(client), await make_task(client)
    start = await hub_caught_up(hub, board)
    live = await follower(hub)
    relation = await block(client, blocker, card)
    await raw_records(live, is_signal("card_blocked"), is_event("relation_added"))
    await unblock(client, blocker, relation)
    lived = [orjson.loads(line) for line in await raw_records(live, is_signal("card_unblocked"), is_event("relation_removed"))]
    assert sorted(r["type"] for r in lived) == ["event", "signal"]
    [unblocked] = [r["signal"] for r in lived if r["type"] == "signal"]
    assert (unblocked["task_id"], unblocked["project_id"]) == (card["id"], "demo")
    head = await hub_caught_up(hub, board)

    # A follower resuming from before both writes gets both events from the ring, and no signal.
    replay = await follower(hub, after=start)
    replayed = [orjson.loads(line) for line in await raw_records(replay, lambda r: r.get("revision") == head)]
    assert [r["type"] for r in replayed] == ["event", "event"], replayed
    assert [r["activity"]["event"] for r in replayed] == ["relation_added", "relation_removed"]
    held = hub.ring.since(start)
    assert held is not None and [orjson.loads(line)["type"] for _, line in held] == ["event", "event"]
    await live.close()
    await replay.close()


async def test_follow_with_signals_false_leaves_them_out(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    blocker, card, other = await make_task(client), await make_task(client), await make_task(client)
    await hub_caught_up(hub, board)
    quiet = await follower(hub, signals=False)
    loud = await follower(hub)
    await block(client, blocker, card)
    await raw_records(loud, is_signal("card_blocked"))
    # A later write is the marker: the quiet follower reads up to its event. Its signal, had it
    # been sent, would have come by then (the loud follower got it before the marker was written).
    assert (await client.patch(f"{API}/tasks/{other['id']}", {"title": "marker"})).status == 200
    got = [orjson.loads(line) for line in await raw_records(quiet, is_event("task_updated"))]
    assert [r["type"] for r in got] == ["event", "event"], got
    await quiet.close()
    await loud.close()


@pytest.mark.parametrize("value", ["no", 0, None, [True]])
async def test_a_bad_signals_field_is_refused_and_the_session_stays(hub: Hub, value: Any) -> None:
    client = await RawClient.greeted(hub)
    await client.send({"type": "follow", "signals": value})
    refused = await client.recv()
    assert (refused["type"], refused["code"], refused["details"]["field"]) == ("error", hp.VALIDATION_FAILED, "signals")
    await client.send(hp.follow(idle_ms=0))
    assert (await client.recv_type("open"))["type"] == "open"  # nothing was half-started
    await client.close()


async def test_a_follower_that_never_follows_gets_no_signal(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    blocker, card = await make_task(client), await make_task(client)
    await hub_caught_up(hub, board)
    idle_session = await RawClient.greeted(hub)
    live = await follower(hub)
    await block(client, blocker, card)
    await raw_records(live, is_signal("card_blocked"))
    await idle_session.send(hp.ping())
    assert (await idle_session.recv())["type"] == "pong"  # the first line it gets is its own answer
    await idle_session.close()
    await live.close()


async def test_the_documented_nc_session_sees_a_signal(hub: Hub, board: RunningBoard, client: BoardClient) -> None:
    """docs/hub-protocol.md *Signals*: the real ``nc``, following live, gets the record as documented."""
    nc = shutil.which("nc")
    assert nc, "the hub tests need nc (Debian: apt-get install netcat-openbsd)"
    blocker, card = await make_task(client), await make_task(client)
    await hub_caught_up(hub, board)
    typed = f'{{"type":"hello","protocol":2,"token":"{hub.token}"}}\n{{"type":"follow","idle_ms":1500}}\n'
    process = await asyncio.create_subprocess_exec(
        nc, "-N", "127.0.0.1", str(hub.port), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(typed.encode())
    await process.stdin.drain()
    process.stdin.close()
    try:
        seen = [orjson.loads(await asyncio.wait_for(process.stdout.readline(), 10)) for _ in range(2)]
        assert [r["type"] for r in seen] == ["welcome", "open"], seen
        await block(client, blocker, card)
        rest, _ = await asyncio.wait_for(process.communicate(), 20)  # ends with idle after 1.5 s of quiet
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    records = [orjson.loads(line) for line in rest.splitlines()]
    assert sorted(r["type"] for r in records if r["type"] != "heartbeat") == ["event", "idle", "signal"], records
    assert records[-1] == {"type": "idle", "idle_ms": 1500}
    [signal] = [r for r in records if r["type"] == "signal"]
    assert signal["signal"]["type"] == "card_blocked" and "revision" not in signal
