"""An SSE stream opened with a session cookie ends when the session does (it read on for ever).

docs/security.md bounds what a copied cookie is worth: the board "refuses it after 12 hours unused
or 7 days after the login, whatever the browser keeps", and a hostile server that recorded the
cookie can "read and write as the browser user until the session ends: ... at most 7 days after
the login" (auth.py: "No session outlives this, however busy: bounds what a copied cookie is
worth"). The deadline was only checked when a request starts (``app.guard_middleware`` →
``Credentials.check_session``). ``GET /api/v1/events`` is one request that lasts as long as the
client wants (``stream_lifetime`` defaults to none), so whoever holds the cookie opens a stream
a minute before the deadline and follows every change on the board for ever after it. Logout and
token rotation do end such streams (``end_revoked_sessions``, ``TOKEN_ROTATED``); expiry did not.
Now the stream ends at the session's deadline.

A real board on loopback with a two-second absolute session lifetime (``--session-max-age``), so
the deadline passes in real time; every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import BoardClient, RunningBoard, make_project, make_task, start_board
from tests.support.sessions import cookie_name, log_in
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

API = "/api/v1"
MAX_AGE = 2.0
#: How long after the session's deadline the stream may still be open (a generous sweep).
GRACE = 5.0


@pytest.fixture
async def short_board(tmp_path: Path) -> AsyncIterator[RunningBoard]:
    running = await start_board(tmp_path / "data", session_absolute_seconds=MAX_AGE, ping_interval=1.0)
    try:
        yield running
    finally:
        await running.runner.cleanup()


async def read_to_end(response: aiohttp.ClientResponse, seconds: float) -> bool:
    """True when the board ends the stream within ``seconds`` (pings and frames are read past)."""
    try:
        async with asyncio.timeout(seconds):
            while await response.content.readline():
                pass
        return True
    except TimeoutError:
        return False


async def test_a_stream_ends_when_the_session_that_opened_it_expires(
    short_board: RunningBoard, http: aiohttp.ClientSession
) -> None:
    board = short_board
    async with aiohttp.ClientSession() as bearer_http:
        client = BoardClient(board.url, board.token, bearer_http)
        await make_project(client)
        cookie = await log_in(board, http)
        logged_in = time.time()
        jar = {"Cookie": f"{cookie_name(board)}={cookie}"}
        stream = await http.get(f"{board.url}{API}/events", headers=jar)
        try:
            assert stream.status == 200
            assert (await stream.content.readline()).startswith(b"retry:"), "the stream is open"

            async def refused() -> bool:
                async with http.get(f"{board.url}{API}/meta", headers=jar) as reply:
                    return reply.status == 401

            await async_wait_until(refused, timeout=MAX_AGE + 10, what="the session to pass its deadline")
            expired_after = time.time() - logged_in

            ended = await read_to_end(stream, GRACE)
            delivered = None
            if not ended:
                task = await make_task(client, title="written after the session ended")
                try:
                    async with asyncio.timeout(10):
                        while True:
                            line = await stream.content.readline()
                            if line.startswith(b"data:") and task["id"].encode() in line:
                                delivered = line[:160].decode(errors="replace")
                                break
                except TimeoutError:
                    pass
        finally:
            stream.close()

    assert ended, (
        f"the session was refused {expired_after:.1f} s after the login (max age {MAX_AGE} s), but the stream "
        f"it opened was still open {GRACE} s later and delivered a change written after that: {delivered!r}"
    )
