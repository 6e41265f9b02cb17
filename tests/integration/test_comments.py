"""Comments and ask over a real board: the rows each writes, the awaiting round trip, every refusal."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.support.board import (
    API,
    BoardClient,
    RunningBoard,
    activity_count,
    make_task,
    raw_connection,
    task_rows,
)

pytestmark = pytest.mark.asyncio


async def claimed_task(client: BoardClient, worker: BoardClient) -> dict[str, Any]:
    task = await make_task(client)
    reply = await worker.post(f"{API}/tasks/{task['id']}/claim")
    assert reply.status == 200 and reply.body["status"] == "in_progress", reply.body
    return reply.body


@pytest.fixture
def worker(client: BoardClient) -> BoardClient:
    return client.as_actor("claude", "worker-1")


# -- comment -------------------------------------------------------------------------------------


async def test_a_note_is_one_comment_added_row(client: BoardClient) -> None:
    task = await make_task(client)
    reply = await client.post(f"{API}/tasks/{task['identifier']}/comments", {"body": "Looks good so far."})
    assert reply.status == 201, reply.body
    comment = reply.body
    assert comment["kind"] == "note" and comment["round"] == 1 and comment["task_id"] == task["id"]
    assert (comment["actor_kind"], comment["actor_id"]) == ("human", "ann")
    assert comment["body"] == "Looks good so far."
    rows = await task_rows(client, task["id"])
    assert [row["event"] for row in rows] == ["task_created", "comment_added"]
    assert rows[-1]["changes"] == {"commentId": comment["id"], "kind": "note"}
    assert (rows[-1]["actor_kind"], rows[-1]["actor_id"]) == ("human", "ann")
    # A comment on a task that is not awaiting changes nothing else.
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "todo"


async def test_every_declared_kind_is_accepted_and_listed_oldest_first(client: BoardClient) -> None:
    task = await make_task(client)
    kinds = ["note", "question", "discuss", "decision", "confirm", "change", "defect"]
    for n, kind in enumerate(kinds):
        reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"comment {n}", "kind": kind})
        assert reply.status == 201 and reply.body["kind"] == kind
    listed = await client.get(f"{API}/tasks/{task['identifier']}/comments")
    assert listed.status == 200 and listed.body["next_cursor"] is None
    assert [(c["kind"], c["body"]) for c in listed.body["items"]] == [(k, f"comment {n}") for n, k in enumerate(kinds)]
    rows = await task_rows(client, task["id"])
    assert [row["changes"]["kind"] for row in rows if row["event"] == "comment_added"] == kinds


async def test_comments_page_by_keyset_cursor(client: BoardClient) -> None:
    task = await make_task(client)
    for n in range(5):
        await client.post(f"{API}/tasks/{task['id']}/comments", {"body": f"c{n}"})
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        suffix = f"&cursor={cursor}" if cursor else ""
        page = await client.get(f"{API}/tasks/{task['id']}/comments?limit=2{suffix}")
        assert page.status == 200, page.body
        seen += [c["body"] for c in page.body["items"]]
        pages += 1
        cursor = page.body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["c0", "c1", "c2", "c3", "c4"] and pages == 3


async def test_comment_list_refusals(client: BoardClient) -> None:
    task = await make_task(client)
    assert (await client.get(f"{API}/tasks/DEMO-9999/comments")).error == "NOT_FOUND"
    bad_cursor = await client.get(f"{API}/tasks/{task['id']}/comments?cursor=%21%21")
    assert bad_cursor.status == 400 and bad_cursor.error == "VALIDATION_FAILED"
    assert (await client.get(f"{API}/tasks/{task['id']}/comments?limit=0")).error == "VALIDATION_FAILED"


@pytest.mark.parametrize(
    ("body", "code", "detail"),
    [
        ({"body": ""}, "VALIDATION_FAILED", {"field": "body"}),
        ({"body": "  \n\t "}, "VALIDATION_FAILED", {"field": "body"}),
        ({}, "VALIDATION_FAILED", {"field": "body"}),
        ({"body": "hello", "kind": "rant"}, "VALIDATION_FAILED", {"field": "kind"}),
        ({"body": "hello", "colour": "red"}, "VALIDATION_FAILED", {"unknown": ["colour"]}),
        ({"body": 42}, "VALIDATION_FAILED", {"field": "body"}),
    ],
)
async def test_bad_comments_write_nothing(
    client: BoardClient, board: RunningBoard, body: dict[str, Any], code: str, detail: dict[str, Any]
) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", body)
    assert reply.status == 400 and reply.error == code, reply.body
    assert detail.items() <= reply.body["error"]["details"].items()
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}/comments")).body["items"] == []


async def test_comment_on_unknown_task_is_404_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/DEMO-0404/comments", {"body": "anyone there?"})
    assert reply.status == 404 and reply.error == "NOT_FOUND"
    assert await activity_count(board) == before


async def test_comment_without_actor_is_403(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "who am I"}, actor=None)
    assert reply.status == 403 and reply.error == "ACTOR_REQUIRED"
    assert await activity_count(board) == before


async def test_comment_on_archived_task_is_refused(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})).status == 200
    # A finished but visible task still takes comments; an archived one does not.
    assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "post-mortem"})).status == 201
    assert (await client.post(f"{API}/tasks/{task['id']}/archive")).status == 200
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "too late"})
    assert reply.status == 409 and reply.error == "TERMINAL_STATE"
    assert await activity_count(board) == before


# -- ask and the human answer --------------------------------------------------------------------


async def test_ask_writes_a_question_and_parks_the_task(client: BoardClient, worker: BoardClient) -> None:
    task = await claimed_task(client, worker)
    question = "\n  Which database should the export use?  \nThe spec names two.\n"
    reply = await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": question})
    assert reply.status == 200, reply.body
    parked = reply.body
    assert parked["status"] == "awaiting"
    assert parked["awaiting_reason"] == "Which database should the export use?"
    assert parked["claimed_by"] == "worker-1" and parked["version"] == task["version"] + 1

    rows = (await task_rows(client, task["id"]))[-2:]
    assert [row["event"] for row in rows] == ["comment_added", "task_moved"]
    comment_id = rows[0]["changes"]["commentId"]
    assert rows[0]["changes"] == {"commentId": comment_id, "kind": "question"}
    assert rows[1]["changes"] == {
        "from": "in_progress",
        "to": "awaiting",
        "deliveryRound": 1,
        "awaitingReason": "Which database should the export use?",
        "questionCommentId": comment_id,
    }
    assert {(row["actor_kind"], row["actor_id"]) for row in rows} == {("claude", "worker-1")}
    assert rows[0]["created_at"] == rows[1]["created_at"]
    comments = (await client.get(f"{API}/tasks/{task['id']}/comments")).body["items"]
    assert [(c["id"], c["kind"], c["body"]) for c in comments] == [(comment_id, "question", question)]


async def test_a_long_question_is_cut_for_the_awaiting_reason(client: BoardClient, worker: BoardClient) -> None:
    task = await claimed_task(client, worker)
    line = "why " * 100
    reply = await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": line + "\nsecond line"})
    reason = reply.body["awaiting_reason"]
    assert len(reason) <= 200 and reason.endswith("…") and reason.startswith("why why")
    comments = (await client.get(f"{API}/tasks/{task['id']}/comments")).body["items"]
    assert comments[0]["body"] == line + "\nsecond line"


async def test_a_human_answer_resumes_the_task_in_the_same_transaction(
    client: BoardClient, board: RunningBoard, worker: BoardClient
) -> None:
    task = await claimed_task(client, worker)
    await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "Which port?"})
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Use 7431.", "kind": "decision"})
    assert reply.status == 201, reply.body
    comment = reply.body

    assert await activity_count(board) == before + 2
    board_rows = (await client.get(f"{API}/activities?order=desc&limit=2")).body["items"][::-1]
    assert [row["event"] for row in board_rows] == ["comment_added", "task_resumed"]
    added, resumed = board_rows
    assert added["changes"] == {"commentId": comment["id"], "kind": "decision"}
    assert resumed["changes"] == {"commentId": comment["id"], "from": "awaiting", "to": "todo"}
    # One commit: adjacent rows, one commit timestamp, increasing revisions.
    assert resumed["id"] == added["id"] + 1
    assert added["created_at"] == resumed["created_at"] == comment["created_at"]
    assert resumed["revision"] > added["revision"]
    assert {(row["actor_kind"], row["actor_id"]) for row in board_rows} == {("human", "ann")}

    resumed_task = (await client.get(f"{API}/tasks/{task['id']}")).body
    assert resumed_task["status"] == "todo"
    assert resumed_task["awaiting_reason"] is None and resumed_task["claimed_by"] is None
    # The status write sits between the two rows: one unit of work, nothing interleaved.
    assert added["revision"] < resumed_task["revision"] < resumed["revision"]


async def test_a_non_human_comment_does_not_resume(client: BoardClient, board: RunningBoard, worker: BoardClient) -> None:
    task = await claimed_task(client, worker)
    await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "Which port?"})
    director = client.as_actor("codex", "director")
    before = await activity_count(board)
    reply = await director.post(f"{API}/tasks/{task['id']}/comments", {"body": "A human will answer."})
    assert reply.status == 201
    assert await activity_count(board) == before + 1
    assert (await task_rows(client, task["id"]))[-1]["event"] == "comment_added"
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "awaiting"


async def test_ask_by_someone_who_does_not_hold_the_claim_is_claim_lost(
    client: BoardClient, board: RunningBoard, worker: BoardClient
) -> None:
    task = await claimed_task(client, worker)
    before = await activity_count(board)
    for outsider in (client.as_actor("claude", "worker-2"), client.as_actor("codex", "worker-1")):
        reply = await outsider.post(f"{API}/tasks/{task['id']}/ask", {"body": "Can I help?"})
        assert reply.status == 409 and reply.error == "CLAIM_LOST", reply.body
        assert reply.body["error"]["details"]["claimed_by"] == "worker-1"
        assert "comment" in reply.body["error"]["hint"]
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_progress"


@pytest.mark.parametrize("status", ["todo", "awaiting", "canceled"])
async def test_ask_outside_in_progress_is_refused_with_a_hint(
    client: BoardClient, board: RunningBoard, worker: BoardClient, status: str
) -> None:
    task = await make_task(client)
    if status == "awaiting":
        await worker.post(f"{API}/tasks/{task['id']}/claim")
        assert (await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "first"})).status == 200
    elif status == "canceled":
        await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "Which port?"})
    expected = "TERMINAL_STATE" if status == "canceled" else "INVALID_TRANSITION"
    assert reply.status == 409 and reply.error == expected, reply.body
    assert reply.body["error"]["hint"]
    assert await activity_count(board) == before


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        ({"body": "   "}, "VALIDATION_FAILED", 400),
        ({}, "VALIDATION_FAILED", 400),
        ({"body": "ok?", "kind": "question"}, "VALIDATION_FAILED", 400),
        ({"body": "ok?", "if_version": 1}, "VERSION_CONFLICT", 409),
    ],
)
async def test_bad_asks_write_nothing(
    client: BoardClient, board: RunningBoard, worker: BoardClient, body: dict[str, Any], code: str, status: int
) -> None:
    task = await claimed_task(client, worker)
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/ask", body)
    assert reply.status == status and reply.error == code, reply.body
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_progress"


async def test_ask_on_unknown_task_is_404(client: BoardClient, board: RunningBoard, worker: BoardClient) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/DEMO-0404/ask", {"body": "hello?"})
    assert reply.status == 404 and reply.error == "NOT_FOUND"
    assert await activity_count(board) == before


# -- the schema keeps comments append-only ---------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    ["UPDATE comments SET body = 'rewritten' WHERE id = ?", "DELETE FROM comments WHERE id = ?"],
)
async def test_comments_are_append_only_in_the_schema(client: BoardClient, board: RunningBoard, statement: str) -> None:
    task = await make_task(client)
    comment = (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "on the record"})).body
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="COMMENT_APPEND_ONLY"):
            conn.execute(statement, (comment["id"],))
    kept = (await client.get(f"{API}/tasks/{task['id']}/comments")).body["items"]
    assert [c["body"] for c in kept] == ["on the record"]
