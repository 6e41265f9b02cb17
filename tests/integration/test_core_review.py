"""Second-look review of the board core (issue 2): each test pins a bug found and fixed, over a
real board on loopback or a real SQLite file, and every refusal is shown to write nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from services.board import sqlite_store as store_module
from services.board.commands import projects
from services.board.sqlite_store import SqliteStore, migrate, schema_version, translate_integrity_error
from services.board.store import Actor
from tests.support.board import (
    API,
    BoardClient,
    RunningBoard,
    activity_count,
    make_project,
    make_task,
    raw_connection,
    row_counts,
    task_rows,
)
from tests.support.waiting import async_wait_until

ANN = Actor("human", "ann")


async def refused(board: RunningBoard, reply: Any, status: int, code: str, before: int) -> dict[str, Any]:
    """The reply is the named refusal and the log did not move."""
    assert (reply.status, reply.error) == (status, code), reply.body
    assert await activity_count(board) == before
    return reply.body["error"]


# -- query and body numbers ---------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["--5", "²", "١", "5-", "0x10"])
async def test_a_query_integer_is_ascii_digits_or_a_400(client: BoardClient, raw: str) -> None:
    # '--5' and '²' passed the old isdigit() check and crashed int() as a 500; '١' was read as 1.
    reply = await client.get(f"{API}/tasks?limit={raw}")
    assert (reply.status, reply.error) == (400, "VALIDATION_FAILED"), reply.body
    assert reply.body["error"]["details"]["field"] == "limit"


async def test_a_query_integer_past_64_bits_is_a_400_not_a_500(client: BoardClient) -> None:
    reply = await client.get(f"{API}/activities?after={1 << 63}")
    assert (reply.status, reply.error) == (400, "VALIDATION_FAILED"), reply.body
    assert (await client.get(f"{API}/activities?after={(1 << 63) - 1}")).status == 200


async def test_a_body_integer_past_64_bits_is_a_400_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/sessions", {"seg": 1 << 63, "phase": "coding"})
    error = await refused(board, reply, 400, "VALIDATION_FAILED", before)
    assert error["details"]["field"] == "seg"
    assert await row_counts(board, "agent_sessions") == (0,)


async def test_a_repeated_query_parameter_is_refused_not_half_read(client: BoardClient) -> None:
    reply = await client.get(f"{API}/tasks?status=todo&status=done")
    assert (reply.status, reply.error) == (400, "VALIDATION_FAILED"), reply.body
    assert reply.body["error"]["details"]["repeated"] == ["status"]


# -- actor kinds (SPEC §4.1) --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["agent", "taskd", "Agent", "system"])
async def test_role_words_and_system_are_not_a_clients_kind(client: BoardClient, board: RunningBoard, kind: str) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.as_actor(kind, "worker-1").post(f"{API}/tasks/{task['id']}/comments", {"body": "hello"})
    await refused(board, reply, 400, "VALIDATION_FAILED", before)
    assert await row_counts(board, "comments") == (0,)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/tasks", {"project": "demo", "title": "x", "assignee_kind": "agent", "assignee_id": "w"}),
        ("PATCH", "/tasks/DEMO-0001", {"reporter_kind": "taskd", "reporter_id": "board"}),
        ("POST", "/tasks/DEMO-0001/sessions", {"seg": 1, "phase": "coding", "owner_kind": "agent", "owner_id": "w"}),
    ],
)
async def test_role_words_are_refused_as_assignee_reporter_or_owner_kinds(
    client: BoardClient, board: RunningBoard, method: str, path: str, body: dict[str, Any]
) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await client.request(method, API + path, json_body=body)
    await refused(board, reply, 400, "VALIDATION_FAILED", before)
    assert await row_counts(board, "actors", "agent_sessions") == (0, 0)


# -- epics keep their children ------------------------------------------------------------------


async def _epic_with_child(client: BoardClient, **epic_fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    epic = await make_task(client, title="Launch", kind="epic", **epic_fields)
    child = await make_task(client, title="Landing page")
    reply = await client.post(f"{API}/tasks/{epic['id']}/relations", {"type": "parent", "target": child["id"]})
    assert reply.status == 201, reply.body
    return epic, child


async def test_an_epic_with_children_cannot_stop_being_an_epic(client: BoardClient, board: RunningBoard) -> None:
    epic, _ = await _epic_with_child(client)
    before = await activity_count(board)
    reply = await client.patch(f"{API}/tasks/{epic['id']}", {"kind": "task"})
    error = await refused(board, reply, 422, "RELATION_INVALID", before)
    assert error["details"]["children"] == 1
    assert (await client.get(f"{API}/tasks/{epic['id']}")).body["kind"] == "epic"


async def test_an_epic_without_children_may_change_kind(client: BoardClient) -> None:
    epic = await make_task(client, title="Was an epic", kind="epic")
    reply = await client.patch(f"{API}/tasks/{epic['id']}", {"kind": "task"})
    assert reply.status == 200 and reply.body["kind"] == "task", reply.body


async def test_the_schema_keeps_a_parent_an_epic_and_a_task_in_its_project(client: BoardClient, board: RunningBoard) -> None:
    epic, child = await _epic_with_child(client)
    await make_project(client, "other")
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="RELATION_INVALID") as caught:
            conn.execute("UPDATE tasks SET kind = 'task' WHERE id = ?", (epic["id"],))
        assert translate_integrity_error(caught.value).code == "RELATION_INVALID"
        with pytest.raises(sqlite3.IntegrityError, match="TASK_PROJECT_FIXED"):
            conn.execute("UPDATE tasks SET project_id = 'other' WHERE id = ?", (child["id"],))


@pytest.mark.parametrize("status", ["backlog", "todo"])
async def test_epic_auto_start_names_the_status_the_epic_left(client: BoardClient, status: str) -> None:
    epic, child = await _epic_with_child(client, status=status)
    assert (await client.as_actor("claude", "worker-1").post(f"{API}/tasks/{child['id']}/claim")).status == 200
    started = [row for row in await task_rows(client, epic["id"]) if row["event"] == "epic_auto_start"]
    assert [row["changes"]["from"] for row in started] == [status]  # a backlog epic was reported as 'todo'
    assert (await client.get(f"{API}/tasks/{epic['id']}")).body["status"] == "in_progress"


# -- clear refusals instead of the database's words ---------------------------------------------


async def test_a_taken_workspace_path_on_patch_is_409_conflict(client: BoardClient, board: RunningBoard) -> None:
    assert (await client.post(f"{API}/projects", {"id": "one", "workspace_path": "/src/one"})).status == 201
    assert (await client.post(f"{API}/projects", {"id": "two"})).status == 201
    before = await activity_count(board)
    reply = await client.patch(f"{API}/projects/two", {"workspace_path": "/src/one"})
    error = await refused(board, reply, 409, "CONFLICT", before)
    assert error["details"] == {"workspace_path": "/src/one", "project": "one"}
    # Keeping one's own path is not a conflict.
    assert (await client.patch(f"{API}/projects/one", {"workspace_path": "/src/one", "name": "One"})).status == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/tasks", {"project": "demo", "title": "x" * 501}),
        ("PATCH", "/tasks/DEMO-0001", {"title": "x" * 501}),
        ("POST", "/projects", {"id": "long", "name": "n" * 201}),
        ("PATCH", "/projects/demo", {"name": "n" * 201}),
    ],
)
async def test_overlong_titles_and_names_are_named_not_left_to_the_schema(
    client: BoardClient, board: RunningBoard, method: str, path: str, body: dict[str, Any]
) -> None:
    await make_task(client)
    before = await activity_count(board)
    error = await refused(board, await client.request(method, API + path, json_body=body), 400, "VALIDATION_FAILED", before)
    assert "at most" in error["message"] and "refused by the database" not in error["message"]


def test_a_unique_constraint_is_a_conflict() -> None:
    error = translate_integrity_error(sqlite3.IntegrityError("UNIQUE constraint failed: projects.workspace_path"))
    assert (error.code, error.status) == ("CONFLICT", 409)


# -- auth and filters ----------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
async def test_the_bearer_scheme_is_case_insensitive(client: BoardClient, board: RunningBoard, scheme: str) -> None:
    reply = await client.get(f"{API}/meta", token=False, headers={"Authorization": f"{scheme} {board.token}"})
    assert reply.status == 200, reply.body


async def test_the_label_filter_matches_the_stored_name(client: BoardClient) -> None:
    task = await make_task(client, labels=["Needs Review"])
    listed = (await client.get(f"{API}/tasks?label=Needs%20Review")).body["items"]
    assert [item["id"] for item in listed] == [task["id"]]
    reply = await client.get(f"{API}/tasks?label=no%20good!")
    assert (reply.status, reply.error) == (400, "VALIDATION_FAILED")


# -- attachments: a refused replacement leaves no blob -------------------------------------------


async def test_replacing_an_attachment_of_an_archived_task_writes_no_blob(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    reply = await client.request(
        "POST", f"{API}/tasks/{task['id']}/attachments?filename=a.txt", data=b"first", headers={"Content-Type": "text/plain"}
    )
    assert reply.status == 201, reply.body
    attachment = reply.body
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})).status == 200
    assert (await client.post(f"{API}/tasks/{task['id']}/archive")).status == 200
    blobs_before = sorted(p for p in (board.data_dir / "attachments").rglob("*") if p.is_file())
    before = await activity_count(board)
    reply = await client.request("PUT", f"{API}/attachments/{attachment['id']}", data=b"second, never stored")
    await refused(board, reply, 409, "TERMINAL_STATE", before)
    assert sorted(p for p in (board.data_dir / "attachments").rglob("*") if p.is_file()) == blobs_before


# -- acceptance revision lives on the task -------------------------------------------------------


async def test_the_acceptance_revision_is_kept_on_the_task_not_counted_from_the_log(
    client: BoardClient, board: RunningBoard
) -> None:
    task = await make_task(client)
    for text in ("Docs build", "Links work"):
        assert (await client.post(f"{API}/tasks/{task['id']}/acceptance", {"items": [text]})).status == 200
    assert (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body["revision"] == 2
    # Retention (SPEC §12) may trim the rows a count would read; the stored counter carries on.
    with raw_connection(board) as conn:
        conn.execute("UPDATE tasks SET acceptance_revision = 40 WHERE id = ?", (task["id"],))
    assert (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body["revision"] == 40
    reply = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"items": ["Search works"]})
    assert reply.body["revision"] == 41
    assert (await task_rows(client, task["id"]))[-1]["changes"]["revision"] == 41
    item = reply.body["items"][0]["id"]
    pruned = await client.request("DELETE", f"{API}/tasks/{task['id']}/acceptance/{item}?reason=not%20needed%20now")
    assert pruned.status == 200 and pruned.body["revision"] == 42


def _version_two_file(path: Path) -> None:
    """A board file as the previous schema left it, with two acceptance changes in its log."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for number, script in store_module.migrations():
            if number <= 2:
                conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
        stamp = "2030-01-01T00:00:00.000Z"
        conn.execute(
            "INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', ?, ?)",
            (stamp, stamp),
        )
        conn.execute(
            "INSERT INTO tasks (id, project_id, number, identifier, title, created_at, updated_at)"
            " VALUES ('t1', 'demo', 1, 'DEMO-0001', 'Docs', ?, ?)",
            (stamp, stamp),
        )
        for event in ("acceptance_changed", "acceptance_pruned", "comment_added"):
            conn.execute(
                "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, created_at)"
                " VALUES ('t1', 'demo', 'human', 'ann', ?, ?)",
                (event, stamp),
            )
    finally:
        conn.close()


def test_the_migration_counts_each_tasks_past_acceptance_changes(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    _version_two_file(path)
    migrate(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema_version()
        assert conn.execute("SELECT acceptance_revision FROM tasks WHERE id = 't1'").fetchone()[0] == 2
    finally:
        conn.close()


# -- the store seam ------------------------------------------------------------------------------


async def test_a_locked_database_is_503_store_unavailable_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    board.store.busy_timeout_ms = 50  # before the writer thread opens its connection
    await make_task(client)
    before = await activity_count(board)
    with raw_connection(board) as conn:
        conn.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            reply = await client.post(f"{API}/tasks", {"project": "demo", "title": "Blocked by a lock"})
        finally:
            conn.execute("ROLLBACK")
    await refused(board, reply, 503, "STORE_UNAVAILABLE", before)
    assert reply.headers["Retry-After"] == "1"
    # The writer is usable again once the lock is gone.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "After the lock"})).status == 201


async def test_commit_listeners_hear_a_command_whose_caller_was_cancelled(tmp_path: Path) -> None:
    board = SqliteStore(tmp_path / "board.sqlite")
    board.open()
    heard: list[int] = []
    board.add_commit_listener(heard.append)
    started, release = threading.Event(), threading.Event()

    def slow_create(tx: Any) -> Any:
        started.set()
        release.wait(10)
        return projects.create_project(tx, id="demo")

    try:
        caller = asyncio.ensure_future(board.command(slow_create, ANN))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        caller.cancel()  # the request went away while its command was running
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await caller

        async def heard_it() -> bool:
            return bool(heard)

        await async_wait_until(heard_it, timeout=5, what="the commit listener")
        assert heard == [board.run_query(lambda conn: conn.execute("SELECT max(revision) FROM task_activities").fetchone()[0])]
    finally:
        board.close()


def test_two_processes_opening_one_fresh_file_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    openers = 4
    barrier = threading.Barrier(openers)
    failures: list[BaseException] = []

    def open_board() -> None:
        barrier.wait()
        try:
            migrate(path)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=open_board) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema_version()
        assert conn.execute("SELECT count(*) FROM board_meta WHERE key = 'board_id'").fetchone()[0] == 1
    finally:
        conn.close()



@pytest.mark.parametrize("changes", ["{not json", "[1, 2]", "42"])
async def test_an_activity_row_whose_changes_are_not_a_json_object_is_refused(
    board: RunningBoard, changes: str
) -> None:
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_CHANGES_NOT_JSON"):
            conn.execute(
                "INSERT INTO task_activities (actor_kind, actor_id, event, changes_json, revision, created_at)"
                " VALUES ('system', 'board', 'label_gc', ?, (SELECT revision + 1 FROM global_revision), 'now')",
                (changes,),
            )
    assert await activity_count(board) == 0
