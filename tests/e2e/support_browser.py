"""Headless Chromium on a real ``taskd``: the pieces the session and stream page tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 10_000


def launch_browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run make deps (or: sudo apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Api:
    """A second client of the board: the token and an actor, raising on any refusal."""

    def __init__(self, url: str, token: str, actor: tuple[str, str] = ("human", "ann")) -> None:
        self.url, self.token, self.actor = url, token, actor
        self.http = httpx.Client(
            base_url=url,
            timeout=10,
            headers={"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": actor[0], "X-Taskloom-Actor": actor[1]},
        )

    def as_actor(self, kind: str, actor_id: str) -> Api:
        return Api(self.url, self.token, (kind, actor_id))

    def call(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.http.request(method, f"/api/v1{path}", json=body)
        assert reply.status_code < 300, f"{method} {path} → {reply.status_code} {reply.text}"
        return reply.json()

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, body if body is not None else {})

    def patch(self, path: str, body: Any) -> Any:
        return self.call("PATCH", path, body)

    def get(self, path: str) -> Any:
        return self.call("GET", path)


def log_in(page: Any, api: Api, board_url: str) -> None:
    """Redeem a fresh login link in ``page`` and wait for the board's live stream."""
    page.goto(api.post("/login-links")["url"])
    assert page.url.rstrip("/") == board_url, "the login link lands on the board page"
    page.wait_for_selector("#connection[data-state=live]", timeout=TIMEOUT_MS)
