"""Another client holding the global_revision row (an open transaction that ran SELECT … FOR
UPDATE, a stuck script): a write must be answered — 503 STORE_UNAVAILABLE with Retry-After, as
SQLite answers after its 5 s busy_timeout — not hang for as long as the other client pleases."""

from __future__ import annotations

import asyncio
import time

import psycopg

from tests.support.board import BoardClient

#: Generous: SQLite's board gives up on a held write lock after 5 s.
ANSWER_WITHIN_S = 12.0


async def test_a_write_behind_a_held_revision_lock_is_answered(pg_client: BoardClient, postgres_url: str) -> None:
    client = pg_client
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    with psycopg.connect(postgres_url) as locker:
        locker.execute("SELECT revision FROM global_revision WHERE singleton = 1 FOR UPDATE")
        began = time.monotonic()
        try:
            async with asyncio.timeout(ANSWER_WITHIN_S):
                reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "behind the lock"})
        except TimeoutError:
            raise AssertionError(
                f"a write behind another client's lock on global_revision got no answer in {ANSWER_WITHIN_S} s"
            ) from None
        finally:
            locker.rollback()
        assert reply.status == 503 and reply.error == "STORE_UNAVAILABLE", reply.body
        assert time.monotonic() - began < ANSWER_WITHIN_S
