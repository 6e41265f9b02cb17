"""A batch that SQLite rolls back by itself in its middle (a full disk, an I/O error).

docs/architecture.md, "Group commit": "If SQLite rolls the transaction back itself in the middle
of a batch (I/O error), the commands that ran before are failed the same way and the rest run in a
new transaction." That new transaction is a batch like any other: what queued meanwhile joins it
once its lock is granted. Every caller whose command it committed must be answered.

The rollback is SQLite's own: ``PRAGMA max_page_count`` pinned at the file's size makes the next
page the file needs a real ``SQLITE_FULL``, which on this path ends the whole transaction
(``conn.in_transaction`` becomes False), exactly as a full disk during a cache spill does.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing
from typing import Any

import pytest

from services.board.commands import tasks
from services.board.store import Actor, Tx
from shared.errors import TaskloomError
from tests.support.board import API, BoardClient, RunningBoard, make_task
from tests.support.gate import Gate
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

ANN = Actor("human", "ann")


class FillsTheDisk:
    """Waits until released, then makes SQLite answer SQLITE_FULL in the middle of the batch: the
    engine rolls the whole transaction back by itself."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.saw_rollback: bool | None = None

    def __call__(self, tx: Tx) -> None:
        self.started.set()
        if not self.release.wait(10):
            raise AssertionError("never released")
        pages = tx.one("PRAGMA page_count")[0]
        tx.execute(f"PRAGMA max_page_count = {int(pages)}")
        try:
            tx.execute("INSERT INTO board_meta (key, value) VALUES ('filler', ?)", ("x" * 400_000,))
        finally:
            self.saw_rollback = not tx.conn.in_transaction  # type: ignore[attr-defined]
            tx.execute("PRAGMA max_page_count = 4294967294")  # the disk has room again


async def wait_event(event: threading.Event) -> None:
    await asyncio.get_running_loop().run_in_executor(None, event.wait, 10)
    assert event.is_set()


def title_in_file(board: RunningBoard, task_id: str) -> str:
    with closing(sqlite3.connect(board.data_dir / "board.sqlite")) as conn:
        return conn.execute("SELECT title FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]


async def test_a_command_that_joins_the_rerun_of_a_batch_sqlite_rolled_back_is_answered(
    board: RunningBoard, client: BoardClient
) -> None:
    store = board.store
    rest = await make_task(client, title="rest of the batch")
    late = await make_task(client, title="late")

    gate = Gate()
    held = asyncio.ensure_future(store.command(gate, ANN))
    await wait_event(gate.started)
    filler = FillsTheDisk()
    failing = asyncio.ensure_future(store.command(filler, ANN))
    after_it = asyncio.ensure_future(store.command(tasks.update_task, ANN, rest["id"], title="rest committed"))

    async def queued(count: int) -> bool:
        return store.queued >= count

    await async_wait_until(lambda: queued(2), what="the batch of two queued behind the gate")
    gate.release.set()
    await held
    # The batch [filler, after_it] is running; the filler holds the writer. A client's PATCH
    # arrives now: it queues while the batch runs.
    await wait_event(filler.started)
    patch = asyncio.ensure_future(client.patch(f"{API}/tasks/{late['id']}", {"title": "late committed"}))
    await async_wait_until(lambda: queued(1), what="the client's PATCH to queue")
    filler.release.set()

    outcome = await asyncio.gather(failing, return_exceptions=True)
    assert filler.saw_rollback, "the setup must make SQLite roll the transaction back by itself"
    assert isinstance(outcome[0], TaskloomError) and outcome[0].status == 503, outcome
    assert (await asyncio.wait_for(after_it, 10))["title"] == "rest committed"

    # The PATCH's command joined the new transaction of the rest, and was committed there...
    async def committed() -> bool:
        return title_in_file(board, late["id"]) == "late committed"

    await async_wait_until(committed, what="the late PATCH to be committed")
    # ...so its client must hear so. It is never answered.
    try:
        reply: Any = await asyncio.wait_for(asyncio.shield(patch), 10)
    except TimeoutError:
        patch.cancel()
        pytest.fail("a PATCH the board committed was never answered: its client waits forever")
    assert reply.status == 200 and reply.body["title"] == "late committed"
