"""Browser sessions for tests: redeem a login link as a browser would, read the cookies it set."""

from __future__ import annotations

from http.cookies import SimpleCookie

import aiohttp

from services.board.keys import CREDENTIALS

from .board import API, BoardClient, Reply, RunningBoard


def cookie_name(board: RunningBoard) -> str:
    return board.app[CREDENTIALS].cookie_name


def set_cookies(reply: aiohttp.ClientResponse | Reply) -> SimpleCookie:
    parsed: SimpleCookie = SimpleCookie()
    for header in reply.headers.getall("Set-Cookie", []):
        parsed.load(header)
    return parsed


async def log_in(board: RunningBoard, http: aiohttp.ClientSession) -> str:
    """Redeem a fresh login link as a browser would; the cookie value it set."""
    bearer = BoardClient(board.url, board.token, http)
    link = (await bearer.post(f"{API}/login-links")).body["url"]
    async with http.get(link, allow_redirects=False) as answer:
        assert answer.status == 302, await answer.text()
        return set_cookies(answer)[cookie_name(board)].value
