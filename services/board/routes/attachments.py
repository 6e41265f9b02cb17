"""Attachment routes: upload raw bytes, list, download, replace, remove.

Uploads are read whole (at most 8 MiB, by ``api.read_body`` like every body), hashed and written
to disk off the event loop, and only then recorded; a download reads the blob (at most 8 MiB) off
the event loop and answers it the same way on either engine (``_answer``).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web

from shared.errors import TaskloomError

from ..api import MAX_ATTACHMENT_BYTES, PREFIX, Call, Created, F, Route, read_body
from ..commands import attachments
from ..queries.attachments import blob_content, get_attachment, list_attachments
from ..store import SYSTEM_ACTOR

TASK = f"{PREFIX}/tasks/{{ref}}"
ATTACHMENT = f"{PREFIX}/attachments/{{id}}"


def _root(call: Call) -> Path:
    return call.settings.attachments_dir


async def _store_blob(call: Call, data: bytes) -> str:
    """Hash and write off the loop: 8 MiB of sha256 and fsync would stall every stream.

    A board whose database keeps the bytes (PostgreSQL) only hashes here; the command writes them.
    """
    loop = asyncio.get_running_loop()
    if call.store.blobs_in_database:
        return await loop.run_in_executor(None, lambda: hashlib.sha256(data).hexdigest())
    return await loop.run_in_executor(None, attachments.write_blob, _root(call), data)


async def _purge(call: Call, sha256: str | None) -> None:
    if sha256 is not None:
        await call.store.command(attachments.purge_blob, SYSTEM_ACTOR, sha256, _root(call))


async def list_(call: Call) -> Any:
    return await call.store.query(list_attachments, call.path["ref"])


async def upload(call: Call) -> Any:
    actor = call.actor  # an anonymous write is refused before any byte reaches the disk
    filename = attachments.check_filename(call.query["filename"])
    content_type = attachments.check_content_type(call.request.headers.get(hdrs.CONTENT_TYPE))
    await call.store.query(attachments.check_attachable, call.path["ref"])
    data = await read_body(call.request, MAX_ATTACHMENT_BYTES)
    sha256 = await _store_blob(call, data)
    return Created(
        await call.store.command(
            attachments.add_attachment,
            actor,
            call.path["ref"],
            filename=filename,
            content_type=content_type,
            data=data,
            sha256=sha256,
            root=_root(call),
        )
    )


async def download(call: Call) -> web.StreamResponse:
    meta = await call.store.query(get_attachment, call.path["id"])
    if call.store.blobs_in_database:
        content = await call.store.query(blob_content, meta["sha256"])
        if content is None:
            raise TaskloomError("NOT_FOUND", f"the content of attachment {meta['id']} is missing from the database",
                                details={"attachment": meta["id"], "sha256": meta["sha256"]})
        return _answer(call, meta, content)
    path = attachments.blob_path(_root(call), meta["sha256"])
    try:
        content = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
    except FileNotFoundError:
        raise TaskloomError(
            "NOT_FOUND",
            f"the content of attachment {meta['id']} is missing from {path.parent}",
            details={"attachment": meta["id"], "sha256": meta["sha256"]},
            hint="a backup (taskctl board backup) carries every blob; taskd restore writes them back",
        ) from None
    return _answer(call, meta, content)


def _answer(call: Call, meta: dict[str, Any], content: bytes) -> web.Response:
    """One answer whether the bytes were a file (SQLite) or a row (PostgreSQL): the ETag is the
    content's digest, the same on both engines and after a move between them (a file's mtime is
    neither), a matching If-None-Match is 304, and a Range is ignored (RFC 9110 §14.2 allows it).
    SQLite's ``FileResponse`` alone honoured ranges, so one engine answered 206 where the other 200."""
    etag = f'"{meta["sha256"]}"'
    headers = {
        hdrs.CONTENT_TYPE: attachments.served_content_type(meta["content_type"]),
        hdrs.CONTENT_DISPOSITION: attachments.content_disposition(meta["filename"]),
        hdrs.ETAG: etag,
        hdrs.ACCEPT_RANGES: "none",
        # Served from the board's own origin: never let a browser sniff an upload into HTML.
        "X-Content-Type-Options": "nosniff",
        # And one a browser shows as a page after all (a PDF viewer, a tab that ignores the
        # disposition) runs nothing and has no origin of the board's to act in.
        "Content-Security-Policy": "sandbox; default-src 'none'",
    }
    asked = call.request.headers.get(hdrs.IF_NONE_MATCH)
    if asked is not None and (asked.strip() == "*" or etag in (tag.strip().removeprefix("W/") for tag in asked.split(","))):
        return web.Response(status=304, headers={key: headers[key] for key in (hdrs.ETAG, "X-Content-Type-Options")})
    return web.Response(body=content, headers=headers)


async def replace(call: Call) -> Any:
    actor = call.actor
    filename = call.query.get("filename")
    if filename is not None:
        attachments.check_filename(filename)
    sent_type = call.request.headers.get(hdrs.CONTENT_TYPE)
    content_type = attachments.check_content_type(sent_type) if sent_type else None
    await call.store.query(attachments.check_replaceable, call.path["id"])
    data = await read_body(call.request, MAX_ATTACHMENT_BYTES)
    sha256 = await _store_blob(call, data)
    result, released = await call.store.command(
        attachments.replace_attachment,
        actor,
        call.path["id"],
        data=data,
        sha256=sha256,
        root=_root(call),
        content_type=content_type,
        filename=filename,
    )
    await _purge(call, released)
    return result


async def remove(call: Call) -> Any:
    removed = await call.store.command(attachments.remove_attachment, call.actor, call.path["id"])
    await _purge(call, removed["sha256"])
    return removed


ROUTES = [
    Route("GET", f"{TASK}/attachments", list_, "List a task's attachments (metadata)"),
    Route("POST", f"{TASK}/attachments", upload,
          "Attach the request body (raw bytes, at most 8 MiB) with its Content-Type",
          query={"filename": F("str", required=True, description="a plain file name, at most 255 characters")},
          raw_body=True, max_body=MAX_ATTACHMENT_BYTES, success=(201,)),
    Route("GET", ATTACHMENT, download, "Download an attachment's bytes (ETag: its sha256; no ranges)",
          success=(200, 304)),
    Route("PUT", ATTACHMENT, replace, "Replace an attachment's content (and optionally its name)",
          query={"filename": F("str", description="rename it at the same time")},
          raw_body=True, max_body=MAX_ATTACHMENT_BYTES),
    Route("DELETE", ATTACHMENT, remove, "Remove an attachment"),
]
