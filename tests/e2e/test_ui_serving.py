"""How the board serves the page: public shell, strict headers, modules from the package only."""

from __future__ import annotations

import pytest

from services.board import ui
from tests.support.board import BoardClient

pytestmark = pytest.mark.asyncio


async def test_page_shell_is_public_with_a_strict_policy(client: BoardClient) -> None:
    reply = await client.get("/", token=False)
    assert reply.status == 200
    assert b'<script type="module" src="/static/js/app.js">' in reply.body
    policy = reply.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert reply.headers["Cache-Control"] == "no-cache"


async def test_every_module_the_page_imports_is_served(client: BoardClient) -> None:
    modules = sorted(path.name for path in (ui.STATIC_DIR / "js").glob("*.js"))
    assert "app.js" in modules and "events-table.js" in modules
    for name in modules:
        reply = await client.get(f"/static/js/{name}", token=False)
        assert reply.status == 200, name
        assert reply.headers["Content-Type"].startswith(("text/javascript", "application/javascript")), name
        assert reply.headers["Cache-Control"] == "no-cache"
        # No CDN, no absolute URL: everything the page runs comes from this board.
        assert b"https://" not in reply.body and b"http://" not in reply.body, name
    css = await client.get("/static/css/board.css", token=False)
    assert css.status == 200 and css.headers["Content-Type"].startswith("text/css")
    assert b"@import" not in css.body and b"url(http" not in css.body


async def test_static_route_does_not_leave_its_folder(client: BoardClient) -> None:
    for path in ("/static/../token", "/static/%2e%2e/token", "/static/../board.sqlite"):
        reply = await client.get(path, token=False)
        assert reply.status in (401, 403, 404), path  # refused, whichever layer answers
        assert b"tl_" not in (reply.body if isinstance(reply.body, bytes) else str(reply.body).encode())


async def test_the_api_still_needs_the_token_or_cookie(client: BoardClient) -> None:
    reply = await client.get("/api/v1/meta", token=False)
    assert reply.status == 401 and reply.error == "UNAUTHORIZED"
