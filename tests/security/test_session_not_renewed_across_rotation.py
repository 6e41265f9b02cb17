"""Fixed: before, a browser session outlives a token rotation.

docs/operations.md (Rotating the board token): "the old token stops working at once for every new
request … Browser sessions signed with the old token end; log in again". A session cookie is
checked when the request arrives (app.guard_middleware) but renewed when its response is prepared
(app.renew_session), and the renewal is signed with the token the board holds *then*. A request
authenticated with an old-token cookie that is still being answered when the rotation lands gets a
fresh cookie signed with the new token: the holder of a leaked cookie (the reason to rotate) keeps
a valid session by keeping one request in flight across the rotation.

The request is held in flight for real: both of the board's reader threads are kept busy by two
queries that wait for the test, so the cookie's ``GET /api/v1/meta`` has passed the guard and
waits for a reader while the rotation is made through the API.
"""

from __future__ import annotations

import asyncio
import threading
import time
from http.cookies import SimpleCookie
from typing import Any

import aiohttp
import pytest

from services.board import auth
from services.board.keys import CREDENTIALS
from services.board.store import READER_THREADS
from tests.support.board import API, BoardClient, RunningBoard
from tests.support.sessions import cookie_name, log_in
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


class Clock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_a_cookie_in_flight_across_a_rotation_is_not_renewed_under_the_new_token(
    board: RunningBoard, http: aiohttp.ClientSession
) -> None:
    clock = Clock()
    board.app[CREDENTIALS].clock = clock
    cookie = await log_in(board, http)
    clock.now += 2 * auth.RENEW_AFTER  # the session is due for its sliding renewal
    sent = {"Cookie": f"{cookie_name(board)}={cookie}"}

    release = threading.Event()
    entered = threading.Semaphore(0)

    def occupy(conn: Any) -> None:
        entered.release()
        assert release.wait(20), "the test never released the reader"

    readers = [asyncio.ensure_future(board.store.query(occupy)) for _ in range(READER_THREADS)]
    try:
        for _ in range(READER_THREADS):
            await asyncio.get_running_loop().run_in_executor(None, entered.acquire)

        async def with_cookie() -> tuple[int, SimpleCookie]:
            async with http.get(f"{board.url}{API}/meta", headers=sent) as response:
                jar: SimpleCookie = SimpleCookie()
                for header in response.headers.getall("Set-Cookie", []):
                    jar.load(header)
                return response.status, jar

        in_flight = asyncio.ensure_future(with_cookie())
        # Observed, not assumed: the cookie request passed the guard and its query waits for a reader.
        queue = board.store._readers._work_queue  # noqa: SLF001 (read only)
        await async_wait_until(lambda: asyncio.sleep(0, queue.qsize() >= 1), what="the cookie request to be waiting")

        rotated = await BoardClient(board.url, board.token, http).post(f"{API}/token/rotate")
        assert rotated.status == 200, rotated.body
    finally:
        release.set()
        await asyncio.gather(*readers)
    status, jar = await in_flight
    assert status == 200, "the request was authenticated before the rotation"

    after = await BoardClient(board.url, None, http).request("GET", f"{API}/meta", headers=sent, actor=None)
    assert after.status == 401, "the old cookie itself is refused after the rotation"
    renewed = jar.get(cookie_name(board))
    if renewed is not None and renewed.value:  # no renewal, or one that clears the cookie, is right
        fresh = await BoardClient(board.url, None, http).request(
            "GET", f"{API}/meta", headers={"Cookie": f"{cookie_name(board)}={renewed.value}"}, actor=None)
        assert fresh.status == 401, (
            f"the answer to a request made with an old-token cookie carried a renewed cookie (max-age "
            f"{renewed['max-age']}) signed with the NEW token; it is accepted after the rotation ({fresh.status})"
        )
