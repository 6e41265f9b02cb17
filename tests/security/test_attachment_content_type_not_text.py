"""An attachment's Content-Type that is not UTF-8 text is a 400, and nothing is written (SPEC §1.8).

``attachments.check_content_type`` checked the header's shape (type/subtype, no control
characters) but not that it is text: aiohttp hands undecodable header bytes over as surrogates
(the actor headers refuse them for that reason, ``api.header_actor``). The value passed the
check, the blob was written to disk, and the INSERT of the row failed in the driver: the client
got ``500 INTERNAL`` and a blob no row names was left under ``<data_dir>/attachments``.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.board import BoardClient, RunningBoard, make_task, row_counts

from .support_http import host_port, parse_reply

pytestmark = pytest.mark.asyncio

BAD_TYPE = b"text/plain; charset=\xff\xfe"
CONTENT = b"the attachment's bytes"


async def raw_request(board: RunningBoard, method: str, target: str, headers: list[bytes], body: bytes) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection(*host_port(board.url))
    head = [
        f"{method} {target} HTTP/1.1".encode(),
        f"Host: {board.url.removeprefix('http://')}".encode(),
        f"Authorization: Bearer {board.token}".encode(),
        b"X-Taskloom-Actor: ann",
        b"X-Taskloom-Actor-Kind: human",
        b"Connection: close",
        f"Content-Length: {len(body)}".encode(),
        *headers,
    ]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    try:
        async with asyncio.timeout(10):
            raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    reply = parse_reply(raw)
    return reply.status, json.loads(reply.body)


def blob_files(board: RunningBoard) -> list[str]:
    root = board.data_dir / "attachments"
    return sorted(str(path) for path in root.rglob("*") if path.is_file()) if root.exists() else []


async def test_an_upload_with_an_undecodable_content_type_is_refused(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    before = await row_counts(board, "attachments", "task_activities")

    status, body = await raw_request(
        board, "POST", f"/api/v1/tasks/{task['id']}/attachments?filename=notes.txt", [b"Content-Type: " + BAD_TYPE], CONTENT
    )

    assert status == 400, f"expected 400 VALIDATION_FAILED, got {status} {body}"
    assert body["error"]["code"] == "VALIDATION_FAILED"
    assert await row_counts(board, "attachments", "task_activities") == before, "a refused upload writes no row"
    assert blob_files(board) == [], "a refused upload leaves no blob on disk"


async def test_a_replace_with_an_undecodable_content_type_is_refused(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    added = await client.request(
        "POST", f"/api/v1/tasks/{task['id']}/attachments?filename=notes.txt", data=CONTENT,
        headers={"Content-Type": "text/plain"},
    )
    assert added.status == 201, added.body
    before = await row_counts(board, "attachments", "task_activities")
    blobs = blob_files(board)

    status, body = await raw_request(
        board, "PUT", f"/api/v1/attachments/{added.body['id']}", [b"Content-Type: " + BAD_TYPE], b"new bytes"
    )

    assert status == 400, f"expected 400 VALIDATION_FAILED, got {status} {body}"
    assert body["error"]["code"] == "VALIDATION_FAILED"
    assert await row_counts(board, "attachments", "task_activities") == before
    shown = await client.get(f"/api/v1/attachments/{added.body['id']}")
    assert shown.status == 200 and shown.body == CONTENT, "the old content is kept"
    assert blob_files(board) == blobs, "a refused replace leaves no new blob on disk"
