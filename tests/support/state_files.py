"""State files (``GET``/``POST /api/v1/state``) as the import tests read, edit and send them."""

from __future__ import annotations

import json
from typing import Any

from services.board.keys import SETTINGS
from tests.support.board import API, BoardClient, RunningBoard, row_counts

#: Every table an import writes rows to.
IMPORTED_TABLES = ("projects", "tasks", "comments", "attachments", "labels", "actors", "task_activities")


async def exported(client: BoardClient) -> list[dict[str, Any]]:
    """The board's state export, one record a line."""
    reply = await client.get(f"{API}/state")
    assert reply.status == 200, reply.body
    return [json.loads(line) for line in reply.body.splitlines()]


def encode(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


async def assert_nothing_imported(board: RunningBoard) -> None:
    """A refused import wrote no row and no attachment bytes, wherever the engine keeps them (a
    table on PostgreSQL, files under the data directory on SQLite), so it runs on either engine."""
    assert await row_counts(board, *IMPORTED_TABLES) == (0,) * len(IMPORTED_TABLES)
    if board.store.blobs_in_database:
        assert await row_counts(board, "attachment_blobs") == (0,)
        return
    blobs = board.app[SETTINGS].attachments_dir
    assert not blobs.exists() or not any(path.is_file() for path in blobs.rglob("*"))


async def assert_refused(empty_board: tuple[RunningBoard, BoardClient], records: list[dict[str, Any]],
                         *, line: int | None) -> None:
    """``records`` imported into the empty board: refused whole, 400 VALIDATION_FAILED naming
    ``line`` (when given), and nothing written."""
    board, other = empty_board
    imported = await other.request("POST", f"{API}/state", data=encode(records))
    assert imported.status == 400 and imported.error == "VALIDATION_FAILED", (imported.status, imported.body)
    if line is not None:
        assert imported.body["error"]["details"].get("line") == line, imported.body
    await assert_nothing_imported(board)
