"""The writer's hand-off to the live fan-out: a batch's frames go out without being read back.

Without it, a commit wakes the log reader, which hops to its thread, reads back the rows the
writer has just written, decodes their changes JSON, encodes it again into frames and hops back.
With it, ``Tx.record`` encodes each frame on the writer thread from the very bytes it inserts,
and after COMMIT the store hands the batch to :meth:`Handoff.deliver` on the event loop, which
publishes it as the reader would have.

That is only right when the reader's position equals the head the batch began on. The batch
read that head under the write lock, so nobody committed between it and the batch's own rows;
but a commit by another process (a script, ``taskctl`` on the file, a second board on PostgreSQL)
*before* the batch may not have been read yet. Then ``deliver`` declines, and the log reader reads
the whole range — the other commit and the batch — from the database as before. A page the reader
was already reading when the hand-off went out may overlap it; streams skip what they already
have by revision (``Stream.offer``), so nothing is sent twice.

Where several board processes serve one PostgreSQL database, the writer also encodes its frames
while another process has live streams, with no stream of its own, and they travel with the
COMMIT (``postgres_store.FRAMES_CHANNEL``, ``pack``/``unpack``): the other processes' hand-offs
publish them under the same rule, so a stream there needs no read of the rows either.
"""

from __future__ import annotations

import asyncio
from typing import Final

import orjson

from shared.sse import encode_event

from .logreader import Frame, LogReader, Page, unfiltered_wire
from .store import WriterStore

#: The fields of an activity frame before and after ``changes`` (SPEC §6.1, ``activities.to_frame``).
_CHANGES: Final = b',"changes":'
_CREATED_AT: Final = b',"created_at":'


def encode_recorded(
    row_id: int, revision: int, task_id: str | None, project_id: str | None, actor_kind: str, actor_id: str,
    event: str, changes_json: bytes, created_at: str,
) -> Frame:
    """The frame the log reader would build from this row, without decoding ``changes`` again.

    ``changes_json`` is orjson's own output, which orjson reads back and writes to the same bytes,
    so splicing it in gives exactly ``orjson.dumps(activities.to_frame(row))``
    (``tests/integration/test_frame_handoff.py`` compares the two on every frame it sees).
    """
    head = orjson.dumps({
        "id": row_id, "revision": revision, "task_id": task_id, "project_id": project_id,
        "actor_kind": actor_kind, "actor_id": actor_id, "event": event,
    })
    data = head[:-1] + _CHANGES + changes_json + _CREATED_AT + orjson.dumps(created_at) + b"}"
    return Frame(revision, event, task_id, project_id, encode_event(revision, data))


class Handoff:
    """Publishes committed batches for one log reader (``WriterStore.attach_handoff``)."""

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self.loop = asyncio.get_running_loop()
        #: Batches published from the writer's frames, and batches left to the reader (tests, bench).
        self.taken = 0
        self.declined = 0
        #: Rows published from the writer's frames (the log reader counts those it read itself).
        self.rows = 0
        #: Batches the log reader had already published: its poll saw the commit before the
        #: hand-off reached the loop (harmless, the reader's page went out instead).
        self.overtaken = 0

    def attach(self, store: WriterStore) -> None:
        store.attach_handoff(self)

    @staticmethod
    def detach(store: WriterStore) -> None:
        store.attach_handoff(None)

    def wanted(self) -> bool:
        # Read on the writer thread: a stale answer only costs one batch its hand-off (or an
        # encoding nobody uses), never a frame.
        return self.reader.subscribers > 0

    encode = staticmethod(encode_recorded)

    @staticmethod
    def pack(frames: tuple[Frame, ...]) -> bytes:
        """The frames for another board process (``BatchHandoff.pack``): each one's fields, its SSE
        bytes as they are, so what that process's streams send is byte for byte what these send."""
        return orjson.dumps([(frame.revision, frame.event, frame.task_id, frame.project_id, frame.wire.decode())
                             for frame in frames])

    @staticmethod
    def unpack(packed: bytes) -> tuple[Frame, ...]:
        try:
            return tuple(Frame(int(revision), str(event), task_id, project_id, wire.encode())
                         for revision, event, task_id, project_id, wire in orjson.loads(packed))
        except (TypeError, AttributeError) as exc:  # well-formed JSON of another shape
            raise ValueError(f"not packed frames: {exc}") from exc

    def deliver(self, after: int, end: int, frames: tuple[Frame, ...]) -> bool:
        """On the event loop after COMMIT: publish the batch if it starts where the reader stands."""
        reader = self.reader
        if asyncio.get_running_loop() is not self.loop or reader.stopped:
            return False
        if end <= reader.position:
            self.overtaken += 1
            return True  # the reader has already read it
        if after != reader.position or not reader.subscribers:
            # Something before this batch is still unread (another process committed), or there
            # is nobody live (the commit listener only moves the position then).
            self.declined += 1
            return False
        wire, last_id = unfiltered_wire(frames, after)
        reader.publish(Page(after, end, frames, wire=wire, last_id=last_id))
        self.taken += 1
        self.rows += len(frames)
        return True
