"""A card holding 100 KB of text (emoji included) does not stall the page: measured in real
Chromium with a long-task observer, on the card's live arrival, on the first load, and when its
drawer opens. The card and the feed show a capped start; the drawer shows all of it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from services.board import ui
from shared import limits
from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

#: The budget: no task of the page's main thread may run longer than this.
BUDGET_MS = 100
#: 100 KB and more of UTF-8, mostly four-byte emoji and ZWJ families, in markdown paragraphs.
LINE = "🚀 lift-off 👩‍👩‍👧‍👦 **bold** and `code` 🇫🇷 — " * 4
DESCRIPTION = "\n\n".join(f"## Part {n}\n\n{LINE}" for n in range(400))[: limits.DESCRIPTION_MAX_CHARS]
COMMENT = DESCRIPTION[: limits.COMMENT_MAX_CHARS]

#: The page's own cap on a card's reason text (text-cap.js), read from the module it lives in.
CARD_TEXT_MAX = int(re.search(r"CARD_TEXT_MAX = (\d+)", (ui.STATIC_DIR / "js/text-cap.js").read_text()).group(1))  # type: ignore[union-attr]

OBSERVE = """
window.__long = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__long.push(Math.round(e.duration)); })
  .observe({ type: 'longtask', buffered: true });
"""


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def long_tasks(page: Any) -> list[int]:
    # Two frames later every task that ran before has been reported.
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return list(page.evaluate("window.__long.splice(0)"))


def within_budget(page: Any, phase: str, run: Callable[[], None], *, attempts: int = 3) -> None:
    """Run ``phase`` until one run stays within the budget, at most ``attempts`` times.

    Long tasks are wall-clock: on a machine busy with other processes the same work takes longer,
    never shorter. So one run within the budget shows the page can do it; every run over it fails.
    """
    seen = []
    for _ in range(attempts):
        long_tasks(page)  # whatever ran before this phase
        run()
        tasks = long_tasks(page)
        seen.append(tasks)
        if max(tasks, default=0) <= BUDGET_MS:
            return
    raise AssertionError(f"{phase}: every run had a task over {BUDGET_MS} ms: {seen}")


def test_a_100_kb_card_renders_within_the_budget(browser: Any, board: Board) -> None:
    assert len(DESCRIPTION.encode()) > 100_000 and len(COMMENT.encode()) > 100_000
    page = open_page(browser, board, width=1700)
    page.add_init_script(OBSERVE)
    page.evaluate(OBSERVE)
    assert page.get_attribute("#feed-toggle", "aria-expanded") == "true", "a wide window opens the feed"
    worker = board.api.as_actor("claude", "worker-1")
    made: list[dict[str, Any]] = []

    def arrive() -> None:
        """A card, its feed rows, a question and a comment of 100 KB each, live."""
        task = board.task("🚀" * 250, description=DESCRIPTION)
        made.append(task)
        worker.post(f"/tasks/{task['id']}/claim")
        worker.post(f"/tasks/{task['id']}/ask", {"body": COMMENT})
        board.api.post(f"/tasks/{task['id']}/comments", {"body": COMMENT, "kind": "discuss"})
        worker.post(f"/tasks/{task['id']}/move", {"to": "blocked", "reason": "🚀" * 500})
        card(page, task["identifier"], "blocked").wait_for()
        page.wait_for_selector(f".feed-entry:has-text('{task['identifier']}')")

    within_budget(page, "live arrival", arrive)
    task = made[0]
    # The card shows a capped start, whole graphemes only.
    marker = card(page, task["identifier"]).locator(".marker span").last.inner_text()
    assert marker.endswith("…") and len(marker) <= CARD_TEXT_MAX + 1 and "\ufffd" not in marker

    def first_load() -> None:
        page.reload()
        page.wait_for_selector("#connection[data-state=live]")
        card(page, task["identifier"], "blocked").wait_for()

    within_budget(page, "first load", first_load)

    def open_drawer() -> None:
        """The drawer shows the whole text, description and comments, as markdown."""
        if page.is_visible("#drawer"):
            page.keyboard.press("Escape")
        card(page, task["identifier"]).locator(".card-button").click()
        page.wait_for_selector("#panel-details .prose.description:not([data-drawing])")
        page.click("#tab-comments")
        page.wait_for_selector("#panel-comments .comment-discuss .prose:not([data-drawing])")
        page.click("#tab-details")

    within_budget(page, "drawer", open_drawer)
    drawn = page.evaluate("document.querySelector('#panel-details .prose.description').textContent.length")
    assert drawn > 0.9 * len(DESCRIPTION.replace("**", "").replace("`", "").replace("## ", "")), "the drawer shows it all"
    page.context.close()
    assert not board.problems, board.problems
