"""The web UI: static files shipped in the package, served by the board (no build step, no CDN)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC_DIR = Path(__file__).parent / "static"

#: Everything the page loads comes from this origin; nothing may frame it.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


#: What a browser sees for a used or expired login link: what happened and how to get a new one.
LOGIN_REFUSED_PAGE = STATIC_DIR / "login-expired.html"


def login_refused(*, challenge: str) -> web.Response:
    """401 with a page a person can read (a browser shows this, not the API's JSON error)."""
    return web.Response(
        status=401,
        body=LOGIN_REFUSED_PAGE.read_bytes(),
        content_type="text/html",
        charset="utf-8",
        headers={**PAGE_HEADERS, "WWW-Authenticate": challenge},
    )


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)


async def _revalidate_static(request: web.Request, response: web.StreamResponse) -> None:
    # Modules are not fingerprinted, so make the browser revalidate them (cheap on loopback):
    # after an upgrade the page never runs an old module against a new board.
    # The page's own headers on every static file too: ``/static/index.html`` is the page as well,
    # and without them it could be framed (another port of 127.0.0.1 is the same site, so the
    # session cookie goes with the frame) and would run without its CSP.
    if request.path.startswith("/static/"):
        for name, value in PAGE_HEADERS.items():
            response.headers.setdefault(name, value)


def setup(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    app.on_response_prepare.append(_revalidate_static)
