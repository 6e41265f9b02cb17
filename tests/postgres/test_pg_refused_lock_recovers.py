"""A writing transaction whose first statement (the global_revision lock) is refused by the server
— lock_timeout / statement_timeout set on the database while another client holds the row — must
cost that batch only: once the lock is free again, writes succeed."""

from __future__ import annotations

import psycopg
from psycopg import sql

from tests.support.board import BoardClient
from tests.support.postgres import Cluster
from tests.support.waiting import async_wait_until


async def test_a_refused_revision_lock_does_not_wedge_the_writer(pg_client: BoardClient, postgres_url: str, pg_cluster: Cluster) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    admin_url = pg_cluster.admin_url
    client = pg_client
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    # An operator bounds lock waits on the database; the board's sessions pick it up anew.
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET lock_timeout = '300ms'").format(sql.Identifier(database)))
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                      " AND pid <> pg_backend_pid()", (database,))

    async def written(title: str) -> object:
        reply = await client.post("/api/v1/tasks", {"project": "demo", "title": title})
        return reply.body["id"] if reply.status == 201 else None

    acknowledged = [await async_wait_until(lambda: written("before"), timeout=10, what="writes after reconnecting")]

    # Another client holds the revision row for a while (a long report, a stuck migration).
    with psycopg.connect(postgres_url) as locker:
        locker.execute("SELECT revision FROM global_revision WHERE singleton = 1 FOR UPDATE")
        refused = await client.post("/api/v1/tasks", {"project": "demo", "title": "while locked"})
        assert refused.status == 503 and refused.error == "STORE_UNAVAILABLE", refused.body
        locker.rollback()

    # The lock is free: writes must work again (retry as the 503 says).
    last: list[object] = []

    async def recovered() -> object:
        reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "after"})
        last[:] = [reply.status, reply.body]
        return reply.body["id"] if reply.status == 201 else None

    try:
        acknowledged.append(await async_wait_until(recovered, timeout=10, interval=0.2, what="writes to work again"))
    except AssertionError as exc:
        raise AssertionError(f"writes never recovered after the lock was released; last reply: {last}") from exc
    listed = await client.get("/api/v1/tasks")
    assert {task["id"] for task in listed.body["items"]} >= set(acknowledged)
