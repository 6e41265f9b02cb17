"""A board restart neither repeats a fired temporal condition nor loses an armed one: SIGKILL a
real ``taskd`` with one ``status_timeout`` fired and one armed, start it again (docs/conditions.md).

The project persists ``status_timeout`` so every fire is a row: the rows are the evidence of how
many times each fired, whichever process fired it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from shared.timestamps import parse_timestamp
from tests.support.board import API, BoardClient, TaskdProcess
from tests.support.signals import RawStream
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

FIRED_AFTER = 1  # in_progress: fires before the kill
ARMED_AFTER = 10  # blocked: still armed at the kill, and after the restart (a loaded machine starts slowly)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client_for(taskd: TaskdProcess, session: aiohttp.ClientSession) -> BoardClient:
    return BoardClient(taskd.url, taskd.token, session)


async def timeout_rows(client: BoardClient) -> list[dict[str, Any]]:
    reply = await client.get(f"{API}/activities?event=status_timeout&limit=1000")
    assert reply.status == 200, reply.body
    items: list[dict[str, Any]] = reply.body["items"]
    return items


async def one_fired_one_armed(taskd: TaskdProcess, session: aiohttp.ClientSession) -> tuple[dict, dict]:
    taskd.start()
    client = client_for(taskd, session)
    assert (await client.post(f"{API}/projects", {"id": "demo", "settings": {
        "monitors": {"max_time_in_status": {"in_progress": FIRED_AFTER, "blocked": ARMED_AFTER}},
        "persist_conditions": ["status_timeout"],
    }})).status == 201
    fired = (await client.post(f"{API}/tasks", {"project": "demo", "title": "fires before the kill"})).body
    armed = (await client.post(f"{API}/tasks", {"project": "demo", "title": "armed at the kill"})).body
    stream = await RawStream.open(session, taskd.url, taskd.token)
    assert (await client.post(f"{API}/tasks/{fired['id']}/claim", {})).status == 200
    armed = (await client.post(f"{API}/tasks/{armed['id']}/move", {"to": "blocked", "reason": "waiting on CI"})).body
    got = await stream.signal("status_timeout", timeout=5)
    assert got["task_id"] == fired["id"]
    stream.close()
    assert taskd.stop(signal.SIGKILL) == -signal.SIGKILL
    return fired, armed


def by_task(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["task_id"]] = counts.get(row["task_id"], 0) + 1
    return counts


async def test_after_sigkill_the_fired_one_stays_fired_and_the_armed_one_fires_on_time(
    taskd: TaskdProcess, session: aiohttp.ClientSession
) -> None:
    fired, armed = await one_fired_one_armed(taskd, session)
    due = parse_timestamp(armed["status_since"]).timestamp() + ARMED_AFTER
    taskd.start()
    client = client_for(taskd, session)
    stream = await RawStream.open(session, taskd.url, taskd.token)
    assert time.time() < due - 0.5, "the board took too long to restart for this case; see the at-start case"
    got = await stream.signal("status_timeout", timeout=ARMED_AFTER + 5)
    assert got["task_id"] == armed["id"]
    late = (parse_timestamp(got["at"]) - parse_timestamp(armed["status_since"])).total_seconds()
    assert ARMED_AFTER <= late <= ARMED_AFTER + 0.3, late
    assert by_task(await timeout_rows(client)) == {fired["id"]: 1, armed["id"]: 1}
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert sorted(b["task_id"] for b in breaches) == sorted([fired["id"], armed["id"]])
    # Nothing more is due: a later write's row is the next one, and no third timeout row came.
    probe = (await client.post(f"{API}/tasks", {"project": "demo", "title": "probe"})).body
    await stream.wait_for(lambda f: f.data is not None and not f.is_signal and f.data.get("task_id") == probe["id"])
    assert stream.signals("status_timeout") == [got]
    assert by_task(await timeout_rows(client)) == {fired["id"]: 1, armed["id"]: 1}


async def test_a_deadline_that_passed_while_the_board_was_down_fires_once_at_start(
    taskd: TaskdProcess, session: aiohttp.ClientSession
) -> None:
    fired, armed = await one_fired_one_armed(taskd, session)
    due = parse_timestamp(armed["status_since"]).timestamp() + ARMED_AFTER
    # The board is down; what is awaited is the wall clock passing the armed deadline.
    await async_wait_until(lambda: _passed(due + 0.2), timeout=ARMED_AFTER + 5, interval=0.05, what="the deadline")
    started = time.time()
    taskd.start()
    client = client_for(taskd, session)
    rows = await async_wait_until(
        lambda: _two_rows(client), timeout=10, what="the overdue status_timeout to fire at start"
    )
    fired_at = {row["task_id"]: parse_timestamp(row["created_at"]).timestamp() for row in rows}
    assert fired_at[armed["id"]] >= started - 0.5  # fired by the new process, at its start
    probe = (await client.post(f"{API}/tasks", {"project": "demo", "title": "probe"})).body
    assert probe["id"]
    assert by_task(await timeout_rows(client)) == {fired["id"]: 1, armed["id"]: 1}


async def _passed(moment: float) -> bool:
    return time.time() >= moment


async def _two_rows(client: BoardClient) -> list[dict[str, Any]] | None:
    rows = await timeout_rows(client)
    return rows if len(rows) >= 2 else None
