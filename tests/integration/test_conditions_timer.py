"""Temporal conditions fire from the board's one timer at the moment of crossing (docs/conditions.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from shared.timestamps import parse_timestamp
from tests.support.board import API, BoardClient, RunningBoard, make_project, make_task
from tests.support.signals import RawStream

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def seconds_between(earlier: str, later: str) -> float:
    return (parse_timestamp(later) - parse_timestamp(earlier)).total_seconds()


async def settings(client: BoardClient, value: dict[str, Any], project: str = "demo") -> None:
    await make_project(client, project)
    reply = await client.patch(f"{API}/projects/{project}", {"settings": value})
    assert reply.status == 200, reply.body


async def test_a_two_second_status_timeout_fires_within_two_to_two_point_three_seconds(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, {"monitors": {"max_time_in_status": {"in_progress": 2}}})
    task = await make_task(client)
    stream = await RawStream.open(session, board.url, board.token)
    claimed = (await client.post(f"{API}/tasks/{task['id']}/claim", {})).body
    started = time.monotonic()
    signal = await stream.signal("status_timeout", timeout=5)
    waited = time.monotonic() - started
    since = claimed["status_since"]
    assert signal["task_id"] == task["id"]
    assert signal["changes"] == {"status": "in_progress", "since": since, "max": 2}
    assert 2.0 <= seconds_between(since, signal["at"]) <= 2.3, (since, signal["at"])
    assert waited <= 2.3, waited
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert [(b["type"], b["task_id"], b["changes"]) for b in breaches] == [("status_timeout", task["id"], signal["changes"])]
    # Leaving the status ends the condition (silently: the move is the news) and a fresh entry
    # into it starts a new episode, which fires again once its own two seconds have passed.
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "todo"})).status == 200
    assert (await client.get(f"{API}/breaches?project=demo")).body["items"] == []
    again = (await client.post(f"{API}/tasks/{task['id']}/claim", {})).body
    second = await stream.signal("status_timeout", timeout=5)
    assert second["changes"]["since"] == again["status_since"] != since


async def test_claim_stale_fires_when_the_heartbeat_stops_and_not_while_it_beats(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, {"monitors": {"claim_stale_after": 1.5}})
    task = await make_task(client)
    stream = await RawStream.open(session, board.url, board.token)
    worker = client.as_actor("claude", "worker-1")
    claimed = (await worker.post(f"{API}/tasks/{task['id']}/claim", {})).body
    # Heart-beating moves the deadline: each beat is a new episode, armed from its own stamp.
    # The pause is the worker's own beat interval (shorter than the threshold), not a wait for
    # the board: had any beat's deadline fired, the first claim_stale would name that beat.
    beats = [claimed["heartbeat_at"]]
    for _ in range(4):
        await asyncio.sleep(0.5)
        beats.append((await worker.post(f"{API}/tasks/{task['id']}/heartbeat", {})).body["heartbeat_at"])
    signal = await stream.signal("claim_stale", timeout=5)
    assert signal["changes"] == {"claimed_by": "worker-1", "heartbeat_at": beats[-1], "threshold": 1.5}
    assert 1.5 <= seconds_between(beats[-1], signal["at"]) <= 1.8


async def test_card_idle_counts_activity_not_conditions(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, {"monitors": {"idle_after": 1}, "persist_conditions": ["card_idle"]})
    stream = await RawStream.open(session, board.url, board.token)
    task = await make_task(client)
    first = await stream.signal("card_idle", timeout=5)
    assert first["changes"] == {"since": task["created_at"], "threshold": 1}
    assert 1.0 <= seconds_between(task["created_at"], first["at"]) <= 1.3
    # The persisted card_idle row is not activity: the card stays idle, nothing fires again
    # until someone touches it. A comment is activity: one second later it is idle again.
    comment = (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "still wanted"})).body
    second = await stream.signal("card_idle", timeout=5)
    assert second["changes"]["since"] == comment["created_at"]
    rows = (await client.get(f"{API}/activities?event=card_idle")).body["items"]
    assert len(rows) == 2 and {row["actor_kind"] for row in rows} == {"system"}
