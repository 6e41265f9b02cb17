"""A server that stops answering the writer while its host stays up (a backend stopped by a
signal, as a disk hung under it looks from the client): writes are answered, not left waiting.

TCP keepalives cannot see this (the host's kernel acknowledges every packet), so the writer's
watch gives up on a session whose server has not answered one round trip for ``answer_timeout_s``
(60 s in production, one second here): it shuts the socket down, the blocked call fails as for a
lost connection, and the next batch begins on a fresh session. Before, the write and every write
queued behind it waited for as long as the server stayed silent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import psycopg
import pytest

from services.board.store import SYSTEM_ACTOR, Tx
from shared.errors import TaskloomError
from tests.support.board import BoardClient, RunningBoard
from tests.support.waiting import async_wait_until

#: Here: the bound the watch gives one round trip, and how long the test lets an answer take.
ANSWER_TIMEOUT_S = 1.0
ANSWER_WITHIN_S = 20.0


def _backend_pid(tx: Any) -> int:
    return int(tx.one("SELECT pg_backend_pid()")[0])


async def test_a_write_to_a_stopped_idle_backend_is_written_on_a_fresh_session(
    pg_board: RunningBoard, pg_client: BoardClient,
) -> None:
    """The writer's backend stopped while idle: the batch's BEGIN is cut after the bound, and
    begins again on a fresh session (it had written nothing), so the write is written."""
    pg_board.store.answer_timeout_s = ANSWER_TIMEOUT_S
    assert (await pg_client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    pid = await pg_board.store.command(_backend_pid, SYSTEM_ACTOR)
    os.kill(pid, signal.SIGSTOP)
    began = time.monotonic()
    try:
        async with asyncio.timeout(ANSWER_WITHIN_S):
            reply = await pg_client.post("/api/v1/tasks", {"project": "demo", "title": "to a silent server"})
    except TimeoutError:
        raise AssertionError(f"a write to a stopped backend got no answer in {ANSWER_WITHIN_S} s") from None
    finally:
        os.kill(pid, signal.SIGCONT)
    assert reply.status == 201, reply.body
    assert time.monotonic() - began >= ANSWER_TIMEOUT_S  # it was the watch that ended the wait
    assert (await pg_client.get(f"/api/v1/tasks/{reply.body['id']}")).status == 200


async def test_a_batch_whose_backend_stops_mid_transaction_answers_503_and_writes_nothing(
    pg_board: RunningBoard, pg_client: BoardClient, postgres_url: str,
) -> None:
    """Stopped inside the transaction, with the revision lock held: the command answers 503 and
    nothing of it is written; once the backend runs again it finds its client gone, rolls back
    and lets the lock go, and writes succeed again by themselves."""
    store = pg_board.store
    store.answer_timeout_s = ANSWER_TIMEOUT_S
    assert (await pg_client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    stopped: list[int] = []

    def stops_its_backend(tx: Tx) -> None:
        tx.execute("INSERT INTO board_meta (key, value) VALUES ('cut', 'never committed')")
        pid = _backend_pid(tx)
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)
        tx.one("SELECT 1")  # no answer comes

    try:
        with pytest.raises(TaskloomError) as refused:
            await asyncio.wait_for(store.command(stops_its_backend, SYSTEM_ACTOR), ANSWER_WITHIN_S)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert refused.value.status == 503 and refused.value.code == "STORE_UNAVAILABLE", refused.value

    async def writes_again() -> bool:
        return (await pg_client.post("/api/v1/tasks", {"project": "demo", "title": "after"})).status == 201

    await async_wait_until(writes_again, timeout=ANSWER_WITHIN_S, what="writes to succeed again")
    with psycopg.connect(postgres_url, autocommit=True) as raw:
        assert raw.execute("SELECT count(*) FROM board_meta WHERE key = 'cut'").fetchone() == (0,)
