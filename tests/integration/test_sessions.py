"""Agent sessions over a real board: deterministic ids, resumes, phase changes, closing once."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.board import BoardClient, RunningBoard, last_row, make_task

pytestmark = pytest.mark.asyncio


async def counts(board: RunningBoard) -> tuple[int, int]:
    """(activity rows, open sessions)."""
    return await board.store.query(
        lambda conn: (
            conn.execute("SELECT count(*) FROM task_activities").fetchone()[0],
            conn.execute("SELECT count(*) FROM agent_sessions WHERE status = 'open'").fetchone()[0],
        )
    )


def expected_id(task: dict, kind: str, owner: str, seg: int) -> str:
    return "ses_" + hashlib.sha256(f"{task['id']}\0{kind}\0{owner}\0{seg}".encode()).hexdigest()[:24]


async def test_register_opens_a_session_with_a_derived_id(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    before = await counts(board)
    reply = await worker.post(f"/api/v1/tasks/{task['identifier']}/sessions", {"seg": 1, "phase": "planning"})
    assert reply.status == 201, reply.body
    session = reply.body
    assert session["id"] == expected_id(task, "claude", "worker-1", 1)
    assert (session["task_id"], session["owner_kind"], session["owner_id"]) == (task["id"], "claude", "worker-1")
    assert (session["seg"], session["phase"], session["status"], session["closed_at"]) == (1, "planning", "open", None)
    assert await counts(board) == (before[0] + 1, before[1] + 1)
    row = await last_row(client, task["id"])
    assert row["event"] == "session_registered" and row["task_id"] == task["id"]
    assert (row["actor_kind"], row["actor_id"]) == ("claude", "worker-1")
    assert row["changes"] == {"sessionId": session["id"], "seg": 1, "ownerKind": "claude", "phase": "planning"}


async def test_resume_in_the_same_phase_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    first = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    before = await counts(board)
    again = await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})
    assert again.status == 200 and again.body == first
    assert await counts(board) == before


async def test_resume_in_a_new_phase_updates_it(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    first = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    before = await counts(board)
    again = await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "testing"})
    assert again.status == 200 and again.body["id"] == first["id"] and again.body["phase"] == "testing"
    assert await counts(board) == (before[0] + 1, before[1])
    row = await last_row(client, task["id"])
    assert row["changes"] == {"sessionId": first["id"], "seg": 1, "ownerKind": "claude", "phase": "testing"}


async def test_a_new_segment_is_a_new_session(client: BoardClient) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    one = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    two = await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 2, "phase": "coding"})
    assert two.status == 201 and two.body["id"] != one["id"]


async def test_owner_may_be_named_by_someone_else(client: BoardClient) -> None:
    task = await make_task(client)
    reply = await client.post(
        f"/api/v1/tasks/{task['id']}/sessions", {"seg": 0, "phase": "queued", "owner_kind": "codex", "owner_id": "w-9"}
    )
    assert reply.status == 201 and reply.body["id"] == expected_id(task, "codex", "w-9", 0)
    row = await last_row(client, task["id"])
    assert (row["actor_kind"], row["actor_id"]) == ("human", "ann") and row["changes"]["ownerKind"] == "codex"


async def test_close_writes_session_closed_once(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    session = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    closed = await worker.post(f"/api/v1/tasks/{task['id']}/sessions/{session['id']}/close", {"status": "completed"})
    assert closed.status == 200 and closed.body["status"] == "completed" and closed.body["closed_at"] is not None
    row = await last_row(client, task["id"])
    assert row["event"] == "session_closed"
    assert row["changes"] == {"sessionId": session["id"], "status": "completed"}

    before = await counts(board)
    twice = await worker.post(f"/api/v1/tasks/{task['id']}/sessions/{session['id']}/close", {"status": "failed"})
    assert (twice.status, twice.error) == (409, "CONFLICT")
    assert twice.body["error"]["details"] == {"session_id": session["id"], "status": "completed"}
    assert await counts(board) == before
    listed = (await client.get(f"/api/v1/tasks/{task['id']}/sessions")).body["items"]
    assert [item["status"] for item in listed] == ["completed"]


async def test_a_closed_session_is_not_resumed(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    session = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    await worker.post(f"/api/v1/tasks/{task['id']}/sessions/{session['id']}/close", {"status": "abandoned"})
    before = await counts(board)
    reply = await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})
    assert (reply.status, reply.error) == (409, "CONFLICT") and reply.body["error"]["hint"]
    assert await counts(board) == before


async def test_list_filters_by_status(client: BoardClient) -> None:
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    one = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    two = (await worker.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 2, "phase": "coding"})).body
    await worker.post(f"/api/v1/tasks/{task['id']}/sessions/{one['id']}/close", {"status": "failed"})
    everything = (await client.get(f"/api/v1/tasks/{task['identifier']}/sessions")).body
    assert [item["id"] for item in everything["items"]] == [one["id"], two["id"]] and everything["next_cursor"] is None
    still_open = (await client.get(f"/api/v1/tasks/{task['id']}/sessions?status=open")).body["items"]
    assert [item["id"] for item in still_open] == [two["id"]]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"seg": -1, "phase": "coding"}, "VALIDATION_FAILED"),
        ({"seg": "1", "phase": "coding"}, "VALIDATION_FAILED"),
        ({"seg": 1, "phase": "   "}, "VALIDATION_FAILED"),
        ({"seg": 1, "phase": "x" * 65}, "VALIDATION_FAILED"),
        ({"seg": 1}, "VALIDATION_FAILED"),
        ({"seg": 1, "phase": "coding", "owner_kind": "claude"}, "VALIDATION_FAILED"),
        ({"seg": 1, "phase": "coding", "owner_kind": "", "owner_id": ""}, "VALIDATION_FAILED"),
        ({"seg": 1, "phase": "coding", "pid": 42}, "VALIDATION_FAILED"),
    ],
)
async def test_bad_registrations_write_nothing(client: BoardClient, board: RunningBoard, body: dict, code: str) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await client.post(f"/api/v1/tasks/{task['id']}/sessions", body)
    assert reply.error == code, reply.body
    assert await counts(board) == before


async def test_register_on_an_unknown_task_is_404(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await counts(board)
    reply = await client.post("/api/v1/tasks/DEMO-0404/sessions", {"seg": 1, "phase": "coding"})
    assert (reply.status, reply.error) == (404, "NOT_FOUND")
    assert await counts(board) == before


async def test_bad_closes_write_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    other = await make_task(client, title="Another")
    session = (await client.post(f"/api/v1/tasks/{task['id']}/sessions", {"seg": 1, "phase": "coding"})).body
    before = await counts(board)
    cases = [
        (f"/api/v1/tasks/{task['id']}/sessions/ses_unknown/close", {"status": "completed"}, "NOT_FOUND"),
        (f"/api/v1/tasks/{other['id']}/sessions/{session['id']}/close", {"status": "completed"}, "NOT_FOUND"),
        (f"/api/v1/tasks/{task['id']}/sessions/{session['id']}/close", {"status": "open"}, "VALIDATION_FAILED"),
        (f"/api/v1/tasks/{task['id']}/sessions/{session['id']}/close", {}, "VALIDATION_FAILED"),
    ]
    for path, body, code in cases:
        reply = await client.post(path, body)
        assert reply.error == code, (path, body, reply.body)
    assert await counts(board) == before
