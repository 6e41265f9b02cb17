"""The task API over a real board on loopback: happy paths and every refusal writing nothing."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from tests.support.board import BoardClient, RunningBoard, activity_count, make_task

pytestmark = pytest.mark.asyncio


async def test_health_needs_no_token(client: BoardClient) -> None:
    reply = await client.get("/health", token=False)
    assert reply.status == 200 and reply.body == {"ok": True}


async def test_meta_names_board_and_head(client: BoardClient) -> None:
    reply = await client.get("/api/v1/meta")
    assert reply.status == 200
    assert reply.body["board_id"].startswith("brd_")
    assert reply.body["revision"] == 0 and reply.body["floor"] == 0


async def test_create_claim_move_cycle_writes_one_row_each(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["Needs Review", "docs"])
    assert task["identifier"] == "DEMO-0001"
    assert task["labels"] == ["needs-review", "docs"]
    worker = client.as_actor("claude", "worker-1")
    claimed = await worker.post(f"/api/v1/tasks/{task['identifier']}/claim")
    assert claimed.status == 200 and claimed.body["status"] == "in_progress"
    moved = await worker.post(f"/api/v1/tasks/{task['id']}/move", {"to": "blocked", "reason": "waiting on CI"})
    assert moved.body["status"] == "blocked" and moved.body["blocked_reason"] == "waiting on CI"
    rows = (await client.get(f"/api/v1/tasks/{task['id']}/activities")).body["items"]
    assert [row["event"] for row in rows] == ["task_created", "task_claimed", "task_moved"]
    assert rows[2]["changes"] == {"from": "in_progress", "to": "blocked", "deliveryRound": 1, "blockedReason": "waiting on CI"}
    assert [row["revision"] for row in rows] == sorted(row["revision"] for row in rows)


async def test_update_carries_before_and_after(client: BoardClient) -> None:
    task = await make_task(client)
    reply = await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "Better docs", "priority": "urgent"})
    assert reply.status == 200 and reply.body["version"] == 2
    row = (await client.get(f"/api/v1/tasks/{task['id']}/activities")).body["items"][-1]
    assert row["event"] == "task_updated"
    assert row["changes"]["before"] == {"title": "Write the docs", "priority": "medium"}
    assert row["changes"]["after"] == {"title": "Better docs", "priority": "urgent"}


async def test_noop_update_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "Write the docs"})
    assert reply.status == 200 and reply.body["version"] == 1
    assert await activity_count(board) == before


async def test_idempotent_create_returns_the_live_task(client: BoardClient, board: RunningBoard) -> None:
    first = await make_task(client, idem="nightly-42")
    before = await activity_count(board)
    again = await client.post("/api/v1/tasks", {"project": "demo", "title": "Other title", "idem": "nightly-42"})
    assert again.status == 200 and again.body["id"] == first["id"]
    assert await activity_count(board) == before


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "VALIDATION_FAILED"),
        (b"[1, 2]", "VALIDATION_FAILED"),
        (b'{"project": "demo", "title": "x", "colour": "red"}', "VALIDATION_FAILED"),
        (b'{"project": "demo"}', "VALIDATION_FAILED"),
        (b'{"project": "demo", "title": "x", "priority": "whenever"}', "VALIDATION_FAILED"),
        (b'{"project": "nope", "title": "x"}', "NOT_FOUND"),
    ],
)
async def test_bad_create_bodies_write_nothing(client: BoardClient, board: RunningBoard, body: bytes, code: str) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await client.request("POST", "/api/v1/tasks", data=body, headers={"Content-Type": "application/json"})
    assert reply.error == code, reply.body
    assert reply.body["error"]["message"]
    assert await activity_count(board) == before


async def test_unknown_field_is_named(client: BoardClient) -> None:
    await make_task(client)
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "x", "colour": "red"})
    assert reply.status == 400 and reply.body["error"]["details"]["unknown"] == ["colour"]


async def test_unknown_query_parameter_is_refused(client: BoardClient) -> None:
    reply = await client.get("/api/v1/tasks?colour=red")
    assert reply.status == 400 and reply.body["error"]["details"]["unknown"] == ["colour"]


async def test_oversize_body_is_413_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await activity_count(board)
    huge = b'{"project": "demo", "title": "' + b"x" * (1 << 20) + b'"}'
    reply = await client.request("POST", "/api/v1/tasks", data=huge, headers={"Content-Type": "application/json"})
    assert reply.status == 413 and reply.error == "PAYLOAD_TOO_LARGE"
    assert await activity_count(board) == before


async def test_missing_actor_is_403(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "x"}, actor=None)
    assert reply.status == 403 and reply.error == "ACTOR_REQUIRED"
    assert await activity_count(board) == before


@pytest.mark.parametrize("token", [None, "tl_" + "0" * 64, "nonsense"])
async def test_wrong_or_missing_token_is_401(client: BoardClient, board: RunningBoard, token: str | None) -> None:
    reply = await client.post("/api/v1/projects", {"id": "demo"}, token=token)
    assert reply.status == 401 and reply.error == "UNAUTHORIZED"
    assert board.token not in str(reply.body)
    assert await activity_count(board) == 0


async def test_foreign_host_is_refused(client: BoardClient, board: RunningBoard) -> None:
    reply = await client.post("/api/v1/projects", {"id": "demo"}, headers={"Host": "evil.example:7431"})
    assert reply.status == 403 and reply.error == "FORBIDDEN_HOST"
    assert await activity_count(board) == 0


async def test_unknown_ref_is_404(client: BoardClient) -> None:
    reply = await client.post("/api/v1/tasks/DEMO-9999/move", {"to": "todo"})
    assert reply.status == 404 and reply.error == "NOT_FOUND"


async def test_illegal_transition_is_409_and_names_allowed(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "done"})
    assert reply.status == 409 and reply.error == "INVALID_TRANSITION"
    assert "in_progress" in reply.body["error"]["details"]["allowed"]
    assert await activity_count(board) == before


async def test_stale_if_version_is_409(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "v2"})
    before = await activity_count(board)
    reply = await client.patch(f"/api/v1/tasks/{task['id']}", {"title": "v3", "if_version": 1})
    assert reply.status == 409 and reply.error == "VERSION_CONFLICT"
    assert (await client.get(f"/api/v1/tasks/{task['id']}")).body["title"] == "v2"
    assert await activity_count(board) == before


async def test_delivery_gate_without_report(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    await client.post(f"/api/v1/tasks/{task['id']}/claim")
    before = await activity_count(board)
    reply = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "in_review"})
    assert reply.status == 422 and reply.error == "REPORT_REQUIRED"
    assert await activity_count(board) == before


async def test_short_reopen_reason_is_refused(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "canceled"})
    before = await activity_count(board)
    reply = await client.post(f"/api/v1/tasks/{task['id']}/reopen", {"reason": "nah"})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED"
    assert await activity_count(board) == before
    ok = await client.post(f"/api/v1/tasks/{task['id']}/reopen", {"reason": "needs another pass"})
    assert ok.status == 200 and ok.body["status"] == "todo" and ok.body["delivery_round"] == 2


async def test_two_concurrent_claimers_exactly_one_wins(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    claimers = [client.as_actor("claude", f"worker-{n}") for n in range(8)]
    replies = await asyncio.gather(*(c.post(f"/api/v1/tasks/{task['id']}/claim") for c in claimers))
    winners = [r for r in replies if r.status == 200]
    losers = [r for r in replies if r.status != 200]
    assert len(winners) == 1
    assert {r.error for r in losers} <= {"EXECUTION_ACTIVE", "CLAIM_LOST"}
    rows = (await client.get(f"/api/v1/tasks/{task['id']}/activities?event=task_claimed")).body
    assert rows is not None
    claims = (await client.get(f"/api/v1/activities?task={task['id']}&event=task_claimed")).body["items"]
    assert len(claims) == 1


async def test_same_actor_reclaim_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    await client.post(f"/api/v1/tasks/{task['id']}/claim")
    before = await activity_count(board)
    assert (await client.post(f"/api/v1/tasks/{task['id']}/claim")).status == 200
    assert await activity_count(board) == before


async def test_claiming_someone_elses_task_needs_steal_and_reason(client: BoardClient) -> None:
    task = await make_task(client, assignee_kind="claude", assignee_id="worker-1")
    thief = client.as_actor("codex", "worker-2")
    assert (await thief.post(f"/api/v1/tasks/{task['id']}/claim")).error == "NOT_ASSIGNEE"
    assert (await thief.post(f"/api/v1/tasks/{task['id']}/claim", {"steal": True, "reason": "short"})).error == "VALIDATION_FAILED"
    stolen = await thief.post(f"/api/v1/tasks/{task['id']}/claim", {"steal": True, "reason": "worker-1 is offline"})
    assert stolen.status == 200
    row = (await client.get(f"/api/v1/activities?task={task['id']}&event=task_claimed")).body["items"][0]
    assert row["changes"]["stoleFrom"] == "worker-1"


async def test_raw_update_or_delete_of_activities_is_refused(board: RunningBoard, client: BoardClient) -> None:
    await make_task(client)
    conn = sqlite3.connect(board.data_dir / "board.sqlite")
    try:
        with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
            conn.execute("UPDATE task_activities SET event = 'x'")
        with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
            conn.execute("DELETE FROM task_activities")
    finally:
        conn.close()
    assert await activity_count(board) == 2


async def test_activity_pages_use_an_opaque_cursor(client: BoardClient) -> None:
    task = await make_task(client)
    for n in range(5):
        await client.patch(f"/api/v1/tasks/{task['id']}", {"title": f"title {n}"})
    seen: list[int] = []
    cursor = None
    while True:
        path = "/api/v1/activities?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = (await client.get(path)).body
        seen += [row["id"] for row in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen) and len(seen) == 7
    bad = await client.get("/api/v1/activities?cursor=!!!")
    assert bad.status == 400 and bad.error == "VALIDATION_FAILED"


# -- filters naming a project (docs/architecture.md, "List filters") ----------------------------------

#: Every read that takes ``project=``: an unknown one is named, never answered with an empty list.
PROJECT_FILTERED = [
    "/api/v1/tasks?project=nosuch",
    "/api/v1/tasks?ready=true&project=nosuch",
    "/api/v1/tasks?ready=true&project=nosuch&for=worker-1",
    "/api/v1/tasks?project=nosuch&status=todo&blocked=false",
    "/api/v1/activities?project=nosuch",
    "/api/v1/activities?project=nosuch&order=desc",
    "/api/v1/labels?project=nosuch",
    "/api/v1/breaches?project=nosuch",
    "/api/v1/events?project=nosuch",
]


@pytest.mark.parametrize("path", PROJECT_FILTERED)
async def test_an_unknown_project_in_a_filter_is_404(client: BoardClient, board: RunningBoard, path: str) -> None:
    await make_task(client)  # the board has a project and rows: only the filter's project is missing
    before = await activity_count(board)
    reply = await client.get(path)
    assert reply.status == 404, reply.body
    assert reply.body["error"]["code"] == "NOT_FOUND"
    assert reply.body["error"]["details"] == {"project": "nosuch"}
    assert await activity_count(board) == before


@pytest.mark.parametrize("path", [
    "/api/v1/tasks?project=empty",
    "/api/v1/tasks?ready=true&project=empty",
    "/api/v1/tasks?ready=true&project=empty&for=worker-1",
    "/api/v1/activities?project=empty&event=task_created",  # its one row is project_created
    "/api/v1/labels?project=empty",
    "/api/v1/breaches?project=empty",
])
async def test_a_known_project_with_nothing_in_it_is_an_empty_list(client: BoardClient, path: str) -> None:
    await make_task(client)
    assert (await client.post("/api/v1/projects", {"id": "empty"})).status == 201
    reply = await client.get(path)
    assert reply.status == 200, reply.body
    assert reply.body["items"] == []


async def test_a_value_filter_matching_nothing_is_an_empty_list(client: BoardClient) -> None:
    await make_task(client)
    for path in ("/api/v1/tasks?label=nosuch", "/api/v1/tasks?assignee=nosuch", "/api/v1/tasks?kind=epic",
                 "/api/v1/tasks?project=demo&q=nosuch", "/api/v1/activities?actor=nosuch"):
        reply = await client.get(path)
        assert reply.status == 200 and reply.body["items"] == [], (path, reply.body)
