"""The open card's drawer after the page reloads its whole state under it, in real Chromium on a
real ``taskd``: the board was down while the card changed and the log was compacted past the
page's cursor, so no frame tells the page what happened (``CURSOR_EXPIRED``): the page reads
every card again, and the drawer must show the card as read, not as it was."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.board import compaction
from services.board.commands import tasks as task_commands
from services.board.queries.activities import head as head_revision
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor
from tests.e2e.support_page import Board, card, open_page, start_board
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

#: Long enough for the page's reconnect ladder (1 s, 2 s, 4 s, 8 s …) to come round after a restart.
RECONNECT_TIMEOUT_MS = 40_000


@pytest.fixture
def board(taskd: TaskdProcess) -> Board:
    return start_board(taskd)


def change_and_compact_while_down(taskd: TaskdProcess, task_id: str, *, archive: bool = False) -> None:
    """Retitle and move the card (or cancel and archive it) straight in the file, then compact
    the log through its head, as the board's daily compaction would have: the page's cursor is
    now below the floor."""
    store = SqliteStore(taskd.data_dir / "board.sqlite")
    store.open()
    try:
        night = Actor("claude", "night-shift")
        if archive:
            store.run_command(task_commands.move_task, night, task_id, to="canceled")
            store.run_command(task_commands.archive_task, night, task_id)
        else:
            store.run_command(task_commands.update_task, night, task_id, title="Renamed overnight")
            store.run_command(task_commands.move_task, night, task_id, to="backlog")
        head = store.run_query(head_revision)
        chosen = store.run_query(compaction.plan, through=head, older_than_days=None, now=datetime.now(UTC))
        written = store.run_query(compaction.write_archive, taskd.data_dir, chosen)
        assert written.is_file()
        store.run_command(compaction.raise_floor, night, chosen)
    finally:
        store.close()


def reloaded_under_its_drawer(
    browser: Any, board: Board, taskd: TaskdProcess, title: str, *, archive: bool = False
) -> tuple[dict[str, Any], Any]:
    """A card titled ``title`` open in its drawer while the board stops, the card changes (or is
    archived) and the log is compacted past the page's cursor, and the board starts again on its
    port: the task and the page, once the page has said CURSOR_EXPIRED and reloaded."""
    task = board.task(title)
    page = open_page(browser, board)
    card(page, task["identifier"]).locator(".card-button").click()
    page.locator("#drawer .drawer-title", has_text=title).wait_for()
    port = int(taskd.url.rsplit(":", 1)[1])

    assert taskd.stop() == 0
    page.wait_for_selector("#connection[data-state=reconnecting]")
    change_and_compact_while_down(taskd, task["id"], archive=archive)
    taskd.start(port=port)

    page.locator(".toast", has_text="CURSOR_EXPIRED").wait_for(timeout=RECONNECT_TIMEOUT_MS)
    return task, page


def test_the_open_drawer_shows_the_card_as_reloaded_after_an_expired_cursor(
    browser: Any, board: Board, taskd: TaskdProcess
) -> None:
    task, page = reloaded_under_its_drawer(browser, board, taskd, "Written before the night")
    card(page, task["identifier"], "backlog").wait_for()
    page.locator("#panel-details .facts .status-pill", has_text="Backlog").wait_for()
    head = page.locator("#drawer .drawer-head")
    head.locator(".drawer-title", has_text="Renamed overnight").wait_for()
    head.locator(".drawer-meta .status-pill", has_text="Backlog").wait_for()
    page.context.close()
    assert not board.problems, board.problems


def test_the_open_drawer_closes_when_the_reload_finds_its_card_archived(
    browser: Any, board: Board, taskd: TaskdProcess
) -> None:
    task, page = reloaded_under_its_drawer(browser, board, taskd, "Archived before the morning", archive=True)
    card(page, task["identifier"]).wait_for(state="detached")
    # As when a live frame says so: the card is off the board, so its drawer closes and says why.
    page.locator("#drawer").wait_for(state="hidden")
    page.locator(".toast", has_text=f"{task['identifier']} was archived.").wait_for()
    page.context.close()
    assert not board.problems, board.problems
