"""The web UI: static files shipped in the package, served by the board (no build step, no CDN)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).parent / "static"


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


def setup(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
