"""The board on a laptop, in real Chromium: all eight columns within 1280 px, the feed closed
below 1600 px, identifiers on one line, folded terminal columns, and an epic's `n/m done` bar."""

from __future__ import annotations

from typing import Any

import pytest

from shared import domain
from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def column_boxes(page: Any) -> dict[str, dict[str, float]]:
    script = "[...document.querySelectorAll('.column')].map(c => [c.dataset.status, c.getBoundingClientRect().toJSON()])"
    return dict(page.evaluate(f"() => Object.fromEntries({script})"))


def test_all_eight_columns_fit_1280_px_with_the_feed_closed(browser: Any, board: Board) -> None:
    long_project = "a-project-with-a-long-id-abcdefg"
    board.api.post("/projects", {"id": long_project, "name": "Long prefix"})
    task = board.task("A card whose identifier is long", project=long_project)
    page = open_page(browser, board, width=1280)
    assert page.get_attribute("#feed-toggle", "aria-expanded") == "false", "under 1600 px the feed starts closed"
    boxes = column_boxes(page)
    assert list(boxes) == list(domain.STATUSES)
    for status, box in boxes.items():
        assert box["left"] >= 0 and box["right"] <= 1280, f"{status} is off screen: {box}"
        assert box["width"] >= 140, status
    assert page.evaluate("document.querySelector('#board').scrollWidth <= document.querySelector('#board').clientWidth")

    page.select_option("#project", long_project)
    identifier = card(page, task["identifier"]).locator(".identifier")
    identifier.wait_for()
    # One line, however long the prefix and however narrow the column.
    line = page.evaluate("el => parseFloat(getComputedStyle(el).lineHeight)", identifier.element_handle())
    assert identifier.bounding_box()["height"] < 1.5 * line
    assert page.evaluate("el => el.getClientRects().length", identifier.element_handle()) == 1
    assert identifier.get_attribute("title") == task["identifier"], "the whole identifier is one hover away"

    # A folded terminal column is a strip that still takes drops, and stays folded after a reload.
    page.click(".column[data-status=done] .collapse")
    assert column_boxes(page)["done"]["width"] < 60
    page.reload()
    page.wait_for_selector("#connection[data-state=live]")
    assert page.get_attribute(".column[data-status=done]", "data-collapsed") == "true"
    page.context.close()
    assert not board.problems, board.problems


def test_a_wide_window_opens_the_feed_beside_the_columns(browser: Any, board: Board) -> None:
    page = open_page(browser, board, width=1600)
    assert page.get_attribute("#feed-toggle", "aria-expanded") == "true"
    page.context.close()
    assert not board.problems, board.problems


def wait_progress(page: Any, epic: dict[str, Any], text: str) -> None:
    page.wait_for_function(
        "([id, text]) => document.querySelector(`.card[data-identifier=${id}] .epic-progress-text`).textContent === text",
        arg=[epic["identifier"], text],
    )


def test_an_epic_card_shows_its_children_done_and_a_bar(browser: Any, board: Board) -> None:
    epic = board.task("Launch epic", kind="epic")
    children = [board.task(f"Child {n}") for n in range(4)]
    for child in children:
        board.api.post(f"/tasks/{epic['id']}/relations", {"type": "parent", "target": child["id"]})
    worker = board.api.as_actor("claude", "worker-1")
    page = open_page(browser, board)
    progress = card(page, epic["identifier"]).locator(".epic-progress")
    progress.wait_for()
    assert progress.inner_text() == "0/4 done"

    def finish(child: dict[str, Any]) -> None:
        worker.post(f"/tasks/{child['id']}/claim")
        worker.post(f"/tasks/{child['id']}/waive", {"reason": "small enough to skip"})
        board.api.post(f"/tasks/{child['id']}/comments", {"body": "ok", "kind": "confirm"})
        board.api.post(f"/tasks/{child['id']}/move", {"to": "done"})

    finish(children[0])
    wait_progress(page, epic, "1/4 done")
    assert card(page, epic["identifier"]).locator("[role=progressbar]").get_attribute("aria-valuenow") == "25"
    # A canceled child will never be done: it leaves the count. A new child joins it live.
    board.api.post(f"/tasks/{children[1]['id']}/move", {"to": "canceled"})
    wait_progress(page, epic, "1/3 done")
    late = board.task("Late child")
    board.api.post(f"/tasks/{epic['id']}/relations", {"type": "parent", "target": late["id"]})
    wait_progress(page, epic, "1/4 done")
    width = page.evaluate("id => document.querySelector(`.card[data-identifier=${id}] .epic-bar-fill`).style.width", epic["identifier"])
    assert width == "25%"
    page.context.close()
    assert not board.problems, board.problems
