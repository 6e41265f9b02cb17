"""Free-form JSON a client sends is bounded at validation (issue: deep JSON poisons the board).

A ``meta`` nested ~251 levels used to be stored (201) and then fail every task list for everyone
(orjson will not encode past 254 levels); at 253 levels the caller got 500 for a task that was
committed, so its retry made a second one. Integers past 64 bits became floats without a word.
Every case runs against a real ``taskd`` and checks, after each refusal, that nothing was written
(the revision did not move) and that the task list, the activity list and the stream still work.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from shared.errors import TaskloomError
from shared.json_bounds import check_json
from shared.limits import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, MAX_JSON_FIELD_BYTES
from tests.support.board import API, BoardClient, TaskdProcess

from .support_bounds import assert_board_whole, head, start_taskd, stop_taskd


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` levels of objects: nested(1) == {"a": 1}, as the body's ``meta`` value."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def raw_body(fields: dict[str, bytes]) -> bytes:
    """A JSON object whose values are given as raw JSON text, so integers keep their exact digits."""
    return b"{" + b",".join(orjson.dumps(name) + b":" + value for name, value in fields.items()) + b"}"


@pytest.fixture(scope="module")
def taskd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskdProcess]:
    process = start_taskd(tmp_path_factory.mktemp("json-bounds"))
    yield process
    stop_taskd(process)


@pytest.fixture
async def client(taskd: TaskdProcess) -> AsyncIterator[BoardClient]:
    async with aiohttp.ClientSession() as session:
        board = BoardClient(taskd.url, taskd.token, session)
        if (await board.get(f"{API}/projects/demo")).status == 404:
            assert (await board.post(f"{API}/projects", {"id": "demo"})).status == 201
        yield board


async def post_raw(client: BoardClient, path: str, body: bytes, method: str = "POST") -> Any:
    return await client.request(method, path, data=body, headers={"Content-Type": "application/json"})


def assert_refused(reply: Any, field: str) -> None:
    assert reply.status == 400, reply.body
    assert reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"]["field"] == field, reply.body


# -- depth --------------------------------------------------------------------------------------


async def test_meta_at_the_depth_cap_is_stored_and_every_reader_carries_it(client: BoardClient) -> None:
    meta = nested(MAX_JSON_DEPTH)
    reply = await client.post(f"{API}/tasks", {"project": "demo", "title": "Deep but allowed", "meta": meta})
    assert reply.status == 201, reply.body
    assert reply.body["meta"] == meta
    listed = await client.get(f"{API}/tasks?project=demo&limit=1000")
    assert listed.status == 200 and any(task["meta"] == meta for task in listed.body["items"])
    await assert_board_whole(client, await head(client))


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 251, 253, 254, 255, 300])
async def test_meta_past_the_depth_cap_is_refused_and_nothing_is_written(client: BoardClient, depth: int) -> None:
    before = await head(client)
    reply = await client.post(f"{API}/tasks", {"project": "demo", "title": f"Deep {depth}", "meta": nested(depth)})
    assert_refused(reply, "meta")
    assert reply.body["error"]["details"]["limit"] == MAX_JSON_DEPTH
    await assert_board_whole(client, before)


async def test_deep_meta_in_a_patch_is_refused(client: BoardClient) -> None:
    task = await client.post(f"{API}/tasks", {"project": "demo", "title": "Patch me"})
    assert task.status == 201
    before = await head(client)
    reply = await client.patch(f"{API}/tasks/{task.body['id']}", {"meta": nested(251)})
    assert_refused(reply, "meta")
    await assert_board_whole(client, before)
    assert (await client.get(f"{API}/tasks/{task.body['id']}")).body["meta"] == {}


@pytest.mark.parametrize("field", ["meta", "settings"])
async def test_deep_project_meta_and_settings_are_refused(client: BoardClient, field: str) -> None:
    before = await head(client)
    create = await client.post(f"{API}/projects", {"id": f"deep-{field}", field: nested(251)})
    assert_refused(create, field)
    patch = await client.patch(f"{API}/projects/demo", {field: nested(MAX_JSON_DEPTH + 1)})
    assert_refused(patch, field)
    await assert_board_whole(client, before)
    assert (await client.get(f"{API}/projects/deep-{field}")).status == 404


async def test_a_deep_list_counts_as_deep(client: BoardClient) -> None:
    before = await head(client)
    body = b'{"project":"demo","title":"Lists","meta":{"a":' + b"[" * 260 + b"]" * 260 + b"}}"
    assert_refused(await post_raw(client, f"{API}/tasks", body), "meta")
    await assert_board_whole(client, before)


# -- size ---------------------------------------------------------------------------------------


async def test_a_giant_key_count_is_refused_by_size(client: BoardClient) -> None:
    before = await head(client)
    meta = {f"k{n:06d}": n for n in range(60_000)}  # ~1 MB, inside the body limit
    body = orjson.dumps({"project": "demo", "title": "Many keys", "meta": meta})
    assert len(body) < 1 << 20
    reply = await post_raw(client, f"{API}/tasks", body)
    assert_refused(reply, "meta")
    assert reply.body["error"]["details"]["limit"] == MAX_JSON_FIELD_BYTES
    settings = await client.patch(f"{API}/projects/demo", {"settings": {f"s{n}": n for n in range(20_000)}})
    assert_refused(settings, "settings")
    await assert_board_whole(client, before)


async def test_meta_just_under_the_size_cap_is_stored(client: BoardClient) -> None:
    meta = {"pad": "x" * (MAX_JSON_FIELD_BYTES - 20)}
    assert len(orjson.dumps(meta)) <= MAX_JSON_FIELD_BYTES
    reply = await client.post(f"{API}/tasks", {"project": "demo", "title": "Big meta", "meta": meta})
    assert reply.status == 201, reply.body
    await assert_board_whole(client, await head(client))


# -- numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [INT64_MAX, INT64_MIN, 0, -1, 1.5, 1e18])
async def test_numbers_inside_64_bits_round_trip_exactly(client: BoardClient, number: int | float) -> None:
    text = orjson.dumps(number)
    body = raw_body({"project": b'"demo"', "title": b'"In range"', "meta": b'{"n":{"deep":[' + text + b"]}}"})
    reply = await post_raw(client, f"{API}/tasks", body)
    assert reply.status == 201, reply.body
    fetched = await client.request("GET", f"{API}/tasks/{reply.body['id']}")
    assert fetched.body["meta"]["n"]["deep"][0] == number
    assert type(fetched.body["meta"]["n"]["deep"][0]) is type(number)


@pytest.mark.parametrize(
    "literal",
    [b"9223372036854775808", b"18446744073709551615", b"18446744073709551616", b"-9223372036854775809",
     b"123456789012345678901234567890", b"1e19"],
)
async def test_numbers_beyond_64_bits_are_refused_anywhere(client: BoardClient, literal: bytes) -> None:
    before = await head(client)
    body = raw_body({"project": b'"demo"', "title": b'"Too big"', "meta": b'{"n":{"deep":[' + literal + b"]}}"})
    reply = await post_raw(client, f"{API}/tasks", body)
    assert_refused(reply, "meta")
    assert reply.body["error"]["details"]["path"] == "meta.n.deep[0]"
    settings = await post_raw(client, f"{API}/projects/demo", raw_body({"settings": b'{"wip":' + literal + b"}"}), "PATCH")
    assert_refused(settings, "settings")
    await assert_board_whole(client, before)


async def test_an_integer_field_beyond_64_bits_is_refused(client: BoardClient) -> None:
    task = await client.post(f"{API}/tasks", {"project": "demo", "title": "Versioned"})
    before = await head(client)
    for literal in (b"9223372036854775808", b"18446744073709551616"):
        reply = await post_raw(client, f"{API}/tasks/{task.body['id']}", raw_body({"if_version": literal}), "PATCH")
        assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    await assert_board_whole(client, before)


# -- actors that cannot be encoded ----------------------------------------------------------------


async def test_an_actor_header_that_is_not_utf8_is_a_clear_400(taskd: TaskdProcess, client: BoardClient) -> None:
    before = await head(client)
    host, port = taskd.url.removeprefix("http://").split(":")
    body = b'{"project":"demo","title":"Who am I"}'
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Authorization: Bearer " + taskd.token.encode() + b"\r\n"
        b"X-Taskloom-Actor: ann\xff\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 400"), raw[:300]
    assert orjson.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"] == "VALIDATION_FAILED"
    await assert_board_whole(client, before)


# -- pure units -----------------------------------------------------------------------------------


def test_check_json_names_the_path_and_counts_depth_from_the_field() -> None:
    check_json(nested(MAX_JSON_DEPTH), field="meta")
    with pytest.raises(TaskloomError) as raised:
        check_json(nested(MAX_JSON_DEPTH + 1), field="meta")
    assert raised.value.details["field"] == "meta"
    with pytest.raises(TaskloomError) as raised:
        check_json({"a": [0, {"b": 1 << 63}]}, field="meta")
    assert raised.value.details["path"] == "meta.a[1].b"
    check_json([True, False, None, "x", -(1 << 63), (1 << 63) - 1, 9.2e18], field="meta")


def test_a_result_that_cannot_be_encoded_is_refused_before_commit() -> None:
    from services.board.store import refuse_unencodable

    refuse_unencodable({"ok": [1, 2], "row": object()})  # types JSON has no word for are the route's
    for poison in (nested(300), {"n": 1 << 64}):
        with pytest.raises(TaskloomError) as raised:
            refuse_unencodable(poison)
        assert raised.value.code == "VALIDATION_FAILED"
