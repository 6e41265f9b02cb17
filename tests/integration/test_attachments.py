"""Attachments over a real board: content-addressed blobs on disk, rows in the log, and every
refusal leaving neither a row nor a blob behind."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest

from services.board.commands import attachments
from services.board.store import Actor
from tests.support.board import (
    BoardClient,
    RunningBoard,
    last_row,
    make_task,
    row_counts,
)

pytestmark = pytest.mark.asyncio

MiB = 1 << 20


async def counts(board: RunningBoard) -> tuple[int, ...]:
    """(activity rows, attachment rows)."""
    return await row_counts(board, "task_activities", "attachments")


def blobs(board: RunningBoard) -> list[Path]:
    """Every file under attachments/, temp files included: a refusal must leave none."""
    root = board.data_dir / "attachments"
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


def blob(board: RunningBoard, data: bytes) -> Path:
    digest = hashlib.sha256(data).hexdigest()
    return board.data_dir / "attachments" / digest[:2] / digest


async def upload(client: BoardClient, task: dict, filename: str, data: bytes, content_type: str = "text/plain", **kw):
    return await client.request(
        "POST",
        f"/api/v1/tasks/{task['identifier']}/attachments?filename={quote(filename, safe='')}",
        data=data,
        headers={"Content-Type": content_type},
        **kw,
    )


async def attach(client: BoardClient, task: dict, filename: str, data: bytes, content_type: str = "text/plain") -> dict:
    reply = await upload(client, task, filename, data, content_type)
    assert reply.status == 201, reply.body
    return reply.body


# -- happy paths --------------------------------------------------------------------------------


async def test_upload_stores_the_blob_then_the_row(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    data = b"# Notes\n\nfirst draft\n"
    before = await counts(board)
    meta = await attach(client, task, "notes.md", data, "text/markdown; charset=utf-8")
    assert meta["task_id"] == task["id"] and meta["filename"] == "notes.md"
    assert meta["content_type"] == "text/markdown; charset=utf-8" and meta["size"] == len(data)
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert await counts(board) == (before[0] + 1, before[1] + 1)
    assert blob(board, data).read_bytes() == data
    assert blobs(board) == [blob(board, data)]

    row = await last_row(client, task["id"])
    assert row["event"] == "attachment_added" and row["task_id"] == task["id"]
    assert row["changes"] == {
        "attachmentId": meta["id"], "filename": "notes.md", "content_type": "text/markdown; charset=utf-8", "size": len(data),
    }


async def test_download_returns_the_bytes_with_type_and_name(client: BoardClient) -> None:
    task = await make_task(client)
    data = bytes(range(256)) * 10
    meta = await attach(client, task, "Résumé v2.bin", data, "application/x-thing")
    reply = await client.get(f"/api/v1/attachments/{meta['id']}")
    assert reply.status == 200 and reply.body == data
    assert reply.headers["Content-Type"] == "application/x-thing"
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    disposition = reply.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="R_sum_ v2.bin"')
    assert "filename*=UTF-8''R%C3%A9sum%C3%A9%20v2.bin" in disposition


async def test_eight_mebibytes_round_trip(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    data = os.urandom(8 * MiB)
    meta = await attach(client, task, "big.bin", data, "application/octet-stream")
    assert meta["size"] == 8 * MiB
    reply = await client.get(f"/api/v1/attachments/{meta['id']}")
    assert reply.status == 200 and reply.body == data


async def test_list_shows_metadata_only(client: BoardClient) -> None:
    task = await make_task(client)
    one = await attach(client, task, "a.txt", b"a")
    two = await attach(client, task, "b.txt", b"bb")
    listed = (await client.get(f"/api/v1/tasks/{task['identifier']}/attachments")).body
    assert listed == {"items": [one, two], "next_cursor": None}


async def test_replace_writes_attachment_updated_and_drops_the_old_blob(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "plan.txt", b"version one")
    reply = await client.request("PUT", f"/api/v1/attachments/{meta['id']}", data=b"version two, longer",
                                 headers={"Content-Type": "text/plain"})
    assert reply.status == 200, reply.body
    assert reply.body["size"] == len(b"version two, longer") and reply.body["id"] == meta["id"]
    row = await last_row(client, task["id"])
    assert row["event"] == "attachment_updated"
    assert row["changes"] == {"attachmentId": meta["id"], "filename": "plan.txt", "content_type": "text/plain", "size": 19}
    assert (await client.get(f"/api/v1/attachments/{meta['id']}")).body == b"version two, longer"
    assert blobs(board) == [blob(board, b"version two, longer")]


async def test_replace_may_rename(client: BoardClient) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "draft.txt", b"text")
    reply = await client.request("PUT", f"/api/v1/attachments/{meta['id']}?filename=final.txt", data=b"text",
                                 headers={"Content-Type": "text/plain"})
    assert reply.status == 200 and reply.body["filename"] == "final.txt"
    assert (await last_row(client, task["id"]))["changes"]["filename"] == "final.txt"


async def test_replacing_with_the_same_bytes_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "same.txt", b"unchanged")
    before = await counts(board)
    reply = await client.request("PUT", f"/api/v1/attachments/{meta['id']}", data=b"unchanged",
                                 headers={"Content-Type": "text/plain"})
    assert reply.status == 200 and reply.body == meta
    assert await counts(board) == before


async def test_remove_writes_attachment_removed_and_keeps_shared_blobs(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    other = await make_task(client, title="Same file elsewhere")
    data = b"shared bytes"
    first = await attach(client, task, "one.txt", data)
    second = await attach(client, other, "two.txt", data)
    assert blobs(board) == [blob(board, data)]

    reply = await client.request("DELETE", f"/api/v1/attachments/{first['id']}")
    assert reply.status == 200 and reply.body == first
    row = await last_row(client, task["id"])
    assert row["event"] == "attachment_removed"
    assert row["changes"] == {"attachmentId": first["id"], "filename": "one.txt", "content_type": "text/plain", "size": 12}
    assert (await client.get(f"/api/v1/attachments/{first['id']}")).error == "NOT_FOUND"
    assert blobs(board) == [blob(board, data)]  # still named by the second attachment

    assert (await client.request("DELETE", f"/api/v1/attachments/{second['id']}")).status == 200
    assert blobs(board) == []


# -- refusals: a clear code, no row, no blob ------------------------------------------------------


async def refused(board: RunningBoard, reply, status: int, code: str, before: tuple[int, int]) -> None:  # noqa: ANN001
    assert (reply.status, reply.error) == (status, code), reply.body
    assert await counts(board) == before
    assert blobs(board) == []


async def test_nine_mebibytes_is_413_and_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await upload(client, task, "huge.bin", b"\0" * (9 * MiB), "application/octet-stream")
    await refused(board, reply, 413, "PAYLOAD_TOO_LARGE", before)


async def test_oversize_chunked_upload_without_length_is_413(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await counts(board)

    async def stream() -> AsyncIterator[bytes]:
        for _ in range(9):
            yield b"\0" * MiB

    reply = await upload(client, task, "huge.bin", stream(), "application/octet-stream")  # type: ignore[arg-type]
    await refused(board, reply, 413, "PAYLOAD_TOO_LARGE", before)


async def test_oversize_replacement_is_413_and_keeps_the_old_content(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "keep.txt", b"keep me")
    before = await counts(board)
    reply = await client.request("PUT", f"/api/v1/attachments/{meta['id']}", data=b"\0" * (9 * MiB))
    assert (reply.status, reply.error) == (413, "PAYLOAD_TOO_LARGE")
    assert await counts(board) == before
    assert blobs(board) == [blob(board, b"keep me")]


@pytest.mark.parametrize(
    "filename",
    ["../escape.txt", "dir/file.txt", "..", ".", "a..b", "back\\slash.txt", "", "   ", "x" * 256, "nul\0.txt", "line\nbreak"],
)
async def test_bad_filenames_write_nothing(client: BoardClient, board: RunningBoard, filename: str) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await upload(client, task, filename, b"content")
    await refused(board, reply, 400, "VALIDATION_FAILED", before)


async def test_a_255_character_name_is_fine(client: BoardClient) -> None:
    task = await make_task(client)
    await attach(client, task, "é" * 251 + ".txt", b"long name")


async def test_missing_filename_is_refused(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await client.request("POST", f"/api/v1/tasks/{task['id']}/attachments", data=b"content")
    await refused(board, reply, 400, "VALIDATION_FAILED", before)
    assert reply.body["error"]["details"] == {"field": "filename"}


@pytest.mark.parametrize("content_type", ["not a type", "text/", "text/plain, text/html"])
async def test_bad_content_type_writes_nothing(client: BoardClient, board: RunningBoard, content_type: str) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await upload(client, task, "x.txt", b"content", content_type)
    await refused(board, reply, 400, "VALIDATION_FAILED", before)


async def test_upload_to_an_unknown_task_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    await make_task(client)
    before = await counts(board)
    reply = await upload(client, {"identifier": "DEMO-0404"}, "x.txt", b"content")
    await refused(board, reply, 404, "NOT_FOUND", before)


async def test_upload_without_an_actor_writes_nothing(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await upload(client, task, "x.txt", b"content", actor=None)
    await refused(board, reply, 403, "ACTOR_REQUIRED", before)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_unknown_attachment_id_is_404(client: BoardClient, board: RunningBoard, method: str) -> None:
    await make_task(client)
    before = await counts(board)
    reply = await client.request(method, "/api/v1/attachments/00000000-0000-0000-0000-000000000000", data=b"new")
    await refused(board, reply, 404, "NOT_FOUND", before)


async def test_a_missing_blob_is_reported_not_served(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "lost.txt", b"lost")
    blob(board, b"lost").unlink()
    reply = await client.get(f"/api/v1/attachments/{meta['id']}")
    assert (reply.status, reply.error) == (404, "NOT_FOUND")
    assert reply.body["error"]["details"] == {"attachment": meta["id"], "sha256": meta["sha256"]}


async def test_one_byte_over_the_limit_is_413(client: BoardClient, board: RunningBoard) -> None:
    task = await make_task(client)
    before = await counts(board)
    reply = await upload(client, task, "edge.bin", b"\0" * (8 * MiB + 1), "application/octet-stream")
    await refused(board, reply, 413, "PAYLOAD_TOO_LARGE", before)


async def test_a_row_never_lands_without_its_blob(client: BoardClient, board: RunningBoard) -> None:
    """If a purge removed the blob between the upload's write and its transaction (both run on
    the writer thread, so the command re-checks), the command writes it again before the row."""
    task = await make_task(client)
    data = b"raced bytes"
    digest = hashlib.sha256(data).hexdigest()
    assert not blob(board, data).exists()
    meta = await board.store.command(
        attachments.add_attachment,
        Actor("human", "ann"),
        task["id"],
        filename="raced.txt",
        content_type="text/plain",
        data=data,
        sha256=digest,
        root=board.data_dir / "attachments",
    )
    assert blob(board, data).read_bytes() == data
    assert (await client.get(f"/api/v1/attachments/{meta['id']}")).body == data


async def test_a_download_answers_alike_on_either_engine(client: BoardClient) -> None:
    """The bytes are a file on SQLite and a row on PostgreSQL, but the answer is one: a strong ETag
    named by the content's digest (so it is the same after a move between engines, where a file's
    mtime is not), a conditional GET answered 304, and a Range ignored (RFC 9110 §14.2). SQLite's
    file answer alone honoured ranges (206, 416) and If-None-Match with an mtime ETag; PostgreSQL's
    answered 200 to both."""
    task = await make_task(client)
    data = bytes(range(256)) * 8
    added = await client.request("POST", f"/api/v1/tasks/{task['id']}/attachments?filename=a.bin",
                                 data=data, headers={"Content-Type": "application/octet-stream"})
    assert added.status == 201, added.body
    url = f"/api/v1/attachments/{added.body['id']}"
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    whole = await client.get(url)
    assert (whole.status, whole.body, whole.headers.get("ETag")) == (200, data, etag)
    again = await client.get(url, headers={"If-None-Match": etag})
    assert again.status == 304, again.status
    for asked in ("bytes=0-3", "bytes=5000-6000"):
        ranged = await client.get(url, headers={"Range": asked})
        assert (ranged.status, ranged.body) == (200, data), (asked, ranged.status)
    other = await client.get(url, headers={"If-None-Match": '"0000"'})
    assert (other.status, other.body) == (200, data)
