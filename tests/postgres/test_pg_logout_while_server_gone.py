"""A logout the database cannot take (docs/operations.md, "Faults": 503 STORE_UNAVAILABLE, retry).
It changes nothing, here or anywhere, so its retry, once the server is back, ends the session on
every process. It used to revoke the session in this process's memory before the database refused
it: the other processes kept accepting the cookie, this one refused the retry as logged out (401),
and after a restart accepted the cookie again."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient
from tests.support.postgres import Cluster, cut_off, let_back
from tests.support.waiting import async_wait_until


async def test_a_logout_refused_while_the_server_is_away_changes_nothing_and_its_retry_ends_the_session_everywhere(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster,
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
            link = (await BoardClient(a.url, a.token, session).post("/api/v1/login-links", {})).body["url"]
            async with session.get(link, allow_redirects=False) as response:
                assert response.status == 302
                cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in response.cookies.items())

            async def with_cookie(method: str, url: str) -> tuple[int, str]:
                async with session.request(method, url, headers={"Cookie": cookie, "Origin": url.split("/api", 1)[0]},
                                           json={} if method == "POST" else None) as reply:
                    return reply.status, await reply.text()

            cut_off(pg_cluster.admin_url, postgres_url)
            try:
                status, body = await with_cookie("POST", f"{a.url}/api/v1/logout")
                assert status == 503 and "STORE_UNAVAILABLE" in body, body
                # Refused: the session is what it was, on the process that refused it too.
                assert (await with_cookie("GET", f"{a.url}/api/v1/board/status"))[0] != 401
            finally:
                let_back(pg_cluster.admin_url, postgres_url)

            async def logged_out() -> str | None:
                status, body = await with_cookie("POST", f"{a.url}/api/v1/logout")
                assert status in (200, 503), (status, body)
                return body if status == 200 else None

            answer = await async_wait_until(logged_out, timeout=20, what="the retried logout to be answered")
            assert '"logged_out":true' in answer.replace(" ", "")
            assert (await with_cookie("GET", f"{a.url}/api/v1/meta"))[0] == 401, "refused at once where it ended"

            async def refused_on_b() -> bool:  # B hears of it by the database's notification
                return (await with_cookie("GET", f"{b.url}/api/v1/meta"))[0] == 401

            await async_wait_until(refused_on_b, timeout=10, what="process B to refuse the ended session")
    finally:
        a.stop()
        b.stop()
