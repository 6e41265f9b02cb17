"""A batch's frames travel with its COMMIT to the other board processes on the database.

The writer sends its encoded frames in a notification before the log one (``FRAMES_CHANNEL``),
while another process has said it has live streams (``WANT_CHANNEL``).
Another process publishes them only when its log reader stands at the head the batch began on;
otherwise, or when no frames came, its reader reads the rows back as before. Either way every
stream gets every row once, in revision order. The two processes here are two in-process boards
on one database, each with its own store, LISTEN connection and log reader; the writer that
interleaves is a plain connection committing under the revision lock without notifying anyone,
as a script would.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson
import psycopg
import pytest

from services.board.fanout import Handoff
from services.board.keys import LOG_READER
from services.board.logreader import LogReader
from services.board.notification_seal import NotificationSeal
from services.board.postgres_store import FRAMES_NOTE_BYTES, WANT_EVERY_S, PostgresStore
from services.board.store import Actor, Tx
from shared import events
from tests.postgres.sealing import seal_of
from tests.support.board import BoardClient, RunningBoard, make_project, make_task, start_board
from tests.support.frames import FrameStream
from tests.support.waiting import async_wait_until

ANN = Actor("human", "ann")


def logged(url: str, after: int = 0) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(
            "SELECT revision FROM task_activities WHERE revision > %s ORDER BY revision", (after,))]


def head(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()
        assert row is not None
        return int(row[0])


def append_unannounced(url: str, task_id: str) -> int:
    """An activity row committed the way a script might: under the revision lock, no NOTIFY."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT revision FROM global_revision WHERE singleton = 1 FOR UPDATE")
        row = conn.execute(
            "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
            " created_at) VALUES (%s, 'demo', 'codex', 'script', 'task_updated', %s,"
            " (SELECT revision + 1 FROM global_revision WHERE singleton = 1), '2026-01-01T00:00:00.000Z')"
            " RETURNING revision",
            (task_id, orjson.dumps({"fields": ["meta"]}).decode()),
        ).fetchone()
    assert row is not None
    return int(row[0])


def handoff_of(board: RunningBoard) -> Handoff:
    handoff = board.store.handoff
    assert isinstance(handoff, Handoff)
    return handoff


def reader_of(board: RunningBoard) -> LogReader:
    reader: LogReader = board.app[LOG_READER]
    return reader


async def live(board: RunningBoard, count: int, *, heard_by: RunningBoard | None = None) -> None:
    """``count`` streams in ``board``'s live fan-out, and ``heard_by`` told so (it sends frames)."""
    async def joined() -> bool:
        return reader_of(board).subscribers == count

    await async_wait_until(joined, what=f"{count} streams in the live fan-out")
    if heard_by is not None:
        store = heard_by.store
        assert isinstance(store, PostgresStore)

        async def told() -> bool:
            return store.frames_wanted

        await async_wait_until(told, what="the other process to hear that streams are live")


async def a_task_streamed_on(
    b: RunningBoard, *, heard_by: RunningBoard, session: aiohttp.ClientSession,
) -> tuple[BoardClient, dict[str, Any], FrameStream]:
    """A project and a task made on ``heard_by``, and a live stream on ``b`` it has heard of."""
    on_a = BoardClient(heard_by.url, heard_by.token, session)
    await make_project(on_a)
    task = await make_task(on_a)
    stream = await FrameStream.open(session, b)
    await live(b, 1, heard_by=heard_by)
    return on_a, task, stream


@pytest.fixture
async def boards(tmp_path: Path, postgres_url: str) -> AsyncIterator[tuple[RunningBoard, RunningBoard]]:
    """Two boards on one database whose log readers never poll: whatever one of them streams of
    the other's commits came by notification, as frames or as a wake-up to read."""
    a = await start_board(tmp_path / "a", database=postgres_url, external_poll_interval=60.0)
    try:
        b = await start_board(tmp_path / "b", database=postgres_url, external_poll_interval=60.0)
        try:
            yield a, b
        finally:
            await b.runner.cleanup()
    finally:
        await a.runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_another_process_streams_a_batch_from_its_frames_byte_for_byte_without_reading_it(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
) -> None:
    a, b = boards
    on_a = BoardClient(a.url, a.token, session)
    await make_project(on_a)
    stream = await FrameStream.open(session, b)
    await live(b, 1, heard_by=a)
    start, taken, read = head(postgres_url), handoff_of(b).taken, reader_of(b).rows_read
    try:
        task = await make_task(on_a, title="Ünïcode — \"quoted\" \\ back\nslash 🚀 ' O''Brien", labels=["x"])
        await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "a </script> <<title>>", "meta": {"n": 1.5e-7}})
        await on_a.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "line\r\nbreak \u2028 sep"})
        got = await stream.until(head(postgres_url))
    finally:
        stream.close()
    assert [revision for revision, _ in got] == logged(postgres_url, start)
    assert handoff_of(b).taken == taken + 3, "each of A's three batches was published from its frames"
    assert reader_of(b).rows_read == read, "B read none of them back"
    # A replay on B reads the same rows from the database and encodes them there.
    replay = await FrameStream.open(session, b, f"?after={start}")
    try:
        assert await replay.until(head(postgres_url)) == got
    finally:
        replay.close()


async def test_a_commit_nobody_announced_before_a_batch_makes_the_other_process_read_both(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
) -> None:
    a, b = boards
    on_a, task, stream = await a_task_streamed_on(b, heard_by=a, session=session)
    start, handoff, read = head(postgres_url), handoff_of(b), reader_of(b).rows_read
    declined, taken = handoff.declined, handoff.taken
    try:
        unannounced = append_unannounced(postgres_url, task["id"])
        # A's batch begins after a row B's reader has not read: its frames must not be published.
        await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "after the script"})
        got = await stream.until(head(postgres_url))
        assert handoff.declined == declined + 1 and handoff.taken == taken
        assert reader_of(b).rows_read == read + 2, "B read the script's row and A's"
        rows = [orjson.loads(data) for _, data in got]
        assert [(row["revision"], row["actor_id"]) for row in rows] == [
            (unannounced, "script"), (logged(postgres_url)[-1], "ann"),
        ]
        # B has caught up: A's next batch begins where B's reader stands and is published as sent.
        await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "and again"})
        got = await stream.until(head(postgres_url))
        assert handoff.taken == taken + 1 and reader_of(b).rows_read == read + 2
    finally:
        stream.close()
    assert [revision for revision, _ in got] == logged(postgres_url, start)


def bulk(tx: Tx, task_id: str, count: int) -> None:
    for n in range(count):
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * 200}}),
                  task_id=task_id, project_id="demo")


def recorded_and_not(tx: Tx, task_id: str) -> None:
    """One row through ``Tx.record`` and one written past it: the batch's frames are not all its rows."""
    bulk(tx, task_id, 1)
    tx.execute(
        "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
        " created_at) VALUES (?, 'demo', 'human', 'ann', 'task_updated', '{}',"
        " (SELECT revision + 1 FROM global_revision WHERE singleton = 1), ?)",
        (task_id, tx.now),
    )


@pytest.mark.parametrize(("command", "args", "rows"), [
    pytest.param(bulk, (60,), 60, id="frames too large for one notification"),
    pytest.param(recorded_and_not, (), 2, id="a row the batch did not encode"),
])
async def test_a_batch_that_sends_no_frames_is_read_by_the_other_process(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
    command: object, args: tuple[int, ...], rows: int,
) -> None:
    a, b = boards
    on_a, task, stream = await a_task_streamed_on(b, heard_by=a, session=session)
    start, handoff, read = head(postgres_url), handoff_of(b), reader_of(b).rows_read
    taken, declined = handoff.taken, handoff.declined
    try:
        await a.store.command(command, ANN, task["id"], *args)  # type: ignore[arg-type]
        got = await stream.until(head(postgres_url))
    finally:
        stream.close()
    assert [revision for revision, _ in got] == logged(postgres_url, start)
    assert len(got) == rows
    assert (handoff.taken, handoff.declined) == (taken, declined), "no frames reached B"
    assert reader_of(b).rows_read == read + rows
    if command is bulk:
        assert sum(len(data) for _, data in got) > FRAMES_NOTE_BYTES


async def test_two_processes_and_a_script_writing_at_once_lose_and_repeat_nothing(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
) -> None:
    a, b = boards
    on_a = BoardClient(a.url, a.token, session)
    await make_project(on_a)
    task = await make_task(on_a)
    start = head(postgres_url)
    streams = [await FrameStream.open(session, a), await FrameStream.open(session, b), await FrameStream.open(session, b, "?project=demo")]
    await live(a, 1, heard_by=b)
    await live(b, 2, heard_by=a)
    taken = handoff_of(a).taken, handoff_of(b).taken

    async def writer(board: RunningBoard, n: int) -> None:
        me = BoardClient(board.url, board.token, session).as_actor("claude", f"worker-{n}")
        for round_ in range(25):
            reply = await me.patch(f"/api/v1/tasks/{task['id']}", {"title": f"w{n} r{round_}"})
            assert reply.status == 200

    async def script() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await loop.run_in_executor(None, append_unannounced, postgres_url, task["id"])

    try:
        await asyncio.gather(script(), *(writer(board, n) for n, board in enumerate((a, b, a, b))))
        # The script's last rows may follow every board commit: one more from each board wakes both.
        await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "last on A"})
        await BoardClient(b.url, b.token, session).patch(f"/api/v1/tasks/{task['id']}", {"title": "last on B"})
        end = head(postgres_url)
        expected = logged(postgres_url, start)
        for stream in streams:
            got = await stream.until(end)
            assert [revision for revision, _ in got] == expected, "every row once, in revision order"
    finally:
        for stream in streams:
            stream.close()
    assert sum(1 for _, data in streams[1].frames if orjson.loads(data)["actor_id"] == "script") == 20
    assert handoff_of(a).taken > taken[0] and handoff_of(b).taken > taken[1], "batches were published from frames"


@pytest.mark.parametrize("payload", [
    "", "garbage", "12 someone-else", "12 someone-else x []", "12 someone-else 3 {not json",
    '12 someone-else 3 {"a": 1}', "12 someone-else 3 [[1, 2]]", '12 someone-else 3 [[1, "e", null, null, 5]]',
])
async def test_a_frames_note_that_cannot_be_read_is_dropped_and_the_rows_are_read(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str, payload: str,
) -> None:
    a, b = boards
    on_a, task, stream = await a_task_streamed_on(b, heard_by=a, session=session)
    start, handoff, read = head(postgres_url), handoff_of(b), reader_of(b).rows_read
    taken, declined = handoff.taken, handoff.declined
    try:
        revision = append_unannounced(postgres_url, task["id"])
        seal = seal_of(postgres_url)  # well sealed, badly formed: the check after the seal's
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("SELECT pg_notify('taskloom_frames', %s), pg_notify('taskloom_log', %s)",
                         (seal.seal(payload), seal.seal(str(revision))))
        got = await stream.until(revision)
        assert (handoff.taken, handoff.declined) == (taken, declined)
        assert reader_of(b).rows_read == read + 1
        # B's LISTEN thread lives on: A's next batch still reaches it as frames.
        await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "after the bad note"})
        got = await stream.until(head(postgres_url))
        assert handoff.taken == taken + 1
    finally:
        stream.close()
    assert [revision for revision, _ in got] == logged(postgres_url, start)


async def test_no_frames_are_sent_while_no_other_process_has_a_live_stream(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
) -> None:
    a, b = boards
    on_a = BoardClient(a.url, a.token, session)
    await make_project(on_a)
    own = await FrameStream.open(session, a)  # A's own stream says nothing to A
    await live(a, 1)
    handoff = handoff_of(b)
    try:
        declined, taken = handoff.declined, handoff.taken
        task = await make_task(on_a)
        await own.until(task["revision"])
        assert (handoff.declined, handoff.taken) == (declined, taken), "B heard no frames"
        assert isinstance(a.store, PostgresStore) and not a.store.frames_wanted
        # A stream opens on B: B says so, and A's next batch comes as frames.
        stream = await FrameStream.open(session, b)
        await live(b, 1, heard_by=a)
        try:
            await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "now with a stream on B"})
            await stream.until(head(postgres_url))
            assert handoff.taken == taken + 1
        finally:
            stream.close()
    finally:
        own.close()


async def test_a_process_that_starts_listening_hears_at_once_who_has_live_streams(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str, tmp_path: Path,
) -> None:
    a, b = boards
    stream = await FrameStream.open(session, b)
    try:
        await live(b, 1, heard_by=a)
        # B said so when its stream joined (A heard it); a process starting later asks, and B
        # answers before its next turn to say it again.
        c = await start_board(tmp_path / "c", database=postgres_url, external_poll_interval=60.0)
        try:
            store = c.store
            assert isinstance(store, PostgresStore)

            async def told() -> bool:
                return store.frames_wanted

            await async_wait_until(told, timeout=WANT_EVERY_S / 2, what="the new process to hear of B's stream")
        finally:
            await c.runner.cleanup()
    finally:
        stream.close()


def as_role(url: str, role: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}"))


async def test_notes_a_role_without_the_boards_secret_forges_are_dropped(
    boards: tuple[RunningBoard, RunningBoard], session: aiohttp.ClientSession, postgres_url: str,
) -> None:
    """``pg_notify`` needs only a login. A role that cannot read a single table of the board sends
    B frames of an event nobody wrote, with an end a million revisions ahead, a log notification
    as far ahead, and a peer's signal: unsealed, or sealed with a key of its own. B drops every one;
    its reader stays where the log is, and A's next write reaches B's stream as before."""
    a, b = boards
    on_a, task, stream = await a_task_streamed_on(b, heard_by=a, session=session)
    role = f"intruder_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{role}'")
    reader = reader_of(b)
    position, taken = reader.position, handoff_of(b).taken
    ahead = position + 1_000_000
    forged_row = {
        "id": 1, "revision": position + 1, "task_id": task["id"], "project_id": "demo", "actor_kind": "human",
        "actor_id": "ceo", "event": "task_updated", "changes": {"fields": ["title"], "after": {"title": "FORGED"}},
        "created_at": "2026-01-01T00:00:00.000Z",
    }
    wire = f"id: {position + 1}\ndata: {orjson.dumps(forged_row).decode()}\n\n"
    frames = f"{ahead} intruder {position} " + orjson.dumps([[position + 1, "task_updated", task["id"], "demo", wire]]).decode()
    signal = 'intruder {"h":1,"e":[["s","card_unblocked","demo",null,{"blockers":[]},"2026-01-01T00:00:00.000Z"]]}'
    own_key = NotificationSeal(secrets.token_bytes(32))
    forged = [(channel, text) for channel, payload in (
        ("taskloom_frames", frames), ("taskloom_log", str(ahead)), ("taskloom_peer", signal),
    ) for text in (payload, own_key.seal(payload))]
    try:
        with psycopg.connect(as_role(postgres_url, role, role), autocommit=True) as intruder:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                intruder.execute("SELECT value FROM board_secrets")
            for channel, text in forged:
                intruder.execute("SELECT pg_notify(%s, %s)", (channel, text))
        # Delivered after the forgeries, on the same LISTEN connection: by then B has judged them.
        reply = await on_a.patch(f"/api/v1/tasks/{task['id']}", {"title": "genuine"})
        assert reply.status == 200, reply.body
        got = await stream.until(head(postgres_url))
        rows = [orjson.loads(data) for _, data in got]
        assert [row["actor_id"] for row in rows if row["actor_id"] == "ceo"] == [], "a forged frame was streamed"
        assert rows[-1]["changes"]["after"] == {"title": "genuine"}
        assert reader.position == head(postgres_url) < ahead
        assert handoff_of(b).taken == taken + 1, "A's genuine frames were published"
    finally:
        stream.close()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")
