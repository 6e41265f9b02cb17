"""``GET /api/v1/state`` (the card state as JSON lines, streamed) and ``POST /api/v1/state`` (import).

The export is read in one snapshot on a reader thread and streamed while it is read: the thread
hands chunks of lines through a small bounded queue, so memory stays bounded whatever the board's
size and a slow client slows the read, not the board. A client that stops reading for
``STALL_SECONDS`` ends the export (the reader thread is the board's, not the client's). An error
before the first line is an ordinary JSON error; after it the stream is cut, and the missing
``end`` line tells the reader the file is incomplete.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final

import structlog
from aiohttp import hdrs, web

from ..api import PREFIX, Call, Created, Route, read_body
from ..commands import attachments, state_import
from ..queries import state
from ..store import utc_now

log = structlog.get_logger("taskd")

#: Bytes of lines handed over at once, and chunks waiting at most: the export's memory bound.
CHUNK_BYTES: Final = 256 * 1024
QUEUED_CHUNKS: Final = 8
#: Seconds the reader thread waits for a client that reads nothing before it ends the export.
STALL_SECONDS: Final = 60.0
#: The largest import body: 50,000 tasks with their comments are a few tens of MiB; attachments
#: (at most 8 MiB each, a third more as base64) are most of the rest.
MAX_STATE_BYTES: Final = 1024 * 1024 * 1024
NDJSON: Final = "application/x-ndjson"


class _ClientGone(Exception):
    """The client left (or stopped reading): the reader thread stops reading the export."""


_DONE: Final = object()


def _producer(
    chunks: queue.Queue[Any], gone: threading.Event, exported_at: str, root: Any, blobs_in_database: bool
) -> Callable[[Any], None]:
    def hand(chunk: Any) -> None:
        waited = 0.0
        while True:
            if gone.is_set():
                raise _ClientGone
            try:
                chunks.put(chunk, timeout=0.5)
                return
            except queue.Full:
                waited += 0.5
                if waited >= STALL_SECONDS:
                    raise _ClientGone from None

    def produce(conn: Any) -> None:
        try:
            buffer = bytearray()
            for line in state.export_lines(conn, exported_at=exported_at, attachments_dir=root,
                                           blobs_in_database=blobs_in_database):
                buffer += line
                if len(buffer) >= CHUNK_BYTES:
                    hand(bytes(buffer))
                    buffer.clear()
            if buffer:
                hand(bytes(buffer))
            hand(_DONE)
        except _ClientGone:
            pass
        except Exception as exc:  # noqa: BLE001 - handed to the event loop, which answers or cuts the stream
            with contextlib.suppress(_ClientGone):
                hand(exc)

    return produce


async def export_state(call: Call) -> web.StreamResponse:
    if call.request.method == hdrs.METH_HEAD:
        # RFC 9110 §9.3.2: a GET's status and headers, no body; reading a snapshot to throw it
        # away would cost the board a whole export.
        head = web.StreamResponse(headers={"Cache-Control": "no-store"})
        head.content_type = NDJSON
        head.charset = "utf-8"
        return head
    # A blob the snapshot names stays on disk until the export has read it, as for a backup:
    # a removal committed meanwhile would otherwise unlink it from under the export.
    async with attachments.blobs_held(call.store, call.settings.attachments_dir):
        return await _export(call)


async def _export(call: Call) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    chunks: queue.Queue[Any] = queue.Queue(maxsize=QUEUED_CHUNKS)
    gone = threading.Event()
    reading = asyncio.ensure_future(
        call.store.streaming_query(_producer(chunks, gone, utc_now(), call.settings.attachments_dir, call.store.blobs_in_database))
    )
    try:
        first = await loop.run_in_executor(None, chunks.get)
        if isinstance(first, BaseException):
            raise first
        response = web.StreamResponse(headers={"Cache-Control": "no-store"})
        response.content_type = NDJSON
        response.charset = "utf-8"
        await response.prepare(call.request)
        item = first
        while item is not _DONE:
            try:
                await response.write(item)
            except ConnectionError:
                return response  # the client left; the reader thread stops at its next chunk
            item = await loop.run_in_executor(None, chunks.get)
            if isinstance(item, BaseException):
                log.error("state_export_failed", error=str(item))
                # Cut short without the end line: the reader can tell (queries/state.py).
                if call.request.transport is not None:
                    call.request.transport.close()
                return response
        await response.write_eof()
        return response
    finally:
        gone.set()
        while not reading.done():
            with contextlib.suppress(queue.Empty):
                chunks.get_nowait()  # a reader thread waiting to hand a chunk sees ``gone`` at once
            await asyncio.wait({reading}, timeout=0.05)


async def import_state_route(call: Call) -> Any:
    asker = call.actor  # an anonymous import is refused like any other write
    data = await read_body(call.request, MAX_STATE_BYTES)
    # Emptiness first: into a board that has projects nothing is imported, whatever the file holds.
    await call.store.query(state_import.require_empty)
    loop = asyncio.get_running_loop()
    parsed = await loop.run_in_executor(None, state_import.parse_state, data.splitlines())
    root = call.settings.attachments_dir
    # A database that keeps the bytes (PostgreSQL) gets them in the import's own transaction.
    written = [] if call.store.blobs_in_database else list(parsed.blobs)
    for sha256 in written:
        # Before the transaction, as for an upload: a blob without a row is harmless, the reverse is not.
        await loop.run_in_executor(None, attachments.write_blob, root, parsed.blobs[sha256], sha256)
    try:
        result = await call.store.command(state_import.import_state, state_import.IMPORTER, parsed, root)
    except Exception:
        # Refused by the database (a CHECK, a trigger) or lost: a refused import writes nothing, so
        # the bytes go again, each on the writer thread, where no row can name it meanwhile.
        await attachments.purge_blobs(call.store, written, root)
        raise
    log.info("state_imported", asked_by=f"{asker.kind}:{asker.id}", revision=result["revision"], counts=result["imported"])
    return Created(result)


ROUTES = [
    Route("GET", f"{PREFIX}/state", export_state,
          "The card state as JSON lines (header, projects … attachments with their bytes, end); not the activity log"),
    Route("POST", f"{PREFIX}/state", import_state_route,
          "Import a state export into a board without projects: checked line by line first, then one transaction",
          raw_body=True, max_body=MAX_STATE_BYTES, success=(201,)),
]
