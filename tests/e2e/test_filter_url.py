"""The filter bar in real Chromium on a real ``taskd``: text (the board's q=), label, assignee,
kind and priority narrow the cards; the filter lives in the URL, so a reload or a shared link
shows the same cards; `/` focuses it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e.support_page import Board, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


SHOWN = "[...document.querySelectorAll('.card:not([hidden])')].map(c => c.dataset.identifier).sort()"


def wait_shown(page: Any, expected: list[str]) -> None:
    page.wait_for_function(f"expected => JSON.stringify({SHOWN}) === JSON.stringify(expected)", arg=sorted(expected))


@pytest.fixture
def cards(board: Board) -> dict[str, dict[str, Any]]:
    return {
        "guide": board.task("Write the onboarding guide", description="Cover the hub", labels=["docs"], priority="high"),
        "login": board.task("Login page", description="explains itself", labels=["web"], assignee_kind="human", assignee_id="ann"),
        "flaky": board.task("Flaky test", kind="bug", labels=["docs"], description="fails on CI", assignee_kind="human", assignee_id="ann"),
        "epic": board.task("Docs epic", kind="epic", priority="high"),
    }


def test_each_field_narrows_and_the_url_carries_it(browser: Any, board: Board, cards: dict[str, Any]) -> None:
    page = open_page(browser, board)
    every = [card["identifier"] for card in cards.values()]
    wait_shown(page, every)
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "filter-q"
    page.keyboard.type("hub")  # only the description holds it: the board's q= answers
    wait_shown(page, [cards["guide"]["identifier"]])
    assert parse_qs(urlparse(page.url).query) == {"project": ["demo"], "q": ["hub"]}
    assert page.inner_text("#filter-summary") == "1 of 4 cards"

    page.fill("#filter-q", cards["flaky"]["identifier"].lower())  # identifiers are searched too
    wait_shown(page, [cards["flaky"]["identifier"]])
    page.fill("#filter-q", "")
    page.fill("#filter [name=label]", "docs")
    wait_shown(page, [cards["guide"]["identifier"], cards["flaky"]["identifier"]])
    page.fill("#filter [name=assignee]", "ann")
    wait_shown(page, [cards["flaky"]["identifier"]])
    page.fill("#filter [name=assignee]", "")
    page.select_option("#filter [name=priority]", "high")
    wait_shown(page, [cards["guide"]["identifier"]])
    page.select_option("#filter [name=priority]", "")
    page.fill("#filter [name=label]", "")
    page.select_option("#filter [name=kind]", "epic")
    wait_shown(page, [cards["epic"]["identifier"]])
    assert parse_qs(urlparse(page.url).query) == {"project": ["demo"], "kind": ["epic"]}
    page.click("#filter-clear")
    wait_shown(page, every)
    assert "kind" not in page.url
    page.context.close()
    assert not board.problems, board.problems


def test_a_shared_link_and_a_reload_show_the_same_cards(browser: Any, board: Board, cards: dict[str, Any]) -> None:
    link = "/?project=demo&q=onboarding&label=docs&priority=high"
    page = open_page(browser, board, path=link)
    wait_shown(page, [cards["guide"]["identifier"]])
    assert page.input_value("#filter-q") == "onboarding"
    assert page.input_value("#filter [name=label]") == "docs"
    assert page.input_value("#filter [name=priority]") == "high"
    page.reload()
    page.wait_for_selector("#connection[data-state=live]")
    wait_shown(page, [cards["guide"]["identifier"]])
    assert page.input_value("#filter-q") == "onboarding"
    # A card that starts to match (renamed by someone else) shows up live.
    board.api.patch(f"/tasks/{cards['login']['id']}", {"title": "Onboarding login page", "labels": ["docs"], "priority": "high"})
    wait_shown(page, [cards["guide"]["identifier"], cards["login"]["identifier"]])
    page.context.close()
    assert not board.problems, board.problems


def test_a_filter_the_board_refuses_says_why(browser: Any, board: Board, cards: dict[str, Any]) -> None:
    nine_words = " ".join(f"w{i}" for i in range(9))
    page = open_page(browser, board, path=f"/?q={nine_words}")
    page.wait_for_selector("#filter-error:not(:empty)")
    assert page.inner_text("#filter-error").startswith("VALIDATION_FAILED: q must have at most 8 words")
    wait_shown(page, [])
    # A link naming a kind that does not exist is ignored rather than trusted.
    page.goto(f"{board.url}/?kind=constructor")
    page.wait_for_selector("#connection[data-state=live]")
    wait_shown(page, [card["identifier"] for card in cards.values()])
    page.context.close()
    assert not board.problems, board.problems
