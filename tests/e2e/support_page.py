"""A logged-in board page on a real ``taskd`` for the page's work tests (claim, drag, filter, text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.e2e.support_browser import TIMEOUT_MS, Api
from tests.support.board import TaskdProcess


@dataclass
class Board:
    url: str
    api: Api
    problems: list[str] = field(default_factory=list)

    def task(self, title: str, project: str = "demo", **fields: Any) -> dict[str, Any]:
        return self.api.post("/tasks", {"project": project, "title": title, **fields})


def start_board(taskd: TaskdProcess) -> Board:
    """Start ``taskd`` with one project, ``demo``."""
    taskd.start()
    api = Api(taskd.url, taskd.token)
    api.post("/projects", {"id": "demo", "name": "Demo"})
    return Board(taskd.url, api)


def open_page(browser: Any, board: Board, *, width: int = 1280, height: int = 800, path: str = "/", actor: str = "carol") -> Any:
    """A new browser context logged in on ``path``, acting as ``actor``; CSP and page errors are collected."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_init_script(f"localStorage.setItem('taskloom:actor', {actor!r})")
    page = context.new_page()
    page.on("pageerror", lambda error: board.problems.append(str(error)))
    page.on("console", lambda m: board.problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(board.api.post("/login-links")["url"])
    if path != "/":
        page.goto(board.url + path)
    page.wait_for_selector("#connection[data-state=live]")
    return page


def card(page: Any, identifier: str, status: str | None = None) -> Any:
    column = f".column[data-status={status}] " if status else ""
    return page.locator(f"{column}.card[data-identifier={identifier}]")
