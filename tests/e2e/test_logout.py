"""The page's "Log out" control in real Chromium against a real ``taskd``.

It must end the session on the board (the copied cookie is refused afterwards), drop it from the
browser, and land on a page that says how to log in again, all within the page's CSP.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.support_browser import TIMEOUT_MS, Api, log_in
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

COOKIE_PREFIX = "taskloom_session_"


def session_cookies(context: Any) -> list[dict[str, Any]]:
    return [cookie for cookie in context.cookies() if cookie["name"].startswith(COOKIE_PREFIX)]


def test_log_out_ends_the_session_and_says_how_to_come_back(browser: Any, taskd: TaskdProcess) -> None:
    taskd.start()
    api = Api(taskd.url, taskd.token)
    context = browser.new_context()
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.set_default_timeout(TIMEOUT_MS)
    log_in(page, api, taskd.url)

    [cookie] = session_cookies(context)
    assert cookie["value"].startswith("tls1.") and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["expires"] > 0, "a bounded cookie, not one for the browser's whole life"
    copied = {"Cookie": f"{cookie['name']}={cookie['value']}"}
    assert httpx.get(f"{taskd.url}/api/v1/meta", headers=copied).status_code == 200

    # The page's own writes carry its Origin and pass the same-origin check.
    status = page.evaluate(
        """async () => (await fetch('/api/v1/projects', {
            method: 'POST', credentials: 'same-origin',
            headers: {'Content-Type': 'application/json', 'X-Taskloom-Actor': 'ann'},
            body: JSON.stringify({id: 'from-the-page'}),
        })).status"""
    )
    assert status == 201

    page.click("#logout")
    page.wait_for_url(f"{taskd.url}/static/logged-out.html")
    text = page.inner_text("main")
    assert "You are logged out" in text and "taskctl open" in text
    assert session_cookies(context) == [], "the browser dropped the cookie"

    # The copied cookie is dead on the board itself, not only forgotten by this browser.
    replay = httpx.get(f"{taskd.url}/api/v1/meta", headers=copied)
    assert replay.status_code == 401 and replay.json()["error"]["code"] == "UNAUTHORIZED"
    written = httpx.post(
        f"{taskd.url}/api/v1/projects",
        headers={**copied, "Origin": taskd.url, "X-Taskloom-Actor": "ann"},
        json={"id": "after-logout"},
    )
    assert written.status_code == 401
    assert [p["id"] for p in api.get("/projects")["items"]] == ["from-the-page"]

    # Back on the board, the page shows how to sign in again.
    page.goto(f"{taskd.url}/")
    page.wait_for_selector("#login:not([hidden])")
    assert page.get_attribute("#connection", "data-state") == "closed"
    context.close()
    assert not problems, problems
