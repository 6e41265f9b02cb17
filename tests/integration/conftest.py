"""Every reply an integration test gets through ``BoardClient`` is checked against the OpenAPI document;
``empty_board`` is a second board, with nothing on it, for the tests that move state into one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import openapi_guard
from tests.support.board import BoardClient, Reply, RunningBoard, start_board


@pytest.fixture(autouse=True)
def replies_fit_the_openapi_document(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = BoardClient.request

    async def checked(self: BoardClient, method: str, path: str, **kw: Any) -> Reply:
        reply = await plain(self, method, path, **kw)
        content_type = reply.headers.get("Content-Type") if reply.headers is not None else None
        openapi_guard.check(method, self.url + path, reply.status, content_type, reply.body)
        return reply

    monkeypatch.setattr(BoardClient, "request", checked)


@pytest.fixture
async def empty_board(tmp_path: Path) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    """A second board beside ``board``, with nothing on it: where an import or a restore goes."""
    board = await start_board(tmp_path / "empty")
    try:
        async with aiohttp.ClientSession() as session:
            yield board, BoardClient(board.url, board.token, session)
    finally:
        await board.runner.cleanup()
