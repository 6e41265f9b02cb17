"""Labels (list, GC) and the actor dictionary over a real board."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.timestamps import format_timestamp
from tests.support.board import (
    BoardClient,
    RunningBoard,
    activity_count,
    make_task,
    raw_connection,
)

pytestmark = pytest.mark.asyncio


async def label_table(board: RunningBoard) -> list[tuple]:
    return await board.store.query(
        lambda conn: [tuple(row) for row in conn.execute("SELECT * FROM labels ORDER BY project_id, name")]
    )


def days_ago(days: int) -> str:
    return format_timestamp(datetime.now(UTC) - timedelta(days=days))


def backdate(board: RunningBoard, name: str, days: int, *, project: str = "demo") -> None:
    with raw_connection(board) as conn:
        conn.execute(
            "UPDATE labels SET last_used_at = ?, created_at = ? WHERE project_id = ? AND name = ?",
            (days_ago(days), days_ago(days), project, name),
        )


async def labels(client: BoardClient, query: str = "") -> dict[str, dict]:
    reply = await client.get(f"/api/v1/labels{query}")
    assert reply.status == 200, reply.body
    return {f"{item['project_id']}/{item['name']}": item for item in reply.body["items"]}


# -- listing ------------------------------------------------------------------------------------


async def test_labels_are_normalised_and_counted_per_project(client: BoardClient) -> None:
    await make_task(client, labels=["Needs Review", "docs"])
    await make_task(client, labels=["docs"])
    await make_task(client, project="other", labels=["DOCS"])
    listed = await labels(client)
    assert {key: item["use_count"] for key, item in listed.items()} == {
        "demo/docs": 2, "demo/needs-review": 1, "other/docs": 1,
    }
    item = listed["demo/docs"]
    assert set(item) == {"project_id", "name", "use_count", "created_at", "last_used_at", "archived_at"}
    assert item["archived_at"] is None
    assert set(await labels(client, "?project=other")) == {"other/docs"}


async def test_dropping_a_label_lowers_its_count(client: BoardClient) -> None:
    task = await make_task(client, labels=["docs", "ui"])
    assert (await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": ["ui"]})).status == 200
    listed = await labels(client)
    assert listed["demo/docs"]["use_count"] == 0 and listed["demo/ui"]["use_count"] == 1


async def test_labels_page_by_cursor(client: BoardClient) -> None:
    await make_task(client, labels=["a", "b", "c", "d", "e"])
    seen: list[str] = []
    cursor = None
    while True:
        reply = await client.get("/api/v1/labels?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert reply.status == 200 and len(reply.body["items"]) <= 2
        seen += [item["name"] for item in reply.body["items"]]
        cursor = reply.body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("?project=nope", "NOT_FOUND"),
        ("?cursor=not-a-cursor", "VALIDATION_FAILED"),
        ("?limit=0", "VALIDATION_FAILED"),
        ("?archived=maybe", "VALIDATION_FAILED"),
        ("?colour=red", "VALIDATION_FAILED"),
    ],
)
async def test_bad_label_queries_are_refused(client: BoardClient, query: str, code: str) -> None:
    await make_task(client, labels=["docs"])
    assert (await client.get(f"/api/v1/labels{query}")).error == code


# -- GC -----------------------------------------------------------------------------------------


async def test_gc_with_nothing_to_archive_writes_no_row(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["docs", "ui"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": ["ui"]})  # docs unused, but only just
    before = await activity_count(board)
    table = await label_table(board)
    reply = await client.post("/api/v1/labels/gc", {})
    assert reply.status == 200, reply.body
    assert reply.body == {"archived": [], "kept": 2, "mismatched": 0, "ttl_days": 30, "dry_run": False, "revision": None}
    assert await activity_count(board) == before
    assert await label_table(board) == table


async def test_gc_archives_labels_unused_past_the_ttl_in_one_system_row(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["stale", "recent", "busy"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": ["busy"]})
    backdate(board, "stale", 40)
    backdate(board, "recent", 10)
    backdate(board, "busy", 400)  # old, but still on a task
    before = await activity_count(board)

    reply = await client.post("/api/v1/labels/gc", {"project": "demo"})
    assert reply.status == 200, reply.body
    assert reply.body["archived"] == ["demo/stale"] and reply.body["kept"] == 2 and reply.body["mismatched"] == 0
    assert await activity_count(board) == before + 1
    rows = (await client.get("/api/v1/activities?event=label_gc")).body["items"]
    assert len(rows) == 1
    row = rows[0]
    assert row["revision"] == reply.body["revision"]
    assert row["task_id"] is None and row["project_id"] == "demo"
    assert (row["actor_kind"], row["actor_id"]) == ("system", "board")
    assert row["changes"] == {
        "archived": ["demo/stale"], "kept": 2, "mismatched": 0, "reason": "requested by human:ann", "ttlDays": 30,
    }

    assert set(await labels(client)) == {"demo/recent", "demo/busy"}
    archived = await labels(client, "?archived=true")
    assert archived["demo/stale"]["archived_at"] == row["created_at"]


async def test_gc_board_wide_names_the_project_of_each_archived_label(client: BoardClient, board: RunningBoard) -> None:
    for project in ("demo", "other"):
        task = await make_task(client, project=project, labels=["old"])
        await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": []})
    reply = await client.post("/api/v1/labels/gc", {"ttl_days": 0})
    assert reply.body["archived"] == ["demo/old", "other/old"]
    row = (await client.get("/api/v1/activities?event=label_gc")).body["items"][0]
    assert row["project_id"] is None and row["changes"]["archived"] == ["demo/old", "other/old"]


async def test_gc_repairs_mismatched_counts(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client, labels=["docs"])
    await make_task(client, labels=["docs"])
    with raw_connection(board) as conn:
        conn.execute("UPDATE labels SET use_count = 7 WHERE name = 'docs'")
    before = await activity_count(board)
    reply = await client.post("/api/v1/labels/gc", {})
    assert reply.body["mismatched"] == 1 and reply.body["archived"] == []
    assert await activity_count(board) == before  # a repaired cache is not a fact
    assert (await labels(client))["demo/docs"]["use_count"] == 2


async def test_gc_counts_only_live_tasks(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["gone"])
    with raw_connection(board) as conn:  # archived behind the counters' back: the count now lies
        conn.execute("UPDATE tasks SET archived_at = ? WHERE id = ?", (days_ago(0), task["id"]))
    backdate(board, "gone", 31)
    reply = await client.post("/api/v1/labels/gc", {})
    assert reply.body["archived"] == ["demo/gone"] and reply.body["mismatched"] == 1
    row = (await client.get("/api/v1/activities?event=label_gc")).body["items"][0]
    assert row["changes"]["mismatched"] == 1
    assert (await labels(client, "?archived=true"))["demo/gone"]["use_count"] == 0


async def test_gc_dry_run_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["old"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": []})
    with raw_connection(board) as conn:
        conn.execute("UPDATE labels SET use_count = 3 WHERE name = 'old'")
    before = await activity_count(board)
    table = await label_table(board)
    reply = await client.post("/api/v1/labels/gc", {"ttl_days": 0, "dry_run": True})
    assert reply.body["archived"] == ["demo/old"] and reply.body["mismatched"] == 1 and reply.body["dry_run"] is True
    assert await activity_count(board) == before
    assert await label_table(board) == table


async def test_using_an_archived_label_brings_it_back(client: BoardClient) -> None:
    task = await make_task(client, labels=["old"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": []})
    assert (await client.post("/api/v1/labels/gc", {"ttl_days": 0})).body["archived"] == ["demo/old"]
    await make_task(client, labels=["Old"])
    listed = await labels(client)
    assert listed["demo/old"]["archived_at"] is None and listed["demo/old"]["use_count"] == 1


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"ttl_days": -1}, "VALIDATION_FAILED"),
        ({"ttl_days": "30"}, "VALIDATION_FAILED"),
        ({"project": "nope"}, "NOT_FOUND"),
        ({"older_than": 3}, "VALIDATION_FAILED"),
    ],
)
async def test_bad_gc_requests_write_nothing(client: BoardClient, board: RunningBoard, body: dict, code: str) -> None:
    task = await make_task(client, labels=["old"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": []})
    before = await activity_count(board)
    table = await label_table(board)
    reply = await client.post("/api/v1/labels/gc", body)
    assert reply.error == code, reply.body
    assert await activity_count(board) == before
    assert await label_table(board) == table


async def test_gc_needs_an_actor(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client, labels=["old"])
    await client.patch(f"/api/v1/tasks/{task['id']}", {"labels": []})
    before = await activity_count(board)
    reply = await client.post("/api/v1/labels/gc", {"ttl_days": 0}, actor=None)
    assert reply.error == "ACTOR_REQUIRED"
    assert await activity_count(board) == before


# -- actors -------------------------------------------------------------------------------------


async def test_actors_dictionary_counts_assignees_and_reporters(client: BoardClient) -> None:
    await make_task(client, assignee_kind="claude", assignee_id="worker-1", reporter_kind="human", reporter_id="ann")
    task = await make_task(client, assignee_kind="claude", assignee_id="worker-1")
    await client.patch(f"/api/v1/tasks/{task['id']}", {"assignee_kind": "codex", "assignee_id": "worker-2"})
    reply = await client.get("/api/v1/actors")
    assert reply.status == 200 and reply.body["next_cursor"] is None
    items = reply.body["items"]
    assert [(item["kind"], item["id"], item["use_count"]) for item in items] == [
        ("claude", "worker-1", 2), ("codex", "worker-2", 1), ("human", "ann", 1),
    ]
    assert set(items[0]) == {"kind", "id", "use_count", "first_seen_at", "last_seen_at"}
    assert items[0]["first_seen_at"] <= items[0]["last_seen_at"]
    only = (await client.get("/api/v1/actors?kind=codex")).body["items"]
    assert [item["id"] for item in only] == ["worker-2"]


async def test_actors_page_by_cursor(client: BoardClient) -> None:
    for i in range(5):
        await make_task(client, assignee_kind="claude", assignee_id=f"worker-{i}")
    first = (await client.get("/api/v1/actors?limit=3")).body
    rest = (await client.get(f"/api/v1/actors?limit=3&cursor={first['next_cursor']}")).body
    assert [item["id"] for item in first["items"] + rest["items"]] == [f"worker-{i}" for i in range(5)]
    assert rest["next_cursor"] is None


@pytest.mark.parametrize("query", ["?cursor=%%%", "?limit=1001", "?who=me"])
async def test_bad_actor_queries_are_refused(client: BoardClient, query: str) -> None:
    assert (await client.get(f"/api/v1/actors{query}")).error == "VALIDATION_FAILED"
