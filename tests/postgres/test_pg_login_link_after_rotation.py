"""A token rotation on one board process reaches the others by a notification, milliseconds later.
In that window a process still checks requests with the replaced token: a login link it minted
then would outlive the rotation (which drops every code written before it) and let whoever holds
the replaced token log in after all. The code is written only while the database holds the token
the request was checked with.

The window is held open for the test by replacing the token row directly, as another process's
rotation does, without the notification that would tell this board.
"""

from __future__ import annotations

import psycopg
import pytest

from services.board.auth import LOGIN_PREFIX, TOKEN_SECRET
from tests.support.board import BoardClient

pytestmark = pytest.mark.asyncio


async def test_no_login_link_is_minted_under_a_token_the_database_replaced(
    pg_client: BoardClient, postgres_url: str,
) -> None:
    assert (await pg_client.post("/api/v1/login-links", {})).status == 200, "a link under the current token"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE board_secrets SET value = %s WHERE key = %s", ("tl_rotated-elsewhere", TOKEN_SECRET))
        conn.execute("DELETE FROM board_secrets WHERE key LIKE %s", (f"{LOGIN_PREFIX}%",))  # as a rotation does

        reply = await pg_client.post("/api/v1/login-links", {})

        assert reply.status == 401, f"a link minted with the replaced token: {reply.status} {reply.body}"
        assert reply.error == "UNAUTHORIZED"
        codes = conn.execute("SELECT count(*) FROM board_secrets WHERE key LIKE %s", (f"{LOGIN_PREFIX}%",)).fetchone()
        assert codes == (0,), f"a login code was written after the rotation: {codes[0] if codes else None}"
