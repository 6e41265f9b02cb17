"""What RFC 9110 and JSON Schema promise a peer, checked against a real ``taskd serve``.

Each test is a finding of the Schemathesis run (tests/security/test_schemathesis.py) or of a
peer's client, reproduced by hand: 405 without ``Allow``, 401 without ``WWW-Authenticate``, no
``HEAD`` on GET routes, ``1.0`` refused where JSON Schema calls it an integer. The refusals
beside them (fractions, numbers beyond 64 bits, a project id with a final newline, which Python's
``$`` lets through) guard the edges where the document's patterns and the validators must agree.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from services.board.api import check_body
from services.board.routes import ALL_ROUTES, relations
from shared.errors import TaskloomError
from tests.support.board import API, BoardClient, TaskdProcess

PATH_PARAM = re.compile(r"{(\w+)}")
#: Headers that describe the representation, which HEAD must send as GET does (RFC 9110 §9.3.2).
REPRESENTATION_HEADERS = ("Content-Type", "Content-Length", "Content-Disposition", "Cache-Control", "X-Content-Type-Options")


@pytest.fixture
async def board(taskd: TaskdProcess) -> AsyncIterator[BoardClient]:
    taskd.start("--stream-lifetime", "0.2")
    async with aiohttp.ClientSession() as session:
        yield BoardClient(taskd.url, taskd.token, session)


async def count(client: BoardClient, path: str) -> int:
    reply = await client.get(path)
    assert reply.status == 200, reply.body
    return len(reply.body["items"])


# -- RFC 9110 §15.5.6: a 405 lists the allowed methods -------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", f"{API}/meta", {"GET", "HEAD"}),
        ("PUT", f"{API}/projects", {"GET", "HEAD", "POST"}),
        ("DELETE", f"{API}/tasks/DEMO-1/claim", {"POST"}),
    ],
)
async def test_a_405_names_the_allowed_methods(board: BoardClient, method: str, path: str, allowed: set[str]) -> None:
    reply = await board.request(method, path)
    assert reply.status == 405 and reply.error == "METHOD_NOT_ALLOWED"
    assert "Allow" in reply.headers, "RFC 9110 §15.5.6: a 405 MUST carry Allow"
    assert {name.strip() for name in reply.headers["Allow"].split(",")} == allowed
    assert set(reply.body["error"]["details"]["allowed"]) == allowed


# -- RFC 9110 §15.5.2 / RFC 6750 §3: a 401 names the scheme that would work ----------------------


@pytest.mark.parametrize("token", [False, "tk_not_the_token"], ids=["missing", "wrong"])
async def test_a_401_challenges_with_bearer(board: BoardClient, token: Any) -> None:
    before = await count(board, f"{API}/projects")
    reply = await board.post(f"{API}/projects", {"id": "taken-over"}, token=token)
    assert reply.status == 401 and reply.error == "UNAUTHORIZED"
    assert reply.headers.get("WWW-Authenticate") == 'Bearer realm="taskloom"'
    assert await count(board, f"{API}/projects") == before  # nothing was written


async def test_a_used_login_link_challenges_too(board: BoardClient) -> None:
    reply = await board.request("GET", "/login?code=not-a-code", token=False)
    assert reply.status == 401 and reply.headers.get("WWW-Authenticate", "").startswith("Bearer ")


# -- RFC 9110 §9.3.2: HEAD on every GET route ----------------------------------------------------


async def _resources(board: BoardClient) -> dict[str, str]:
    """One of everything a GET path names, made through the API."""
    assert (await board.post(f"{API}/projects", {"id": "demo"})).status == 201
    task = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Head me"})).body
    blob = await board.request(
        "POST", f"{API}/tasks/{task['id']}/attachments?filename=notes.txt", data=b"hello", headers={"Content-Type": "text/plain"}
    )
    assert blob.status == 201, blob.body
    return {"id": "demo", "ref": task["identifier"], "attachment": blob.body["id"]}


def _fill(path: str, names: dict[str, str]) -> str:
    if path.startswith(f"{API}/attachments/"):
        return path.replace("{id}", names["attachment"])
    return PATH_PARAM.sub(lambda match: names[match.group(1)], path)


async def test_head_answers_every_get_route_like_get_without_a_body(board: BoardClient, taskd: TaskdProcess) -> None:
    names = await _resources(board)
    paths = [_fill(route.path, names) for route in ALL_ROUTES if route.method == "GET"]
    assert len(paths) >= 20  # the whole API, not an empty table
    headers = {"Authorization": f"Bearer {taskd.token}"}
    async with aiohttp.ClientSession() as session:
        for path in [*paths, "/health", "/"]:
            async with session.head(taskd.url + path, headers=headers, timeout=aiohttp.ClientTimeout(total=5)) as head:
                head_body = await head.read()
            async with session.get(taskd.url + path, headers=headers) as get:
                await get.read()  # a stream ends by its lifetime
            assert head.status == get.status == 200, (path, head.status, get.status)
            assert head_body == b"", path
            for name in REPRESENTATION_HEADERS:
                if path.endswith("/events") and name == "Content-Length":
                    continue  # a stream has no length; neither answer sends one
                assert head.headers.get(name) == get.headers.get(name), (path, name)


async def test_head_on_the_stream_answers_at_once_and_opens_no_stream(board: BoardClient, taskd: TaskdProcess) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(3):  # one keep-alive connection: a HEAD that streamed would block the next
            async with session.head(
                f"{taskd.url}{API}/events?after=0", headers={"Authorization": f"Bearer {taskd.token}"},
                timeout=aiohttp.ClientTimeout(total=2),
            ) as head:
                assert head.status == 200
                assert head.headers["Content-Type"].startswith("text/event-stream")
        # The cursor is still checked as GET checks it.
        async with session.head(
            f"{taskd.url}{API}/events?after=999", headers={"Authorization": f"Bearer {taskd.token}"}
        ) as ahead:
            assert ahead.status == 400


# -- JSON Schema §6.1.1: an integer is any number with a zero fractional part --------------------


async def test_an_integral_number_is_accepted_as_an_integer(board: BoardClient) -> None:
    reply = await board.post(f"{API}/labels/gc", {"ttl_days": 5.0, "dry_run": True})
    assert reply.status == 200, reply.body
    assert reply.body["ttl_days"] == 5 and isinstance(reply.body["ttl_days"], int)
    await board.post(f"{API}/projects", {"id": "demo"})
    task = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Count me"})).body
    claimed = await board.post(f"{API}/tasks/{task['id']}/claim", {"if_version": 1.0})
    assert claimed.status == 200 and claimed.body["status"] == "in_progress", claimed.body


@pytest.mark.parametrize("value", [1.5, 1e300, -1e19, True])
async def test_a_number_that_is_not_a_64_bit_integer_is_refused(board: BoardClient, value: Any) -> None:
    await board.post(f"{API}/projects", {"id": "demo"})
    task = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Count me"})).body
    reply = await board.post(f"{API}/tasks/{task['id']}/claim", {"if_version": value})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert (await board.get(f"{API}/tasks/{task['id']}")).body["status"] == "todo"  # nothing moved


# -- the slug is matched whole, as the document's pattern says ------------------------------------


async def test_a_project_id_with_a_final_newline_is_a_400_and_writes_nothing(board: BoardClient) -> None:
    reply = await board.post(f"{API}/projects", {"id": "demo\n"})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert await count(board, f"{API}/projects") == 0
    assert await count(board, f"{API}/activities") == 0



# -- a PATCH body is valid or not whatever the task holds ----------------------------------------


async def test_half_an_assignee_pair_is_refused_on_every_task(board: BoardClient) -> None:
    await board.post(f"{API}/projects", {"id": "demo"})
    assigned = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Mine",
                                                  "assignee_kind": "human", "assignee_id": "ann"})).body
    free = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Free"})).body
    before = await count(board, f"{API}/activities")
    for task in (assigned, free):
        # Once judged against the task's own kind (accepted on one task, refused on the other).
        reply = await board.patch(f"{API}/tasks/{task['id']}", {"assignee_id": "bob"})
        assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (task["title"], reply.body)
        assert set(reply.body["error"]["details"]["fields"]) == {"assignee_kind", "assignee_id"}
    assert await count(board, f"{API}/activities") == before
    assert (await board.get(f"{API}/tasks/{assigned['id']}")).body["assignee_id"] == "ann"
    whole = await board.patch(f"{API}/tasks/{assigned['id']}", {"assignee_kind": "human", "assignee_id": "bob"})
    assert whole.status == 200 and whole.body["assignee_id"] == "bob"
    cleared = await board.patch(f"{API}/tasks/{assigned['id']}", {"assignee_kind": None, "assignee_id": None})
    assert cleared.status == 200 and cleared.body["assignee_id"] is None


# -- U+0000 in a text: SQLite's length() stops there, so its CHECKs judged another text ----------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("comments", {"body": "looks fine\x00 but is not"}, "body"),
        ("acceptance", {"items": ["\x00the page loads"]}, "items"),
    ],
)
async def test_a_nul_in_a_text_is_a_clear_400_and_writes_nothing(
    board: BoardClient, path: str, body: dict[str, Any], field: str
) -> None:
    await board.post(f"{API}/projects", {"id": "demo"})
    task = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Plain"})).body
    before = await count(board, f"{API}/activities")
    reply = await board.post(f"{API}/tasks/{task['id']}/{path}", body)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"] == {"field": field}
    assert "NUL" in reply.body["error"]["message"]
    assert await count(board, f"{API}/activities") == before
    titled = await board.post(f"{API}/tasks", {"project": "demo", "title": "\x00hidden"})
    assert titled.status == 400 and titled.body["error"]["details"] == {"field": "title"}



# -- a number where a text belongs: a 400 that shows it, never a 500 ----------------------------

#: Integer literals beyond 64 bits. orjson reads them as floats; a decoder that keeps integers
#: exact (the standard library's, any other) gives a Python int the error body cannot encode.
WIDE_INTEGERS = [106004180010909042044588523520, 2**64, -(2**63) - 1]


@pytest.mark.parametrize("target", [*WIDE_INTEGERS, 2**63, 1e300, 7, True])
async def test_a_number_as_a_relation_target_is_a_400_and_writes_nothing(board: BoardClient, target: Any) -> None:
    await board.post(f"{API}/projects", {"id": "demo"})
    epic = (await board.post(f"{API}/tasks", {"project": "demo", "title": "Epic", "kind": "epic"})).body
    before = await count(board, f"{API}/activities")
    reply = await board.post(f"{API}/tasks/{epic['id']}/relations", {"target": target, "type": "parent"})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"]["field"] == "target"
    # As orjson read it (a float past 64 bits), or as decimal text where that is not encodable.
    shown = reply.body["error"]["details"]["value"]
    assert float(shown) == float(target), shown
    assert await count(board, f"{API}/tasks/{epic['id']}/relations") == 0
    assert await count(board, f"{API}/activities") == before


@pytest.mark.parametrize("value", WIDE_INTEGERS)
def test_the_type_error_of_a_wide_integer_encodes(value: int) -> None:
    """The refusal itself must be encodable whatever the decoder made of the number: a
    ``details`` holding the int past 64 bits made orjson raise while answering, a 500."""
    with pytest.raises(TaskloomError) as refused:
        check_body({"target": value, "type": "parent"}, relations.ADD_BODY)
    body = orjson.loads(orjson.dumps(refused.value.body()))
    assert body["error"]["code"] == "VALIDATION_FAILED"
    assert body["error"]["details"] == {"field": "target", "value": str(value)}
