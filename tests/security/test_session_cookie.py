"""The browser session cookie: bounded sliding lifetime, logout, and same-origin writes only.

A real board on loopback; the session's clock is the one thing replaced (``Credentials.clock``),
so twelve idle hours pass in a line instead of a sleep. Every refusal is checked to have written
nothing.
"""

from __future__ import annotations

import asyncio
import time
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from services.board import auth
from services.board.keys import CREDENTIALS, STREAMS
from tests.support.board import (
    BoardClient,
    Reply,
    RunningBoard,
    TaskdProcess,
    activity_count,
    make_task,
    row_counts,
    start_board,
)
from tests.support.disks import fill, tmpfs
from tests.support.sessions import cookie_name, log_in, set_cookies
from tests.support.waiting import wait_until

API = "/api/v1"
HOUR = 3600.0


class Clock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(board: RunningBoard) -> Clock:
    fake = Clock()
    board.app[CREDENTIALS].clock = fake
    return fake


async def with_cookie(
    board: RunningBoard,
    http: aiohttp.ClientSession,
    cookie: str,
    method: str = "GET",
    path: str = f"{API}/meta",
    *,
    body: Any = None,
    origin: str | None = "own",
    headers: dict[str, str] | None = None,
) -> Reply:
    """A request carrying only the session cookie (no bearer), from the board's page by default."""
    sent = {"Cookie": f"{cookie_name(board)}={cookie}", **(headers or {})}
    if origin is not None:
        sent["Origin"] = board.url if origin == "own" else origin
    client = BoardClient(board.url, None, http)
    if method == "GET":
        return await client.request("GET", path, headers=sent, actor=None)
    return await client.request(method, path, json_body=body if body is not None else {}, headers=sent)


def renewed(reply: Reply, board: RunningBoard) -> str | None:
    morsel = set_cookies(reply).get(cookie_name(board))
    return morsel.value if morsel is not None else None


# -- the cookie itself ----------------------------------------------------------------------------


async def test_the_cookie_is_named_for_the_board_marked_and_bounded(
    board: RunningBoard, http: aiohttp.ClientSession
) -> None:
    bearer = BoardClient(board.url, board.token, http)
    board_id = (await bearer.get(f"{API}/meta")).body["board_id"]
    link = (await bearer.post(f"{API}/login-links")).body["url"]
    async with http.get(link, allow_redirects=False) as answer:
        morsel = set_cookies(answer)[f"taskloom_session_{board_id.removeprefix('brd_')}"]
    assert morsel.value.startswith("tls1.")
    assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/"
    assert int(morsel["max-age"]) == int(auth.SESSION_IDLE_SECONDS)
    assert (await with_cookie(board, http, morsel.value)).status == 200


async def test_a_tampered_cookie_is_refused(board: RunningBoard, http: aiohttp.ClientSession) -> None:
    cookie = await log_in(board, http)
    mark, nonce, issued, seen, signature = cookie.split(".")
    later = str(int(seen) + 10 * int(HOUR))
    for forged in (
        f"{mark}.{nonce}.{issued}.{later}.{signature}",  # stretch its lifetime
        f"{mark}.{nonce}.{later}.{later}.{signature}",
        f"{nonce}.{signature}",  # the old, unbounded format
        cookie + "0",
    ):
        reply = await with_cookie(board, http, forged)
        assert reply.status == 401 and reply.error == "UNAUTHORIZED", forged


# -- lifetime -------------------------------------------------------------------------------------


async def test_an_idle_cookie_expires_on_the_board(board: RunningBoard, http: aiohttp.ClientSession, clock: Clock) -> None:
    cookie = await log_in(board, http)
    clock.advance(auth.SESSION_IDLE_SECONDS - 1)
    assert (await with_cookie(board, http, cookie)).status == 200
    clock.advance(2)
    # The browser would still send it if it ignored Max-Age: the board says no.
    reply = await with_cookie(board, http, cookie)
    assert reply.status == 401 and reply.error == "UNAUTHORIZED"


async def test_use_slides_the_idle_limit(board: RunningBoard, http: aiohttp.ClientSession, clock: Clock) -> None:
    cookie = first = await log_in(board, http)
    for _ in range(5):  # three idle limits in all, never idle for one
        clock.advance(0.6 * auth.SESSION_IDLE_SECONDS)
        reply = await with_cookie(board, http, cookie)
        assert reply.status == 200, reply.body
        fresh = renewed(reply, board)
        assert fresh is not None and fresh != cookie, "a cookie in use is re-issued"
        morsel = set_cookies(reply)[cookie_name(board)]
        assert morsel["httponly"] and morsel["samesite"] == "Strict"
        cookie = fresh
    assert (await with_cookie(board, http, first)).status == 401, "the first cookie's own idle limit passed"
    # Within the renewal interval the board does not re-issue (one Set-Cookie a minute at most).
    clock.advance(1)
    reply = await with_cookie(board, http, cookie)
    assert reply.status == 200 and renewed(reply, board) is None


async def test_no_session_outlives_the_absolute_limit(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    board = await start_board(tmp_path / "data", session_idle_seconds=HOUR, session_absolute_seconds=4 * HOUR)
    try:
        clock = Clock()
        board.app[CREDENTIALS].clock = clock
        cookie = await log_in(board, http)
        used = 0.0
        while used + 0.5 * HOUR < 4 * HOUR:
            clock.advance(0.5 * HOUR)
            used += 0.5 * HOUR
            reply = await with_cookie(board, http, cookie)
            assert reply.status == 200
            cookie = renewed(reply, board) or cookie
            assert int(set_cookies(reply)[cookie_name(board)]["max-age"]) <= 4 * HOUR - used
        clock.advance(0.5 * HOUR)  # used a moment ago, but four hours since the login
        assert (await with_cookie(board, http, cookie)).error == "UNAUTHORIZED"
    finally:
        await board.runner.cleanup()


# -- logout ---------------------------------------------------------------------------------------


async def test_logout_ends_the_session_on_the_board_and_across_a_restart(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    data = tmp_path / "data"
    board = await start_board(data)
    try:
        leaving, staying = await log_in(board, http), await log_in(board, http)
        clock = Clock()
        board.app[CREDENTIALS].clock = clock
        clock.advance(2 * auth.RENEW_AFTER)
        older = leaving
        leaving = renewed(await with_cookie(board, http, leaving), board) or ""
        assert leaving and leaving != older

        reply = await with_cookie(board, http, leaving, "POST", f"{API}/logout")
        assert reply.status == 200 and reply.body == {"logged_out": True}
        cleared = set_cookies(reply)[cookie_name(board)]
        assert cleared.value == "" and cleared["max-age"] == "0", "the browser is told to drop it"
        for replay in (leaving, older):  # every cookie of that session, renewed or not
            assert (await with_cookie(board, http, replay)).error == "UNAUTHORIZED"
        assert (await with_cookie(board, http, staying)).status == 200, "other sessions stay"
        revoked = data / "revoked-sessions.json"
        assert revoked.stat().st_mode & 0o777 == 0o600
    finally:
        await board.runner.cleanup()

    board = await start_board(data)
    try:
        assert (await with_cookie(board, http, leaving)).error == "UNAUTHORIZED", "a restart does not revive it"
        assert (await with_cookie(board, http, staying)).status == 200
    finally:
        await board.runner.cleanup()


async def test_a_logout_the_disk_refuses_leaves_the_session_as_it_was(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """A logout whose revocation the full disk would not take is refused, and changes nothing:
    the cookie still works, so the person's retry (once there is room) ends the session for good.
    The session used to be refused in memory before the file was written: the retry met 401
    and could not log out, and the next start, with no revocation on disk, took the cookie again."""
    with tmpfs(tmp_path / "disk", "8m") as disk:
        data = disk / "data"
        board = await start_board(data)
        try:
            leaving = await log_in(board, http)
            filler = fill(disk)
            refused = await with_cookie(board, http, leaving, "POST", f"{API}/logout")
            assert refused.status == 503, (refused.status, refused.body)
            assert (await with_cookie(board, http, leaving)).status == 200, "the refused logout ended nothing"
            filler.unlink()
            done = await with_cookie(board, http, leaving, "POST", f"{API}/logout")
            assert done.status == 200 and done.body == {"logged_out": True}, done.body
            assert (await with_cookie(board, http, leaving)).error == "UNAUTHORIZED"
        finally:
            await board.runner.cleanup()
        board = await start_board(data)
        try:
            assert (await with_cookie(board, http, leaving)).error == "UNAUTHORIZED", "a restart does not revive it"
        finally:
            await board.runner.cleanup()


async def test_logout_closes_the_streams_that_session_opened(
    board: RunningBoard, http: aiohttp.ClientSession, client: BoardClient
) -> None:
    leaving, staying = await log_in(board, http), await log_in(board, http)
    streams = []
    for cookie in (leaving, staying):
        response = await http.get(
            f"{board.url}{API}/events", headers={"Cookie": f"{cookie_name(board)}={cookie}"}
        )
        assert response.status == 200
        assert (await response.content.readline()).startswith(b"retry:"), "the stream is open"
        streams.append(response)
    gone, kept = streams
    try:
        assert (await with_cookie(board, http, leaving, "POST", f"{API}/logout")).status == 200
        async with asyncio.timeout(10):
            rest = await gone.content.read()  # until the board ends the stream
        assert b"shutdown" not in rest, "no shutdown frame: the reconnect should meet the 401"
        await make_task(client, title="after the logout")
        async with asyncio.timeout(10):
            while not (await kept.content.readline()).startswith(b"data:"):
                pass  # the other session's stream still follows the board
        assert len(board.app[STREAMS]) == 1
    finally:
        for response in streams:
            response.close()


async def test_logout_with_only_the_token_ends_no_session(board: RunningBoard, client: BoardClient) -> None:
    reply = await client.post(f"{API}/logout")
    assert reply.status == 200 and reply.body == {"logged_out": False}


async def test_the_api_document_lists_logout(client: BoardClient) -> None:
    paths = (await client.get(f"{API}/openapi.json")).body["paths"]
    assert "post" in paths[f"{API}/logout"]


# -- same-origin writes ---------------------------------------------------------------------------

CROSS_ORIGIN = [
    pytest.param({"origin": "http://127.0.0.1:9"}, id="another port of 127.0.0.1"),
    pytest.param({"origin": "http://evil.example"}, id="another site"),
    pytest.param({"origin": "null"}, id="an opaque origin"),
    pytest.param({"headers": {"Sec-Fetch-Site": "same-site"}}, id="same-site with our Origin"),
    pytest.param({"headers": {"Sec-Fetch-Site": "cross-site"}}, id="cross-site with our Origin"),
    pytest.param({"origin": None, "headers": {"Sec-Fetch-Site": "cross-site"}}, id="cross-site, no Origin"),
    pytest.param({"origin": None}, id="neither header"),
]


@pytest.mark.parametrize("where", CROSS_ORIGIN)
async def test_a_cross_origin_write_with_the_cookie_is_refused(
    board: RunningBoard, http: aiohttp.ClientSession, client: BoardClient, where: dict[str, Any]
) -> None:
    assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
    cookie = await log_in(board, http)
    before = await row_counts(board, "projects", "task_activities")
    attempts = [
        ("POST", f"{API}/projects", {"id": "stolen"}),
        ("PATCH", f"{API}/projects/demo", {"name": "Owned"}),
        ("POST", f"{API}/logout", {}),
        ("POST", f"{API}/token/rotate", {}),
    ]
    token = (board.data_dir / "token").read_text()
    for method, path, body in attempts:
        reply = await with_cookie(board, http, cookie, method, path, body=body, **where)
        assert reply.status == 403 and reply.error == "FORBIDDEN_ORIGIN", (method, path, reply.body)
        assert reply.body["error"]["details"]["expected"] == board.url
    assert await row_counts(board, "projects", "task_activities") == before, "nothing written"
    assert (await client.get(f"{API}/projects/demo")).body["name"] != "Owned"
    assert (board.data_dir / "token").read_text() == token
    assert (await with_cookie(board, http, cookie)).status == 200, "the refused logout ended nothing"


@pytest.mark.parametrize(
    "where",
    [
        pytest.param({}, id="our Origin"),
        pytest.param({"headers": {"Sec-Fetch-Site": "same-origin"}}, id="our Origin and same-origin"),
        pytest.param({"origin": None, "headers": {"Sec-Fetch-Site": "same-origin"}}, id="same-origin, no Origin"),
    ],
)
async def test_a_same_origin_write_with_the_cookie_works(
    board: RunningBoard, http: aiohttp.ClientSession, where: dict[str, Any]
) -> None:
    cookie = await log_in(board, http)
    before = await activity_count(board)
    reply = await with_cookie(board, http, cookie, "POST", f"{API}/projects", body={"id": "demo"}, **where)
    assert reply.status == 201, reply.body
    assert await activity_count(board) == before + 1


async def test_bearer_requests_are_not_subject_to_the_origin_check(board: RunningBoard, client: BoardClient) -> None:
    assert (await client.post(f"{API}/projects", {"id": "plain"})).status == 201  # no Origin at all
    foreign = {"Origin": "http://127.0.0.1:9", "Sec-Fetch-Site": "cross-site"}
    assert (await client.post(f"{API}/projects", {"id": "scripted"}, headers=foreign)).status == 201


async def test_reads_with_the_cookie_need_no_origin(board: RunningBoard, http: aiohttp.ClientSession) -> None:
    cookie = await log_in(board, http)
    reply = await with_cookie(board, http, cookie, origin=None)
    assert reply.status == 200


def test_taskd_session_idle_flag_expires_a_real_process_cookie(taskd: TaskdProcess) -> None:
    """The operator's knob, end to end: a real ``taskd`` refuses the cookie once it idled too long."""
    taskd.start("--session-idle", "2", "--session-max-age", "60")
    bearer = {"Authorization": f"Bearer {taskd.token}", "X-Taskloom-Actor": "ann"}
    link = httpx.post(f"{taskd.url}{API}/login-links", headers=bearer, json={}).json()["url"]
    answer = httpx.get(link, follow_redirects=False)
    assert answer.status_code == 302
    [header] = [value for name, value in answer.headers.multi_items() if name.lower() == "set-cookie"]
    jar: SimpleCookie = SimpleCookie()
    jar.load(header)
    [(name, morsel)] = jar.items()
    assert name.startswith(auth.SESSION_COOKIE_PREFIX) and morsel["max-age"] == "2"
    sent = {"Cookie": f"{name}={morsel.value}"}
    assert httpx.get(f"{taskd.url}{API}/meta", headers=sent).status_code == 200
    # Unused for two seconds of the board's own clock: refused, though this client still sends it.
    wait_until(
        lambda: httpx.get(f"{taskd.url}{API}/meta", headers=sent).status_code == 401,
        timeout=15,
        interval=0.2,
        what="the idle session to be refused",
    )
