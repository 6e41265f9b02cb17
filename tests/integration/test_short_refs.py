"""Short references: a unique prefix of a task, attachment, relation or session id stands for it;
a prefix several ids share is ``409 AMBIGUOUS_REF`` naming them, and writes nothing.

uuid4 ids rarely share a prefix, so the ids of these tests come from a fixed sequence: the board's
id source (``commands.common.new_id``, as each command module imports it) is pointed at it. The
board itself is real and in process; only the randomness is pinned.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest

from services.board.commands import attachments, relations, tasks
from services.board.queries import refs
from tests.support.board import BoardClient, RunningBoard, activity_count, make_project

TWINS = ("abcd1234-0000-4000-8000-000000000001", "abcd1234-0000-4000-8000-000000000002")
LONER = "f00d5678-0000-4000-8000-000000000003"


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    queue: list[str] = []

    def next_id() -> str:
        return queue.pop(0)

    for module in (tasks, attachments, relations):
        monkeypatch.setattr(module, "new_id", next_id)
    yield queue


async def create(client: BoardClient, title: str, **fields: object) -> dict:
    reply = await client.post("/api/v1/tasks", {"project": "demo", "title": title, **fields})
    assert reply.status == 201, reply.body
    return reply.body


async def test_a_unique_prefix_names_the_task_on_every_route(client: BoardClient, board: RunningBoard,
                                                           fixed_ids: list[str]) -> None:
    await make_project(client)
    fixed_ids.extend([*TWINS, LONER])
    await create(client, "one")
    await create(client, "two")
    loner = await create(client, "three")

    for prefix in ("f00d", "f00d5678", "F00D5678-0000", LONER):
        shown = await client.get(f"/api/v1/tasks/{prefix}")
        assert shown.status == 200 and shown.body["id"] == LONER, (prefix, shown.body)
    assert (await client.get("/api/v1/tasks/abcd1234-0000-4000-8000-000000000002")).body["title"] == "two"
    assert (await client.get("/api/v1/tasks/abcd1234-0000-4000-8000-00000000000")).status == 409

    worker = client.as_actor("claude", "worker-1")
    claimed = await worker.post("/api/v1/tasks/f00d/claim", {})
    assert claimed.status == 200 and claimed.body["id"] == LONER
    assert (await client.get("/api/v1/tasks/f00d/history")).body["task"]["id"] == LONER
    exported = await client.post("/api/v1/export", {"ref": "f00d5"})
    assert exported.status == 200 and exported.body["task"]["identifier"] == loner["identifier"]
    activities = await client.get("/api/v1/activities?task=f00d")
    assert activities.status == 200 and {row["task_id"] for row in activities.body["items"]} == {LONER}


async def test_an_ambiguous_prefix_is_409_listing_the_candidates_and_writes_nothing(
    client: BoardClient, board: RunningBoard, fixed_ids: list[str]
) -> None:
    await make_project(client)
    fixed_ids.extend(TWINS)
    await create(client, "one")
    await create(client, "two")
    before = await activity_count(board)
    worker = client.as_actor("claude", "worker-1")
    for reply in (
        await client.get("/api/v1/tasks/abcd"),
        await worker.post("/api/v1/tasks/abcd1234/claim", {}),
        await client.post("/api/v1/tasks/abcd/comments", {"body": "which one?"}),
        await client.patch("/api/v1/tasks/abcd1234-0000", {"title": "renamed"}),
    ):
        assert reply.status == 409 and reply.error == "AMBIGUOUS_REF", reply.body
        error = reply.body["error"]
        assert error["details"]["candidates"] == list(TWINS)
        assert error["details"]["more"] is False
        assert all(candidate in error["message"] for candidate in TWINS)
        assert error["hint"]
    assert await activity_count(board) == before
    titles = {(await client.get(f"/api/v1/tasks/{twin}")).body["title"] for twin in TWINS}
    assert titles == {"one", "two"}


async def test_prefixes_that_are_too_short_or_hold_wildcards_name_nothing(
    client: BoardClient, board: RunningBoard, fixed_ids: list[str]
) -> None:
    await make_project(client)
    fixed_ids.extend(TWINS)
    await create(client, "one")
    await create(client, "two")
    assert len("abc") < refs.MIN_PREFIX_CHARS
    # "%" and "_" are LIKE wildcards: taken literally, they are no prefix of any id.
    for ref in ("abc", "____", "%", "%25%25%25%25", "ab%25d", "abc_", "a" * 4 + "!"):
        reply = await client.get(f"/api/v1/tasks/{ref}")
        assert reply.status == 404 and reply.error == "NOT_FOUND", (ref, reply.body)


async def test_attachments_relations_and_sessions_take_prefixes_too(
    client: BoardClient, board: RunningBoard, fixed_ids: list[str]
) -> None:
    await make_project(client)
    fixed_ids.extend([TWINS[0], LONER])
    first = await create(client, "first")
    epic = await create(client, "epic", kind="epic")
    fixed_ids.extend(["aaaa0000-0000-4000-8000-000000000001", "aaaa0000-0000-4000-8000-000000000002"])
    uploaded = []
    for name in ("a.txt", "b.txt"):
        reply = await client.request("POST", f"/api/v1/tasks/{first['id']}/attachments?filename={quote(name)}",
                                     data=name.encode(), headers={"Content-Type": "text/plain"})
        assert reply.status == 201, reply.body
        uploaded.append(reply.body)
    assert (await client.get("/api/v1/attachments/aaaa0000")).error == "AMBIGUOUS_REF"
    got = await client.request("GET", "/api/v1/attachments/aaaa0000-0000-4000-8000-000000000002")
    assert got.status == 200 and got.body == b"b.txt"
    removed = await client.request("DELETE", "/api/v1/attachments/aaaa0000-0000-4000-8000-000000000001")
    assert removed.status == 200 and removed.body["id"] == uploaded[0]["id"]
    # With one left, the short prefix is unique again.
    assert (await client.request("GET", "/api/v1/attachments/aaaa")).body == b"b.txt"

    fixed_ids.extend(["bbbb0000-0000-4000-8000-000000000001", "bbbb0000-0000-4000-8000-000000000002"])
    for rel_type in ("parent", "related"):
        reply = await client.post(f"/api/v1/tasks/{epic['id']}/relations", {"type": rel_type, "target": first["id"]})
        assert reply.status == 201, reply.body
    fixed_ids.append("cccc0000-0000-4000-8000-000000000001")
    bystander = await create(client, "bystander")
    before = await activity_count(board)
    ambiguous = await client.request("DELETE", f"/api/v1/tasks/{first['id']}/relations/bbbb")
    assert ambiguous.status == 409 and ambiguous.error == "AMBIGUOUS_REF"
    assert ambiguous.body["error"]["details"]["candidates"] == [
        "bbbb0000-0000-4000-8000-000000000001", "bbbb0000-0000-4000-8000-000000000002",
    ]
    # A prefix is looked up among the relations of the task named, as a full id is.
    assert (await client.request("DELETE", f"/api/v1/tasks/{bystander['id']}/relations/bbbb")).error == "NOT_FOUND"
    assert await activity_count(board) == before
    gone = await client.request("DELETE", f"/api/v1/tasks/{first['id']}/relations/bbbb0000-0000-4000-8000-000000000002")
    assert gone.status == 200 and gone.body["id"] == "bbbb0000-0000-4000-8000-000000000002"
    last = await client.request("DELETE", f"/api/v1/tasks/{epic['id']}/relations/bbbb")
    assert last.status == 200 and last.body["id"] == "bbbb0000-0000-4000-8000-000000000001"
    removed_rows = (await client.get(f"/api/v1/tasks/{first['id']}/activities?limit=100")).body["items"]
    assert [row["changes"]["relationId"] for row in removed_rows if row["event"] == "relation_removed"] == [
        "bbbb0000-0000-4000-8000-000000000002", "bbbb0000-0000-4000-8000-000000000001",
    ]

    worker = client.as_actor("claude", "worker-1")
    assert (await worker.post(f"/api/v1/tasks/{first['id']}/claim", {})).status == 200
    sessions = []
    for seg in (1, 2):
        reply = await worker.post(f"/api/v1/tasks/{first['id']}/sessions", {"seg": seg, "phase": "coding"})
        assert reply.status in (200, 201), reply.body
        sessions.append(reply.body["id"])
    before = await activity_count(board)
    assert (await worker.post(f"/api/v1/tasks/{first['id']}/sessions/ses_/close", {"status": "completed"})).error == "AMBIGUOUS_REF"
    assert await activity_count(board) == before
    closed = await worker.post(f"/api/v1/tasks/{first['id']}/sessions/{sessions[1][:10]}/close", {"status": "completed"})
    assert closed.status == 200 and closed.body["id"] == sessions[1] and closed.body["status"] == "completed"
