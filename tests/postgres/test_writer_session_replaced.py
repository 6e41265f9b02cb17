"""The writer's own PostgreSQL session ends while the board runs (an operator's
``pg_terminate_backend``, the server's ``idle_session_timeout``) and the server stays up: the next
write is written, on a fresh session.

Nothing of a batch has been sent when its BEGIN fails on a session that is already gone, so
beginning once more is always safe, as reads (``run_query``), the secrets (``_on_own_conn``) and
the LISTEN thread already did. The writer used to answer 503 STORE_UNAVAILABLE instead.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from services.board.store import SYSTEM_ACTOR
from tests.support.board import BoardClient, RunningBoard
from tests.support.postgres import Cluster
from tests.support.waiting import wait_until


def _backend_pid(tx: object) -> int:
    return int(tx.one("SELECT pg_backend_pid()")[0])  # type: ignore[attr-defined]


async def writer_pid(board: RunningBoard) -> int:
    return await board.store.command(_backend_pid, SYSTEM_ACTOR)


def gone(admin_url: str, pid: int) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        wait_until(lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone(),
                   timeout=10, what=f"backend {pid} to end")


async def test_a_write_after_the_writers_session_was_terminated_is_written(
    pg_board: RunningBoard, pg_client: BoardClient, pg_cluster: Cluster,
) -> None:
    client = pg_client
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    pid = await writer_pid(pg_board)
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    gone(pg_cluster.admin_url, pid)
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "after the writer's session went"})
    assert reply.status == 201, (reply.status, reply.body)


async def test_a_write_after_idle_session_timeout_ended_the_writers_session_is_written(
    pg_board: RunningBoard, pg_client: BoardClient, pg_cluster: Cluster, postgres_url: str,
) -> None:
    """A DBA's ``idle_session_timeout`` ends the writer's session after every quiet spell: the
    first write after each must not be refused."""
    client = pg_client
    database = postgres_url.rsplit("/", 1)[1]
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET idle_session_timeout = '1s'").format(sql.Identifier(database)))
        # The writer's next session picks the setting up.
        admin.execute("SELECT pg_terminate_backend(%s)", (await writer_pid(pg_board),))
    for attempt in range(3):  # the first may meet the terminated session: that is the other test
        reply = await client.post("/api/v1/tasks", {"project": "demo", "title": f"settle {attempt}"})
        if reply.status == 201:
            break
    assert reply.status == 201, reply.body
    pid = await writer_pid(pg_board)
    gone(pg_cluster.admin_url, pid)  # the server ended it after a quiet second
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "after a quiet second"})
    assert reply.status == 201, (reply.status, reply.body)
