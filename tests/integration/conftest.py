"""Every reply an integration test gets through ``BoardClient`` is checked against the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import openapi_guard
from tests.support.board import BoardClient, Reply


@pytest.fixture(autouse=True)
def replies_fit_the_openapi_document(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = BoardClient.request

    async def checked(self: BoardClient, method: str, path: str, **kw: Any) -> Reply:
        reply = await plain(self, method, path, **kw)
        content_type = reply.headers.get("Content-Type") if reply.headers is not None else None
        openapi_guard.check(method, self.url + path, reply.status, content_type, reply.body)
        return reply

    monkeypatch.setattr(BoardClient, "request", checked)
