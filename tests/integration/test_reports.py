"""Reports, delivery and waivers over a real board: the rows each writes and every refusal."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from services.board.report_format import TEMPLATE
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


@pytest.fixture
def worker(client: BoardClient) -> BoardClient:
    return client.as_actor("claude", "worker-1")


@pytest.fixture
async def task(client: BoardClient, worker: BoardClient) -> dict[str, Any]:
    """A task worker-1 has claimed: in_progress, round 1."""
    created = await make_task(client)
    reply = await worker.post(f"{API}/tasks/{created['id']}/claim")
    assert reply.status == 200, reply.body
    return reply.body


# -- write ---------------------------------------------------------------------------------------


async def test_writing_a_report_is_one_report_written_row(client: BoardClient, worker: BoardClient, task: dict) -> None:
    reply = await worker.post(f"{API}/tasks/{task['identifier']}/report", {"body": REPORT})
    assert reply.status == 201, reply.body
    report = reply.body
    assert (report["task_id"], report["round"], report["body"]) == (task["id"], 1, REPORT)
    assert (report["actor_kind"], report["actor_id"]) == ("claude", "worker-1")
    rows = await task_rows(client, task["id"])
    assert rows[-1]["event"] == "report_written" and rows[-2]["event"] == "task_claimed"
    assert rows[-1]["changes"] == {"round": 1, "reportId": report["id"], "deliveryRound": 1}
    # Writing does not deliver.
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_progress"


async def test_a_written_report_opens_the_move_gate(client: BoardClient, worker: BoardClient, task: dict) -> None:
    await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})
    reply = await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "in_review"})
    assert reply.status == 200 and reply.body["status"] == "in_review", reply.body


async def test_a_blocked_task_takes_a_report(client: BoardClient, worker: BoardClient, task: dict) -> None:
    await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "blocked", "reason": "waiting on CI"})
    assert (await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})).status == 201


def _oversize() -> str:
    return REPORT + "\n## Notes\n\n" + "x" * (256 * 1024)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("", "the report is empty"),
        ("   \n", "the report is empty"),
        (TEMPLATE, "'## Summary' still holds template placeholder text"),
        ("## Summary\n\nDone.\n", "the required section '## Changes' is missing"),
        (REPORT.replace("- make docs: no warnings\n", ""), "the required section '## Verification' is empty"),
        (_oversize(), "the limit is 262144 bytes"),
    ],
)
async def test_an_invalid_report_is_422_naming_the_problems(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict, body: str, problem: str
) -> None:
    before = await activity_count(board)
    for verb in ("report", "deliver"):
        reply = await worker.post(f"{API}/tasks/{task['id']}/{verb}", {"body": body})
        assert reply.status == 422 and reply.error == "REPORT_INVALID", reply.body
        assert any(problem in text for text in reply.body["error"]["details"]["problems"]), reply.body
        assert "template" in reply.body["error"]["hint"]
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}/reports")).body["items"] == []
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_progress"


@pytest.mark.parametrize(("status", "code"), [("todo", "INVALID_TRANSITION"), ("canceled", "TERMINAL_STATE")])
async def test_a_report_needs_a_task_being_worked(
    client: BoardClient, board: RunningBoard, status: str, code: str
) -> None:
    task = await make_task(client)
    if status == "canceled":
        await client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})
    assert reply.status == 409 and reply.error == code, reply.body
    assert reply.body["error"]["hint"]
    assert await activity_count(board) == before


async def test_report_refusals_for_shape_and_unknown_task(client: BoardClient, board: RunningBoard, task: dict) -> None:
    before = await activity_count(board)
    assert (await client.post(f"{API}/tasks/{task['id']}/report", {})).error == "VALIDATION_FAILED"
    unknown = await client.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT, "round": 3})
    assert unknown.error == "VALIDATION_FAILED" and unknown.body["error"]["details"]["unknown"] == ["round"]
    missing = await client.post(f"{API}/tasks/DEMO-0404/report", {"body": REPORT})
    assert missing.status == 404 and missing.error == "NOT_FOUND"
    assert await activity_count(board) == before


# -- deliver -------------------------------------------------------------------------------------


async def test_deliver_with_a_body_writes_the_report_then_delivers(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert reply.status == 200, reply.body
    delivered = reply.body
    assert delivered["status"] == "in_review" and delivered["delivered_by"] == "worker-1"
    assert delivered["version"] == task["version"] + 1
    assert await activity_count(board) == before + 2
    written, moved = (await task_rows(client, task["id"]))[-2:]
    report_id = written["changes"]["reportId"]
    assert written["event"] == "report_written"
    assert written["changes"] == {"round": 1, "reportId": report_id, "deliveryRound": 1}
    assert moved["event"] == "task_delivered"
    assert moved["changes"] == {"from": "in_progress", "to": "in_review", "round": 1, "reportId": report_id}
    assert written["created_at"] == moved["created_at"]
    reports = (await client.get(f"{API}/tasks/{task['id']}/reports")).body["items"]
    assert [(r["id"], r["body"]) for r in reports] == [(report_id, REPORT)]


async def test_deliver_without_a_body_uses_the_latest_current_report(
    client: BoardClient, worker: BoardClient, task: dict
) -> None:
    await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})
    second = (await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT + "\nAlso the index.\n"})).body
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver")
    assert reply.status == 200, reply.body
    rows = await task_rows(client, task["id"])
    assert [row["event"] for row in rows[-3:]] == ["report_written", "report_written", "task_delivered"]
    assert rows[-1]["changes"] == {"from": "in_progress", "to": "in_review", "round": 1, "reportId": second["id"]}


async def test_deliver_may_name_a_report_of_the_round(client: BoardClient, worker: BoardClient, task: dict) -> None:
    first = (await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})).body
    await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT + "\nA later draft.\n"})
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"report_id": first["id"]})
    assert reply.status == 200, reply.body
    assert (await task_rows(client, task["id"]))[-1]["changes"]["reportId"] == first["id"]


async def test_deliver_from_blocked(client: BoardClient, worker: BoardClient, task: dict) -> None:
    await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "blocked", "reason": "waiting on CI"})
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert reply.status == 200 and reply.body["blocked_reason"] is None
    assert (await task_rows(client, task["id"]))[-1]["changes"]["from"] == "blocked"


async def test_deliver_without_any_report_is_report_required(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver")
    assert reply.status == 422 and reply.error == "REPORT_REQUIRED", reply.body
    assert reply.body["error"]["details"] == {"round": 1} and "waive" in reply.body["error"]["hint"]
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "in_progress"


async def test_a_report_of_an_earlier_round_does_not_deliver_the_next(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    old = (await client.get(f"{API}/tasks/{task['id']}/reports")).body["items"][0]
    sent_back = await client.post(f"{API}/tasks/{task['id']}/move", {"to": "in_progress"})
    assert sent_back.body["delivery_round"] == 2 and sent_back.body["delivered_by"] is None
    before = await activity_count(board)
    latest = await worker.post(f"{API}/tasks/{task['id']}/deliver")
    assert latest.error == "REPORT_REQUIRED" and latest.body["error"]["details"] == {"round": 2}
    named = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"report_id": old["id"]})
    assert named.error == "REPORT_REQUIRED"
    assert named.body["error"]["details"] == {"report_round": 1, "round": 2}
    assert await activity_count(board) == before
    # The next round's report is filed under round 2 and delivers it.
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert reply.status == 200
    rows = await task_rows(client, task["id"])
    assert rows[-2]["changes"]["round"] == 2 and rows[-1]["changes"]["round"] == 2
    round_two = (await client.get(f"{API}/tasks/{task['id']}/reports?round=2")).body["items"]
    assert [r["round"] for r in round_two] == [2]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"body": REPORT, "report_id": "r-1"}, 400, "VALIDATION_FAILED"),
        ({"report_id": "00000000-0000-0000-0000-000000000000"}, 404, "NOT_FOUND"),
        ({"body": REPORT, "if_version": 1}, 409, "VERSION_CONFLICT"),
        ({"body": REPORT, "reason": "because I said"}, 400, "VALIDATION_FAILED"),
    ],
)
async def test_bad_deliveries_write_nothing(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict, body: dict, status: int, code: str
) -> None:
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", body)
    assert reply.status == status and reply.error == code, reply.body
    assert await activity_count(board) == before


async def test_a_report_of_another_task_cannot_deliver_this_one(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    other = await make_task(client, title="Other")
    await worker.post(f"{API}/tasks/{other['id']}/claim")
    foreign = (await worker.post(f"{API}/tasks/{other['id']}/report", {"body": REPORT})).body
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"report_id": foreign["id"]})
    assert reply.status == 404 and reply.error == "NOT_FOUND"
    assert await activity_count(board) == before


@pytest.mark.parametrize(("status", "code"), [("todo", "INVALID_TRANSITION"), ("in_review", "INVALID_TRANSITION")])
async def test_deliver_only_from_in_progress_or_blocked(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict, status: str, code: str
) -> None:
    if status == "todo":
        await worker.post(f"{API}/tasks/{task['id']}/move", {"to": "todo"})
    else:
        await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/deliver", {"body": REPORT})
    assert reply.status == 409 and reply.error == code, reply.body
    assert await activity_count(board) == before


# -- waive ---------------------------------------------------------------------------------------


async def test_waive_stamps_the_reason_and_moves_to_review(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/waive", {"reason": "  config-only change  "})
    assert reply.status == 200, reply.body
    waived = reply.body
    assert waived["status"] == "in_review" and waived["waiver_reason"] == "config-only change"
    assert waived["delivered_by"] == "worker-1"
    assert await activity_count(board) == before + 1
    row = (await task_rows(client, task["id"]))[-1]
    assert row["event"] == "report_waived"
    assert row["changes"] == {
        "from": "in_progress",
        "to": "in_review",
        "round": 1,
        "reason": "config-only change",
        "deliveryRound": 1,
    }
    # Sending it back starts round 2 and clears the waiver.
    back = (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "in_progress"})).body
    assert back["delivery_round"] == 2 and back["waiver_reason"] is None


@pytest.mark.parametrize(
    ("body", "code"),
    [({"reason": "meh"}, "VALIDATION_FAILED"), ({"reason": "        "}, "VALIDATION_FAILED"), ({}, "VALIDATION_FAILED")],
)
async def test_a_short_waiver_reason_writes_nothing(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict, body: dict, code: str
) -> None:
    before = await activity_count(board)
    reply = await worker.post(f"{API}/tasks/{task['id']}/waive", body)
    assert reply.status == 400 and reply.error == code, reply.body
    assert await activity_count(board) == before
    after = (await client.get(f"{API}/tasks/{task['id']}")).body
    assert after["status"] == "in_progress" and after["waiver_reason"] is None


async def test_waive_follows_the_status_graph(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/waive", {"reason": "nothing to report"})
    assert reply.status == 409 and reply.error == "INVALID_TRANSITION"
    assert await activity_count(board) == before


# -- reading ---------------------------------------------------------------------------------------


async def test_reports_list_oldest_first_by_round_and_page(client: BoardClient, worker: BoardClient, task: dict) -> None:
    for n in range(3):
        await worker.post(f"{API}/tasks/{task['id']}/report", {"body": f"{REPORT}\nDraft {n}.\n"})
    page = await client.get(f"{API}/tasks/{task['identifier']}/reports?limit=2")
    assert page.status == 200 and len(page.body["items"]) == 2 and page.body["next_cursor"]
    rest = await client.get(f"{API}/tasks/{task['id']}/reports?limit=2&cursor={page.body['next_cursor']}")
    bodies = [r["body"] for r in page.body["items"] + rest.body["items"]]
    assert bodies == [f"{REPORT}\nDraft {n}.\n" for n in range(3)] and rest.body["next_cursor"] is None
    assert (await client.get(f"{API}/tasks/{task['id']}/reports?round=2")).body["items"] == []
    assert (await client.get(f"{API}/tasks/{task['id']}/reports?round=0")).error == "VALIDATION_FAILED"
    assert (await client.get(f"{API}/tasks/DEMO-0404/reports")).error == "NOT_FOUND"


async def test_the_template_route_serves_the_format(client: BoardClient) -> None:
    reply = await client.get(f"{API}/reports/template")
    assert reply.status == 200
    assert reply.body["markdown"] == TEMPLATE
    assert reply.body["required_sections"] == ["Summary", "Changes", "Verification"]
    assert reply.body["max_bytes"] == 256 * 1024


# -- the schema keeps reports append-only ----------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    ["UPDATE reports SET body = 'rewritten' WHERE id = ?", "DELETE FROM reports WHERE id = ?"],
)
async def test_reports_are_append_only_in_the_schema(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict, statement: str
) -> None:
    report = (await worker.post(f"{API}/tasks/{task['id']}/report", {"body": REPORT})).body
    with raw_connection(board) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="REPORT_APPEND_ONLY"):
            conn.execute(statement, (report["id"],))
    kept = (await client.get(f"{API}/tasks/{task['id']}/reports")).body["items"]
    assert [r["body"] for r in kept] == [REPORT]


async def test_a_confirm_written_before_the_delivery_does_not_approve_it(
    client: BoardClient, board: RunningBoard, worker: BoardClient, task: dict
) -> None:
    """An approval reviews the delivered work, so it must come after the delivery."""
    early = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "looks fine so far", "kind": "confirm"})
    assert early.status == 201
    delivered = await worker.post(f"/api/v1/tasks/{task['id']}/deliver", {"body": REPORT})
    assert delivered.status == 200, delivered.body
    before = await activity_count(board)
    refused = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "done"})
    assert refused.status == 422 and refused.error == "APPROVAL_REQUIRED"
    assert await activity_count(board) == before
    assert (await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "LGTM", "kind": "confirm"})).status == 201
    assert (await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "done"})).status == 200
