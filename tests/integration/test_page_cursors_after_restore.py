"""Page cursors over row ids, across a restore: every list the board pages by its rows' own
numbering (tasks, the ready queue, a task's comments and reports) names the board that issued the
cursor, as ``/activities`` does.

A board restored from a backup numbers its new rows on from the backup's last row id, so the ids
of the history it replaced come again, meaning other rows. A client holding a cursor from late in
that lost history used to resume after it and never see the new rows numbered below it: a page
that silently skips. The cursor from before the restore is ``410 CURSOR_EXPIRED`` (reason
``restored``) now, and pages the restored board issues list every new row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.board.queries.paging import encode_cursor
from tests.support.board import API, REPORT, BoardClient, board_running, make_task, start_board

#: Rows of each list written after the backup (the future the restore loses), and after the restore.
LOST, NEW = 6, 8


def lists(task_id: str) -> dict[str, str]:
    """Each paged list, as the path of its first page of one item."""
    return {
        "tasks": f"{API}/tasks?project=demo&limit=1",
        "ready": f"{API}/tasks?ready=true&limit=1",
        "comments": f"{API}/tasks/{task_id}/comments?limit=1",
        "reports": f"{API}/tasks/{task_id}/reports?limit=1",
    }


async def write_rows(client: BoardClient, worked: dict[str, Any], label: str, count: int) -> None:
    """``count`` rows of every list: tasks (ready ones), comments and reports on ``worked``."""
    for n in range(count):
        assert (await client.post(f"{API}/tasks", {"project": "demo", "title": f"{label} {n}"})).status == 201
        assert (await client.post(f"{API}/tasks/{worked['id']}/comments", {"body": f"{label} {n}"})).status == 201
        assert (await client.post(f"{API}/tasks/{worked['id']}/report", {"body": REPORT})).status == 201


async def late_cursor(client: BoardClient, path: str) -> str:
    """A cursor just below the newest row of a list: the one that asks for its last page, paged
    one row at a time."""
    cursor: str | None = None
    seen = 0
    while True:
        reply = await client.get(path + (f"&cursor={cursor}" if cursor else ""))
        assert reply.status == 200, reply.body
        seen += len(reply.body["items"])
        if reply.body["next_cursor"] is None:
            assert cursor is not None and seen >= LOST
            return cursor
        cursor = reply.body["next_cursor"]


async def every_item(client: BoardClient, path: str) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        reply = await client.get(path.replace("limit=1", "limit=3") + (f"&cursor={cursor}" if cursor else ""))
        assert reply.status == 200, reply.body
        items += reply.body["items"]
        cursor = reply.body["next_cursor"]
        if cursor is None:
            return items


@pytest.mark.sqlite_only  # taskd restore is the SQLite file's; a PostgreSQL board is restored with pg_restore
async def test_a_page_cursor_from_the_history_a_restore_replaced_is_refused_on_every_list(tmp_path: Path) -> None:
    data_dir, backup_file = tmp_path / "data", tmp_path / "board.backup"
    async with aiohttp.ClientSession() as session:
        async with board_running(data_dir) as board:
            client = BoardClient(board.url, board.token, session)
            worked = await make_task(client, title="worked")
            assert (await client.post(f"{API}/tasks/{worked['id']}/claim", {})).status == 200
            assert (await client.post(f"{API}/admin/backup", {"path": str(backup_file)})).status == 200
            await write_rows(client, worked, "lost", LOST)
            held = {name: await late_cursor(client, path) for name, path in lists(worked["id"]).items()}
            old = (await client.get(f"{API}/meta")).body

        async with board_running(data_dir, restored_from=backup_file) as board:
            client = BoardClient(board.url, board.token, session)
            await write_rows(client, worked, "new", NEW)
            meta = (await client.get(f"{API}/meta")).body
            for name, path in lists(worked["id"]).items():
                refused = await client.get(f"{path}&cursor={held[name]}")
                assert (refused.status, refused.error) == (410, "CURSOR_EXPIRED"), (name, refused.body)
                assert refused.body["error"]["details"] == {
                    "reason": "restored", "cursor_board_id": old["board_id"], "board_id": meta["board_id"]}, name
                assert (await client.get(f"{API}/meta")).body["revision"] == meta["revision"]  # nothing written
            # Pages the restored board issues go through every row it holds.
            made = [item["title"] for item in await every_item(client, lists(worked["id"])["tasks"])]
            assert made == ["worked", *(f"new {n}" for n in range(NEW))]
            ready = [item["title"] for item in await every_item(client, lists(worked["id"])["ready"])]
            assert sorted(ready) == sorted(f"new {n}" for n in range(NEW))
            said = [item["body"] for item in await every_item(client, lists(worked["id"])["comments"])]
            assert said == [f"new {n}" for n in range(NEW)]
            assert len(await every_item(client, lists(worked["id"])["reports"])) == NEW


async def test_page_cursors_of_the_older_shape_page_on_and_foreign_ones_are_refused(tmp_path: Path) -> None:
    """A cursor issued before cursors named their board (a row id alone; the ready queue's rank
    and row id) still pages on; one naming another board is 410 (reason ``another_board``); one
    whose row id is not a number is 400."""
    board = await start_board(tmp_path / "data")
    async with aiohttp.ClientSession() as session:
        try:
            client = BoardClient(board.url, board.token, session)
            worked = await make_task(client, title="worked")
            assert (await client.post(f"{API}/tasks/{worked['id']}/claim", {})).status == 200
            await write_rows(client, worked, "row", 3)
            board_id = (await client.get(f"{API}/meta")).body["board_id"]
            paths = lists(worked["id"])
            for name, path in paths.items():
                first = await client.get(path)
                rest = await client.get(f"{path.replace('limit=1', 'limit=50')}&cursor={first.body['next_cursor']}")
                assert rest.status == 200 and rest.body["items"], (name, rest.body)
                foreign_parts: tuple[str, ...] = ("brd_0123456789abcdef", "1") if name != "ready" else (
                    "brd_0123456789abcdef", "2", "1")
                foreign = await client.get(f"{path}&cursor={encode_cursor(foreign_parts)}")
                assert (foreign.status, foreign.error) == (410, "CURSOR_EXPIRED"), (name, foreign.body)
                assert foreign.body["error"]["details"]["reason"] == "another_board"
                bad_parts = (board_id, "x1") if name != "ready" else (board_id, "2", "x1")
                bad = await client.get(f"{path}&cursor={encode_cursor(bad_parts)}")
                assert (bad.status, bad.error) == (400, "VALIDATION_FAILED"), (name, bad.body)
            # The older shapes, as the board issued them before.
            tasks_first = await client.get(paths["tasks"])
            older = encode_cursor(1)  # the first task's row id
            assert (await client.get(f"{paths['tasks'].replace('limit=1', 'limit=50')}&cursor={older}")).body["items"] == (
                await client.get(f"{paths['tasks'].replace('limit=1', 'limit=50')}&cursor={tasks_first.body['next_cursor']}")
            ).body["items"]
            ready_older = encode_cursor(("2", "0"))  # medium priority, from the first row
            reply = await client.get(f"{paths['ready'].replace('limit=1', 'limit=50')}&cursor={ready_older}")
            assert reply.status == 200 and len(reply.body["items"]) == 3, reply.body
        finally:
            await board.runner.cleanup()
