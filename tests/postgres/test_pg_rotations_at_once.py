"""Token rotations on two ``taskd`` processes at once (docs/operations.md, "Rotating the board
token"): whichever commits last is the board's token, and every process, and its token file, ends
on it. A rotation heard from the other process while this one's own was under way used to finish
first and be overwritten by it: the process then refused the database's token for good, accepted a
dead one, or left a dead one in its token file for the local ``taskctl``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import psycopg

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient
from tests.support.waiting import async_wait_until

#: Rotations at once, one on each process; a round lost the race a few times in a hundred.
ROUNDS = 100


async def test_rotations_on_two_processes_at_once_end_every_process_on_the_databases_token(
    tmp_path: Path, postgres_url: str,
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session, await psycopg.AsyncConnection.connect(
            postgres_url, autocommit=True,
        ) as db:
            for round_ in range(ROUNDS):
                replies = await asyncio.gather(*(BoardClient(p.url, p.token, session).post("/api/v1/token/rotate", {})
                                                 for p in (a, b)))
                assert [reply.status for reply in replies] == [200, 200], replies
                row = await (await db.execute("SELECT value FROM board_secrets WHERE key = 'token'")).fetchone()
                assert row is not None
                stored = str(row[0])

                async def on_the_stored_token(stored: str = stored) -> bool:
                    for process in (a, b):
                        with_stored = await BoardClient(process.url, stored, session).get("/api/v1/board/status")
                        if with_stored.status != 200 or process.token != stored:
                            return False
                    return True

                await async_wait_until(on_the_stored_token, timeout=10,
                                       what=f"round {round_}: both processes and their token files on the database's token")
    finally:
        a.stop()
        b.stop()
