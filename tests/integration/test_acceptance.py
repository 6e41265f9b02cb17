"""Acceptance criteria and the independent-approval rule over a real board, and the schema's guard."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.board import (
    API,
    REPORT,
    BoardClient,
    RunningBoard,
    activity_count,
    make_task,
    raw_connection,
    task_rows,
)

pytestmark = pytest.mark.asyncio


async def add_items(client: BoardClient, task_id: str, *texts: str) -> dict[str, Any]:
    reply = await client.post(f"{API}/tasks/{task_id}/acceptance", {"items": list(texts)})
    assert reply.status == 200, reply.body
    return reply.body


async def prune(client: BoardClient, task_id: str, item_id: str, reason: str | None) -> Any:
    query = f"?reason={quote(reason)}" if reason is not None else ""
    return await client.request("DELETE", f"{API}/tasks/{task_id}/acceptance/{item_id}{query}")


@pytest.fixture
def worker(client: BoardClient) -> BoardClient:
    return client.as_actor("claude", "worker-1")


# -- reading and adding --------------------------------------------------------------------------


async def test_a_new_task_has_review_mode_and_no_items(client: BoardClient) -> None:
    task = await make_task(client)
    reply = await client.get(f"{API}/tasks/{task['identifier']}/acceptance")
    assert reply.status == 200
    assert reply.body == {"task_id": task["id"], "mode": "review", "revision": 0, "items": []}
    assert (await client.get(f"{API}/tasks/DEMO-0404/acceptance")).error == "NOT_FOUND"


async def test_adding_items_is_one_acceptance_changed_row_per_request(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    first = await add_items(client, task["id"], "  Docs build without warnings ", "Every page has a title")
    assert await activity_count(board) == before + 1
    assert first["revision"] == 1 and first["mode"] == "review"
    assert [(i["position"], i["text"]) for i in first["items"]] == [
        (1, "Docs build without warnings"),
        (2, "Every page has a title"),
    ]
    row = (await task_rows(client, task["id"]))[-1]
    assert row["event"] == "acceptance_changed"
    assert row["changes"] == {"added": [{"id": i["id"], "text": i["text"]} for i in first["items"]], "revision": 1}

    second = await add_items(client, task["id"], "Links are checked")
    assert second["revision"] == 2
    assert [(i["position"], i["text"]) for i in second["items"]][-1] == (3, "Links are checked")
    row = (await task_rows(client, task["id"]))[-1]
    assert row["changes"] == {"added": [{"id": second["items"][-1]["id"], "text": "Links are checked"}], "revision": 2}
    assert (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body == second
    # Items are not task fields: the task's version stays, its revision (the ETag) moves.
    shown = (await client.get(f"{API}/tasks/{task['id']}")).body
    assert shown["version"] == task["version"] and shown["revision"] > task["revision"]


async def test_overriding_the_mode_is_one_acceptance_override_row(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"mode": "none", "reason": "spike, no review"})
    assert reply.status == 200 and reply.body["mode"] == "none" and reply.body["revision"] == 0
    assert await activity_count(board) == before + 1
    row = (await task_rows(client, task["id"]))[-1]
    assert row["event"] == "acceptance_override"
    assert row["changes"] == {"from": "review", "to": "none", "reason": "spike, no review"}
    shown = (await client.get(f"{API}/tasks/{task['id']}")).body
    assert shown["acceptance_mode"] == "none" and shown["version"] == task["version"] + 1

    back = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"mode": "review"})
    assert back.status == 200
    assert (await task_rows(client, task["id"]))[-1]["changes"] == {"from": "none", "to": "review"}


async def test_items_and_mode_together_write_both_rows_in_order(client: BoardClient) -> None:
    task = await make_task(client)
    reply = await client.post(
        f"{API}/tasks/{task['id']}/acceptance", {"items": ["Smoke test passes"], "mode": "none", "if_version": 1}
    )
    assert reply.status == 200, reply.body
    rows = (await task_rows(client, task["id"]))[-2:]
    assert [row["event"] for row in rows] == ["acceptance_changed", "acceptance_override"]
    assert rows[0]["created_at"] == rows[1]["created_at"]


async def test_setting_the_mode_it_already_has_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"mode": "review"})
    assert reply.status == 200 and reply.body["mode"] == "review"
    assert await activity_count(board) == before


# -- pruning -------------------------------------------------------------------------------------


async def test_prune_writes_the_audit_row_and_removes_the_item(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    items = (await add_items(client, task["id"], "Docs build", "Old browser support"))["items"]
    before = await activity_count(board)
    reply = await prune(client, task["identifier"], items[1]["id"], "IE11 is out of scope now")
    assert reply.status == 200, reply.body
    assert [i["text"] for i in reply.body["items"]] == ["Docs build"] and reply.body["revision"] == 2
    assert await activity_count(board) == before + 1
    row = (await task_rows(client, task["id"]))[-1]
    assert row["event"] == "acceptance_pruned"
    assert row["changes"] == {
        "reason": "IE11 is out of scope now",
        "removed": [{"id": items[1]["id"], "text": "Old browser support"}],
    }
    # The list's revision counts prunes too; positions only order the items, ids name them.
    again = await add_items(client, task["id"], "Search works")
    assert again["revision"] == 3
    assert [(i["position"], i["text"]) for i in again["items"]] == [(1, "Docs build"), (2, "Search works")]
    assert again["items"][1]["id"] != items[1]["id"]


@pytest.mark.parametrize(
    ("reason", "detail"),
    [(None, {"field": "reason"}), ("", {"reason": ""}), ("too few", {"reason": "too few"})],
)
async def test_prune_without_a_real_reason_writes_nothing(
    client: BoardClient, board: RunningBoard, reason: str | None, detail: dict[str, Any]
) -> None:
    task = await make_task(client)
    item = (await add_items(client, task["id"], "Docs build"))["items"][0]
    before = await activity_count(board)
    reply = await prune(client, task["id"], item["id"], reason)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert detail.items() <= reply.body["error"]["details"].items()
    assert await activity_count(board) == before
    assert [i["id"] for i in (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body["items"]] == [item["id"]]


async def test_prune_of_an_unknown_or_foreign_item_is_404(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    other = await make_task(client, title="Other")
    foreign = (await add_items(client, other["id"], "Not yours"))["items"][0]
    before = await activity_count(board)
    for item_id in ("00000000-0000-0000-0000-000000000000", foreign["id"]):
        reply = await prune(client, task["id"], item_id, "no longer wanted")
        assert reply.status == 404 and reply.error == "NOT_FOUND", reply.body
        assert reply.body["error"]["details"] == {"acceptance_item": item_id}
    missing_task = await prune(client, "DEMO-0404", foreign["id"], "no longer wanted")
    assert missing_task.error == "NOT_FOUND"
    assert await activity_count(board) == before
    assert len((await client.get(f"{API}/tasks/{other['id']}/acceptance")).body["items"]) == 1


async def test_prune_with_an_unknown_query_parameter_is_refused(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    item = (await add_items(client, task["id"], "Docs build"))["items"][0]
    before = await activity_count(board)
    reply = await client.request(
        "DELETE", f"{API}/tasks/{task['id']}/acceptance/{item['id']}?reason=no+longer+wanted&force=1"
    )
    assert reply.status == 400 and reply.body["error"]["details"]["unknown"] == ["force"]
    assert await activity_count(board) == before


# -- refusals of POST ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "VALIDATION_FAILED"),
        ({"items": []}, 400, "VALIDATION_FAILED"),
        ({"items": ["  "]}, 400, "VALIDATION_FAILED"),
        ({"items": ["x" * 2001]}, 400, "VALIDATION_FAILED"),
        ({"items": ["Same", " Same "]}, 400, "VALIDATION_FAILED"),
        ({"items": ["Docs build"]}, 409, "CONFLICT"),
        ({"items": "Docs build"}, 400, "VALIDATION_FAILED"),
        ({"items": [1]}, 400, "VALIDATION_FAILED"),
        ({"mode": "whenever"}, 400, "VALIDATION_FAILED"),
        ({"mode": "none", "reason": "short"}, 400, "VALIDATION_FAILED"),
        ({"reason": "a reason with nothing to explain"}, 400, "VALIDATION_FAILED"),
        ({"items": ["New one"], "mode": "none", "reason": "short"}, 400, "VALIDATION_FAILED"),
        ({"items": ["New one"], "if_version": 7}, 409, "VERSION_CONFLICT"),
        ({"items": ["New one"], "revision": 1}, 400, "VALIDATION_FAILED"),
    ],
)
async def test_bad_acceptance_changes_write_nothing(
    client: BoardClient, board: RunningBoard, body: dict[str, Any], status: int, code: str
) -> None:
    task = await make_task(client)
    await add_items(client, task["id"], "Docs build")
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/acceptance", body)
    assert reply.status == status and reply.error == code, reply.body
    assert await activity_count(board) == before
    view = (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body
    assert view["mode"] == "review" and [i["text"] for i in view["items"]] == ["Docs build"]


async def test_acceptance_of_a_finished_task_is_settled(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    item = (await add_items(client, task["id"], "Docs build"))["items"][0]
    await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})
    before = await activity_count(board)
    added = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"items": ["More"]})
    assert added.status == 409 and added.error == "TERMINAL_STATE" and "reopen" in added.body["error"]["hint"]
    pruned = await prune(client, task["id"], item["id"], "no longer wanted")
    assert pruned.status == 409 and pruned.error == "TERMINAL_STATE"
    assert await activity_count(board) == before


async def test_unknown_task_is_404(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/DEMO-0404/acceptance", {"items": ["x"]})
    assert reply.status == 404 and reply.error == "NOT_FOUND"
    assert await activity_count(board) == before


# -- the schema guards the items -------------------------------------------------------------------


async def test_deleting_an_item_without_an_audit_row_is_refused_by_the_schema(
    client: BoardClient, board: RunningBoard
) -> None:
    task = await make_task(client)
    item = (await add_items(client, task["id"], "Docs build"))["items"][0]
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="ACCEPTANCE_PRUNE_UNAUDITED"):
            conn.execute("DELETE FROM acceptance_items WHERE id = ?", (item["id"],))
        with pytest.raises(sqlite3.IntegrityError, match="ACCEPTANCE_IMMUTABLE"):
            conn.execute("UPDATE acceptance_items SET text = 'weaker' WHERE id = ?", (item["id"],))
    assert (await client.get(f"{API}/tasks/{task['id']}/acceptance")).body["items"] == [item]


# -- the independent-approval rule, end to end -----------------------------------------------------


async def _delivered(client: BoardClient, worker: BoardClient, **fields: object) -> dict[str, Any]:
    task = await make_task(client, **fields)
    assert (await worker.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert reply.status == 200 and reply.body["delivered_by"] == "worker-1", reply.body
    return reply.body


async def test_the_deliverer_cannot_approve_their_own_delivery(
    client: BoardClient, board: RunningBoard, worker: BoardClient
) -> None:
    task = await _delivered(client, worker)
    await worker.post(f"{API}/tasks/{task['id']}/comments", {"body": "LGTM", "kind": "confirm"})
    before = await activity_count(board)
    refused = await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})
    assert refused.status == 422 and refused.error == "APPROVAL_REQUIRED", refused.body
    assert refused.body["error"]["details"] == {"round": 1, "delivered_by": "worker-1"}
    # Another agent on another platform but the same id is the same reviewer.
    same_id = client.as_actor("codex", "worker-1")
    await same_id.post(f"{API}/tasks/{task['id']}/comments", {"body": "LGTM", "kind": "confirm"})
    assert (await same_id.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).error == "APPROVAL_REQUIRED"
    assert await activity_count(board) == before + 1
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_review"

    # A note is not an approval; a confirm by someone else is.
    await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Nice work."})
    assert (await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).error == "APPROVAL_REQUIRED"
    await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Approved.", "kind": "confirm"})
    done = await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})
    assert done.status == 200 and done.body["status"] == "done", done.body
    assert (await task_rows(client, task["id"]))[-1]["changes"] == {"from": "in_review", "to": "done", "deliveryRound": 1}


async def test_an_approval_from_an_earlier_round_does_not_count(client: BoardClient, worker: BoardClient) -> None:
    task = await _delivered(client, worker)
    await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Approved.", "kind": "confirm"})
    await client.post(f"{API}/tasks/{task['id']}/move", {"to": "in_progress"})
    redelivered = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert redelivered.body["delivery_round"] == 2
    refused = await client.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})
    assert refused.error == "APPROVAL_REQUIRED" and refused.body["error"]["details"]["round"] == 2
    await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Approved again.", "kind": "confirm"})
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).status == 200


async def test_a_waiver_is_a_delivery_for_the_approval_rule(client: BoardClient, worker: BoardClient) -> None:
    task = await make_task(client)
    await worker.post(f"{API}/tasks/{task['id']}/claim")
    await worker.post(f"{API}/tasks/{task['id']}/waive", {"reason": "config-only change"})
    await worker.post(f"{API}/tasks/{task['id']}/comments", {"body": "fine by me", "kind": "confirm"})
    assert (await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).error == "APPROVAL_REQUIRED"
    await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "Approved.", "kind": "confirm"})
    assert (await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).status == 200


async def test_mode_none_needs_no_approval(client: BoardClient, worker: BoardClient) -> None:
    task = await _delivered(client, worker, acceptance_mode="none")
    done = await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})
    assert done.status == 200 and done.body["status"] == "done", done.body


async def test_overriding_to_none_lifts_the_rule_for_a_delivered_task(client: BoardClient, worker: BoardClient) -> None:
    task = await _delivered(client, worker)
    assert (await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).error == "APPROVAL_REQUIRED"
    override = await client.post(f"{API}/tasks/{task['id']}/acceptance", {"mode": "none", "reason": "trivial typo fix"})
    assert override.status == 200
    assert (await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).status == 200
