"""A logout on one board process ends that session everywhere on the database: new requests are
refused on every process, and the streams the session opened on the others close too.

Two in-process boards on one throwaway PostgreSQL database; a browser session is a login link
redeemed on one of them, its cookie valid on both (they share the token that signs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psycopg
import pytest

from services.board.keys import CREDENTIALS, STREAMS
from tests.support.board import API, BoardClient, RunningBoard, make_task, start_board
from tests.support.sessions import log_in
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def two_boards(tmp_path: Path, postgres_url: str) -> AsyncIterator[tuple[RunningBoard, RunningBoard]]:
    a = await start_board(tmp_path / "a", database=postgres_url)
    b = await start_board(tmp_path / "b", database=postgres_url)
    try:
        yield a, b
    finally:
        await b.runner.cleanup()
        await a.runner.cleanup()


async def open_stream(board: RunningBoard, http: aiohttp.ClientSession, cookie: str) -> aiohttp.ClientResponse:
    response = await http.get(f"{board.url}{API}/events", headers={"Cookie": f"{board.app[CREDENTIALS].cookie_name}={cookie}"})
    assert response.status == 200
    assert (await response.content.readline()).startswith(b"retry:"), "the stream is open"
    return response


async def test_a_logout_closes_the_sessions_streams_on_every_process(
    two_boards: tuple[RunningBoard, RunningBoard], http: aiohttp.ClientSession
) -> None:
    a, b = two_boards
    assert a.app[CREDENTIALS].cookie_name == b.app[CREDENTIALS].cookie_name, "one board, one cookie"
    leaving, staying = await log_in(a, http), await log_in(a, http)
    gone, kept = await open_stream(b, http, leaving), await open_stream(b, http, staying)
    try:
        name = a.app[CREDENTIALS].cookie_name
        headers = {"Cookie": f"{name}={leaving}", "Origin": a.url}
        async with http.post(f"{a.url}{API}/logout", headers=headers, json={}) as answer:
            assert answer.status == 200, await answer.text()
        async with asyncio.timeout(10):
            rest = await gone.content.read()  # until process B ends the stream
        assert b"shutdown" not in rest, "no shutdown frame: the reconnect should meet the 401"
        async with http.get(f"{b.url}{API}/meta", headers={"Cookie": f"{name}={leaving}"}) as answer:
            assert answer.status == 401, "process B refuses the logged-out session"
        await make_task(BoardClient(a.url, a.token, http), title="after the logout")
        async with asyncio.timeout(10):
            while not (await kept.content.readline()).startswith(b"data:"):
                pass  # the other session's stream on B still follows the board
        async def one_left() -> bool:
            return len(b.app[STREAMS]) == 1

        await async_wait_until(one_left, timeout=10, what="one stream left on B")
    finally:
        gone.close()
        kept.close()


async def test_revocations_past_their_session_deadline_leave_board_secrets(
    two_boards: tuple[RunningBoard, RunningBoard], http: aiohttp.ClientSession, postgres_url: str
) -> None:
    """Every process reloads every ``revoked:`` row on each logout or rotation: rows whose session
    could no longer be valid anyway must not pile up."""
    a, _ = two_boards
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO board_secrets (key, value, updated_at)"
            " SELECT 'revoked:old' || n, '1000', '2026-01-01T00:00:00.000Z' FROM generate_series(1, 5) AS n"
        )
    cookie = await log_in(a, http)
    name = a.app[CREDENTIALS].cookie_name
    async with http.post(f"{a.url}{API}/logout", headers={"Cookie": f"{name}={cookie}", "Origin": a.url}, json={}) as answer:
        assert answer.status == 200, await answer.text()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        rows = [key for (key,) in conn.execute("SELECT key FROM board_secrets WHERE key LIKE 'revoked:%'")]
    assert len(rows) == 1 and not rows[0].startswith("revoked:old"), rows
    async with http.get(f"{a.url}{API}/meta", headers={"Cookie": f"{name}={cookie}"}) as answer:
        assert answer.status == 401, "the fresh revocation still holds"
