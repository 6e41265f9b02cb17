"""A token rotation closes every stream the old token opened (issue 11, item 4).

Before, ``POST /api/v1/token/rotate`` only swapped the token in memory: a stream opened with the
old token kept receiving every event, so whoever held the old token kept reading the board.
Against a real ``taskd`` process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import API, TaskdProcess

pytestmark = pytest.mark.asyncio

HUMAN = {"X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "ann"}


@pytest.fixture
def taskd(tmp_path: Path) -> Iterator[TaskdProcess]:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    try:
        yield board
    finally:
        board.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **HUMAN}


async def test_a_rotation_closes_the_streams_of_the_old_token(taskd: TaskdProcess) -> None:
    old = taskd.token
    async with aiohttp.ClientSession() as http:
        stream = await http.get(f"{taskd.url}{API}/events", headers=bearer(old))
        assert stream.status == 200
        assert (await stream.content.readline()).startswith(b"retry:"), "the stream is open"
        rotated = await http.post(f"{taskd.url}{API}/token/rotate", headers=bearer(old), json={})
        assert rotated.status == 200, await rotated.text()
        new = (taskd.data_dir / "token").read_text().strip()
        assert new != old
        async with asyncio.timeout(10):
            rest = await stream.content.read()  # returns only when the board ends the stream
        assert b"shutdown" not in rest, "no shutdown frame: the reconnect should meet the 401"
        stream.close()

        # Nothing written after the rotation reaches the old token, and its reconnect is refused.
        await http.post(f"{taskd.url}{API}/projects", headers=bearer(new), json={"id": "after", "name": "After"})
        again = await http.get(f"{taskd.url}{API}/events", headers=bearer(old), params={"after": "0"})
        assert again.status == 401
        again.close()
        fresh = await http.get(f"{taskd.url}{API}/events", headers=bearer(new), params={"after": "0"})
        assert fresh.status == 200
        async with asyncio.timeout(10):
            while b"project_created" not in (await fresh.content.readline()):
                pass  # the new token's stream replays the write made after the rotation
        fresh.close()
