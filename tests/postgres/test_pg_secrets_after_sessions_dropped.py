"""Login links go through the shared-secret connections (``board_secrets``), not the writer: a
server that dropped the board's sessions (a restart, a failover, pg_terminate_backend) must give
503 STORE_UNAVAILABLE or just work — never 500 INTERNAL."""

from __future__ import annotations

import psycopg

from tests.support.board import BoardClient
from tests.support.postgres import Cluster


async def test_a_login_link_after_the_server_dropped_its_sessions_is_not_500(
    pg_client: BoardClient, postgres_url: str, pg_cluster: Cluster,
) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    admin_url = pg_cluster.admin_url
    client = pg_client
    # Warm the secret connections of the board's threads.
    for _ in range(3):
        assert (await client.post("/api/v1/login-links", {})).status == 200
    # The server ends every session of the database (as a restart does); it serves again at once.
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (database,))
    statuses = []
    for _ in range(3):
        reply = await client.post("/api/v1/login-links", {})
        statuses.append((reply.status, reply.error))
    assert all(status in (200, 503) for status, _ in statuses), (
        f"login links after the server dropped the sessions: {statuses}")
