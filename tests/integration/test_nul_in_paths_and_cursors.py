"""U+0000 where the body and query checks do not look, and cursor numbers past 64 bits: a clear
answer on both engines, never a 500.

No name or id the board stores holds U+0000 (the API refuses it in every value; PostgreSQL text
cannot hold it at all), so a path parameter holding one names nothing: 404, before any SQL. A
composite cursor holding one, or an integer cursor past 64 bits, is not a cursor the board wrote:
400 malformed cursor. On PostgreSQL these were 500s (psycopg's DataError on the reader threads)
or a 400 "refused by the database" on the writer; an oversized number was a 500 on SQLite. A
comma-separated list in the query is a text like any other: U+0000 in one is refused by name.
(Run on PostgreSQL too by the Makefile's ON_POSTGRESQL line.)
"""

from __future__ import annotations

import base64

import pytest

from tests.support.board import BoardClient

NUL = "a%00b"
TASK_READS = ["", "/activities", "/history", "/comments", "/acceptance", "/relations", "/attachments",
              "/reports", "/sessions"]


def key_cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.fixture
async def demo(client: BoardClient) -> BoardClient:
    assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await client.post("/api/v1/tasks", {"project": "demo", "title": "x"})).status == 201
    return client


@pytest.mark.parametrize("tail", TASK_READS)
async def test_a_task_ref_with_nul_is_not_found_not_a_500(demo: BoardClient, tail: str) -> None:
    reply = await demo.get(f"/api/v1/tasks/{NUL}{tail}")
    assert reply.status == 404 and reply.error == "NOT_FOUND", (reply.status, reply.body)


async def test_a_project_id_with_nul_is_not_found_not_a_500(demo: BoardClient) -> None:
    reply = await demo.get(f"/api/v1/projects/{NUL}")
    assert reply.status == 404 and reply.error == "NOT_FOUND", (reply.status, reply.body)


@pytest.mark.parametrize("route", ["/api/v1/labels", "/api/v1/actors"])
async def test_a_composite_cursor_holding_nul_is_not_a_500(demo: BoardClient, route: str) -> None:
    cursor = key_cursor(b'k:["a\\u0000b","c"]')
    reply = await demo.get(f"{route}?cursor={cursor}")
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (reply.status, reply.body)


@pytest.mark.parametrize("route", ["/api/v1/tasks", "/api/v1/activities"])
async def test_an_integer_cursor_past_64_bits_is_malformed_not_a_500(demo: BoardClient, route: str) -> None:
    for digits in ("9" * 30, "9" * 5000):
        reply = await demo.get(f"{route}?cursor={key_cursor(b'a:' + digits.encode())}")
        assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (digits[:8], reply.status, reply.body)


@pytest.mark.parametrize(("method", "tail", "body"), [
    ("POST", "/comments", {"body": "x"}), ("POST", "/heartbeat", {}), ("POST", "/move", {"to": "in_progress"}),
    ("PATCH", "", {"title": "y"}),
])
async def test_a_write_to_a_task_ref_with_nul_is_not_found(
    demo: BoardClient, method: str, tail: str, body: dict[str, str],
) -> None:
    reply = await demo.request(method, f"/api/v1/tasks/{NUL}{tail}", json_body=body)
    assert reply.status == 404 and reply.error == "NOT_FOUND", (reply.status, reply.body)


@pytest.mark.parametrize("query", [
    "/api/v1/activities?event=a%00b", "/api/v1/activities?event=task_created,%00", "/api/v1/tasks?status=todo%00",
    "/api/v1/events?event=task_created,a%00b",
])
async def test_a_comma_separated_query_list_holding_nul_is_refused_by_name(demo: BoardClient, query: str) -> None:
    """A list in the query is refused like any other text holding U+0000: SQLite answered the
    activity filter with an empty page, PostgreSQL with a 400 of its driver's words."""
    reply = await demo.get(query)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (reply.status, reply.body)
    assert reply.body["error"]["details"]["field"] == query.partition("?")[2].partition("=")[0]
    assert "U+0000" in reply.body["error"]["message"], reply.body
