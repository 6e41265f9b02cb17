"""What a person has typed in the open card's drawer but not saved yet survives the live updates
that rebuild the forms around it, in real Chromium on a real ``taskd``: another client moving
the card (an agent claiming it, asking a question, being answered) changes which forms the
drawer offers, and must not take the half-written edit or comment with it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def open_drawer(page: Any, identifier: str) -> None:
    card(page, identifier).locator(".card-button").click()
    page.locator("#panel-details .facts").wait_for()


def open_editor(page: Any) -> None:
    """Open the card's editor and wait until it holds the card's text: the page fills the
    description on the editor's ``toggle`` event, which the browser fires after the click."""
    page.click("#panel-details details.edit summary")
    page.locator("#panel-details details.edit[open] textarea[name=description][data-filled=true]").wait_for()


def save_description(page: Any, text: str) -> None:
    """Type ``text`` as the open editor's description, save, and wait for the card to show it."""
    page.locator("#panel-details textarea[name=description]").fill(text)
    page.locator("#panel-details .edit-form button[type=submit]").click()
    page.locator("#panel-details .prose.description", has_text=text).wait_for()


def wait_for_status(page: Any, status: str) -> None:
    """The drawer's head and its details tab both show ``status`` (the forms were rebuilt for it)."""
    page.locator(f"#drawer .drawer-meta [data-status={status}]").wait_for()
    page.wait_for_function(
        "label => document.querySelector('#panel-details .facts .status-pill')?.textContent === label",
        arg={"in_progress": "In progress", "awaiting": "Awaiting answer", "todo": "To do"}[status],
    )


def test_an_unsaved_edit_survives_another_client_claiming_the_card(browser: Any, board: Board) -> None:
    task = board.task("Write the onboarding guide", description="The first draft.")
    page = open_page(browser, board, actor="carol")
    open_drawer(page, task["identifier"])
    open_editor(page)
    editor = page.locator("#panel-details .edit-form")
    editor.locator("textarea[name=description]").fill("A long description I am still writing.")
    editor.locator("input[name=title]").fill("Write the onboarding guide, part one")

    board.api.as_actor("claude", "worker-1").post(f"/tasks/{task['id']}/claim")
    card(page, task["identifier"], "in_progress").wait_for()
    wait_for_status(page, "in_progress")

    assert page.locator("#panel-details details.edit").get_attribute("open") is not None, "the editor stayed open"
    assert editor.locator("textarea[name=description]").input_value() == "A long description I am still writing."
    assert editor.locator("input[name=title]").input_value() == "Write the onboarding guide, part one"
    # The moves offered follow the new status all the same.
    assert "Awaiting answer" in page.locator("#panel-details .move-form select").inner_text()
    # Saving is against the version the person started from: the claim in between is a conflict.
    editor.locator("button[type=submit]").click()
    page.locator("#panel-details .edit-form .form-error", has_text="VERSION_CONFLICT").wait_for()
    assert board.api.get(f"/tasks/{task['id']}")["description"] == "The first draft."
    page.context.close()
    assert not board.problems, board.problems


def test_a_saved_edit_still_closes_the_editor_with_the_saved_values(browser: Any, board: Board) -> None:
    task = board.task("Edit me", description="Before.")
    page = open_page(browser, board, actor="carol")
    open_drawer(page, task["identifier"])
    open_editor(page)
    save_description(page, "After.")
    page.locator("#panel-details details.edit:not([open])").wait_for()
    # The rebuilt editor starts from the saved card: a second edit saves without a conflict.
    open_editor(page)
    assert page.locator("#panel-details textarea[name=description]").input_value() == "After."
    save_description(page, "After again.")
    assert board.api.get(f"/tasks/{task['id']}")["description"] == "After again."
    page.context.close()
    assert not board.problems, board.problems


def test_a_half_written_comment_survives_the_card_being_asked_and_answered(browser: Any, board: Board) -> None:
    task = board.task("Pick the database")
    worker = board.api.as_actor("claude", "worker-1")
    worker.post(f"/tasks/{task['id']}/claim")
    page = open_page(browser, board, actor="carol")
    open_drawer(page, task["identifier"])
    page.click("#tab-comments")
    comment = page.locator("#panel-comments .comment-form textarea[name=body]")
    comment.fill("I think we should")

    worker.post(f"/tasks/{task['id']}/ask", {"body": "SQLite or PostgreSQL?"})
    page.locator("#panel-comments form[aria-label='Answer the question']").wait_for()
    assert comment.input_value() == "I think we should", "the draft moved into the answer form"

    comment.fill("I think we should use SQLite, but")
    board.api.as_actor("human", "bob").post(f"/tasks/{task['id']}/comments", {"body": "SQLite.", "kind": "note"})
    page.locator("#panel-comments form[aria-label='Add a comment']").wait_for()
    assert comment.input_value() == "I think we should use SQLite, but"
    page.context.close()
    assert not board.problems, board.problems
