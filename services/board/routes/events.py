"""``GET /api/v1/events``: the live stream over the activity log (SPEC §6)."""

from __future__ import annotations

from typing import Final

from aiohttp import hdrs, web

from shared.errors import TaskloomError, validation
from shared.events import EVENT_SET, WIRE_NOISE

from ..api import PREFIX, Call, F, Route
from ..client_stream import HEADERS as STREAM_HEADERS
from ..client_stream import Projection, Stream
from ..dialect import Connection
from ..keys import CREDENTIALS, LOG_READER, SESSION, STREAMS
from ..queries import activities
from ..queries.projects import require_project
from ..queries.tasks import require_task

LAST_EVENT_ID: Final = "Last-Event-ID"
#: Longest cursor accepted from the header; a revision never needs more (SQLite integers are 64-bit).
MAX_CURSOR_DIGITS: Final = 18

EVENTS_QUERY = {
    "after": F(
        "int",
        minimum=0,
        description="resume after this revision; with a Last-Event-ID header too, the later of the two",
    ),
    "project": F("str", description="only rows of this project"),
    "task": F("str", description="only rows of this task (uuid or identifier)"),
    "event": F("list", items="str", description="comma-separated event names to send"),
    "signals": F("bool", description="0 leaves out the id-less `event: signal` condition frames (default 1)"),
}


def header_cursor(values: list[str]) -> int | None:
    """The ``Last-Event-ID`` cursor; a malformed one is refused, never read as 'from the start'.

    ``values`` is every ``Last-Event-ID`` line of the request. Two of them name two positions and
    resolving them either way can skip rows the client never had, so they are refused like a
    repeated ``?after=`` (RFC 9110 §5.3 would fold them into one list, which is no revision either).
    """
    if len(values) > 1:
        raise validation("Last-Event-ID given more than once; send one", last_event_id=values)
    value = values[0] if values else None
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_CURSOR_DIGITS):
        raise validation("Last-Event-ID must be a revision (a non-negative integer)", last_event_id=value)
    return int(text)


def event_filter(names: list[str] | None) -> frozenset[str] | None:
    if not names:
        return None
    for name in names:
        if name in WIRE_NOISE:
            raise validation(f"{name} is wire noise and never streamed", field="event", value=name)
        if name not in EVENT_SET:
            raise validation(f"unknown event name {name!r}", field="event", value=name)
    return frozenset(names)


def open_cursor(
    conn: Connection, after: int | None, project: str | None, task: str | None
) -> tuple[int, str | None]:
    """The start position and the filtered task's id, read in one snapshot (SPEC §6.2)."""
    task_id = require_task(conn, task)["id"] if task is not None else None
    if project is not None:
        require_project(conn, project)
    head = activities.head(conn)
    if after is None:
        return head, task_id  # a live subscription, not a replay
    if after > head:
        raise TaskloomError(
            "CURSOR_AHEAD",
            f"cursor {after} is beyond this board's head revision {head}",
            details={"after": after, "head": head},
            hint="a board restored from an older backup? read /api/v1/meta and rescan",
        )
    activities.check_not_expired(conn, after)
    return after, task_id


def resume_cursor(query_after: int | None, last_event_id: int | None) -> int | None:
    """Where a stream resumes when a client names ``?after=``, ``Last-Event-ID``, or both (SPEC §6.2).

    A native ``EventSource`` keeps its URL, so on every reconnect it resends the ``?after=`` it
    was opened with alongside the ``Last-Event-ID`` of its own progress; letting the query win
    replayed everything since the page opened. A ``Last-Event-ID`` can only come from this
    stream's frames, so the later of the two is the client's true position. Both were validated
    before this point: a malformed value is refused, never ignored.
    """
    cursors = [cursor for cursor in (query_after, last_event_id) if cursor is not None]
    return max(cursors) if cursors else None


async def stream_events(call: Call) -> web.StreamResponse:
    query_after: int | None = call.query.get("after")
    after = resume_cursor(query_after, header_cursor(call.request.headers.getall(LAST_EVENT_ID, [])))
    events = event_filter(call.query.get("event"))
    project = call.query.get("project")
    position, task_id = await call.store.query(open_cursor, after, project, call.query.get("task"))
    app = call.request.app
    registry = app[STREAMS]
    registry.check_capacity()
    if call.request.method == hdrs.METH_HEAD:
        # RFC 9110 §9.3.2: the status and headers a GET would get, no body. Running the stream
        # would hold the connection with nothing to send, and a HEAD reply has no end to wait for.
        head = web.StreamResponse(headers=STREAM_HEADERS)
        head.content_type = "text/event-stream"
        head.charset = "utf-8"
        return head
    settings = call.settings
    stream = Stream(
        call.request,
        store=call.store,
        reader=app[LOG_READER],
        position=position,
        projection=Projection(project=project, task_id=task_id, events=events, signals=call.query.get("signals", True)),
        retry_ms=settings.retry_ms,
        ping_interval=settings.ping_interval,
    )
    session = call.request.get(SESSION)
    left = app[CREDENTIALS].max_age(session) if session is not None else None
    return await registry.serve(stream, session_left=left)


ROUTES = [
    Route(
        "GET",
        f"{PREFIX}/events",
        stream_events,
        "Follow the activity log as Server-Sent Events (replay from a cursor, then live)",
        query=EVENTS_QUERY,
    ),
]
