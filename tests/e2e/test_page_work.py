"""Working the board from the page, in real Chromium on a real ``taskd``: Claim and Release,
drag and drop meaning the transition, the board's refusal on the card, and the keyboard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def activities(board: Board, task: dict[str, Any]) -> list[dict[str, Any]]:
    return board.api.get(f"/tasks/{task['id']}/activities?limit=1000")["items"]


def assert_refusal_reads_well(text: str) -> None:
    """The board's words (code: message — hint), never a JSON body."""
    assert "{" not in text and '"error"' not in text, text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_claim_button_claims_as_you_and_release_gives_it_back(browser: Any, board: Board) -> None:
    task = board.task("Write the onboarding guide")
    epic = board.task("Docs epic", kind="epic")
    page = open_page(browser, board, actor="carol")
    todo = card(page, task["identifier"], "todo")
    assert card(page, epic["identifier"], "todo").locator(".claim").count() == 0, "an epic is claimed through its children"
    todo.locator(".claim").click()
    moved = card(page, task["identifier"], "in_progress")
    moved.wait_for()
    fresh = board.api.get(f"/tasks/{task['id']}")
    assert (fresh["claimed_by_kind"], fresh["claimed_by"]) == ("human", "carol"), "claimed as the You are actor"
    assert activities(board, task)[-1]["event"] == "task_claimed"
    assert moved.locator(".claim").count() == 0
    moved.locator(".release").click()
    card(page, task["identifier"], "todo").wait_for()
    assert board.api.get(f"/tasks/{task['id']}")["status"] == "todo"
    page.context.close()
    assert not board.problems, board.problems


def test_claim_refused_by_the_board_shows_its_words_on_the_card(browser: Any, board: Board) -> None:
    taken = board.task("Someone else's card", assignee_kind="human", assignee_id="bob")
    page = open_page(browser, board, actor="carol")
    before = len(activities(board, taken))
    target = card(page, taken["identifier"], "todo")
    target.locator(".claim").click()
    refusal = target.locator(".card-refusal")
    refusal.wait_for()
    text = refusal.inner_text()
    reply = board.api.http.post(
        f"/api/v1/tasks/{taken['id']}/claim", json={}, headers={"X-Taskloom-Actor": "carol", "X-Taskloom-Actor-Kind": "human"}
    )
    error = reply.json()["error"]
    assert reply.status_code == 409
    assert text.startswith(f"{error['code']}: {error['message']}"), (text, error)
    assert_refusal_reads_well(text)
    assert len(activities(board, taken)) == before, "nothing was written"
    assert board.api.get(f"/tasks/{taken['id']}")["status"] == "todo"
    page.context.close()
    assert not board.problems, board.problems


def test_a_card_with_an_open_blocker_shows_dependency_open_on_claim_and_drop(browser: Any, board: Board) -> None:
    blocker = board.task("Land the schema first")
    waiting = board.task("Build on the schema")
    board.api.post(f"/tasks/{blocker['id']}/relations", {"type": "blocks", "target": waiting["id"]})
    page = open_page(browser, board, actor="carol")
    before = len(activities(board, waiting))
    target = card(page, waiting["identifier"], "todo")
    target.locator(".claim").click()
    refusal = target.locator(".card-refusal")
    refusal.wait_for()
    assert refusal.inner_text().startswith("DEPENDENCY_OPEN: "), refusal.inner_text()
    assert blocker["identifier"] in refusal.inner_text()
    assert_refusal_reads_well(refusal.inner_text())
    # The same refusal for the drop that means a claim; nothing is written either way.
    with page.expect_response(lambda reply: reply.url.endswith(f"/tasks/{waiting['id']}/claim")) as answer:
        page.drag_and_drop(f".card[data-identifier={waiting['identifier']}]", ".column[data-status=in_progress]")
    assert answer.value.status == 409, "the drop sent a claim"
    page.wait_for_function(
        "id => document.querySelector(`.card[data-identifier=${id}] .card-refusal`)?.textContent.startsWith('DEPENDENCY_OPEN')",
        arg=waiting["identifier"],
    )
    assert len(activities(board, waiting)) == before and board.api.get(f"/tasks/{waiting['id']}")["status"] == "todo"
    page.context.close()
    assert not board.problems, board.problems


def test_dragging_to_in_progress_claims_and_to_review_asks_for_a_report_or_waiver(browser: Any, board: Board) -> None:
    task = board.task("Ship the release notes")
    page = open_page(browser, board, actor="carol")
    page.drag_and_drop(f".card[data-identifier={task['identifier']}]", ".column[data-status=in_progress]")
    card(page, task["identifier"], "in_progress").wait_for()
    assert activities(board, task)[-1]["event"] == "task_claimed", "the drop was a claim, not a move"

    page.drag_and_drop(f".card[data-identifier={task['identifier']}]", ".column[data-status=in_review]")
    dialog = page.locator("#drop-dialog[open]")
    dialog.wait_for()
    assert "Deliver" in dialog.inner_text() and "In progress → In review" in dialog.inner_text()
    # A report the board refuses keeps the dialog open with the board's words.
    dialog.locator("textarea[name=report]").fill("just some words")
    dialog.locator("button[type=submit]").click()
    error = dialog.locator(".form-error")
    error.wait_for()
    assert error.inner_text().startswith("REPORT_INVALID: ")
    assert_refusal_reads_well(error.inner_text())
    assert board.api.get(f"/tasks/{task['id']}")["status"] == "in_progress"
    # Without a report, for a stated reason: a waiver.
    dialog.locator("input[value=waiver]").check()
    dialog.locator("input[name=waiver]").fill("a one-line typo fix")
    dialog.locator("button[type=submit]").click()
    card(page, task["identifier"], "in_review").wait_for()
    page.locator("#drop-dialog[open]").wait_for(state="detached")
    fresh = board.api.get(f"/tasks/{task['id']}")
    assert fresh["status"] == "in_review" and fresh["waiver_reason"] == "a one-line typo fix"
    assert activities(board, task)[-1]["event"] == "report_waived"
    page.context.close()
    assert not board.problems, board.problems


def test_an_illegal_drop_snaps_back_with_the_boards_error_inline(browser: Any, board: Board) -> None:
    task = board.task("Backlog idea", status="backlog")
    page = open_page(browser, board)
    before = len(activities(board, task))
    page.drag_and_drop(f".card[data-identifier={task['identifier']}]", ".column[data-status=done]")
    refusal = card(page, task["identifier"], "backlog").locator(".card-refusal")
    refusal.wait_for()
    text = refusal.inner_text()
    assert text.startswith("INVALID_TRANSITION: "), text
    assert_refusal_reads_well(text)
    assert card(page, task["identifier"], "done").count() == 0, "the card stayed where it was"
    assert len(activities(board, task)) == before and board.api.get(f"/tasks/{task['id']}")["status"] == "backlog"
    # The page shows no toast or dialog with a JSON body anywhere either.
    assert '{"error"' not in page.content()
    page.context.close()
    assert not board.problems, board.problems


def test_the_keyboard_claims_drops_and_lists_its_shortcuts(browser: Any, board: Board) -> None:
    task = board.task("Keyboard card")
    page = open_page(browser, board, actor="carol")
    card(page, task["identifier"]).locator(".card-button").focus()
    page.keyboard.press("c")
    card(page, task["identifier"], "in_progress").wait_for()
    assert board.api.get(f"/tasks/{task['id']}")["claimed_by"] == "carol"
    assert page.evaluate("document.activeElement.closest('.card').dataset.identifier") == task["identifier"], "focus follows the card"
    # Shift+← drops on the previous column: in progress → To do is a release.
    page.keyboard.press("Shift+ArrowLeft")
    card(page, task["identifier"], "todo").wait_for()
    # A digit drops on the column at that place: 1 is Backlog, a legal move from To do.
    page.keyboard.press("1")
    card(page, task["identifier"], "backlog").wait_for()
    page.keyboard.press("7")  # backlog → done is not allowed: the board says so on the card
    card(page, task["identifier"], "backlog").locator(".card-refusal").wait_for()
    assert card(page, task["identifier"], "backlog").locator(".card-refusal").inner_text().startswith("INVALID_TRANSITION")

    page.keyboard.press("?")
    sheet = page.locator("#shortcuts[open]")
    sheet.wait_for()
    listed = sheet.inner_text()
    for words in (
        "Focus the filter", "Claim the card as you", "Move the card to the previous or next column",
        "Move the card to column 1–8", "New task",
    ):
        assert words in listed, words
    page.keyboard.press("Escape")
    sheet.wait_for(state="detached")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "filter-q"
    page.context.close()
    assert not board.problems, board.problems


def test_dragging_a_reviewed_card_to_done_asks_for_the_approval(browser: Any, board: Board) -> None:
    task = board.task("Reviewed card")
    worker = board.api.as_actor("claude", "worker-1")
    worker.post(f"/tasks/{task['id']}/claim")
    worker.post(f"/tasks/{task['id']}/waive", {"reason": "trivial, no report"})
    page = open_page(browser, board, actor="carol")
    page.drag_and_drop(f".card[data-identifier={task['identifier']}]", ".column[data-status=done]")
    dialog = page.locator("#drop-dialog[open]")
    dialog.locator("textarea[name=note]").fill("Checked it, thanks.")
    dialog.locator("button[type=submit]").click()
    card(page, task["identifier"], "done").wait_for()
    comments = board.api.get(f"/tasks/{task['id']}/comments")["items"]
    assert [(c["kind"], c["body"], c["actor_id"]) for c in comments] == [("confirm", "Checked it, thanks.", "carol")]
    page.context.close()
    assert not board.problems, board.problems


def test_dragging_a_canceled_card_back_reopens_it_with_the_reason_asked(browser: Any, board: Board) -> None:
    task = board.task("Dropped too early")
    board.api.post(f"/tasks/{task['id']}/move", {"to": "canceled"})
    page = open_page(browser, board)
    page.drag_and_drop(f".card[data-identifier={task['identifier']}]", ".column[data-status=todo]")
    dialog = page.locator("#drop-dialog[open]")
    dialog.wait_for()
    assert "Reopen" in dialog.inner_text() and "Canceled → To do" in dialog.inner_text()
    before = len(activities(board, task))
    dialog.locator("input[name=reason]").fill("short")
    dialog.locator("button[type=submit]").click()
    error = dialog.locator(".form-error")
    error.wait_for()
    assert error.inner_text().startswith("VALIDATION_FAILED: "), error.inner_text()
    assert_refusal_reads_well(error.inner_text())
    assert len(activities(board, task)) == before, "nothing was written"
    dialog.locator("input[name=reason]").fill("needed after all, the client asked")
    dialog.locator("button[type=submit]").click()
    card(page, task["identifier"], "todo").wait_for()
    assert activities(board, task)[-1]["event"] == "task_reopened"
    page.context.close()
    assert not board.problems, board.problems
