"""Relations over a real board: rows hang off the target, every refusal writes nothing, and the
schema triggers refuse the same bad parents when a raw writer walks past the code."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from services.board.sqlite_store import translate_integrity_error
from tests.support.board import (
    BoardClient,
    RunningBoard,
    make_task,
    raw_connection,
    row_counts,
    task_rows,
)

pytestmark = pytest.mark.asyncio


async def counts(board: RunningBoard) -> tuple[int, ...]:
    """(activity rows, relation rows): a refusal must leave both as they were."""
    return await row_counts(board, "task_activities", "relations")


async def relate(client: BoardClient, source: dict, type_: str, target: dict) -> dict:
    reply = await client.post(f"/api/v1/tasks/{source['identifier']}/relations", {"type": type_, "target": target["identifier"]})
    assert reply.status == 201, reply.body
    return reply.body


async def epic_chain(client: BoardClient, length: int, *, prefix: str = "E") -> list[dict]:
    """``length`` epics, each the parent of the next: a chain ``length`` tasks deep."""
    chain = [await make_task(client, title=f"{prefix}{i}", kind="epic") for i in range(length)]
    for parent, child in zip(chain, chain[1:]):
        await relate(client, parent, "parent", child)
    return chain


# -- happy paths --------------------------------------------------------------------------------


async def test_blocks_row_hangs_off_the_target(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client, title="Design")
    b = await make_task(client, title="Build")
    before = await counts(board)
    reply = await client.post(f"/api/v1/tasks/{a['identifier']}/relations", {"type": "blocks", "target": b["identifier"]})
    assert reply.status == 201, reply.body
    relation = reply.body
    assert relation["type"] == "blocks" and relation["source_id"] == a["id"] and relation["target_id"] == b["id"]
    assert await counts(board) == (before[0] + 1, before[1] + 1)

    row = (await task_rows(client, b["id"]))[-1]
    assert row["event"] == "relation_added"
    assert row["task_id"] == b["id"] and row["project_id"] == "demo"
    assert (row["actor_kind"], row["actor_id"]) == ("human", "ann")
    assert row["changes"] == {"relationId": relation["id"], "type": "blocks", "source": a["id"], "target": b["id"]}
    assert [r["event"] for r in await task_rows(client, a["id"])] == ["task_created"]


async def test_list_shows_both_directions_with_the_other_task(client: BoardClient) -> None:
    a = await make_task(client, title="Design")
    b = await make_task(client, title="Build")
    c = await make_task(client, title="Ship")
    first = await relate(client, a, "blocks", b)
    second = await relate(client, b, "related", c)

    mine = (await client.get(f"/api/v1/tasks/{b['identifier']}/relations")).body
    assert mine["next_cursor"] is None
    assert [(item["id"], item["direction"], item["other"]) for item in mine["items"]] == [
        (first["id"], "incoming", {"id": a["id"], "identifier": a["identifier"], "title": "Design", "status": "todo"}),
        (second["id"], "outgoing", {"id": c["id"], "identifier": c["identifier"], "title": "Ship", "status": "todo"}),
    ]
    only = (await client.get(f"/api/v1/tasks/{b['id']}/relations?type=related")).body["items"]
    assert [item["id"] for item in only] == [second["id"]]


async def test_parent_runs_from_epic_to_child(client: BoardClient) -> None:
    epic = await make_task(client, title="Launch", kind="epic")
    child = await make_task(client, title="Landing page")
    relation = await relate(client, epic, "parent", child)
    row = (await task_rows(client, child["id"]))[-1]
    assert row["changes"] == {"relationId": relation["id"], "type": "parent", "source": epic["id"], "target": child["id"]}
    items = (await client.get(f"/api/v1/tasks/{epic['identifier']}/relations")).body["items"]
    assert [(item["direction"], item["other"]["identifier"]) for item in items] == [("outgoing", child["identifier"])]


async def test_remove_from_either_end_writes_relation_removed_on_the_target(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client, title="Review me")
    b = await make_task(client, title="The review")
    relation = await relate(client, b, "review_of", a)
    before = await counts(board)
    reply = await client.request("DELETE", f"/api/v1/tasks/{a['identifier']}/relations/{relation['id']}")
    assert reply.status == 200 and reply.body == relation
    assert await counts(board) == (before[0] + 1, before[1] - 1)
    row = (await task_rows(client, a["id"]))[-1]
    assert row["event"] == "relation_removed" and row["task_id"] == a["id"]
    assert row["changes"] == {"relationId": relation["id"], "type": "review_of", "source": b["id"], "target": a["id"]}
    assert (await client.get(f"/api/v1/tasks/{b['id']}/relations")).body["items"] == []


async def test_a_removed_relation_can_be_added_again(client: BoardClient) -> None:
    a = await make_task(client)
    b = await make_task(client)
    first = await relate(client, a, "blocks", b)
    assert (await client.request("DELETE", f"/api/v1/tasks/{a['id']}/relations/{first['id']}")).status == 200
    again = await relate(client, a, "blocks", b)
    assert again["id"] != first["id"]


async def test_a_chain_of_eight_is_allowed(client: BoardClient) -> None:
    chain = await epic_chain(client, 8)
    assert len((await client.get(f"/api/v1/tasks/{chain[3]['id']}/relations")).body["items"]) == 2


async def test_eight_parents_are_allowed(client: BoardClient) -> None:
    child = await make_task(client, title="Shared child")
    for i in range(8):
        await relate(client, await make_task(client, title=f"Epic {i}", kind="epic"), "parent", child)


# -- refusals: each names its code and writes nothing ---------------------------------------------


async def refused(client: BoardClient, board: RunningBoard, source: str, body: dict, code: str, status: int) -> dict:
    before = await counts(board)
    reply = await client.post(f"/api/v1/tasks/{source}/relations", body)
    assert (reply.status, reply.error) == (status, code), reply.body
    assert reply.body["error"]["message"]
    assert await counts(board) == before
    return reply.body["error"]


async def test_self_relation_is_invalid(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    await refused(client, board, a["identifier"], {"type": "related", "target": a["id"]}, "RELATION_INVALID", 422)


async def test_duplicate_is_refused(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    relation = await relate(client, a, "blocks", b)
    error = await refused(client, board, a["id"], {"type": "blocks", "target": b["id"]}, "RELATION_EXISTS", 409)
    assert error["details"]["relation_id"] == relation["id"]


async def test_related_is_symmetric_so_the_reverse_is_a_duplicate(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    await relate(client, a, "related", b)
    await refused(client, board, b["id"], {"type": "related", "target": a["id"]}, "RELATION_EXISTS", 409)


async def test_same_pair_with_another_type_is_not_a_duplicate(client: BoardClient) -> None:
    a = await make_task(client)
    b = await make_task(client)
    await relate(client, a, "blocks", b)
    await relate(client, a, "related", b)


async def test_parent_must_be_an_epic(client: BoardClient, board: RunningBoard) -> None:
    parent = await make_task(client, title="Not an epic", kind="task")
    child = await make_task(client)
    error = await refused(client, board, parent["id"], {"type": "parent", "target": child["id"]}, "RELATION_INVALID", 422)
    assert error["details"]["kind"] == "task"


async def test_parent_must_be_in_the_same_project(client: BoardClient, board: RunningBoard) -> None:
    epic = await make_task(client, title="Epic", kind="epic")
    other = await make_task(client, title="Elsewhere", project="other")
    error = await refused(client, board, epic["id"], {"type": "parent", "target": other["id"]}, "RELATION_INVALID", 422)
    assert error["details"] == {"source_project": "demo", "target_project": "other"}


async def test_blocks_across_projects_is_fine(client: BoardClient) -> None:
    a = await make_task(client)
    other = await make_task(client, title="Elsewhere", project="other")
    await relate(client, a, "blocks", other)


async def test_parent_cycle_is_refused(client: BoardClient, board: RunningBoard) -> None:
    top, middle, bottom = await epic_chain(client, 3)
    error = await refused(client, board, bottom["id"], {"type": "parent", "target": top["id"]}, "RELATION_CYCLE", 409)
    assert error["details"] == {"type": "parent", "source": bottom["identifier"], "target": top["identifier"]}
    await refused(client, board, middle["id"], {"type": "parent", "target": top["id"]}, "RELATION_CYCLE", 409)


@pytest.mark.parametrize("length", [2, 3])
async def test_blocks_cycle_is_refused(client: BoardClient, board: RunningBoard, length: int) -> None:
    ring = [await make_task(client, title=f"T{i}") for i in range(length)]
    for a, b in zip(ring, ring[1:]):
        await relate(client, a, "blocks", b)
    await refused(client, board, ring[-1]["id"], {"type": "blocks", "target": ring[0]["id"]}, "RELATION_CYCLE", 409)


async def test_an_epic_blocking_its_own_child_is_refused(client: BoardClient, board: RunningBoard) -> None:
    # The child would wait for the epic (the dependency gate) and the epic for the child (rollup).
    epic, child = await epic_chain(client, 2)
    error = await refused(client, board, epic["id"], {"type": "blocks", "target": child["id"]}, "RELATION_CYCLE", 409)
    assert error["details"] == {"type": "blocks", "source": epic["identifier"], "target": child["identifier"], "waits": True}
    assert "neither could ever finish" in error["message"]


async def test_an_epic_blocking_a_grandchild_is_refused(client: BoardClient, board: RunningBoard) -> None:
    top, _, bottom = await epic_chain(client, 3)
    await refused(client, board, top["id"], {"type": "blocks", "target": bottom["id"]}, "RELATION_CYCLE", 409)


async def test_a_parent_over_a_task_its_epic_blocks_is_refused(client: BoardClient, board: RunningBoard) -> None:
    epic = await make_task(client, title="Epic", kind="epic")
    task = await make_task(client)
    await relate(client, epic, "blocks", task)
    error = await refused(client, board, epic["id"], {"type": "parent", "target": task["id"]}, "RELATION_CYCLE", 409)
    assert error["details"] == {"type": "parent", "source": epic["identifier"], "target": task["identifier"], "waits": True}


async def test_a_ring_of_children_and_blockers_is_refused(client: BoardClient, board: RunningBoard) -> None:
    # epic waits for child, child waits for its blocker; the blocker waiting for the epic closes it.
    epic, child = await epic_chain(client, 2)
    blocker = await make_task(client, title="Blocker")
    await relate(client, blocker, "blocks", child)
    await refused(client, board, epic["id"], {"type": "blocks", "target": blocker["id"]}, "RELATION_CYCLE", 409)


async def test_waiting_one_way_through_children_and_blockers_is_fine(client: BoardClient) -> None:
    epic, child = await epic_chain(client, 2)
    sibling = await make_task(client, title="Sibling")
    await relate(client, epic, "parent", sibling)
    await relate(client, child, "blocks", epic)  # the epic waits for its child twice over: no ring
    await relate(client, child, "blocks", sibling)
    outside = await make_task(client, title="Outside")
    await relate(client, epic, "blocks", outside)
    await relate(client, outside, "blocks", await make_task(client, title="Later"))


async def test_depth_nine_is_refused(client: BoardClient, board: RunningBoard) -> None:
    chain = await epic_chain(client, 8)
    ninth = await make_task(client, title="Ninth")
    error = await refused(client, board, chain[-1]["id"], {"type": "parent", "target": ninth["id"]}, "RELATION_DEPTH", 422)
    assert error["details"] == {"depth": 9, "limit": 8}


async def test_depth_counts_the_childs_own_descendants(client: BoardClient, board: RunningBoard) -> None:
    upper = await epic_chain(client, 4, prefix="U")
    lower = await epic_chain(client, 5, prefix="L")
    await refused(client, board, upper[-1]["id"], {"type": "parent", "target": lower[0]["id"]}, "RELATION_DEPTH", 422)
    await relate(client, upper[-2], "parent", lower[0])  # 3 + 5 = 8 tasks deep: allowed


async def test_fan_in_nine_is_refused(client: BoardClient, board: RunningBoard) -> None:
    child = await make_task(client, title="Shared child")
    for i in range(8):
        await relate(client, await make_task(client, title=f"Epic {i}", kind="epic"), "parent", child)
    ninth = await make_task(client, title="Epic 8", kind="epic")
    error = await refused(client, board, ninth["id"], {"type": "parent", "target": child["id"]}, "RELATION_FAN_IN", 422)
    assert error["details"]["parents"] == 8


async def test_unknown_type_is_a_validation_error(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    await refused(client, board, a["id"], {"type": "duplicates", "target": b["id"]}, "VALIDATION_FAILED", 400)


async def test_unknown_target_is_404(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    error = await refused(client, board, a["id"], {"type": "blocks", "target": "DEMO-9999"}, "NOT_FOUND", 404)
    assert error["details"] == {"task": "DEMO-9999"}


async def test_unknown_source_is_404(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    await refused(client, board, "DEMO-9999", {"type": "blocks", "target": a["id"]}, "NOT_FOUND", 404)


@pytest.mark.parametrize("body", [{"type": "blocks"}, {"target": "DEMO-0001"}, {"type": "blocks", "target": "DEMO-0001", "why": 1}])
async def test_malformed_bodies_are_refused(client: BoardClient, board: RunningBoard, body: dict) -> None:
    await make_task(client)
    await refused(client, board, "DEMO-0001", body, "VALIDATION_FAILED", 400)


async def test_missing_actor_is_refused(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    before = await counts(board)
    reply = await client.post(f"/api/v1/tasks/{a['id']}/relations", {"type": "blocks", "target": b["id"]}, actor=None)
    assert reply.error == "ACTOR_REQUIRED"
    assert await counts(board) == before


async def test_removing_an_unknown_or_foreign_relation_is_404(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    c = await make_task(client)
    relation = await relate(client, a, "blocks", b)
    before = await counts(board)
    for path in (f"/api/v1/tasks/{a['id']}/relations/{uuid.uuid4()}", f"/api/v1/tasks/{c['id']}/relations/{relation['id']}"):
        reply = await client.request("DELETE", path)
        assert (reply.status, reply.error) == (404, "NOT_FOUND"), reply.body
    assert await counts(board) == before


async def test_unknown_list_filter_is_refused(client: BoardClient) -> None:
    a = await make_task(client)
    reply = await client.get(f"/api/v1/tasks/{a['id']}/relations?type=duplicates")
    assert reply.error == "VALIDATION_FAILED"


# -- the schema as a backstop: raw writers hit the same rules -------------------------------------


def raw_insert(conn: sqlite3.Connection, type_: str, source: dict, target: dict) -> None:
    conn.execute(
        "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES (?, ?, ?, ?, '2026-01-01T00:00:00.000Z')",
        (str(uuid.uuid4()), type_, source["id"], target["id"]),
    )


def trigger_code(conn: sqlite3.Connection, type_: str, source: dict, target: dict) -> str:
    with pytest.raises(sqlite3.IntegrityError) as caught:
        raw_insert(conn, type_, source, target)
    return translate_integrity_error(caught.value).code


async def test_trigger_refuses_a_parent_that_is_not_an_epic(client: BoardClient, board: RunningBoard) -> None:
    parent = await make_task(client)
    child = await make_task(client)
    with raw_connection(board) as conn:
        assert trigger_code(conn, "parent", parent, child) == "RELATION_INVALID"


async def test_trigger_refuses_a_cross_project_parent(client: BoardClient, board: RunningBoard) -> None:
    epic = await make_task(client, kind="epic")
    other = await make_task(client, project="other")
    with raw_connection(board) as conn:
        assert trigger_code(conn, "parent", epic, other) == "RELATION_INVALID"


async def test_trigger_refuses_a_parent_cycle(client: BoardClient, board: RunningBoard) -> None:
    top, _, bottom = await epic_chain(client, 3)
    with raw_connection(board) as conn:
        assert trigger_code(conn, "parent", bottom, top) == "RELATION_CYCLE"


async def test_trigger_refuses_depth_nine(client: BoardClient, board: RunningBoard) -> None:
    chain = await epic_chain(client, 8)
    ninth = await make_task(client)
    with raw_connection(board) as conn:
        assert trigger_code(conn, "parent", chain[-1], ninth) == "RELATION_DEPTH"


async def test_trigger_refuses_fan_in_nine(client: BoardClient, board: RunningBoard) -> None:
    child = await make_task(client)
    epics = [await make_task(client, title=f"Epic {i}", kind="epic") for i in range(9)]
    with raw_connection(board) as conn:
        for epic in epics[:8]:
            raw_insert(conn, "parent", epic, child)
        assert trigger_code(conn, "parent", epics[8], child) == "RELATION_FAN_IN"


async def test_schema_refuses_self_and_duplicate_rows(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw_insert(conn, "blocks", a, a)
        raw_insert(conn, "blocks", a, b)
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            raw_insert(conn, "blocks", a, b)


async def test_relations_are_immutable_but_removable(client: BoardClient, board: RunningBoard) -> None:
    a = await make_task(client)
    b = await make_task(client)
    c = await make_task(client)
    relation = await relate(client, a, "blocks", b)
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="RELATION_IMMUTABLE"):
            conn.execute("UPDATE relations SET target_id = ? WHERE id = ?", (c["id"], relation["id"]))
        conn.execute("DELETE FROM relations WHERE id = ?", (relation["id"],))
        assert conn.execute("SELECT count(*) FROM relations").fetchone()[0] == 0


async def test_blocks_cycle_trigger_holds_for_a_raw_writer(client: BoardClient, board: RunningBoard) -> None:
    """The schema refuses a `blocks` cycle even from a writer that skips the command's check."""
    assert (await client.post("/api/v1/projects", {"id": "cyc"})).status == 201
    a = (await client.post("/api/v1/tasks", {"project": "cyc", "title": "A"})).body
    b = (await client.post("/api/v1/tasks", {"project": "cyc", "title": "B"})).body
    assert (await client.post(f"/api/v1/tasks/{a['id']}/relations", {"type": "blocks", "target": b["id"]})).status == 201
    conn = sqlite3.connect(board.data_dir / "board.sqlite")
    try:
        with pytest.raises(sqlite3.IntegrityError, match="RELATION_CYCLE"):
            conn.execute(
                "INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES ('r2', 'blocks', ?, ?, 'now')",
                (b["id"], a["id"]),
            )
    finally:
        conn.close()
