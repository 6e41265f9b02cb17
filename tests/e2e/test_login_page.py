"""A login link that no longer works answers a page a person can read (real Chromium, real ``taskd``).

Used or expired, the browser shows what happened and how to get a new link (``taskctl open``),
inside the page's CSP, never the API's JSON error. The link says how long it lives.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from services.board.auth import LOGIN_CODE_TTL, Credentials, new_token
from tests.e2e.support_browser import TIMEOUT_MS, Api, log_in
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e


def watched_page(context: Any) -> tuple[Any, list[str]]:
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.set_default_timeout(TIMEOUT_MS)
    return page, problems


def assert_explains_itself(page: Any, response: Any) -> None:
    assert response.status == 401
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    text = page.inner_text("main")
    assert "This login link no longer works" in text
    assert "already been used, or it has expired" in text
    assert "ten minutes" in text and "taskctl open" in text
    assert "UNAUTHORIZED" not in page.content() and "{" not in text, "no raw JSON error"
    # Styled by the board's own stylesheet (the CSP let it load).
    assert page.evaluate("getComputedStyle(document.querySelector('.login-card')).borderRadius") == "14px"


def test_a_used_link_says_so_and_how_to_get_a_new_one(browser: Any, taskd: TaskdProcess) -> None:
    taskd.start()
    api = Api(taskd.url, taskd.token)
    link = api.post("/login-links")
    assert link["expires_in_seconds"] == LOGIN_CODE_TTL == 600, "the link says it lives ten minutes"
    first = browser.new_context()
    page, _ = watched_page(first)
    page.goto(link["url"])
    page.wait_for_selector("#connection[data-state=live]")

    stranger = browser.new_context()
    again, problems = watched_page(stranger)
    assert_explains_itself(again, again.goto(link["url"]))
    assert not any(c["name"].startswith("taskloom_session_") for c in stranger.cookies()), "no session was given"
    assert httpx.get(f"{taskd.url}/api/v1/meta").status_code == 401
    assert not problems, problems

    # The browser the link signed in may open it again (a reload, a second click): the board.
    page.goto(link["url"])
    assert page.url.rstrip("/") == taskd.url
    page.wait_for_selector("#connection[data-state=live]")
    first.close()
    stranger.close()


def test_an_unknown_or_expired_code_gets_the_same_page(browser: Any, taskd: TaskdProcess) -> None:
    taskd.start()
    context = browser.new_context()
    page, problems = watched_page(context)
    assert_explains_itself(page, page.goto(f"{taskd.url}/login?code=made-up-or-expired"))
    assert_explains_itself(page, page.goto(f"{taskd.url}/login"))
    log_in(page, Api(taskd.url, taskd.token), taskd.url)  # a fresh link still works afterwards
    context.close()
    assert not problems, problems


def test_a_code_expires_after_ten_minutes() -> None:
    """The expiry the page names (the board's clock is not reachable from a subprocess test)."""
    credentials = Credentials(new_token())
    fresh = credentials.new_login_code(now=1000.0)
    stale = credentials.new_login_code(now=1000.0)
    assert credentials.redeem_login_code(fresh, now=1000.0 + LOGIN_CODE_TTL - 1)
    assert not credentials.redeem_login_code(stale, now=1000.0 + LOGIN_CODE_TTL)
