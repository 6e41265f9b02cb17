"""The store's contract, once for each engine: SQLite and PostgreSQL must behave alike.

The same commands, the same refusals with the same stable codes, the same triggers stopping a
hand-written SQL client (``raw``: the engine's own driver, autocommit, as ``sqlite3`` or ``psql``
would be used), the same snapshot reads, the same revision order under concurrency.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from services.board.commands import projects, relations, tasks
from services.board.queries.activities import replay_after
from services.board.queries.tasks import get_task
from services.board.store import BATCH_SAVEPOINT, COMMAND_SAVEPOINT, Actor, Tx, WriterStore
from shared import events
from shared.errors import TaskloomError, validation
from tests.store.engines import Raw, Refused
from tests.support.waiting import async_wait_until

ANN = Actor("human", "ann")


def run(store: WriterStore, fn: Any, *args: Any, actor: Actor = ANN, **kwargs: Any) -> Any:
    return store.run_command(fn, actor, *args, **kwargs)[0]


def new_task(store: WriterStore, title: str = "Write the docs", **fields: Any) -> dict[str, Any]:
    task, created = run(store, tasks.create_task, project="demo", title=title, **fields)
    assert created
    return task


def counts(conn: Raw) -> tuple[int, int, int]:
    """(activity rows, tasks, global revision): what a refused write must leave as it was."""
    return (
        conn.execute("SELECT count(*) FROM task_activities").fetchone()[0],
        conn.execute("SELECT count(*) FROM tasks").fetchone()[0],
        conn.execute("SELECT revision FROM global_revision").fetchone()[0],
    )


# -- the unit of work --------------------------------------------------------------------------


def test_a_command_commits_state_and_rows_together(board: WriterStore, raw: Raw) -> None:
    before = counts(raw)
    task, revisions = board.run_command(tasks.create_task, ANN, project="demo", title="One")
    task = task[0]
    assert len(revisions) == 1
    row = raw.execute("SELECT * FROM task_activities WHERE task_id = ?", (task["id"],)).fetchone()
    assert row["event"] == "task_created" and row["revision"] == revisions[0]
    assert row["actor_kind"] == "human" and row["actor_id"] == "ann"
    assert counts(raw) == (before[0] + 1, before[1] + 1, revisions[0])
    # The task row was stamped by its own trigger before the activity row took the next revision.
    assert task["revision"] < revisions[0]


def test_activity_revisions_are_unique_increasing_and_not_contiguous(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    for title in ("Two", "Three", "Four"):
        run(board, tasks.update_task, task["id"], title=title)
    revisions = [row[0] for row in raw.execute("SELECT revision FROM task_activities ORDER BY id")]
    assert revisions == sorted(set(revisions))
    assert any(b - a > 1 for a, b in zip(revisions, revisions[1:])), "other tables' bumps leave gaps"


def test_a_refusal_after_writes_rolls_everything_back(board: WriterStore, raw: Raw) -> None:
    before = counts(raw)

    def write_then_refuse(tx: Tx) -> None:
        tx.execute(
            "INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('ghost', 'Ghost', 'GHOST', ?, ?)",
            (tx.now, tx.now),
        )
        tx.record(events.PROJECT_CREATED, events.project_created(project="ghost"), task_id=None, project_id="ghost")
        raise validation("changed my mind")

    with pytest.raises(TaskloomError) as refused:
        board.run_command(write_then_refuse, ANN)
    assert refused.value.code == "VALIDATION_FAILED"
    assert counts(raw) == before
    assert raw.execute("SELECT count(*) FROM projects WHERE id = 'ghost'").fetchone()[0] == 0


def test_an_undeclared_event_is_refused_and_rolls_back(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    before = counts(raw)

    def invent(tx: Tx) -> None:
        tx.execute("UPDATE tasks SET title = 'renamed' WHERE id = ?", (task["id"],))
        tx.record("task_renamed", {}, task_id=task["id"], project_id="demo")

    with pytest.raises(ValueError, match="undeclared event 'task_renamed'"):
        board.run_command(invent, ANN)
    assert counts(raw) == before
    assert raw.execute("SELECT title FROM tasks WHERE id = ?", (task["id"],)).fetchone()[0] == "Write the docs"


def test_a_trigger_refusal_becomes_its_error_code_and_rolls_back(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    before = counts(raw)

    def skip_the_graph(tx: Tx) -> None:
        tx.record(events.TASK_MOVED, events.task_moved(from_="todo", to="done", delivery_round=1),
                  task_id=task["id"], project_id="demo")
        tx.execute("UPDATE tasks SET status = 'done' WHERE id = ?", (task["id"],))

    with pytest.raises(TaskloomError) as refused:
        board.run_command(skip_the_graph, ANN)
    assert refused.value.code == "INVALID_TRANSITION"
    assert counts(raw) == before


def test_a_no_op_command_appends_nothing(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    before = counts(raw)
    result, revisions = board.run_command(tasks.update_task, ANN, task["id"], title="Write the docs")
    assert revisions == [] and result["version"] == 1
    assert counts(raw) == before


def test_an_update_or_a_move_answers_the_task_as_a_fresh_read_shows_it(board: WriterStore) -> None:
    """The commands build their answer from the row they read and wrote, reading back only the
    revision the stamp trigger set: it must be the row, field for field, a new read finds."""
    epic = new_task(board, "Epic", kind="epic")
    blocker = new_task(board, "Blocker")
    task = new_task(board, "Child", parent=epic["id"], labels=["docs"])
    run(board, relations.add_relation, blocker["id"], type="blocks", target=task["id"])
    steps: list[tuple[Any, dict[str, Any]]] = [
        (tasks.update_task, {"title": "Child, renamed", "labels": ["docs", "ui"], "meta": {"source": "x", "n": 1.5},
                             "assignee_kind": "claude", "assignee_id": "cc"}),
        (tasks.update_task, {"description": "Longer", "priority": "high"}),
        (tasks.move_task, {"to": "backlog"}),
        (tasks.move_task, {"to": "todo"}),
        (tasks.move_task, {"to": "blocked", "reason": "waiting on the blocker"}),
        (tasks.move_task, {"to": "canceled", "reason": "not needed after all"}),  # the epic's rollup runs
    ]
    previous = board.run_query(get_task, task["id"])
    for command, fields in steps:
        answer = run(board, command, task["id"], **fields)
        assert answer == board.run_query(get_task, task["id"])
        assert answer["blocked_by"] == [blocker["identifier"]]
        assert answer["revision"] > previous["revision"] and answer["version"] == previous["version"] + 1
        previous = answer


def test_a_command_answers_blocked_by_as_a_fresh_read_as_blockers_come_and_go(board: WriterStore) -> None:
    """A card no ``blocks`` relation points at is answered without looking for blockers: the
    answer must still be the fresh read's when a blocker arrives, finishes, or is a second one."""
    task = new_task(board, "Card")
    first, second = new_task(board, "First blocker"), new_task(board, "Second blocker")
    answers = []

    def touch(title: str) -> None:
        answer = run(board, tasks.update_task, task["id"], title=title)
        assert answer == board.run_query(get_task, task["id"])
        answers.append(answer["blocked_by"])

    touch("no blocker yet")
    run(board, relations.add_relation, first["id"], type="blocks", target=task["id"])
    touch("one blocker")
    run(board, relations.add_relation, second["id"], type="blocks", target=task["id"])
    touch("two blockers")
    run(board, tasks.move_task, first["id"], to="canceled", reason="not needed after all")
    run(board, tasks.move_task, second["id"], to="canceled", reason="not needed after all")
    touch("blockers finished")
    assert answers == [[], [first["identifier"]], sorted([first["identifier"], second["identifier"]]), []]


def test_a_create_answers_the_task_as_a_fresh_read_shows_it(board: WriterStore) -> None:
    """The create answers from the row its INSERT returned, with the revision its stamp took: the
    schema's defaults, the stamp and the blockers must be what a new read finds."""
    epic = new_task(board, "Epic", kind="epic")
    creates: list[dict[str, Any]] = [
        {},
        {"labels": ["docs", "ui"], "meta": {"source": "x", "n": 1.5}, "assignee_kind": "claude", "assignee_id": "cc",
         "reporter_kind": "human", "reporter_id": "ann", "priority": "urgent", "kind": "bug", "status": "backlog",
         "description": "Longer", "acceptance_mode": "none", "idem": "key-1"},
        {"parent": epic["id"]},  # the relation stamps the child again after its row
    ]
    for fields in creates:
        answer = new_task(board, "Fresh", **fields)
        assert answer == board.run_query(get_task, answer["id"]), fields
    # An idem key a live task holds answers that task as it is.
    again, created = run(board, tasks.create_task, project="demo", title="Fresh", idem="key-1")
    assert not created and again == board.run_query(get_task, again["id"])


def test_the_lifecycle_verbs_answer_the_task_as_a_fresh_read_shows_it(board: WriterStore) -> None:
    epic = new_task(board, "Epic", kind="epic")
    task = new_task(board, "Child", parent=epic["id"], labels=["docs"])
    bob = Actor("codex", "bob")
    steps: list[tuple[Any, Actor, dict[str, Any]]] = [
        (tasks.claim_task, ANN, {}),  # todo → in_progress; the epic auto-starts
        (tasks.heartbeat_task, ANN, {}),
        (tasks.claim_task, bob, {"stale_seconds": -1}),  # a stale claim taken over
        (tasks.move_task, bob, {"to": "canceled", "reason": "not needed after all"}),
        (tasks.reopen_task, bob, {"reason": "needed after all"}),
        (tasks.move_task, bob, {"to": "canceled", "reason": "not needed after all"}),
        (tasks.archive_task, bob, {}),
    ]
    previous = board.run_query(get_task, task["id"])
    for command, actor, fields in steps:
        answer = run(board, command, task["id"], actor=actor, **fields)
        assert answer == board.run_query(get_task, task["id"]), command.__name__
        assert answer["revision"] > previous["revision"]
        previous = answer
    assert previous["archived_at"] is not None and previous["labels"] == ["docs"]


def test_commands_from_many_coroutines_serialise_on_the_writer(board: WriterStore) -> None:
    async def burst() -> list[dict[str, Any]]:
        results = await asyncio.gather(
            *(board.command(tasks.create_task, ANN, project="demo", title=f"task {n}") for n in range(40))
        )
        return [task for task, _ in results]

    created = asyncio.run(burst())
    numbers = sorted(task["number"] for task in created)
    assert numbers == list(range(1, 41))
    frames = board.run_query(replay_after, 0, 1000)
    assert [row["event"] for row in frames].count("task_created") == 40


def test_a_lone_refused_command_on_the_writer_thread_writes_nothing(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    before = counts(raw)

    def write_then_refuse(tx: Tx) -> None:
        tasks.update_task(tx, task["id"], title="never")
        raise validation("changed my mind")

    async def scenario() -> str:
        with pytest.raises(TaskloomError, match="changed my mind"):
            await board.command(write_then_refuse, ANN)
        # The writer goes on with the next command as if nothing happened.
        return (await board.command(tasks.update_task, ANN, task["id"], title="after"))["title"]

    assert asyncio.run(scenario()) == "after"
    assert counts(raw)[0] == before[0] + 1
    assert raw.execute("SELECT version FROM tasks WHERE id = ?", (task["id"],)).fetchone()[0] == 2


def run_as_one_batch(board: WriterStore, calls: list[tuple[Any, ...]]) -> list[Any]:
    """``calls`` (a command and its arguments each) queued behind a held writer, so they run as
    one batch; their outcomes, a refusal as its exception."""
    started, release = threading.Event(), threading.Event()

    def hold(tx: Tx) -> None:
        started.set()
        release.wait(10)

    async def all_queued() -> bool:
        return board.queued == len(calls)

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        held = asyncio.ensure_future(board.command(hold, ANN))
        await loop.run_in_executor(None, started.wait, 10)
        batches = board.batches
        queued = [asyncio.ensure_future(board.command(fn, ANN, *args)) for fn, *args in calls]
        await async_wait_until(all_queued, what=f"{len(calls)} commands queued behind the held writer")
        release.set()
        await held
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
        assert board.batches == batches + 1, "the commands ran as one batch"
        return outcomes

    return asyncio.run(scenario())


def test_refused_commands_inside_one_batch_take_only_their_own_writes_back(board: WriterStore, raw: Raw) -> None:
    """Group commit: a refusal in the middle or at the end of a batch takes back that command's
    writes only, whichever run of the batch it comes in."""
    task = new_task(board)
    before = counts(raw)

    def write_then_refuse(tx: Tx, title: str) -> None:
        tasks.update_task(tx, task["id"], title=title)
        raise validation(f"not {title}")

    def rename(tx: Tx, title: str) -> Any:
        return tasks.update_task(tx, task["id"], title=title)

    def move(tx: Tx, to: str) -> Any:
        return tasks.move_task(tx, task["id"], to=to)

    first, second, third, fourth, fifth = run_as_one_batch(board, [
        (rename, "first"), (write_then_refuse, "second"), (move, "in_progress"), (rename, "fourth"),
        (write_then_refuse, "fifth"),
    ])
    assert first["title"] == "first" and fourth["title"] == "fourth"
    assert isinstance(second, TaskloomError) and "not second" in second.message
    assert isinstance(third, TaskloomError) and third.code == "INVALID_TRANSITION"
    assert isinstance(fifth, TaskloomError) and "not fifth" in fifth.message
    row = raw.execute("SELECT title, version FROM tasks WHERE id = ?", (task["id"],)).fetchone()
    assert (row[0], row[1]) == ("fourth", 3)
    events_written = [r[0] for r in raw.execute("SELECT event FROM task_activities ORDER BY id")][before[0]:]
    assert events_written == ["task_updated", "task_updated"]


def test_a_refusal_by_the_database_of_a_commands_last_write_is_that_commands_alone(
    board: WriterStore, raw: Raw,
) -> None:
    """A trigger's refusal of the last statement a command sends, which nothing of that command
    reads after, comes back as that command's refusal, its writes rolled back, and the commands
    around it in the batch commit (a writer that sent statements without waiting for each answer
    would hear it only on the next command's first read)."""
    task = new_task(board)
    before = counts(raw)

    def rename(tx: Tx, title: str) -> Any:
        return tasks.update_task(tx, task["id"], title=title)

    def rename_then_skip_the_graph(tx: Tx, title: str) -> None:
        # No activity row, so the conditions read nothing after these: only the writer's wait
        # for the command's answers hears the transition trigger refuse the second.
        tx.execute("UPDATE tasks SET title = ? WHERE id = ?", (title, task["id"]))
        tx.execute("UPDATE tasks SET status = 'done' WHERE id = ?", (task["id"],))

    outcomes = run_as_one_batch(board, [
        (rename, "first"), (rename_then_skip_the_graph, "second"), (rename, "third"),
        (rename_then_skip_the_graph, "fourth"),
    ])
    assert outcomes[0]["title"] == "first" and outcomes[2]["title"] == "third"
    for refused in (outcomes[1], outcomes[3]):
        assert isinstance(refused, TaskloomError) and refused.code == "INVALID_TRANSITION", refused
    row = raw.execute("SELECT title, status, version FROM tasks WHERE id = ?", (task["id"],)).fetchone()
    assert (row[0], row[1], row[2]) == ("third", "todo", 3)
    events_written = [r[0] for r in raw.execute("SELECT event FROM task_activities ORDER BY id")][before[0]:]
    assert events_written == ["task_updated", "task_updated"]


@pytest.mark.parametrize("run_through", ["first run", "run again"])
def test_a_batch_whose_rollback_to_a_savepoint_fails_tells_nobody_it_committed(
    board: WriterStore, raw: Raw, run_through: str,
) -> None:
    """A command that writes, releases the savepoint its batch relies on (raw SQL, a bug) and is
    then refused leaves the rollback nothing to roll back to, and a PostgreSQL transaction left
    failed ends at COMMIT as a ROLLBACK without an error. Every command of the batch must hear
    that it was lost (503), never that it committed, and the table must hold none of their writes:
    in a batch's first run, where the commands rely on the savepoint taken at its start, and once
    a refusal has made the batch run again, each command in a savepoint of its own."""
    task = new_task(board)
    other = new_task(board, title="Read the docs")
    before = counts(raw)

    def rename(tx: Tx, title: str) -> Any:
        return tasks.update_task(tx, task["id"], title=title)

    def write_then_refuse(tx: Tx) -> None:
        tasks.update_task(tx, other["id"], title="never")
        raise validation("refused after writing")

    def break_the_savepoint(tx: Tx) -> None:
        tasks.update_task(tx, task["id"], title="broken")
        tx.execute(f"RELEASE {COMMAND_SAVEPOINT if run_through == 'run again' else BATCH_SAVEPOINT}")
        raise validation("refused after releasing the savepoint")

    calls: list[tuple[Any, ...]] = [(rename, "first"), (break_the_savepoint,), (rename, "third")]
    if run_through == "run again":
        calls.insert(0, (write_then_refuse,))
    outcomes = run_as_one_batch(board, calls)
    for outcome in outcomes:
        assert isinstance(outcome, TaskloomError), f"told it committed: {outcome!r}"
    assert all(outcome.code == "STORE_UNAVAILABLE" for outcome in outcomes), outcomes
    assert counts(raw) == before
    titles = dict(raw.execute("SELECT id, title FROM tasks").fetchall())
    assert (titles[task["id"]], titles[other["id"]]) == ("Write the docs", "Read the docs")
    # The writer goes on: the next command commits.
    assert run(board, rename, "after")["title"] == "after"


def counted_rename(runs: list[str]) -> Callable[[Tx, str, str], Any]:
    """``update_task`` of a title, noting each run of it in ``runs``: how a test tells a batch that
    ran again from one that did not."""
    def rename(tx: Tx, ref: str, title: str) -> Any:
        runs.append(title)
        return tasks.update_task(tx, ref, title=title)

    return rename


def test_a_refusal_after_a_write_runs_the_batch_again_and_each_command_once_more(board: WriterStore, raw: Raw) -> None:
    """A command refused after it wrote takes the batch back to its start; every command then runs
    once more, each in a savepoint of its own: the ones before it commit what their second run
    did, the refused one leaves nothing, a later refusal takes back only its own command."""
    task = new_task(board)
    before = counts(raw)
    runs: list[str] = []
    rename = counted_rename(runs)

    def write_then_refuse(tx: Tx, ref: str, title: str) -> None:
        rename(tx, ref, title)
        raise validation("refused after writing")

    outcomes = run_as_one_batch(board, [
        (rename, task["id"], "first"), (write_then_refuse, task["id"], "second"), (rename, task["id"], "third"),
        (write_then_refuse, task["id"], "fourth"), (rename, task["id"], "fifth"),
    ])
    assert runs == ["first", "second", "first", "second", "third", "fourth", "fifth"]
    assert [outcome["title"] for outcome in outcomes[0::2]] == ["first", "third", "fifth"]
    assert [outcome["version"] for outcome in outcomes[0::2]] == [2, 3, 4]
    for refused in outcomes[1::2]:
        assert isinstance(refused, TaskloomError) and refused.code == "VALIDATION_FAILED", refused
    events_written = [r[0] for r in raw.execute("SELECT event FROM task_activities ORDER BY id")][before[0]:]
    assert events_written == ["task_updated"] * 3
    assert raw.execute("SELECT title, version FROM tasks WHERE id = ?", (task["id"],)).fetchone()[:2] == ("fifth", 4)


def test_a_refusal_that_wrote_nothing_costs_the_batch_nothing(board: WriterStore, raw: Raw) -> None:
    """Most refusals come before any write (a missing card, a stale version, a bad value): the
    batch goes on as it was, and nothing runs twice."""
    task = new_task(board)
    runs: list[str] = []
    rename = counted_rename(runs)

    outcomes = run_as_one_batch(board, [
        (rename, task["id"], "first"), (rename, "no-such-card", "second"), (rename, task["id"], "third"),
    ])
    assert runs == ["first", "second", "third"]
    assert isinstance(outcomes[1], TaskloomError) and outcomes[1].code == "NOT_FOUND", outcomes[1]
    assert (outcomes[0]["version"], outcomes[2]["version"]) == (2, 3)
    assert raw.execute("SELECT title FROM tasks WHERE id = ?", (task["id"],)).fetchone()[0] == "third"


def test_commands_that_queue_while_a_batch_waits_for_the_write_lock_join_that_batch(
    board: WriterStore, raw: Raw, engine: str,
) -> None:
    """Another process holds the write lock (here a raw client): the writer's batch, a lone command
    when it began, waits for it. The commands that queue meanwhile run in that batch once the lock
    is granted, not in one more after it, and a refusal among them that wrote still takes back its
    own writes only (the batch takes its savepoint as it grows)."""
    task, other = new_task(board), new_task(board, "Other card")
    runs: list[str] = []
    rename = counted_rename(runs)

    def write_then_refuse(tx: Tx) -> None:
        tasks.update_task(tx, other["id"], title="never stands")
        raise validation("refused after a write")

    async def scenario() -> list[Any]:
        raw.execute("BEGIN IMMEDIATE" if engine == "sqlite" else "BEGIN")
        if engine != "sqlite":
            raw.execute("SELECT revision FROM global_revision WHERE singleton = 1 FOR UPDATE")
        batches = board.batches
        try:
            first = asyncio.ensure_future(board.command(rename, ANN, task["id"], "first"))

            async def waiting_alone() -> bool:  # its batch formed of it alone, now at the lock
                return board.batches == batches + 1 and board.queued == 0

            await async_wait_until(waiting_alone, what="the first command's batch at the write lock")
            later = [asyncio.ensure_future(board.command(*call)) for call in [
                (rename, ANN, task["id"], "second"), (write_then_refuse, ANN), (rename, ANN, task["id"], "third"),
            ]]

            async def all_queued() -> bool:
                return board.queued == len(later)

            await async_wait_until(all_queued, what="three commands queued behind the waiting batch")
        finally:
            raw.execute("COMMIT")
        outcomes = await asyncio.gather(first, *later, return_exceptions=True)
        assert board.batches == batches + 1, "the commands queued at the lock ran in the batch waiting for it"
        return outcomes

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[2], TaskloomError) and outcomes[2].code == "VALIDATION_FAILED", outcomes[2]
    assert [outcomes[n]["version"] for n in (0, 1, 3)] == [2, 3, 4]
    assert raw.execute("SELECT title FROM tasks WHERE id = ?", (task["id"],)).fetchone()[0] == "third"
    assert raw.execute("SELECT title FROM tasks WHERE id = ?", (other["id"],)).fetchone()[0] == "Other card"


def test_a_command_that_appends_no_row_is_told_it_committed_only_when_its_write_stands(
    board: WriterStore, raw: Raw, engine: str,
) -> None:
    """A command may write without appending a row (``purge_blob`` does) and go on past a statement
    the database refused: here an insert that takes its duplicate key as "already there". SQLite
    refuses that statement alone, and the command's write commits. PostgreSQL leaves the whole
    transaction failed, and a failed transaction ends at COMMIT as a ROLLBACK without an error:
    the command must then hear that it was lost (503), never that it committed, through the
    writer as through ``run_command``."""
    task = new_task(board)

    def rename_then_insert_if_absent(tx: Tx, title: str) -> str:
        tx.execute("UPDATE tasks SET title = ? WHERE id = ?", (title, task["id"]))
        try:
            tx.execute("INSERT INTO projects (id, name, prefix, created_at, updated_at)"
                       " VALUES ('demo', 'Demo', 'DEMO', ?, ?)", (tx.now, tx.now))
        except board.driver_error:
            pass  # the duplicate key, taken as "already there"
        return title

    def through(seam: str) -> Any:
        if seam == "the writer":
            return run_as_one_batch(board, [(rename_then_insert_if_absent, seam)])[0]
        try:
            return run(board, rename_then_insert_if_absent, seam)
        except TaskloomError as exc:
            return exc

    for seam in ("the writer", "run_command"):
        before = counts(raw)
        outcome = through(seam)
        title = raw.execute("SELECT title FROM tasks WHERE id = ?", (task["id"],)).fetchone()[0]
        if engine == "postgresql":
            assert isinstance(outcome, TaskloomError), f"{seam}: told it committed: {outcome!r}"
            assert outcome.code == "STORE_UNAVAILABLE", outcome
            assert (title, counts(raw)) == ("Write the docs", before), seam
        else:
            assert outcome == seam and title == seam
    # The writer goes on: the next command commits.
    assert run(board, tasks.update_task, task["id"], title="after")["title"] == "after"


@pytest.mark.parametrize("place", ["first", "middle", "last"])
def test_a_command_that_goes_on_past_a_refused_statement_in_a_batch_is_never_told_it_committed_in_vain(
    board: WriterStore, raw: Raw, engine: str, place: str,
) -> None:
    """The same command inside a batch of several, which runs without a savepoint per command
    until a refusal: on PostgreSQL the transaction it leaves failed refuses the commands after it
    or the COMMIT, and whatever the batch then does, no command of it may be told it committed
    unless its write stands. On SQLite the refused statement went alone: every command commits."""
    cards = {name: new_task(board, title=name)["id"] for name in ("went on", "before", "after")}

    def rename_then_insert_if_absent(tx: Tx, name: str) -> str:
        tx.execute("UPDATE tasks SET title = ? WHERE id = ?", (f"{name}, renamed", cards[name]))
        try:
            tx.execute("INSERT INTO projects (id, name, prefix, created_at, updated_at)"
                       " VALUES ('demo', 'Demo', 'DEMO', ?, ?)", (tx.now, tx.now))
        except board.driver_error:
            pass  # the duplicate key, taken as "already there"
        return name

    def rename(tx: Tx, name: str) -> str:
        return str(tasks.update_task(tx, cards[name], title=f"{name}, renamed")["title"]).removesuffix(", renamed")

    calls: list[tuple[Any, ...]] = [(rename, "before"), (rename, "after")]
    calls.insert({"first": 0, "middle": 1, "last": 2}[place], (rename_then_insert_if_absent, "went on"))
    outcomes = run_as_one_batch(board, calls)
    titles = dict(raw.execute("SELECT id, title FROM tasks").fetchall())
    for (_, name), outcome in zip(calls, outcomes):
        if isinstance(outcome, TaskloomError):
            assert outcome.code == "STORE_UNAVAILABLE", outcome
            assert titles[cards[name]] == name, f"{name}: lost, yet its write stands"
        else:
            assert outcome == name and titles[cards[name]] == f"{name}, renamed", f"{name}: told it committed"
    if engine == "sqlite":
        assert not any(isinstance(outcome, TaskloomError) for outcome in outcomes), outcomes
    else:
        assert isinstance(outcomes[[name for _, name in calls].index("went on")], TaskloomError), outcomes
    # The writer goes on: the next command commits.
    assert run(board, rename, "went on") == "went on"


def test_close_lets_queued_commands_commit_then_refuses_new_ones(board: WriterStore, raw: Raw) -> None:
    started, release = threading.Event(), threading.Event()

    def hold(tx: Tx) -> None:
        started.set()
        release.wait(10)

    async def three_queued() -> bool:
        return board.queued == 3

    async def scenario() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        held = asyncio.ensure_future(board.command(hold, ANN))
        await loop.run_in_executor(None, started.wait, 10)
        queued = [asyncio.ensure_future(board.command(tasks.create_task, ANN, project="demo", title=f"late {n}"))
                  for n in range(3)]
        await async_wait_until(three_queued, what="three commands queued behind the held writer")
        closing = loop.run_in_executor(None, board.close)  # blocks until the writer has drained
        release.set()
        await held
        created = [task for task, _ in await asyncio.gather(*queued)]
        await closing
        with pytest.raises(RuntimeError, match="closed"):
            await board.command(tasks.create_task, ANN, project="demo", title="too late")
        return created

    created = asyncio.run(scenario())
    assert [task["title"] for task in created] == ["late 0", "late 1", "late 2"]
    assert raw.execute("SELECT count(*) FROM tasks").fetchone()[0] == 3


def test_commit_listeners_hear_the_last_revision_of_each_writing_command(board: WriterStore) -> None:
    heard: list[int] = []
    board.add_commit_listener(heard.append)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        task, _ = await board.command(tasks.create_task, ANN, project="demo", title="Listen")
        worker = Actor("claude", "worker-1")
        claimed = await board.command(tasks.claim_task, worker, task["id"])
        await board.command(tasks.update_task, ANN, task["id"], title="Listen")  # no-op: nothing to hear
        return task, claimed

    asyncio.run(scenario())
    rows = board.run_query(replay_after, 0, 1000)
    assert heard == [row["revision"] for row in rows][-2:]


def test_a_query_reads_one_snapshot(board: WriterStore, raw: Raw) -> None:
    new_task(board)

    def read_twice(conn: Any) -> tuple[int, int]:
        first = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
        raw.execute(
            "INSERT INTO task_activities (actor_kind, actor_id, event, revision, created_at)"
            " VALUES ('human', 'ann', 'progress', (SELECT revision + 1 FROM global_revision), 'now')"
        )
        raw.execute("UPDATE projects SET name = 'Renamed' WHERE id = 'demo'")
        second = conn.execute("SELECT count(*) FROM task_activities").fetchone()[0]
        return first, second

    before_rows = counts(raw)[0]
    first, second = board.run_query(read_twice)
    assert first == 1 and second == before_rows, "a query must not see a commit that landed while it ran"
    assert counts(raw)[0] == before_rows + 1


# -- the activity log --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE task_activities SET event = 'task_moved'",
        "UPDATE task_activities SET changes_json = '{}' WHERE id = 1",
        "DELETE FROM task_activities",
        "DELETE FROM task_activities WHERE id = 1",
    ],
)
def test_raw_sql_cannot_rewrite_the_log(board: WriterStore, raw: Raw, statement: str) -> None:
    new_task(board)
    before = raw.execute("SELECT * FROM task_activities ORDER BY id").fetchall()
    with pytest.raises(Refused, match="ACTIVITY_APPEND_ONLY"):
        raw.execute(statement)
    assert [tuple(row) for row in raw.execute("SELECT * FROM task_activities ORDER BY id")] == [tuple(r) for r in before]


def test_a_row_must_carry_the_revision_its_insert_produces(board: WriterStore, raw: Raw) -> None:
    before = counts(raw)
    with pytest.raises(Refused, match="ACTIVITY_REVISION_MISMATCH"):
        raw.execute(
            "INSERT INTO task_activities (actor_kind, actor_id, event, revision, created_at)"
            " VALUES ('human', 'ann', 'progress', 1, 'now')"
        )
    assert counts(raw) == before


def test_a_row_without_revision_is_readable_but_never_replayed(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    raw.execute(
        "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, created_at)"
        " VALUES (?, 'demo', 'human', 'importer', 'progress', '{\"line\": \"x\", \"seq\": 1}', 'now')",
        (task["id"],),
    )
    replayed = board.run_query(replay_after, 0, 1000)
    assert [row["event"] for row in replayed] == ["project_created", "task_created"]
    per_task = raw.execute("SELECT event FROM task_activities WHERE task_id = ? ORDER BY id", (task["id"],)).fetchall()
    assert [row[0] for row in per_task] == ["task_created", "progress"]


# -- append-only and immutable tables ------------------------------------------------------------


def add_comment(raw: Raw, task_id: str, comment_id: str = "c1") -> None:
    raw.execute(
        "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
        " VALUES (?, ?, 'note', 'hello', 'human', 'ann', 1, 'now')",
        (comment_id, task_id),
    )


@pytest.mark.parametrize(
    ("setup", "statement", "code"),
    [
        ("comment", "UPDATE comments SET body = 'edited'", "COMMENT_APPEND_ONLY"),
        ("comment", "DELETE FROM comments", "COMMENT_APPEND_ONLY"),
        ("report", "UPDATE reports SET body = 'edited'", "REPORT_APPEND_ONLY"),
        ("report", "DELETE FROM reports", "REPORT_APPEND_ONLY"),
        ("relation", "UPDATE relations SET type = 'blocks'", "RELATION_IMMUTABLE"),
        ("acceptance", "UPDATE acceptance_items SET text = 'edited'", "ACCEPTANCE_IMMUTABLE"),
        ("acceptance", "DELETE FROM acceptance_items", "ACCEPTANCE_PRUNE_UNAUDITED"),
    ],
)
def test_records_of_what_was_said_do_not_change(
    board: WriterStore, raw: Raw, setup: str, statement: str, code: str
) -> None:
    one, two = new_task(board), new_task(board, "Other")
    if setup == "comment":
        add_comment(raw, one["id"])
    elif setup == "report":
        raw.execute(
            "INSERT INTO reports (id, task_id, round, body, actor_kind, actor_id, created_at)"
            " VALUES ('r1', ?, 1, 'done it', 'claude', 'w', 'now')",
            (one["id"],),
        )
    elif setup == "relation":
        raw.execute(
            "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES ('rel1', 'related', ?, ?, 'now')",
            (one["id"], two["id"]),
        )
    else:
        raw.execute(
            "INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES ('i1', ?, 1, 'works', 'now')",
            (one["id"],),
        )
    table = statement.split()[1] if statement.startswith("UPDATE") else statement.split()[2]
    before = raw.execute(f"SELECT * FROM {table}").fetchall()
    with pytest.raises(Refused, match=code):
        raw.execute(statement)
    assert [tuple(r) for r in raw.execute(f"SELECT * FROM {table}")] == [tuple(r) for r in before]


def test_acceptance_delete_needs_an_earlier_prune_row_naming_that_item(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    for item_id, position in (("i1", 1), ("i2", 2)):
        raw.execute(
            "INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES (?, ?, ?, 'works', 'now')",
            (item_id, task["id"], position),
        )

    def prune(tx: Tx, named: str, deleted: str) -> None:
        tx.record(events.ACCEPTANCE_PRUNED,
                  events.acceptance_pruned(reason="duplicated by item 2", removed=[{"id": named, "text": "works"}]),
                  task_id=task["id"], project_id="demo")
        tx.execute("DELETE FROM acceptance_items WHERE id = ?", (deleted,))

    before = counts(raw)
    with pytest.raises(TaskloomError):
        board.run_command(prune, ANN, "i2", "i1")  # the audit row names another item
    assert counts(raw) == before
    assert raw.execute("SELECT count(*) FROM acceptance_items").fetchone()[0] == 2

    board.run_command(prune, ANN, "i1", "i1")
    assert [row[0] for row in raw.execute("SELECT id FROM acceptance_items")] == ["i2"]
    assert counts(raw)[0] == before[0] + 1


# -- the status graph ----------------------------------------------------------------------------


def test_raw_status_writes_follow_the_graph(board: WriterStore, raw: Raw) -> None:
    task = new_task(board)
    with pytest.raises(Refused, match="INVALID_TRANSITION"):
        raw.execute("UPDATE tasks SET status = 'done' WHERE id = ?", (task["id"],))
    raw.execute("UPDATE tasks SET status = 'canceled' WHERE id = ?", (task["id"],))
    with pytest.raises(Refused, match="TERMINAL_STATE"):
        raw.execute("UPDATE tasks SET status = 'todo' WHERE id = ?", (task["id"],))
    with pytest.raises(Refused, match="TERMINAL_STATE|INVALID_TRANSITION"):
        raw.execute("UPDATE tasks SET status = 'in_progress', delivery_round = 2 WHERE id = ?", (task["id"],))
    raw.execute("UPDATE tasks SET status = 'todo', delivery_round = delivery_round + 1 WHERE id = ?", (task["id"],))
    assert raw.execute("SELECT status, delivery_round FROM tasks WHERE id = ?", (task["id"],)).fetchone()[:] == ("todo", 2)


# -- parent relations ----------------------------------------------------------------------------


def parent(raw: Raw, source: dict[str, Any], target: dict[str, Any], rel_id: str) -> None:
    raw.execute(
        "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES (?, 'parent', ?, ?, 'now')",
        (rel_id, source["id"], target["id"]),
    )


def relation_count(raw: Raw) -> int:
    return raw.execute("SELECT count(*) FROM relations").fetchone()[0]


def test_a_parent_must_be_an_epic_in_the_same_project(board: WriterStore, raw: Raw) -> None:
    plain, child = new_task(board, "plain"), new_task(board, "child")
    run(board, projects.create_project, id="other")
    foreign_epic, _ = run(board, tasks.create_task, project="other", title="foreign", kind="epic")
    before = relation_count(raw)
    with pytest.raises(Refused, match="RELATION_INVALID: parent must be an epic"):
        parent(raw, plain, child, "r1")
    with pytest.raises(Refused, match="RELATION_INVALID: parent and child must be in the same project"):
        parent(raw, foreign_epic, child, "r2")
    assert relation_count(raw) == before


def test_parent_chains_refuse_cycles(board: WriterStore, raw: Raw) -> None:
    a, b, c = (new_task(board, name, kind="epic") for name in "abc")
    parent(raw, a, b, "ab")
    parent(raw, b, c, "bc")
    with pytest.raises(Refused, match="RELATION_CYCLE"):
        parent(raw, c, a, "ca")
    assert relation_count(raw) == 2


def test_parent_chains_are_at_most_eight_deep(board: WriterStore, raw: Raw) -> None:
    chain = [new_task(board, f"level {n}", kind="epic") for n in range(9)]
    for n in range(7):
        parent(raw, chain[n], chain[n + 1], f"p{n}")  # eight tasks deep
    with pytest.raises(Refused, match="RELATION_DEPTH"):
        parent(raw, chain[7], chain[8], "p7")
    assert relation_count(raw) == 7


def test_a_task_has_at_most_eight_parents(board: WriterStore, raw: Raw) -> None:
    child = new_task(board, "child")
    epics = [new_task(board, f"epic {n}", kind="epic") for n in range(9)]
    for n in range(8):
        parent(raw, epics[n], child, f"p{n}")
    with pytest.raises(Refused, match="RELATION_FAN_IN"):
        parent(raw, epics[8], child, "p8")
    assert relation_count(raw) == 8


def test_trigger_codes_reach_callers_as_stable_errors(board: WriterStore, raw: Raw) -> None:
    a, b = new_task(board, "a", kind="epic"), new_task(board, "b", kind="epic")
    parent(raw, a, b, "ab")
    before = counts(raw)

    def loop(tx: Tx) -> None:
        tx.execute(
            "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES ('ba', 'parent', ?, ?, ?)",
            (b["id"], a["id"], tx.now),
        )
        tx.record(events.RELATION_ADDED,
                  events.relation_added(relation_id="ba", type_="parent", source=b["identifier"], target=a["identifier"]),
                  task_id=a["id"], project_id="demo")

    with pytest.raises(TaskloomError) as refused:
        board.run_command(loop, ANN)
    assert refused.value.code == "RELATION_CYCLE" and refused.value.status == 409
    assert counts(raw) == before


# -- revision order under concurrency ------------------------------------------------------------


def test_concurrent_writers_on_their_own_connections_get_unique_revisions_in_commit_order(
    board: WriterStore, raw: Raw
) -> None:
    """Eight threads, each on its own connection (``run_command``), write at once: every revision
    is used once, the log is gap-free in order of id, and a reader polling meanwhile never sees a
    revision appear below one it has already seen."""
    seen: list[int] = []
    done = threading.Event()

    def follow() -> None:
        position = 0
        while not done.is_set() or position < board.run_query(lambda conn: conn.execute(
                "SELECT max(revision) FROM task_activities").fetchone()[0]):
            rows = board.run_query(replay_after, position, 1000)
            for row in rows:
                seen.append(row["revision"])
                position = row["revision"]

    def write(worker: int) -> None:
        for n in range(10):
            board.run_command(tasks.create_task, Actor("claude", f"w{worker}"), project="demo", title=f"{worker}-{n}")

    reader = threading.Thread(target=follow)
    reader.start()
    writers = [threading.Thread(target=write, args=(worker,)) for worker in range(8)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join(timeout=60)
    final = [row[0] for row in raw.execute("SELECT revision FROM task_activities WHERE revision IS NOT NULL ORDER BY id")]
    assert final == sorted(set(final)) and len(final) == 81
    assert seen == final[: len(seen)] and seen[-1] == final[-1], "a reader skipped or repeated a revision"
