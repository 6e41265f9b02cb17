"""Group commit: commands queued together share one transaction, each inside its own savepoint.

A refused command writes nothing while the others of its batch commit; nobody (caller, commit
listener, stream) hears of a command before its batch's COMMIT; a failed BEGIN or COMMIT fails
every command of the batch with 503 and writes nothing. Batches are formed for real: a command
that holds the writer thread (``Gate``) lets the others queue up behind it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from services.board.commands import comments, projects, tasks
from services.board.fanout import Handoff
from services.board.keys import LOG_READER
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx
from shared import events
from shared.errors import TaskloomError, validation
from shared.sse import SSEMessage, SSEParser
from tests.support.board import (
    API,
    BoardClient,
    RunningBoard,
    make_project,
    make_task,
    raw_connection,
)
from tests.support.gate import Gate
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

ANN = Actor("human", "ann")
WORKER_1 = Actor("claude", "worker-1")
WORKER_2 = Actor("codex", "worker-2")
REPO = Path(__file__).resolve().parents[2]


async def hold_writer(store: SqliteStore) -> tuple[Gate, asyncio.Future[Any]]:
    gate = Gate()
    held = asyncio.ensure_future(store.command(gate, ANN))
    await asyncio.get_running_loop().run_in_executor(None, gate.started.wait, 10)
    assert gate.started.is_set()
    return gate, held


async def until_queued(store: SqliteStore, count: int) -> None:
    async def enough() -> bool:
        return store.queued >= count

    await async_wait_until(enough, what=f"{count} commands queued behind the gate")


def tracked(tx: Tx, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[int]]:
    """Run a command and return the revisions it appended, as its caller would never see them."""
    result = fn(tx, *args, **kwargs)
    return result, list(tx.appended)


def rows_after(store: SqliteStore, revision: int) -> list[tuple[int, str | None, str, str]]:
    """(revision, task_id, event, created_at) of every activity row after ``revision``, through a
    connection of its own: only committed rows are visible to it."""
    with closing(sqlite3.connect(store.path)) as conn:
        return conn.execute(
            "SELECT revision, task_id, event, created_at FROM task_activities WHERE revision > ? ORDER BY revision",
            (revision,),
        ).fetchall()


def head(store: SqliteStore) -> int:
    with closing(sqlite3.connect(store.path)) as conn:
        return conn.execute("SELECT revision FROM global_revision").fetchone()[0]


# -- commands that write and then fail: a savepoint must undo exactly them ------------------------


def poison(tx: Tx, ref: str) -> None:
    """A real update (state and its row), then a refusal."""
    tasks.update_task(tx, ref, title="poison")
    raise validation("changed my mind after writing")


def skip_the_graph(tx: Tx, ref: str) -> None:
    """An activity row, then a status write the schema's trigger refuses (an IntegrityError)."""
    task = tx.one("SELECT id, project_id FROM tasks WHERE id = ?", (ref,))
    tx.record(events.TASK_MOVED, events.task_moved(from_="todo", to="done", delivery_round=1),
              task_id=task["id"], project_id=task["project_id"])
    tx.execute("UPDATE tasks SET status = 'done' WHERE id = ?", (ref,))


def broken(tx: Tx, ref: str) -> None:
    """A real update, then a bug: an undeclared event (ValueError, not a TaskloomError)."""
    tasks.update_task(tx, ref, title="renamed by a bug")
    tx.record("task_renamed", {}, task_id=ref, project_id="demo")


def dangling_comment(tx: Tx, ref: str) -> None:
    """A foreign-key violation deferred to COMMIT: the statement succeeds, the batch's COMMIT fails."""
    tx.execute("PRAGMA defer_foreign_keys = ON")
    tx.execute(
        "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
        " VALUES ('dangling', 'no-such-task', 'note', 'x', 'human', 'ann', 1, ?)",
        (tx.now,),
    )
    tx.record(events.COMMENT_ADDED, events.comment_added(comment_id="dangling", kind="note"),
              task_id=ref, project_id="demo")


@dataclass
class Planned:
    name: str
    actor: Actor
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    refused: str | None  # the error code it must get, None when it must commit


async def test_a_batch_commits_the_accepted_and_writes_nothing_of_the_refused(
    board: RunningBoard, client: BoardClient
) -> None:
    store = board.store
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(40)]
    plan = [
        Planned("update", ANN, tasks.update_task, (ids[0],), {"title": "batched"}, None),
        # Sees the update above inside the same transaction: version 2 now.
        Planned("stale", ANN, tasks.update_task, (ids[0],), {"title": "stale", "if_version": 1}, "VERSION_CONFLICT"),
        Planned("move", ANN, tasks.move_task, (ids[1],), {"to": "backlog"}, None),
        Planned("claim", WORKER_1, tasks.claim_task, (ids[2],), {}, None),
        Planned("second claimer", WORKER_2, tasks.claim_task, (ids[2],), {}, "EXECUTION_ACTIVE"),
        Planned("poison", ANN, poison, (ids[3],), {}, "VALIDATION_FAILED"),
        # Passes only if the poison's version bump was rolled back to its savepoint.
        Planned("after poison", ANN, tasks.update_task, (ids[3],), {"priority": "high", "if_version": 1}, None),
        Planned("trigger", ANN, skip_the_graph, (ids[4],), {}, "INVALID_TRANSITION"),
        Planned("after trigger", ANN, tasks.move_task, (ids[4],), {"to": "backlog"}, None),
        Planned("bug", ANN, broken, (ids[5],), {}, "ValueError"),
        Planned("illegal move", ANN, tasks.move_task, (ids[5],), {"to": "done"}, "INVALID_TRANSITION"),
        Planned("unknown task", ANN, tasks.move_task, ("DEMO-9999",), {"to": "backlog"}, "NOT_FOUND"),
        *(Planned(f"bulk {n}", ANN, tasks.update_task, (ids[n],), {"title": f"bulk {n}"}, None) for n in range(6, 40)),
    ]
    assert len(plan) + 1 <= 64, "one batch must hold them all"
    start, batches = head(store), store.batches
    gate, held = await hold_writer(store)
    calls = [asyncio.ensure_future(store.command(tracked, item.actor, item.fn, *item.args, **item.kwargs))
             for item in plan]
    await until_queued(store, len(plan))
    gate.release.set()
    await held
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert store.batches - batches == 2, "the gate's batch, then every planned command in one more"

    expected_rows: list[int] = []
    for item, outcome in zip(plan, outcomes):
        if item.refused is None:
            assert not isinstance(outcome, BaseException), f"{item.name}: {outcome!r}"
            _, appended = outcome
            assert appended, f"{item.name} committed without an activity row"
            expected_rows += appended
        elif isinstance(outcome, TaskloomError):
            assert outcome.code == item.refused, f"{item.name}: {outcome.code}"
        else:
            assert type(outcome).__name__ == item.refused, f"{item.name}: {outcome!r}"
    # Every row after the start belongs to exactly one accepted command, in submission order.
    written = rows_after(store, start)
    assert [row[0] for row in written] == expected_rows
    # Each command's clock reading was taken in turn: commit times follow revision order.
    assert [row[3] for row in written] == sorted(row[3] for row in written)
    with raw_connection(board) as conn:
        titles = dict(conn.execute("SELECT id, title FROM tasks").fetchall())
        state = {row[0]: row[1:] for row in conn.execute("SELECT id, status, version, priority FROM tasks")}
        assert conn.execute("SELECT count(*) FROM task_activities WHERE revision > ? AND event = 'task_claimed'",
                            (start,)).fetchone()[0] == 1
    assert "poison" not in titles.values() and "renamed by a bug" not in titles.values()
    assert titles[ids[0]] == "batched" and state[ids[0]][1] == 2
    assert state[ids[2]][0] == "in_progress"
    assert state[ids[3]] == ("todo", 2, "high")
    assert state[ids[4]][0] == "backlog" and state[ids[5]][0] == "todo"


async def test_nothing_is_acknowledged_or_streamed_before_the_batch_commits(board: RunningBoard, client: BoardClient) -> None:
    store = board.store
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(3)]
    heard: list[int] = []
    store.add_commit_listener(heard.append)
    # When a caller resumes, its rows must already be readable by any other connection.
    seen_at_ack: dict[str, list[int]] = {}

    def check_on_ack(name: str) -> Callable[[asyncio.Future[Any]], None]:
        def check(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None:
                _, appended = future.result()
                visible = {row[0] for row in rows_after(store, appended[0] - 1)}
                seen_at_ack[name] = [revision for revision in appended if revision in visible]
        return check

    slow_started, slow_release = threading.Event(), threading.Event()

    def slow_update(tx: Tx, ref: str) -> Any:
        # Writes, then holds the batch open: what ran before it has run but must not be committed.
        result = tasks.update_task(tx, ref, title="slow")
        slow_started.set()
        if not slow_release.wait(10):
            raise AssertionError("never released")
        return result

    gate, held = await hold_writer(store)
    first = asyncio.ensure_future(store.command(tracked, ANN, tasks.update_task, ids[0], title="first"))
    second = asyncio.ensure_future(store.command(tracked, ANN, tasks.move_task, ids[1], to="backlog"))
    slow = asyncio.ensure_future(store.command(tracked, ANN, slow_update, ids[2]))
    last = asyncio.ensure_future(store.command(tracked, ANN, tasks.update_task, ids[0], title="last"))
    for name, call in (("first", first), ("second", second), ("slow", slow), ("last", last)):
        call.add_done_callback(check_on_ack(name))
    await until_queued(store, 4)
    gate.release.set()
    await held
    heard_before = list(heard)
    committed_head = head(store)
    # The batch is inside slow_update: first and second have run, nothing is committed.
    await asyncio.get_running_loop().run_in_executor(None, slow_started.wait, 10)
    # That wake-up reached the loop after anything the writer scheduled before slow_update began,
    # so an early acknowledgment or notification would already show here.
    assert slow_started.is_set()
    assert not first.done() and not second.done(), "acknowledged before the batch committed"
    assert heard == heard_before, "a commit listener heard of an uncommitted batch"
    assert head(store) == committed_head and rows_after(store, committed_head) == []
    slow_release.set()
    results = await asyncio.gather(first, second, slow, last)
    appended = [revision for _, revisions in results for revision in revisions]
    assert seen_at_ack == {name: revisions for name, (_, revisions) in zip(("first", "second", "slow", "last"), results)}
    assert heard[len(heard_before):] == [max(appended)], "one notification per batch, after its COMMIT"
    store.remove_commit_listener(heard.append)


async def test_a_stream_sees_exactly_the_accepted_commands_of_a_batch(
    board: RunningBoard, client: BoardClient
) -> None:
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(24)]
    start = head(board.store)
    async with aiohttp.ClientSession() as session:
        response = await session.get(f"{board.url}{API}/events?after={start}",
                                     headers={"Authorization": f"Bearer {board.token}"})
        assert response.status == 200
        gate, held = await hold_writer(board.store)
        requests = []
        for n, task_id in enumerate(ids):
            if n % 3 == 0:  # refused: todo → done is not an edge
                requests.append(client.post(f"{API}/tasks/{task_id}/move", {"to": "done"}))
            elif n % 3 == 1:
                requests.append(client.post(f"{API}/tasks/{task_id}/move", {"to": "backlog"}))
            else:
                requests.append(client.patch(f"{API}/tasks/{task_id}", {"title": f"renamed {n}"}))
        replies = [asyncio.ensure_future(request) for request in requests]
        await until_queued(board.store, len(ids))
        gate.release.set()
        await held
        done = await asyncio.gather(*replies)
        assert [reply.status for reply in done] == [409 if n % 3 == 0 else 200 for n in range(len(ids))]
        assert {reply.error for n, reply in enumerate(done) if n % 3 == 0} == {"INVALID_TRANSITION"}
        expected = [row[0] for row in rows_after(board.store, start)]
        assert len(expected) == 16
        parser, seen = SSEParser(), []
        async with asyncio.timeout(10):
            async for chunk in response.content.iter_any():
                for item in parser.feed(chunk):
                    if isinstance(item, SSEMessage) and item.data is not None:
                        frame = orjson.loads(item.data)
                        seen.append(frame["revision"])
                        assert frame["task_id"] in ids and frame["event"] in ("task_moved", "task_updated")
                if seen and seen[-1] >= expected[-1]:
                    break
        response.close()
    assert seen == expected


async def test_a_failed_commit_fails_every_command_of_the_batch_with_503_and_writes_nothing(
    board: RunningBoard, client: BoardClient
) -> None:
    store = board.store
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(3)]
    start = head(store)
    gate, held = await hold_writer(store)
    calls = [
        asyncio.ensure_future(store.command(tasks.update_task, ANN, ids[0], title="lost")),
        asyncio.ensure_future(store.command(dangling_comment, ANN, ids[1])),
        asyncio.ensure_future(store.command(tasks.move_task, ANN, ids[2], to="backlog")),
    ]
    await until_queued(store, len(calls))
    gate.release.set()
    await held
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for outcome in outcomes:
        assert isinstance(outcome, TaskloomError) and outcome.code == "STORE_UNAVAILABLE", outcome
        assert outcome.status == 503 and outcome.details["retry_after"] == 1
    assert head(store) == start and rows_after(store, start) == []
    with raw_connection(board) as conn:
        assert conn.execute("SELECT count(*) FROM comments").fetchone()[0] == 0
        assert conn.execute("SELECT title FROM tasks WHERE id = ?", (ids[0],)).fetchone()[0] == "task 0"
    # The writer goes on: the same commands, retried without the culprit, commit.
    assert (await store.command(tasks.update_task, ANN, ids[0], title="lost"))["title"] == "lost"
    assert (await client.post(f"{API}/tasks/{ids[2]}/move", {"to": "backlog"})).status == 200


async def test_a_lock_held_elsewhere_fails_each_queued_command_with_503_and_writes_nothing(
    board: RunningBoard, client: BoardClient
) -> None:
    board.store.busy_timeout_ms = 100  # before the writer thread opens its connection
    await make_project(client)
    before = head(board.store)
    with raw_connection(board) as conn:
        conn.execute("BEGIN IMMEDIATE")  # another writer of the file holds the lock
        try:
            replies = await asyncio.gather(
                *(client.post(f"{API}/tasks", {"project": "demo", "title": f"blocked {n}"}) for n in range(8))
            )
        finally:
            conn.execute("ROLLBACK")
    assert {(reply.status, reply.error) for reply in replies} == {(503, "STORE_UNAVAILABLE")}
    assert {reply.headers["Retry-After"] for reply in replies} == {"1"}
    assert head(board.store) == before and rows_after(board.store, before) == []
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "after the lock"})).status == 201


async def test_a_caller_cancelled_in_the_queue_still_commits_and_is_heard(board: RunningBoard, client: BoardClient) -> None:
    store = board.store
    task = await make_task(client)
    heard: list[int] = []
    store.add_commit_listener(heard.append)
    gate, held = await hold_writer(store)
    call = asyncio.ensure_future(store.command(tracked, ANN, tasks.update_task, task["id"], title="gone"))
    await until_queued(store, 1)
    call.cancel()  # the client went away while its command waited for the writer
    gate.release.set()
    await held
    with pytest.raises(asyncio.CancelledError):
        await call

    async def committed() -> bool:
        return bool(heard)

    await async_wait_until(committed, what="the listener to hear the cancelled caller's commit")
    rows = rows_after(store, heard[0] - 1)
    assert [(row[1], row[2]) for row in rows] == [(task["id"], "task_updated")]
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["title"] == "gone"
    store.remove_commit_listener(heard.append)


# -- a second process writing the same file -----------------------------------------------------

WRITER_SCRIPT = """
import sys
from pathlib import Path
from services.board.commands.comments import add_comment
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor

store = SqliteStore(Path(sys.argv[1]))
actor = Actor("codex", "elsewhere")
try:
    for n in range(int(sys.argv[3])):
        _, revisions = store.run_command(add_comment, actor, sys.argv[2], body=f"outside {n}")
        print(revisions[-1], flush=True)
finally:
    store.close()
"""


async def test_batches_and_a_second_process_writing_the_file_interleave_exactly(
    board: RunningBoard, client: BoardClient
) -> None:
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(16)]
    outside = await make_task(client, title="written from outside")
    start = head(board.store)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER_SCRIPT, str(board.data_dir / "board.sqlite"), outside["id"], "150",
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )

    async def one_client(task_id: str) -> list[int]:
        statuses = []
        for n in range(12):
            if n % 4 == 3:
                reply = await client.post(f"{API}/tasks/{task_id}/move", {"to": "in_review"})  # refused
                assert reply.status == 409, reply.body
            else:
                reply = await client.patch(f"{API}/tasks/{task_id}", {"title": f"{task_id} {n}"})
                assert reply.status == 200, reply.body
                statuses.append(reply.body["version"])
        return statuses

    versions, (out, err) = await asyncio.gather(
        asyncio.gather(*(one_client(task_id) for task_id in ids)), process.communicate()
    )
    assert process.returncode == 0, err.decode()
    assert all(found == list(range(2, 11)) for found in versions)
    outside_revisions = [int(line) for line in out.decode().split()]
    rows = rows_after(board.store, start)
    by_task: dict[str | None, list[str]] = {}
    for _, task_id, event, _ in rows:
        by_task.setdefault(task_id, []).append(event)
    assert by_task.pop(outside["id"]) == ["comment_added"] * 150
    assert sorted(by_task) == sorted(ids)
    assert all(found == ["task_updated"] * 9 for found in by_task.values())
    assert set(outside_revisions) <= {row[0] for row in rows}
    # Two writers on one file, yet commit times follow revision order: each command is stamped
    # once it holds the write lock.
    stamps = [row[3] for row in rows]
    assert stamps == sorted(stamps)


# -- each command keeps its own clock reading ------------------------------------------------------


@contextmanager
def counting_store(path: Path) -> Iterator[tuple[SqliteStore, list[str]]]:
    stamps: list[str] = []

    def clock() -> str:
        stamps.append(f"2030-01-01T00:00:{len(stamps):02d}.000000Z")
        return stamps[-1]

    store = SqliteStore(path, clock=clock)
    store.open()
    try:
        yield store, stamps
    finally:
        store.close()


async def test_each_command_of_a_batch_gets_its_own_timestamp(tmp_path: Path) -> None:
    with counting_store(tmp_path / "board.sqlite") as (store, stamps):
        store.run_command(projects.create_project, ANN, id="demo")
        task, _ = store.run_command(tasks.create_task, ANN, project="demo", title="clocked")
        task = task[0]
        gate, held = await hold_writer(store)
        calls = [asyncio.ensure_future(store.command(tracked, ANN, comments.add_comment, task["id"], body=f"c{n}"))
                 for n in range(5)]
        await until_queued(store, 5)
        gate.release.set()
        await held
        results = await asyncio.gather(*calls)
        revisions = [revisions[0] for _, revisions in results]
        with closing(sqlite3.connect(store.path)) as conn:
            created = [conn.execute("SELECT created_at FROM task_activities WHERE revision = ?", (revision,)).fetchone()[0]
                       for revision in revisions]
        assert created == stamps[-5:], "one clock reading per command, in revision order"
        assert len(set(created)) == 5


# -- the log reader after a batch ----------------------------------------------------------------


async def test_an_idle_log_reader_only_moves_its_position_and_a_later_stream_reads_the_gap(
    board: RunningBoard, client: BoardClient
) -> None:
    reader = board.app[LOG_READER]
    store = board.store
    ids = [(await make_task(client, title=f"task {n}"))["id"] for n in range(4)]
    start = head(store)
    seen: list[tuple[int, int]] = []  # (committed revision, the reader's position right after its listener)

    def after_reader(revision: int) -> None:  # registered after the reader's listener: called after it
        seen.append((revision, reader.position))

    store.add_commit_listener(after_reader)
    try:
        assert reader.subscribers == 0
        reads = reader.reads
        gate, held = await hold_writer(store)
        calls = [asyncio.ensure_future(client.patch(f"{API}/tasks/{task_id}", {"title": "while idle"})) for task_id in ids]
        await until_queued(store, len(ids))
        gate.release.set()
        await held
        assert [reply.status for reply in await asyncio.gather(*calls)] == [200] * 4
        # Nobody was live: the listener moved the position itself, with no read in between.
        assert seen and all(position == revision for revision, position in seen)
        assert reader.reads == reads
        expected = [row[0] for row in rows_after(store, start)]
        async with aiohttp.ClientSession() as session:
            response = await session.get(f"{board.url}{API}/events?after={start}",
                                         headers={"Authorization": f"Bearer {board.token}"})
            assert response.status == 200
            parser, got = SSEParser(), []

            async def until(revision: int) -> None:
                async with asyncio.timeout(10):
                    async for chunk in response.content.iter_any():
                        got.extend(orjson.loads(item.data)["revision"] for item in parser.feed(chunk)
                                   if isinstance(item, SSEMessage) and item.data is not None)
                        if got and got[-1] >= revision:
                            return

            await until(expected[-1])
            assert got == expected, "the stream read the idle reader's gap from the database"

            async def live() -> bool:
                return reader.subscribers == 1

            await async_wait_until(live, what="the stream to join the fan-out")
            seen.clear()
            handoff = store.handoff
            assert isinstance(handoff, Handoff)
            handed = handoff.taken + handoff.overtaken
            reply = await client.patch(f"{API}/tasks/{ids[0]}", {"title": "while live"})
            assert reply.status == 200
            last = rows_after(store, expected[-1])[-1][0]
            await until(last)
            assert got[-1] == last
            # With a stream live, the writer's frames are published before the listeners run
            # (services/board/fanout.py): the position has moved without a read.
            assert seen and seen[-1][1] == seen[-1][0]
            assert handoff.taken + handoff.overtaken == handed + 1
            response.close()
    finally:
        store.remove_commit_listener(after_reader)
