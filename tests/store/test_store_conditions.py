"""The column conditions judged by the command hook, once for each engine: the hook reads a
project's column marks and its column counts in one statement, which both engines must answer
alike (docs/conditions.md).

Each crossing is kept as an activity row (``persist_conditions``), so what the hook said can be
read back from the log beside the marks it left.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from services.board.commands import projects, relations, tasks
from services.board.conditions import marks, temporal
from services.board.conditions.signals import Signal
from services.board.conditions.timer import ConditionsEngine
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx, WriterStore
from shared import events
from shared.errors import TaskloomError, validation
from shared.timestamps import format_timestamp
from tests.store.engines import open_store
from tests.store.test_store_contract import run_as_one_batch
from tests.support.waiting import async_wait_until

ANN = Actor("human", "ann")
KEPT = [events.WIP_EXCEEDED, events.WIP_CLEARED, events.LANE_DRAINED, events.LANE_REFILLED]


def run(store: WriterStore, fn: Any, *args: Any, **kwargs: Any) -> Any:
    return store.run_command(fn, ANN, *args, **kwargs)[0]


def said_since(store: WriterStore, revision: int) -> list[tuple[str, dict[str, Any]]]:
    """The condition rows appended after ``revision``, in order."""
    return store.run_query(lambda conn: [
        (row["event"], orjson.loads(row["changes_json"]))
        for row in conn.execute(
            "SELECT event, changes_json FROM task_activities WHERE revision > ? AND actor_kind = 'system'"
            " ORDER BY revision", (revision,),
        )
    ])


def head(store: WriterStore) -> int:
    return int(store.run_query(lambda conn: conn.execute("SELECT revision FROM global_revision").fetchone()[0]))


def held(store: WriterStore) -> dict[tuple[str, str], dict[str, Any]]:
    return {(mark.type, mark.subject): mark.changes for mark in store.run_query(marks.every, "demo")}


def test_wip_and_lane_marks_follow_the_column_counts(board: WriterStore) -> None:
    ConditionsEngine(board, claim_fresh_seconds=600)
    run(board, projects.update_project, "demo", settings={
        "wip_limits": {"backlog": 1}, "monitors": {"lanes": ["todo"]}, "persist_conditions": KEPT,
    })
    a, _ = run(board, tasks.create_task, project="demo", title="first")
    b, _ = run(board, tasks.create_task, project="demo", title="second")
    assert held(board) == {}

    start = head(board)
    run(board, tasks.move_task, a["id"], to="backlog")
    assert said_since(board, start) == []
    start = head(board)
    run(board, tasks.move_task, b["id"], to="backlog")
    assert said_since(board, start) == [
        (events.WIP_EXCEEDED, {"status": "backlog", "count": 2, "limit": 1}),
        (events.LANE_DRAINED, {"status": "todo", "count": 0}),
    ]
    assert held(board) == {
        (events.WIP_EXCEEDED, "backlog"): {"status": "backlog", "count": 2, "limit": 1},
        (events.LANE_DRAINED, "todo"): {"status": "todo", "count": 0},
    }

    start = head(board)
    run(board, tasks.move_task, a["id"], to="todo")
    assert said_since(board, start) == [
        (events.WIP_CLEARED, {"status": "backlog", "count": 1, "limit": 1}),
        (events.LANE_REFILLED, {"status": "todo", "count": 1}),
    ]
    assert held(board) == {}


def test_a_mark_on_a_column_the_settings_stop_watching_clears_with_its_count(board: WriterStore) -> None:
    ConditionsEngine(board, claim_fresh_seconds=600)
    run(board, projects.update_project, "demo", settings={"wip_limits": {"backlog": 0}, "persist_conditions": KEPT})
    a, _ = run(board, tasks.create_task, project="demo", title="first", status="backlog")
    assert set(held(board)) == {(events.WIP_EXCEEDED, "backlog")}

    # The limit is gone: the held mark's column is counted although no setting names it any more,
    # and it clears with the limit it was exceeded against.
    start = head(board)
    run(board, projects.update_project, "demo", settings={"monitors": {"lanes": ["done"]}, "persist_conditions": KEPT})
    assert said_since(board, start) == [
        (events.WIP_CLEARED, {"status": "backlog", "count": 1, "limit": 0}),
        (events.LANE_DRAINED, {"status": "done", "count": 0}),
    ]
    assert held(board) == {(events.LANE_DRAINED, "done"): {"status": "done", "count": 0}}
    assert a["status"] == "backlog"


async def test_a_deadline_moved_later_fires_once_at_its_new_time_not_at_the_old_one(board: WriterStore) -> None:
    """The timer keeps an earlier wake-up rather than moving it after every commit that pushes the
    earliest deadline back: that wake-up finds nothing due, and the pushed deadline fires at its
    own time, once."""
    engine = ConditionsEngine(board, claim_fresh_seconds=600)
    heard: list[Signal] = []
    engine.add_signal_listener(heard.append)
    await engine.start()
    try:
        await board.command(projects.update_project, ANN, "demo", settings={"monitors": {"idle_after": 1}})
        card, _ = await board.command(tasks.create_task, ANN, project="demo", title="waits")
        # Activity on the card: its idle deadline moves later while the first one is still armed.
        touched = await board.command(tasks.update_task, ANN, card["id"], title="waits, touched")
        assert touched["updated_at"] > card["created_at"] and engine.armed == 1

        async def fired() -> bool:
            return any(signal.type == events.CARD_IDLE for signal in heard)

        await async_wait_until(fired, timeout=10, what="card_idle")
        idle = [signal for signal in heard if signal.type == events.CARD_IDLE]
        assert [signal.changes["since"] for signal in idle] == [touched["updated_at"]]
        assert temporal.posix(idle[0].at) >= temporal.posix(touched["updated_at"]) + 1
        assert engine.armed == 0
    finally:
        await engine.stop()


class SleptWallClock:
    """The machine's wall clock as it reads after a sleep: ahead of where the event loop's monotonic
    clock, which stands still while the machine sleeps, would put it (``slept`` seconds ahead)."""

    def __init__(self) -> None:
        self.slept = 0.0

    def posix(self) -> float:
        return time.time() + self.slept

    def iso(self) -> str:
        return format_timestamp(datetime.fromtimestamp(self.posix(), UTC))


async def test_a_deadline_that_passed_while_the_machine_slept_fires_on_waking(
    engine: str, tmp_path: Path, database_url: str | None,
) -> None:
    """A card idle for ten minutes, the lid shut for eleven: the timer's wait was counted on the
    monotonic clock, which did not move, so the deadline would fire ten minutes after waking; it
    must fire as soon as the timer reads the wall clock again."""
    wall = SleptWallClock()
    store = open_store(engine, tmp_path, database_url, clock=wall.iso)
    store.open()
    conditions = ConditionsEngine(store, claim_fresh_seconds=600, clock=wall.posix)
    heard: list[Signal] = []
    conditions.add_signal_listener(heard.append)
    try:
        await store.command(projects.create_project, ANN, id="demo", name="Demo",
                            settings={"monitors": {"idle_after": 600}})
        await conditions.start()
        card, _ = await store.command(tasks.create_task, ANN, project="demo", title="left for the night")
        assert conditions.armed == 1
        wall.slept = 660.0

        async def fired() -> bool:
            return any(signal.type == events.CARD_IDLE for signal in heard)

        await async_wait_until(fired, timeout=5, what="card_idle after the sleep")
        idle = [signal for signal in heard if signal.type == events.CARD_IDLE]
        assert [signal.task_id for signal in idle] == [card["id"]]
        assert temporal.posix(idle[0].at) >= temporal.posix(card["created_at"]) + 600
    finally:
        await conditions.stop()
        store.close()


def test_marks_another_store_wrote_are_judged_by_the_next_command_here(
    board: WriterStore, engine: str, tmp_path: Path, database_url: str | None,
) -> None:
    """Two stores on one database, each with its engine (two board processes on PostgreSQL; a
    script beside the board on SQLite): what one's commands marked, the other's next command
    judges against — it clears the mark, and crosses again once, not twice."""
    ConditionsEngine(board, claim_fresh_seconds=600)
    run(board, projects.update_project, "demo", settings={"wip_limits": {"backlog": 1}, "persist_conditions": KEPT})
    a, _ = run(board, tasks.create_task, project="demo", title="first")
    b, _ = run(board, tasks.create_task, project="demo", title="second")
    other = open_store(engine, tmp_path, database_url)
    other.open()
    try:
        ConditionsEngine(other, claim_fresh_seconds=600)
        start = head(board)
        run(other, tasks.move_task, a["id"], to="backlog")
        run(other, tasks.move_task, b["id"], to="backlog")
        assert said_since(board, start) == [(events.WIP_EXCEEDED, {"status": "backlog", "count": 2, "limit": 1})]

        start = head(board)
        run(board, tasks.move_task, b["id"], to="todo")
        assert said_since(board, start) == [(events.WIP_CLEARED, {"status": "backlog", "count": 1, "limit": 1})]
        assert held(board) == {}

        start = head(board)
        run(other, tasks.move_task, b["id"], to="backlog")
        run(board, tasks.update_task, a["id"], title="first, renamed")
        assert said_since(board, start) == [(events.WIP_EXCEEDED, {"status": "backlog", "count": 2, "limit": 1})]
        assert set(held(board)) == {(events.WIP_EXCEEDED, "backlog")}
    finally:
        other.close()


def test_settings_changed_through_another_store_are_what_the_next_command_here_judges_by(
    board: WriterStore, engine: str, tmp_path: Path, database_url: str | None
) -> None:
    """Each engine caches a project's settings between commands. A limit lowered through another
    store on the same database (another board process on PostgreSQL, a script on SQLite) must hold
    for this one's very next command: the head under the write lock says someone else committed."""
    ConditionsEngine(board, claim_fresh_seconds=600)
    run(board, projects.update_project, "demo", settings={"wip_limits": {"backlog": 5}, "persist_conditions": KEPT})
    a, _ = run(board, tasks.create_task, project="demo", title="first")
    b, _ = run(board, tasks.create_task, project="demo", title="second")
    run(board, tasks.move_task, a["id"], to="backlog")  # judged by a limit of 5: now cached here
    other = open_store(engine, tmp_path, database_url)
    other.open()
    try:
        ConditionsEngine(other, claim_fresh_seconds=600)
        run(other, projects.update_project, "demo", settings={"wip_limits": {"backlog": 1}, "persist_conditions": KEPT})
        start = head(board)
        run(board, tasks.move_task, b["id"], to="backlog")
        assert said_since(board, start) == [(events.WIP_EXCEEDED, {"status": "backlog", "count": 2, "limit": 1})]
    finally:
        other.close()


async def test_settings_from_a_batch_the_database_lost_are_not_judged_by_later_commands(tmp_path: Path) -> None:
    """SQLite can roll a whole transaction back by itself (a full disk, an I/O error): the batch's
    earlier commands are lost with it. A command in that batch that read a project's settings
    changed earlier in the same batch must not leave them cached: they never committed."""
    store = SqliteStore(tmp_path / "board.sqlite")
    store.open()
    try:
        run(store, projects.create_project, id="demo", name="Demo")
        ConditionsEngine(store, claim_fresh_seconds=600)
        a, _ = run(store, tasks.create_task, project="demo", title="first")
        b, _ = run(store, tasks.create_task, project="demo", title="second")
        started, release = threading.Event(), threading.Event()

        def hold_the_writer(tx: Any) -> None:
            # The batch after this one is everything queued meanwhile: one transaction.
            started.set()
            release.wait(10)

        def lose_the_transaction(tx: Any) -> None:
            # What SQLite itself does on SQLITE_FULL or SQLITE_IOERR: the transaction is gone.
            tx.conn.execute("ROLLBACK")
            raise sqlite3.OperationalError("disk I/O error")

        async def holding_started() -> bool:
            return started.is_set()

        async def all_queued() -> bool:
            return store._queue.qsize() == len(lost)

        holding = asyncio.ensure_future(store.command(hold_the_writer, ANN))
        await async_wait_until(holding_started, what="the writer runs the holding command")
        lost = [
            asyncio.ensure_future(store.command(projects.update_project, ANN, "demo", settings={
                "wip_limits": {"backlog": 1}, "persist_conditions": [events.WIP_EXCEEDED]})),
            asyncio.ensure_future(store.command(tasks.move_task, ANN, a["id"], to="backlog")),  # reads the new limit
            asyncio.ensure_future(store.command(lose_the_transaction, ANN)),
        ]
        await async_wait_until(all_queued, what="the three commands queued")
        release.set()
        await holding
        outcomes = await asyncio.gather(*lost, return_exceptions=True)
        assert all(isinstance(outcome, Exception) for outcome in outcomes), outcomes
        assert store.run_query(lambda conn: conn.execute("SELECT settings_json FROM projects").fetchone()[0]) == "{}"

        start = head(store)
        await store.command(tasks.move_task, ANN, a["id"], to="backlog")
        await store.command(tasks.move_task, ANN, b["id"], to="backlog")
        # The committed settings have no limit and keep no condition rows: nothing to say.
        assert said_since(store, start) == []
    finally:
        store.close()


def test_a_card_is_judged_as_it_stands_after_its_command_writes_more_than_the_card(board: WriterStore) -> None:
    """The hook judges the card its command updated from the row that update returned, without
    reading it again — but only while the command sends nothing else that may change it. Here the
    command renames a card and then makes an open card block it: the hook must see the blocker
    the second write added, and the card is blocked once the command commits."""
    ConditionsEngine(board, claim_fresh_seconds=600)
    card, _ = run(board, tasks.create_task, project="demo", title="waits")
    blocker, _ = run(board, tasks.create_task, project="demo", title="blocks it")

    def rename_then_block(tx: Any) -> None:
        tasks.update_task(tx, card["id"], title="waits, renamed")
        relations.add_relation(tx, blocker["id"], type="blocks", target=card["id"])

    run(board, rename_then_block)
    assert held(board) == {(events.CARD_BLOCKED, card["id"]): {"blockers": [blocker["identifier"]]}}


def test_settings_read_in_a_batch_that_ran_again_and_committed_none_of_them_are_not_judged_later(
    board: WriterStore,
) -> None:
    """A refusal after a write runs the batch again, and what its first run cached is to be read
    afresh. Here the first run changes a project's settings and a move caches them; a later command
    is refused after writing, and in the second run the two are refused before their hook (they
    depend on the clock, which has moved on), so no command of that run reaches the conditions and
    nothing of the settings commits. The commands after it must be judged by the committed
    settings (none), not by the ones the first run read."""
    ConditionsEngine(board, claim_fresh_seconds=600)
    a, _ = run(board, tasks.create_task, project="demo", title="first")
    b, _ = run(board, tasks.create_task, project="demo", title="second")
    ticks, base = itertools.count(), datetime.now(UTC)
    board.clock = lambda: format_timestamp(base + timedelta(seconds=next(ticks)))
    first_seen: dict[str, str] = {}

    def valid_only_at_first(name: str, fn: Any) -> Any:
        """``fn`` as an offer that expires: refused, before it writes, at any later clock reading."""
        def command(tx: Tx) -> Any:
            if tx.now > first_seen.setdefault(name, tx.now):
                raise TaskloomError("VALIDATION_FAILED", f"{name}: the offer has expired")
            return fn(tx)
        return command

    def limit(tx: Tx) -> Any:
        return projects.update_project(tx, "demo", settings={"wip_limits": {"backlog": 1}, "persist_conditions": KEPT})

    def park(tx: Tx) -> Any:
        return tasks.move_task(tx, a["id"], to="backlog")  # judged by the limit above: cached

    def write_then_refuse(tx: Tx) -> None:
        tasks.update_task(tx, b["id"], title="never")
        raise validation("refused after writing")

    outcomes = run_as_one_batch(board, [
        (valid_only_at_first("limit", limit),), (valid_only_at_first("park", park),), (write_then_refuse,),
    ])
    assert all(isinstance(outcome, TaskloomError) for outcome in outcomes), outcomes
    assert board.run_query(lambda conn: conn.execute("SELECT settings_json FROM projects").fetchone()[0]) == "{}"

    start = head(board)
    run(board, tasks.move_task, a["id"], to="backlog")
    run(board, tasks.move_task, b["id"], to="backlog")
    # The committed settings have no limit and keep no condition rows: nothing to say, nothing held.
    assert said_since(board, start) == []
    assert held(board) == {}
