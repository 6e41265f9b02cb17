"""The hub keeps briefs out of the board's data directory even when it first asked while the
board's database was away.

The hub learns that directory from ``GET /api/v1/board/status`` at its first brief path check and
keeps the answer. It kept any answer: a ``503 STORE_UNAVAILABLE`` (the PostgreSQL server
restarting) was remembered as "the board has no data directory", and for the rest of the hub's
life a ``watch`` could write its brief over the board's token file. Only the board's word that it
is serving counts now; until then the hub asks again at each check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.hub.conftest import NO_EVENT, RawClient, start_hub
from tests.support.board import BoardClient, make_project, make_task, start_board
from tests.support.postgres import Cluster, cut_off, let_back
from tests.support.waiting import async_wait_until


async def answer_to(raw: RawClient, request: dict[str, Any]) -> dict[str, Any]:
    await raw.send(request)
    while True:
        message = await raw.recv(timeout=30)
        if message["type"] not in NO_EVENT:
            return message


async def test_a_status_answered_while_the_database_was_away_does_not_unprotect_the_data_dir(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster,
) -> None:
    board = await start_board(tmp_path / "data", database=postgres_url)
    hub = None
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            await make_project(client)
            task = await make_task(client)
            hub = await start_hub(board.url, board.token)
            raw = await RawClient.greeted(hub)
            token_file = board.data_dir / "token"
            token_before = token_file.read_bytes()
            (tmp_path / "work").mkdir()

            cut_off(pg_cluster.admin_url, postgres_url)
            try:
                refused = await client.get("/api/v1/board/status")
                assert refused.status == 503 and refused.error == "STORE_UNAVAILABLE", refused.body
                while_away = await answer_to(raw, {"type": "watch", "ref": task["identifier"], "detach": True,
                                                   "out": str(tmp_path / "work" / "card.md")})
                assert while_away["type"] == "error", while_away
            finally:
                let_back(pg_cluster.admin_url, postgres_url)

            async def serving() -> bool:
                return (await client.get("/api/v1/board/status")).status == 200

            await async_wait_until(serving, timeout=20, what="the board to read its database again")
            over_token = await answer_to(raw, {"type": "watch", "ref": task["identifier"], "detach": True,
                                               "out": str(token_file)})
            assert over_token["type"] == "error" and over_token["code"] == "VALIDATION_FAILED", over_token
            assert "holds Taskloom's own files" in over_token["message"], over_token
            assert token_file.read_bytes() == token_before
            await raw.close()
    finally:
        if hub is not None:
            await hub.stop()
        await board.runner.cleanup()
