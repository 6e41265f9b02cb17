"""A project's workspace path is bounded in UTF-8 bytes, and the bound is the same on both engines.

The path is unique, and PostgreSQL's unique index keeps at most 2704 bytes of a row: a longer path
that does not compress was answered 503 STORE_UNAVAILABLE ("retry in a moment", on every retry)
where SQLite stored it. Each engine now takes exactly ``WORKSPACE_PATH_MAX_BYTES`` and refuses one
byte more with a 400 naming the field, writing nothing.
"""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from shared.limits import WORKSPACE_PATH_MAX_BYTES
from tests.support.board import API, BoardClient, RunningBoard, activity_count, start_board

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine_board(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    """A board on each engine, whichever engine the run's other boards use."""
    database = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    board = await start_board(tmp_path / "data", database=database)
    try:
        async with aiohttp.ClientSession() as session:
            yield board, BoardClient(board.url, board.token, session)
    finally:
        await board.runner.cleanup()


def path_of(size: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """An absolute path of about ``size`` UTF-8 bytes (exactly, in ASCII) that does not compress
    (random, seeded): what PostgreSQL's index cannot shrink under its bound."""
    rnd = random.Random(size)
    text = "/"
    while len(text.encode()) < size:
        text += rnd.choice(alphabet)
    return text


async def test_the_longest_path_is_stored_and_stays_unique(engine_board: tuple[RunningBoard, BoardClient]) -> None:
    _, client = engine_board
    longest = path_of(WORKSPACE_PATH_MAX_BYTES)
    assert len(longest.encode()) == WORKSPACE_PATH_MAX_BYTES
    created = await client.post(f"{API}/projects", {"id": "wide", "workspace_path": longest})
    assert created.status == 201, created.body
    assert (await client.get(f"{API}/projects/wide")).body["workspace_path"] == longest
    assert (await client.post(f"{API}/projects", {"id": "other"})).status == 201
    taken = await client.patch(f"{API}/projects/other", {"workspace_path": longest})
    assert taken.status == 409 and taken.error == "CONFLICT", taken.body


#: Past the bound: one byte in ASCII; characters of two and three bytes (fewer characters than the
#: bound, more bytes); and paths PostgreSQL's index could not hold, which SQLite stored.
TOO_LONG = {
    "ascii": path_of(WORKSPACE_PATH_MAX_BYTES + 1),
    "two-byte letters": "/" + "é" * (WORKSPACE_PATH_MAX_BYTES // 2),
    "three-byte letters": "/" + "€" * 1000,
    "random, PATH_MAX bytes": path_of(4096),
    "random letters of two and three bytes": path_of(3000, "éüßøπжחأ€あ한"),
}


@pytest.mark.parametrize("case", sorted(TOO_LONG))
@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_a_longer_path_is_a_400_naming_the_field_and_writes_nothing(
    engine_board: tuple[RunningBoard, BoardClient], case: str, method: str
) -> None:
    board, client = engine_board
    path = TOO_LONG[case]
    assert len(path.encode()) > WORKSPACE_PATH_MAX_BYTES
    assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
    before = await activity_count(board)
    if method == "POST":
        reply = await client.post(f"{API}/projects", {"id": "wide", "workspace_path": path})
    else:
        reply = await client.patch(f"{API}/projects/demo", {"workspace_path": path})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"]["field"] == "workspace_path"
    assert f"{WORKSPACE_PATH_MAX_BYTES} bytes" in reply.body["error"]["message"]
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/projects/demo")).body["workspace_path"] is None
    assert (await client.get(f"{API}/projects/wide")).status == 404
