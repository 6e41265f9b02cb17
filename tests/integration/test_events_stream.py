"""The live stream (SPEC §6) over a real board on loopback: frames, cursors, projection, limits, ending.

``EventStream`` is the test client: aiohttp for the socket and the shared ``SSEParser`` for the
bytes, as every Python client of the stream does it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from services.board.fanout import Handoff
from services.board.keys import LOG_READER, STREAMS
from services.board.logreader import LogReader
from services.board.store import Actor, Tx
from shared import events
from shared.sse import SSEComment, SSEItem, SSEMessage, SSEParser
from tests.support.board import BoardClient, RunningBoard, start_board
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

WRITER = Actor("human", "ann")
REPO = Path(__file__).resolve().parents[2]


class StreamClosed(Exception):
    """The server ended the response."""


class EventStream:
    """One SSE connection: read items with a deadline, remember the cursor, close at will."""

    def __init__(self, response: aiohttp.ClientResponse, parser: SSEParser) -> None:
        self.response = response
        self.parser = parser
        self.items: deque[SSEItem] = deque()
        self.eof = False
        self.opening: SSEItem | None = None
        self.cursor = parser.last_event_id

    @classmethod
    async def open(
        cls,
        session: aiohttp.ClientSession,
        board: RunningBoard,
        query: str = "",
        *,
        last_event_id: str | None = None,
        token: str | None = None,
    ) -> EventStream:
        headers = {"Authorization": f"Bearer {token or board.token}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        response = await session.get(f"{board.url}/api/v1/events{query}", headers=headers)
        assert response.status == 200, await response.text()
        stream = cls(response, SSEParser(last_event_id=last_event_id or ""))
        # The stream's first frame; once it is here the server has registered the stream.
        stream.opening = await stream.next()
        return stream

    @property
    def last_event_id(self) -> int:
        """The id of the last message *taken* (the parser may have read further ahead)."""
        return int(self.cursor) if self.cursor.isdigit() else 0

    async def next(self, timeout: float = 10.0) -> SSEItem:
        async with asyncio.timeout(timeout):
            while not self.items:
                if self.eof:
                    raise StreamClosed
                chunk = await self.response.content.readany()
                if not chunk:
                    self.eof = True
                    continue
                self.items.extend(self.parser.feed(chunk))
        item = self.items.popleft()
        if isinstance(item, SSEMessage) and item.id is not None:
            self.cursor = item.id
        return item

    async def message(self, timeout: float = 10.0) -> SSEMessage:
        """The next message, skipping comments (pings)."""
        while True:
            item = await self.next(timeout)
            if isinstance(item, SSEMessage):
                return item

    async def activities_until(self, revision: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Data frames until the cursor reaches ``revision`` (id-only frames move it too)."""
        received: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while self.last_event_id < revision:
            message = await self.message(max(0.01, deadline - time.monotonic()))
            if message.data is not None and message.event is None:
                received.append(orjson.loads(message.data))
        return received

    async def until_eof(self, timeout: float = 10.0) -> list[SSEItem]:
        rest: list[SSEItem] = []
        try:
            while True:
                rest.append(await self.next(timeout))
        except StreamClosed:
            return rest

    def close(self) -> None:
        self.response.close()


async def activity_count(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT count(*) FROM task_activities").fetchone()[0])


async def streamable_revisions(board: RunningBoard) -> list[int]:
    """Every revision a complete, unfiltered stream must deliver as data, in order."""
    noise = tuple(events.WIRE_NOISE)
    return await board.store.query(
        lambda conn: [
            row[0]
            for row in conn.execute(
                f"SELECT revision FROM task_activities WHERE revision IS NOT NULL AND event NOT IN ({','.join('?' * len(noise))})"
                " ORDER BY revision",
                noise,
            )
        ]
    )


async def last_revision(board: RunningBoard) -> int:
    return await board.store.query(lambda conn: conn.execute("SELECT max(revision) FROM task_activities").fetchone()[0] or 0)


async def make_project(client: BoardClient, project: str = "demo") -> None:
    reply = await client.post("/api/v1/projects", {"id": project, "name": project.title()})
    assert reply.status == 201, reply.body


async def make_task(client: BoardClient, project: str = "demo", title: str = "Write the docs") -> dict[str, Any]:
    reply = await client.post("/api/v1/tasks", {"project": project, "title": title})
    assert reply.status == 201, reply.body
    return reply.body


def bulk_rows(tx: Tx, task_id: str, project_id: str, count: int, *, size: int = 0) -> None:
    """Many rows in one command: fast, and the same code path as any other write."""
    for n in range(count):
        changes = events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * size}})
        tx.record(events.TASK_UPDATED, changes, task_id=task_id, project_id=project_id)


@pytest.fixture
async def session() -> Any:
    async with aiohttp.ClientSession() as session:
        yield session


# -- frames and headers -----------------------------------------------------------------------


async def test_stream_opens_with_headers_then_retry(board: RunningBoard, session: aiohttp.ClientSession) -> None:
    stream = await EventStream.open(session, board)
    try:
        headers = stream.response.headers
        assert headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert headers["Cache-Control"] == "no-cache, no-transform"
        assert headers["X-Accel-Buffering"] == "no"
        assert stream.opening == SSEMessage(retry=1000)
    finally:
        stream.close()


async def test_live_frames_are_the_activity_rows(board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession) -> None:
    stream = await EventStream.open(session, board)
    try:
        await make_project(client)
        task = await make_task(client)
        head = await last_revision(board)
        rows = (await client.get("/api/v1/activities")).body["items"]
        got = []
        while stream.last_event_id < head:
            message = await stream.message()
            assert message.event is None, "activity frames carry no event: field"
            assert message.data is not None
            assert message.id == str(orjson.loads(message.data)["revision"])
            got.append(orjson.loads(message.data))
        assert got == rows
        assert [row["event"] for row in got] == ["project_created", "task_created"]
        assert got[1]["task_id"] == task["id"]
    finally:
        stream.close()


async def test_without_a_cursor_the_stream_starts_at_the_head(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    await make_task(client, title="before")
    stream = await EventStream.open(session, board)
    try:
        after = await make_task(client, title="after")
        message = await stream.message()
        while message.data is None:
            message = await stream.message()
        assert orjson.loads(message.data)["task_id"] == after["id"]
    finally:
        stream.close()


async def test_replay_in_pages_then_live_without_gap(board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession) -> None:
    await make_project(client)
    task = await make_task(client)
    await board.store.command(bulk_rows, WRITER, task["id"], "demo", 1234)
    stream = await EventStream.open(session, board, "?after=0")
    try:
        replayed = await stream.activities_until(await last_revision(board))
        live = await make_task(client, title="live")
        got = replayed + await stream.activities_until(live["revision"])
        assert [row["revision"] for row in got] == await streamable_revisions(board)
        assert len(got) == 1234 + 3
    finally:
        stream.close()


async def test_one_commit_longer_than_a_reader_batch_arrives_live(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    stream = await EventStream.open(session, board)
    try:
        await async_wait_until(lambda: _true(board.app[LOG_READER].subscribers == 1), what="the stream to go live")
        start = await last_revision(board)
        await board.store.command(bulk_rows, WRITER, task["id"], "demo", 1777)
        got = await stream.activities_until(await last_revision(board))
        assert [row["revision"] for row in got] == [r for r in await streamable_revisions(board) if r > start]
        assert len(got) == 1777
        assert served_catch_up_reads(board) == 0, "the reader's backlog came through the fan-out"
    finally:
        stream.close()


def served_catch_up_reads(board: RunningBoard) -> int:
    return sum(stream.catch_up_reads for stream in board.app[STREAMS])


async def test_last_event_id_resumes_and_the_later_cursor_wins(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    tasks = [await make_task(client, title=f"t{n}") for n in range(4)]
    revisions = await streamable_revisions(board)
    head = revisions[-1]

    resumed = await EventStream.open(session, board, last_event_id=str(revisions[1]))
    try:
        got = await resumed.activities_until(head)
        assert [row["revision"] for row in got] == revisions[2:]
    finally:
        resumed.close()

    # With both, the later one wins (SPEC §6.2; tests/security/test_sse_cursor.py has the rest).
    for header in (str(revisions[0]),):
        both = await EventStream.open(session, board, f"?after={revisions[3]}", last_event_id=header)
        try:
            got = await both.activities_until(head)
            assert [row["revision"] for row in got] == revisions[4:]
            assert got[-1]["task_id"] == tasks[-1]["id"]
        finally:
            both.close()


# -- bad cursors and filters: a clear code, nothing written, no stream left open --------------------


@pytest.mark.parametrize(
    ("query", "header", "code", "status", "detail"),
    [
        ("?after=abc", None, "VALIDATION_FAILED", 400, ("value", "abc")),
        ("?after=-1", None, "VALIDATION_FAILED", 400, ("value", -1)),
        ("?after=1.5", None, "VALIDATION_FAILED", 400, ("value", "1.5")),
        ("?after=", None, "VALIDATION_FAILED", 400, ("value", "")),
        ("", "abc", "VALIDATION_FAILED", 400, ("last_event_id", "abc")),
        ("", "-3", "VALIDATION_FAILED", 400, ("last_event_id", "-3")),
        ("", "1e3", "VALIDATION_FAILED", 400, ("last_event_id", "1e3")),
        ("", "1" * 40, "VALIDATION_FAILED", 400, ("last_event_id", "1" * 40)),
        ("?after=999", None, "CURSOR_AHEAD", 400, ("after", 999)),
        ("", "999", "CURSOR_AHEAD", 400, ("after", 999)),
        ("?after=99999999999999999999999", None, "VALIDATION_FAILED", 400, ("value", "99999999999999999999999")),
        ("?after=999999999999999999", None, "CURSOR_AHEAD", 400, ("after", 999999999999999999)),
        ("?colour=red", None, "VALIDATION_FAILED", 400, ("unknown", ["colour"])),
        ("?event=task_created,nonsense", None, "VALIDATION_FAILED", 400, ("value", "nonsense")),
        ("?event=task_heartbeat", None, "VALIDATION_FAILED", 400, ("value", "task_heartbeat")),
        ("?task=DEMO-9999", None, "NOT_FOUND", 404, ("task", "DEMO-9999")),
        ("?project=nope", None, "NOT_FOUND", 404, ("project", "nope")),
    ],
)
async def test_bad_stream_requests_are_refused(
    board: RunningBoard,
    client: BoardClient,
    query: str,
    header: str | None,
    code: str,
    status: int,
    detail: tuple[str, Any],
) -> None:
    await make_project(client)
    await make_task(client)
    before = await activity_count(board)
    reply = await client.get(f"/api/v1/events{query}", headers={"Last-Event-ID": header} if header else None)
    assert reply.status == status and reply.error == code, reply.body
    key, value = detail
    assert reply.body["error"]["details"][key] == value
    assert reply.body["error"]["message"]
    assert await activity_count(board) == before
    assert len(board.app[STREAMS]) == 0


async def test_cursor_below_the_floor_is_expired(board: RunningBoard, client: BoardClient) -> None:
    await make_project(client)
    for n in range(3):
        await make_task(client, title=f"t{n}")

    def set_floor(tx: Tx) -> None:
        tx.execute("UPDATE board_meta SET value = '5' WHERE key = 'floor'")

    await board.store.command(set_floor, WRITER)
    before = await activity_count(board)
    for request in ({"path": "/api/v1/events?after=4"}, {"path": "/api/v1/events", "headers": {"Last-Event-ID": "2"}}):
        reply = await client.get(request["path"], headers=request.get("headers"))
        assert reply.status == 410 and reply.error == "CURSOR_EXPIRED"
        assert reply.body["error"]["details"] == {"after": 4 if "after" in request["path"] else 2, "floor": 5}
    ok = await client.session.get(f"{board.url}/api/v1/events?after=5", headers={"Authorization": f"Bearer {board.token}"})
    assert ok.status == 200
    ok.close()
    assert await activity_count(board) == before


async def test_stream_needs_the_token(board: RunningBoard, client: BoardClient) -> None:
    reply = await client.get("/api/v1/events", token=False)
    assert reply.status == 401 and reply.error == "UNAUTHORIZED"
    assert len(board.app[STREAMS]) == 0


async def test_an_http_1_0_client_gets_unchunked_frames(board: RunningBoard, client: BoardClient) -> None:
    """Frames written straight from the fan-out honour the response's framing (no chunking in 1.0)."""
    await make_project(client)
    host = board.url.removeprefix("http://")
    reader, writer = await asyncio.open_connection(*host.split(":"))
    writer.write(f"GET /api/v1/events HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {board.token}\r\n\r\n".encode())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
        assert await asyncio.wait_for(reader.readuntil(b"\n\n"), 5) == b"retry: 1000\n\n"
        await async_wait_until(lambda: _true(board.app[LOG_READER].subscribers == 1), what="the stream to go live")
        task = await make_task(client)
        frame = await asyncio.wait_for(reader.readuntil(b"\n\n"), 5)
        items = SSEParser().feed(frame)
        assert len(items) == 1 and isinstance(items[0], SSEMessage) and items[0].data is not None
        assert orjson.loads(items[0].data)["task_id"] == task["id"]
    finally:
        writer.close()


# -- projection --------------------------------------------------------------------------------


async def test_heartbeat_is_never_sent_but_the_cursor_moves_past_it(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    assert (await worker.post(f"/api/v1/tasks/{task['id']}/claim")).status == 200
    live = await EventStream.open(session, board)
    try:
        beat = await worker.post(f"/api/v1/tasks/{task['id']}/heartbeat")
        assert beat.status == 200
        heartbeat_revision = await last_revision(board)
        message = await live.message()
        assert message == SSEMessage(id=str(heartbeat_revision)), "an id-only frame, no data"
        assert live.last_event_id == heartbeat_revision
        note = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "still there?"})
        assert note.status == 201
        message = await live.message()
        assert message.data is not None and orjson.loads(message.data)["event"] == "comment_added"
    finally:
        live.close()

    # Replayed, the heartbeat is skipped the same way and the cursor still ends past it.
    replay = await EventStream.open(session, board, "?after=0")
    try:
        head = await last_revision(board)
        got = await replay.activities_until(head)
        assert "task_heartbeat" not in {row["event"] for row in got}
        assert [row["revision"] for row in got] == await streamable_revisions(board)
    finally:
        replay.close()


async def test_a_trailing_heartbeat_moves_a_replaying_cursor(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    worker = client.as_actor("claude", "worker-1")
    await worker.post(f"/api/v1/tasks/{task['id']}/claim")
    await worker.post(f"/api/v1/tasks/{task['id']}/heartbeat")
    head = await last_revision(board)
    stream = await EventStream.open(session, board, "?after=0")
    try:
        await stream.activities_until(head)
        assert stream.last_event_id == head
    finally:
        stream.close()


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("?task={a}", lambda row, a, b: row["task_id"] == a["id"]),
        ("?task={a_identifier}", lambda row, a, b: row["task_id"] == a["id"]),
        ("?project=other", lambda row, a, b: row["project_id"] == "other"),
        ("?event=comment_added,task_moved", lambda row, a, b: row["event"] in ("comment_added", "task_moved")),
        ("?project=demo&event=comment_added", lambda row, a, b: row["project_id"] == "demo" and row["event"] == "comment_added"),
    ],
)
async def test_filters_send_matching_rows_and_id_only_frames(
    board: RunningBoard,
    client: BoardClient,
    session: aiohttp.ClientSession,
    query: str,
    wanted: Any,
    replay: bool,
) -> None:
    await make_project(client)
    await make_project(client, "other")
    a = await make_task(client, title="A")
    b = await make_task(client, "other", title="B")
    path = query.format(a=a["id"], a_identifier=a["identifier"])
    start = await last_revision(board)
    if not replay:
        stream = await EventStream.open(session, board, path)
    for n in range(3):
        await client.post(f"/api/v1/tasks/{a['id']}/comments", {"body": f"a{n}"})
        await client.post(f"/api/v1/tasks/{b['id']}/comments", {"body": f"b{n}"})
    await client.post(f"/api/v1/tasks/{b['id']}/move", {"to": "blocked", "reason": "waiting"})
    await client.patch(f"/api/v1/tasks/{b['id']}", {"title": "B2"})  # a non-matching row last
    head = await last_revision(board)
    if replay:
        stream = await EventStream.open(session, board, f"{path}&after={start}")
    try:
        frames: list[SSEMessage] = []
        while stream.last_event_id < head:
            frames.append(await stream.message())
        data = [orjson.loads(frame.data) for frame in frames if frame.data is not None]
        rows = (await client.get(f"/api/v1/activities?after={start}&limit=1000")).body["items"]
        assert data == [row for row in rows if wanted(row, a, b)]
        assert data, "the filter matched something"
        if not replay:  # every commit is its own batch, and each batch skipped a row of the other task
            assert any(frame.data is None for frame in frames), "skipped rows are announced by id-only frames"
        assert frames[-1].id == str(head), "the client's cursor never falls behind"
        last_wanted = wanted(rows[-1], a, b)
        assert (frames[-1].data is not None) == last_wanted
    finally:
        stream.close()


async def test_unknown_event_names_are_forwarded(board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession) -> None:
    stream = await EventStream.open(session, board)

    def newer_writer(tx: Tx) -> int:
        # A row as a newer board might write it: a name this code does not declare.
        revision = tx.one("SELECT revision + 1 FROM global_revision")[0]
        tx.execute(
            "INSERT INTO task_activities (actor_kind, actor_id, event, changes_json, revision, created_at)"
            " VALUES ('system', 'board', 'comet_sighted', '{\"tail\":3}', ?, ?)",
            (revision, tx.now),
        )
        return revision

    try:
        revision = await board.store.command(newer_writer, WRITER)
        got = await stream.activities_until(revision)
        assert [(row["event"], row["changes"]) for row in got] == [("comet_sighted", {"tail": 3})]
    finally:
        stream.close()


async def test_a_row_with_unreadable_changes_does_not_wedge_the_stream(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    stream = await EventStream.open(session, board)

    def broken_writer(tx: Tx) -> int:
        # Since migration 4 the schema refuses such a row; a file from before it may still hold one,
        # so lift the trigger for this one insert.
        trigger = "task_activities_changes_are_json"
        trigger_sql = tx.one("SELECT sql FROM sqlite_master WHERE name = ?", (trigger,))[0]
        tx.execute(f"DROP TRIGGER {trigger}")
        revision = tx.one("SELECT revision + 1 FROM global_revision")[0]
        tx.execute(
            "INSERT INTO task_activities (actor_kind, actor_id, event, changes_json, revision, created_at)"
            " VALUES ('system', 'board', 'label_gc', '{not json', ?, ?)",
            (revision, tx.now),
        )
        tx.execute(trigger_sql)
        return revision

    try:
        broken = await board.store.command(broken_writer, WRITER)
        await make_project(client)
        got = await stream.activities_until(await last_revision(board))
        assert [(row["revision"], row["event"], row["changes"]) for row in got[:1]] == [(broken, "label_gc", {})]
        assert got[-1]["event"] == "project_created"
    finally:
        stream.close()


# -- one reader for every stream -------------------------------------------------------------------


async def test_each_row_is_read_once_however_many_streams(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    streams = [await EventStream.open(session, board) for _ in range(20)]
    reader: LogReader = board.app[LOG_READER]
    try:
        await async_wait_until(lambda: _true(reader.subscribers == 20), what="every stream live")
        handoff = board.store.handoff
        assert isinstance(handoff, Handoff)

        def rows_encoded() -> int:  # read back by the log reader, or handed over by the writer
            return reader.rows_read + handoff.rows

        rows_before = rows_encoded()
        for n in range(15):
            await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": f"n{n}"})
        head = await last_revision(board)
        for stream in streams:
            got = await stream.activities_until(head)
            assert [row["changes"]["kind"] for row in got] == ["note"] * 15
        # Once per row, not once per stream: a row is encoded twice only when the reader's
        # poll raced the writer's hand-off to the loop.
        assert 15 <= rows_encoded() - rows_before <= 30
        assert sum(stream.catch_up_reads for stream in board.app[STREAMS]) == 0
    finally:
        for stream in streams:
            stream.close()


async def test_what_waits_on_a_revision_is_made_once_the_fan_out_passes_it(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    """``LogReader.after``: how a commit's signals follow its frames (docs/conditions.md §4.1).
    A call waits until the live streams have been handed every row up to its revision, and calls
    are made in the order they came, a passed revision behind an unpassed one included."""
    await make_project(client)
    task = await make_task(client)
    stream = await EventStream.open(session, board)
    reader: LogReader = board.app[LOG_READER]
    try:
        await async_wait_until(lambda: _true(reader.subscribers == 1), what="the stream live")
        head = await last_revision(board)
        made: list[tuple[str, int]] = []
        reader.after(head + 1, lambda: made.append(("the next commit", reader.position)))
        reader.after(head, lambda: made.append(("passed already", reader.position)))
        assert made == [], "made before the fan-out passed its revision"
        reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "one row"})
        assert reply.status == 201, reply.body
        await async_wait_until(lambda: _true(len(made) == 2), what="both calls made")
        assert [name for name, _ in made] == ["the next commit", "passed already"]
        assert all(position >= head + 1 for _, position in made)
        written = await last_revision(board)
        assert [row["event"] for row in await stream.activities_until(written)] == ["comment_added"]
    finally:
        stream.close()


async def _true(value: bool) -> bool:
    return value


WRITER_SCRIPT = """
import sys
from pathlib import Path
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor
from services.board.commands.comments import add_comment

store = SqliteStore(Path(sys.argv[1]))
try:
    comment = store.run_command(add_comment, Actor("codex", "elsewhere"), sys.argv[2], body="from another process")
    print(comment[0]["id"])
finally:
    store.close()
"""


async def test_a_second_process_writing_the_file_reaches_the_stream(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    await make_project(client)
    task = await make_task(client)
    stream = await EventStream.open(session, board)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER_SCRIPT, str(board.data_dir / "board.sqlite"), task["identifier"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        message = await stream.message(timeout=5)
        while message.data is None:
            message = await stream.message(timeout=5)
        row = orjson.loads(message.data)
        assert row["event"] == "comment_added" and row["actor_id"] == "elsewhere"
        assert row["changes"]["commentId"] == out.decode().strip()
    finally:
        stream.close()


# -- exactness under concurrency ----------------------------------------------------------------------


async def test_readers_that_drop_and_resume_see_every_revision_in_order(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    seed = int(os.environ.get("TASKLOOM_TEST_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    await make_project(client)
    writing = True

    async def writer(n: int) -> None:
        me = client.as_actor("claude", f"worker-{n}")
        for round_ in range(6):
            task = await make_task(me, title=f"w{n}-{round_}")
            await me.post(f"/api/v1/tasks/{task['id']}/claim")
            for beat in range(3):
                await me.post(f"/api/v1/tasks/{task['id']}/heartbeat")
                await me.post(f"/api/v1/tasks/{task['id']}/comments", {"body": f"beat {beat}"})
            await me.patch(f"/api/v1/tasks/{task['id']}", {"title": f"w{n}-{round_} done"})

    async def bulk_writer() -> None:
        task = await make_task(client, title="bulk")
        for _ in range(4):
            await board.store.command(bulk_rows, WRITER, task["id"], "demo", rng.randint(200, 700))

    async def reader(n: int) -> list[list[int]]:
        connections: list[list[int]] = []
        cursor: str | None = "0"
        while True:
            stream = await EventStream.open(session, board, last_event_id=cursor)
            seen: list[int] = []
            connections.append(seen)
            budget = rng.randint(1, 400)
            try:
                while budget > 0:
                    if not writing and stream.last_event_id >= final_head:
                        return connections
                    try:
                        message = await stream.message(timeout=0.2)
                    except TimeoutError:
                        continue  # quiet for now: look at the finish line again
                    budget -= 1
                    if message.data is not None:
                        seen.append(orjson.loads(message.data)["revision"])
            finally:
                stream.close()
                cursor = stream.cursor or cursor

    final_head = 1 << 62
    readers = [asyncio.create_task(reader(n)) for n in range(4)]
    await asyncio.gather(*(writer(n) for n in range(3)), bulk_writer())
    final_head = await last_revision(board)
    writing = False
    results = await asyncio.wait_for(asyncio.gather(*readers), timeout=60)

    expected = await streamable_revisions(board)
    for connections in results:
        merged: list[int] = []
        for seen in connections:
            assert seen == sorted(set(seen)), f"seed {seed}: order or duplicates inside one connection"
            merged += [revision for revision in seen if not merged or revision > merged[-1]]
        assert merged == expected, f"seed {seed}: a reader missed or reordered revisions"
        assert len(connections) > 1, f"seed {seed}: the reader never reconnected"


# -- limits and ending ---------------------------------------------------------------------------


async def test_max_streams_is_enforced_with_retry_after(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    board = await start_board(tmp_path / "data", max_streams=2)
    try:
        client = BoardClient(board.url, board.token, session)
        first = await EventStream.open(session, board)
        second = await EventStream.open(session, board)
        before = await activity_count(board)
        refused = await client.get("/api/v1/events")
        assert refused.status == 503 and refused.error == "TOO_MANY_STREAMS"
        assert refused.headers["Retry-After"] == "5"
        assert refused.body["error"]["details"]["max_streams"] == 2
        assert await activity_count(board) == before
        first.close()
        await async_wait_until(lambda: _true(len(board.app[STREAMS]) == 1), what="the closed stream to leave")
        third = await EventStream.open(session, board)
        assert third.opening == SSEMessage(retry=1000)
        second.close()
        third.close()
    finally:
        await board.runner.cleanup()


async def test_ping_cadence_follows_the_setting(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    board = await start_board(tmp_path / "data", ping_interval=0.2)
    try:
        stream = await EventStream.open(session, board)
        arrivals: list[float] = []
        while len(arrivals) < 6:
            item = await stream.next(timeout=2)
            if item == SSEComment("ping"):
                arrivals.append(time.monotonic())
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        assert all(0.15 <= gap <= 0.5 for gap in gaps), gaps
        stream.close()
    finally:
        await board.runner.cleanup()


async def test_lifetime_ends_the_stream_with_a_shutdown_frame(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    board = await start_board(tmp_path / "data", stream_lifetime=0.3)
    try:
        opened = time.monotonic()
        stream = await EventStream.open(session, board)
        rest = await stream.until_eof(timeout=5)
        assert time.monotonic() - opened >= 0.3
        assert rest[-1] == SSEMessage(event="shutdown", data='{"reason":"lifetime"}')
        await async_wait_until(lambda: _true(len(board.app[STREAMS]) == 0), what="the stream to leave the registry")
    finally:
        await board.runner.cleanup()


async def test_server_stop_sends_shutdown_to_every_stream(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    board = await start_board(tmp_path / "data")
    client = BoardClient(board.url, board.token, session)
    await make_project(client)
    task = await make_task(client)
    await board.store.command(bulk_rows, WRITER, task["id"], "demo", 50)
    streams = [
        await EventStream.open(session, board),
        await EventStream.open(session, board, f"?task={task['identifier']}"),
        await EventStream.open(session, board, "?after=0"),
    ]
    await async_wait_until(lambda: _true(board.app[LOG_READER].subscribers == 3), what="every stream live")
    reader = board.app[LOG_READER]
    await board.runner.cleanup()
    for stream in streams:
        rest = await stream.until_eof(timeout=5)
        assert rest[-1] == SSEMessage(event="shutdown", data='{"reason":"server_stopping"}')
    assert len(board.app[STREAMS]) == 0
    assert reader._task is not None and reader._task.done()
    assert board.app[STREAMS]._sweeper is not None and board.app[STREAMS]._sweeper.done()
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("taskloom-logreader")]


@pytest.mark.sqlite_only
async def test_a_read_failure_closes_streams_without_a_shutdown_frame(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    """A shutdown frame would reset the client's backoff and turn a broken board into a hot loop.

    The damage is a dropped log table, a damaged file's symptom. On PostgreSQL the DROP waits for
    the readers' locks instead; a server that goes away is tests/postgres/test_pg_faults.py's case.
    """
    await make_project(client)
    live = await EventStream.open(session, board)
    await async_wait_until(lambda: _true(board.app[LOG_READER].subscribers == 1), what="the stream to go live")

    def break_the_log(tx: Tx) -> None:
        tx.execute("DROP TABLE task_activities")  # a damaged file: every read of the log now fails

    await board.store.command(break_the_log, WRITER)
    replaying = await EventStream.open(session, board, "?after=0")
    for stream in (live, replaying):
        rest = await stream.until_eof(timeout=10)
        assert not any(isinstance(item, SSEMessage) and item.event == "shutdown" for item in rest), rest
    await async_wait_until(lambda: _true(len(board.app[STREAMS]) == 0), what="both streams to close")


async def test_a_client_that_leaves_frees_its_stream(board: RunningBoard, session: aiohttp.ClientSession) -> None:
    stream = await EventStream.open(session, board)
    assert len(board.app[STREAMS]) == 1
    stream.close()
    await async_wait_until(lambda: _true(len(board.app[STREAMS]) == 0), timeout=5, what="the stream to notice")
    assert board.app[LOG_READER].subscribers == 0


async def test_a_slow_client_leaves_the_fan_out_and_catches_up(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession
) -> None:
    """In process: a stalled socket overflows its queue; the stream rejoins after reading the gap."""
    await make_project(client)
    task = await make_task(client)
    stalled = await EventStream.open(session, board)
    await async_wait_until(lambda: _true(board.app[LOG_READER].subscribers == 1), what="the stream to go live")
    served = next(iter(board.app[STREAMS]))
    for _ in range(60):
        await board.store.command(bulk_rows, WRITER, task["id"], "demo", 50, size=4000)
        if not served.live:
            break
    assert not served.live, "the stalled stream left the fan-out"
    head = await last_revision(board)
    got = await stalled.activities_until(head, timeout=30)
    assert [row["revision"] for row in got] == (await streamable_revisions(board))[2:]
    assert served.catch_up_reads > 0
    await async_wait_until(lambda: _true(served.live), what="the stream to rejoin the fan-out")
    stalled.close()

