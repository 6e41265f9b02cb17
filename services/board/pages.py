"""Pages of the activity log and their SSE bytes: each row is encoded once, on the thread that read it.

A ``Page`` is what every reader of the log produces — the log reader's live batches, a stream's
catch-up reads — whichever connection read it: ``read_page`` on a ``sqlite3`` connection inside
``store.query``, or ``readers.ActivityReader.fetch_after`` on the asynchronous read side.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import orjson
import structlog

from shared.events import WIRE_NOISE
from shared.sse import encode_event, encode_id_only

from . import activities

log = structlog.get_logger("taskd.pages")


class Frame(NamedTuple):
    """One activity row, encoded: ``wire`` is its complete SSE frame. (A tuple: replay builds
    tens of thousands a second, and a frozen dataclass costs several times more to create.)"""

    revision: int
    event: str
    task_id: str | None
    project_id: str | None
    wire: bytes

    @property
    def noise(self) -> bool:
        return self.event in WIRE_NOISE


@dataclass(frozen=True, slots=True)
class Page:
    """Rows with ``after < revision <= end`` in revision order; nothing else streamable is in that range.

    ``end`` is the snapshot's head when the page is not full (revisions that belong to other tables
    hold no row), else the last row's revision. ``complete`` is False when the rows were not read
    (nobody was listening): such a page only moves the reader's position.
    """

    after: int
    end: int
    frames: tuple[Frame, ...]
    full: bool = False
    complete: bool = True
    #: Every frame a stream without filters receives, joined once (noise left out, see ``wire_for``).
    wire: bytes = b""
    #: The id a stream without filters has announced once it has written ``wire``.
    last_id: int = 0


def encode_row(row: sqlite3.Row) -> Frame:
    try:
        frame = activities.to_frame(row)
    except orjson.JSONDecodeError:
        # A row some other writer stored with broken JSON must not wedge every stream behind it:
        # it is still a signal that something changed, so it goes out with empty changes.
        log.warning("activity_changes_unreadable", revision=row["revision"])
        frame = activities.to_frame(_with_changes(row, "{}"))
    revision = frame["revision"]
    wire = encode_event(revision, orjson.dumps(frame))
    return Frame(revision, frame["event"], frame["task_id"], frame["project_id"], wire)


def _with_changes(row: sqlite3.Row, changes_json: str) -> dict[str, object]:
    # sqlite3.Row iterates over values, not names: keys() is needed here.
    replaced: dict[str, object] = {key: row[key] for key in row.keys()}  # noqa: SIM118
    replaced["changes_json"] = changes_json
    return replaced


def unfiltered_wire(frames: Iterable[Frame], last_id: int) -> tuple[bytes, int]:
    """What a stream without filters sends for ``frames``: noise is left out, but an id-only
    frame after trailing noise moves the client's cursor past it (SPEC §6.4)."""
    parts: list[bytes] = []
    skipped = 0
    for frame in frames:
        if frame.noise:
            skipped = frame.revision
        else:
            parts.append(frame.wire)
            last_id = frame.revision
    if skipped > last_id:
        parts.append(encode_id_only(skipped))
        last_id = skipped
    return b"".join(parts), last_id


def page_of(after: int, limit: int, frames: Sequence[Frame], head: int) -> Page:
    """The page for ``frames`` (the rows after ``after``, oldest first) read in a snapshot whose
    head was ``head``."""
    framed = tuple(frames)
    full = len(framed) == limit
    end = framed[-1].revision if full else max(head, after)
    wire, last_id = unfiltered_wire(framed, after)
    return Page(after, end, framed, full=full, wire=wire, last_id=last_id)


def read_page(conn: sqlite3.Connection, after: int, limit: int = activities.REPLAY_PAGE) -> Page:
    """Streamable rows after ``after``, encoded; one call is one snapshot (``store.query``)."""
    frames = [encode_row(row) for row in activities.replay_after(conn, after, limit)]
    head = activities.head(conn) if len(frames) < limit else 0
    return page_of(after, limit, frames, head)
