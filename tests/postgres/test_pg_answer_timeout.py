"""A server that stops answering one of the board's sessions while its host stays up (a backend
stopped by a signal, as a disk hung under it looks from the client): writes, reads and the live
streams go on, not left waiting.

TCP keepalives cannot see this (the host's kernel acknowledges every packet), so the store's watch
gives up on any session whose server has not answered one round trip for ``answer_timeout_s``
(60 s in production, one second here): it shuts the socket down and the blocked call fails as for
a lost connection. The writer's next batch then begins on a fresh session, a read runs again on a
fresh pool connection, the log reader reconnects. Before, the call and everything behind it waited
for as long as the server stayed silent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from services.board.keys import LOG_READER
from services.board.logreader import LogReader
from services.board.postgres_store import PgConnection
from services.board.store import SYSTEM_ACTOR, Tx
from shared.errors import TaskloomError
from tests.postgres.support_taskd import Follower
from tests.support.board import BoardClient, RunningBoard, start_board
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


async def test_a_read_whose_backend_stops_is_answered_from_a_fresh_session(
    pg_board: RunningBoard, pg_client: BoardClient,
) -> None:
    """A read's pool connection stopped under it: the watch cuts it after the bound and the read
    runs again on a fresh connection, with the right answer."""
    store = pg_board.store
    store.answer_timeout_s = ANSWER_TIMEOUT_S
    assert (await pg_client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    stopped: list[int] = []

    def counts_projects_stopping_its_first_backend(conn: PgConnection) -> int:
        if not stopped:
            pid = conn.raw.info.backend_pid
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        return int(conn.execute("SELECT count(*) FROM projects").fetchone()[0])

    began = time.monotonic()
    try:
        async with asyncio.timeout(ANSWER_WITHIN_S):
            count = await store.query(counts_projects_stopping_its_first_backend)
    except TimeoutError:
        raise AssertionError(f"a read from a stopped backend got no answer in {ANSWER_WITHIN_S} s") from None
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert stopped and count == 1
    assert time.monotonic() - began >= ANSWER_TIMEOUT_S  # it was the watch that ended the wait


async def test_a_stream_follows_another_process_after_its_log_readers_backend_stops(
    tmp_path: Path, postgres_url: str,
) -> None:
    """The log reader's own session stopped: a write made through another board process (which no
    hand-off of this process's writer can carry) still reaches a client of this one. The watch
    cuts the silent session; the failed read closes the live streams quietly and their clients,
    back with their cursors, are served from a fresh session."""
    here = await start_board(tmp_path / "here", database=postgres_url)
    there = await start_board(tmp_path / "there", database=postgres_url)
    try:
        here.store.answer_timeout_s = ANSWER_TIMEOUT_S
        reader: LogReader = here.app[LOG_READER]
        follower_conn = reader._follower.conn if reader._follower is not None else None
        assert follower_conn is not None
        pid = follower_conn.raw.info.backend_pid
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            named = admin.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert named == ("taskd log",), "an operator can tell the log reader's session in pg_stat_activity"
        async with aiohttp.ClientSession() as session:
            on_there = BoardClient(there.url, there.token, session)
            assert (await on_there.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
            follower = Follower(session, here.url, here.token, after=0).start()
            await follower.opened.wait()
            os.kill(pid, signal.SIGSTOP)
            try:
                task = (await on_there.post("/api/v1/tasks", {"project": "demo", "title": "past a stopped reader"})).body

                async def delivered_or_closed() -> bool:
                    assert follower.task is not None
                    return follower.cursor >= task["revision"] or follower.task.done()

                await async_wait_until(delivered_or_closed, timeout=ANSWER_WITHIN_S,
                                       what="the stream to get the write or be closed for its client to come back")
            finally:
                os.kill(pid, signal.SIGCONT)
            await follower.close()
            if follower.cursor < task["revision"]:
                # The failed read closed the live streams quietly (as when the server goes away):
                # the client comes back with its cursor and is served from the fresh session.
                again = Follower(session, here.url, here.token, after=follower.cursor).start()
                await again.until(task["revision"], timeout=ANSWER_WITHIN_S)
                await again.close()
    finally:
        await there.runner.cleanup()
        await here.runner.cleanup()
