"""The board page is also served at ``/static/index.html``: with its CSP now (it had none).

``ui.index`` serves ``static/index.html`` at ``/`` with ``PAGE_HEADERS``: the Content-Security-Policy
("everything the page loads comes from this origin; nothing may frame it": ``frame-ancestors
'none'``, no inline script). ``ui.setup`` also mounts the whole ``static/`` directory with
``add_static``, so the *same* page answered at ``/static/index.html`` with none of those headers,
and the page's scripts do not care about their path: the full, logged-in board runs there.

So any page could frame the live board (clickjacking: a page on another port of 127.0.0.1 is the
same site, so the browser sends the ``SameSite=Strict`` cookie to the frame), and the third of the
"three walls" against script in a field (markdown.js: "the page's Content-Security-Policy runs no
inline script or handler at all") was absent for anyone who linked the user to that URL.

Real ``taskd``, real Chromium, the framing page served by a real HTTP server on another loopback
port. ``/`` is the control: it refuses to be framed; the copy must too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.e2e.support_browser import TIMEOUT_MS, Api, log_in
from tests.support.board import TaskdProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

PAGE_URLS = ["/", "/static/index.html"]


@pytest.fixture
def framing_site() -> Iterator[tuple[str, dict[str, str]]]:
    """Another origin on loopback (another local user's dev server): serves ``/frame`` = an iframe of
    the URL the test puts in ``target["url"]``."""
    target: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = (
                "<!doctype html><title>cat pictures</title>"
                f'<iframe id="victim" width="1200" height="800" src="{target["url"]}"></iframe>'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", target
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("path", PAGE_URLS)
def test_no_other_origin_can_frame_the_logged_in_board(
    browser: Any, taskd: TaskdProcess, framing_site: tuple[str, dict[str, str]], path: str
) -> None:
    taskd.start()
    api = Api(taskd.url, taskd.token)
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    log_in(page, api, taskd.url)  # the user's browser holds a session

    site, target = framing_site
    target["url"] = taskd.url + path
    attacker = context.new_page()
    attacker.set_default_timeout(TIMEOUT_MS)
    attacker.goto(f"{site}/frame")
    # The iframe has finished navigating: either the board's document or Chromium's refusal page.
    frame = wait_until(
        lambda: next((f for f in attacker.frames if f is not attacker.main_frame and f.url not in ("", "about:blank")), None),
        timeout=TIMEOUT_MS / 1000, what="the iframe to navigate",
    )
    frame.wait_for_load_state("domcontentloaded")
    runs_board = frame.url.startswith(taskd.url) and frame.evaluate("() => !!document.querySelector('#app')")
    if runs_board:
        frame.wait_for_selector("#connection[data-state=live]")  # logged in, live, clickable
    headers = httpx.head(taskd.url + path).headers
    context.close()
    assert not runs_board, (
        f"{site} framed the live, logged-in board at {path} (clickjacking); "
        f"its Content-Security-Policy: {headers.get('content-security-policy')!r}, "
        f"X-Frame-Options: {headers.get('x-frame-options')!r}"
    )
