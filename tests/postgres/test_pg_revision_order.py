"""Revisions never let a reader skip, across board processes (docs/architecture.md).

Sixteen writers spread over two ``taskd`` processes on one PostgreSQL database create tasks as
fast as they can; a stream on each process follows the log from the start. Once the writers are
done, every stream's sequence of revisions must be exactly the final activity table's, in order:
a revision committed after a later one was visible would show up as a gap (skipped for good) or a
repeat.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import psycopg

from tests.postgres.support_taskd import Follower, board_process

WRITERS = 16
TASKS_PER_WRITER = 15


async def test_sixteen_writers_on_two_processes_never_make_a_reader_skip(tmp_path: Path, postgres_url: str) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        assert a.token == b.token, "both processes accept the database's one token"
        headers = {"Authorization": f"Bearer {a.token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "ann"}
        async with aiohttp.ClientSession(headers=headers) as session:
            reply = await session.post(f"{a.url}/api/v1/projects", json={"id": "demo", "name": "Demo"})
            assert reply.status == 201, await reply.text()
            followers = [Follower(session, a.url, a.token).start(), Follower(session, b.url, b.token).start()]
            await asyncio.gather(*(follower.opened.wait() for follower in followers))

            async def writer(number: int) -> None:
                url = (a if number % 2 else b).url
                for n in range(TASKS_PER_WRITER):
                    reply = await session.post(f"{url}/api/v1/tasks", json={"project": "demo", "title": f"w{number} t{n}"})
                    assert reply.status == 201, await reply.text()

            await asyncio.gather(*(writer(number) for number in range(WRITERS)))
            with psycopg.connect(postgres_url) as conn:
                final = [row[0] for row in conn.execute(
                    "SELECT revision FROM task_activities WHERE revision IS NOT NULL ORDER BY revision")]
            assert len(final) == 1 + WRITERS * TASKS_PER_WRITER
            for follower in followers:
                await follower.until(final[-1])
            for follower in followers:
                await follower.close()
        for follower in followers:
            assert follower.revisions == final, "a reader skipped, repeated or reordered a revision"
    finally:
        a.stop()
        b.stop()
