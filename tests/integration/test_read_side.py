"""The board's asynchronous read side (aiosqlite) on real SQLite files: same pages, same cursor rules.

``ActivityReader.fetch_after`` must hand out exactly the page ``read_page`` builds on a ``sqlite3``
connection in one snapshot; ``changed`` must keep ``PRAGMA data_version``'s meaning (a commit by
any other connection, seen or not by the reader's last read); the connections never write and
leave no thread behind.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.board.pages import Page, read_page
from services.board.readers import ActivityReader, ReaderPool
from services.board.store import Actor, SqliteStore, Tx
from services.board.streaming import LOG_READER
from shared import events
from shared.sse import SSEMessage, SSEParser
from tests.support.board import start_board
from tests.support.waiting import async_wait_until

WRITER = Actor("codex", "read-side")
#: aiosqlite runs each connection on a thread with this target (its name carries it).
WORKER = "_connection_worker_thread"


def rows(tx: Tx, count: int, *, heartbeat_every: int = 0, pad: int = 0) -> None:
    """``count`` activity rows in one command; every ``heartbeat_every``-th one is wire noise."""
    for n in range(count):
        if heartbeat_every and n % heartbeat_every == heartbeat_every - 1:
            tx.record(events.TASK_HEARTBEAT, events.task_heartbeat(heartbeat_at=tx.now), task_id=None, project_id="demo")
        else:
            changes = events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * pad}})
            tx.record(events.TASK_UPDATED, changes, task_id=None, project_id="demo")


def advance_revision(tx: Tx) -> None:
    """A revision that holds no activity row (as other tables' writes do): the head moves alone."""
    tx.execute("UPDATE global_revision SET revision = revision + 1 WHERE singleton = 1")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    board = SqliteStore(tmp_path / "board.sqlite")
    board.open()
    try:
        yield board
    finally:
        board.close()


@pytest.fixture
async def reader(store: SqliteStore) -> AsyncIterator[ActivityReader]:
    opened = await store.open_reader()
    try:
        yield opened
    finally:
        await opened.close()


def same_page(got: Page, want: Page) -> None:
    assert (got.after, got.end, got.full, got.complete) == (want.after, want.end, want.full, want.complete)
    assert got.frames == want.frames
    assert (got.wire, got.last_id) == (want.wire, want.last_id)


async def test_pages_equal_those_of_the_sqlite3_path(store: SqliteStore, reader: ActivityReader) -> None:
    store.run_command(rows, WRITER, 120, heartbeat_every=7)
    store.run_command(advance_revision, WRITER)  # a head above the last row
    store.run_command(rows, WRITER, 3, heartbeat_every=3)  # ends on wire noise: an id-only frame
    head = await store.query(lambda conn: conn.execute("SELECT revision FROM global_revision").fetchone()[0])
    for after in (0, 1, 50, 119, 120, 121, head - 1, head, head + 5):
        for limit in (1, 7, 500):
            same_page(await reader.fetch_after(after, limit), await store.query(read_page, after, limit))


async def test_an_empty_log_gives_the_head_and_no_frames(store: SqliteStore, reader: ActivityReader) -> None:
    page = await reader.fetch_after(0, 500)
    assert (page.frames, page.end, page.full, page.wire) == ((), 0, False, b"")
    store.run_command(advance_revision, WRITER)
    page = await reader.fetch_after(0, 500)
    assert (page.frames, page.end) == ((), 1), "the head moves past revisions that hold no row"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(after=st.integers(min_value=0, max_value=80), limit=st.integers(min_value=1, max_value=90))
async def test_any_cursor_and_limit_agree_with_the_sqlite3_path(
    store: SqliteStore, reader: ActivityReader, after: int, limit: int
) -> None:
    if await store.query(lambda conn: conn.execute("SELECT count(*) FROM task_activities").fetchone()[0]) == 0:
        store.run_command(rows, WRITER, 60, heartbeat_every=4)
    same_page(await reader.fetch_after(after, limit), await store.query(read_page, after, limit))


async def test_rows_come_in_revision_order_whatever_their_ids(store: SqliteStore, reader: ActivityReader) -> None:
    """Another writer may store ids that do not follow revisions; the cursor follows revisions."""

    def reversed_ids(tx: Tx) -> None:
        base = tx.one("SELECT revision FROM global_revision")[0]
        for n in range(1, 6):
            tx.execute(
                "INSERT INTO task_activities (id, task_id, project_id, actor_kind, actor_id, event, changes_json,"
                " revision, created_at) VALUES (?, NULL, 'demo', 'codex', 'raw', 'task_updated', '{}', ?, ?)",
                (1000 - n, base + n, tx.now),  # the bump trigger moves the head by one per row
            )

    store.run_command(reversed_ids, WRITER)
    page = await reader.fetch_after(0, 500)
    assert [frame.revision for frame in page.frames] == [1, 2, 3, 4, 5]
    same_page(page, await store.query(read_page, 0, 500))


async def test_changed_keeps_the_meaning_of_data_version(tmp_path: Path, store: SqliteStore, reader: ActivityReader) -> None:
    assert await reader.changed(), "the first poll reports a change: nothing was read yet"
    assert not await reader.changed(), "nobody committed"
    store.run_command(rows, WRITER, 1)  # the store's connection: another connection
    assert await reader.changed()
    assert not await reader.changed()
    # A second SqliteStore on the same file stands for another process.
    other = SqliteStore(tmp_path / "board.sqlite")
    try:
        other.run_command(rows, WRITER, 1)
    finally:
        other.close()
    assert await reader.changed()


async def test_a_read_notes_the_commits_it_saw_and_not_the_later_ones(
    store: SqliteStore, reader: ActivityReader
) -> None:
    """The log reader's wake reads in one statement: the poll after it must not re-read what the
    page held, and must not miss a commit that landed after the page's snapshot."""
    assert await reader.changed()
    store.run_command(rows, WRITER, 2)
    page = await reader.fetch_after(0, 500)
    assert len(page.frames) == 2
    assert not await reader.changed(), "the page's snapshot already held that commit"
    store.run_command(rows, WRITER, 1)
    assert await reader.changed(), "a commit after the page's snapshot is a change"
    store.run_command(rows, WRITER, 1)
    assert await reader.head() == 4
    assert not await reader.changed(), "the head's snapshot held that commit"
    reader.forget()
    assert await reader.changed(), "after a failed read the next poll reads again"


async def test_reader_connections_never_write(store: SqliteStore, reader: ActivityReader) -> None:
    conn = reader._conn  # the one place this test looks inside: the connection's own guard
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        await conn.execute_fetchall("UPDATE global_revision SET revision = revision + 1")
    assert await reader.head() == 0
    assert [tuple(row) for row in await conn.execute_fetchall("PRAGMA busy_timeout")] == [(store.busy_timeout_ms,)]


async def test_a_pool_serves_reads_in_turn_and_closes_its_threads(store: SqliteStore) -> None:
    store.run_command(rows, WRITER, 10)
    before = {thread.ident for thread in threading.enumerate() if WORKER in thread.name}
    pool = await ReaderPool.open(store.open_reader, size=3)
    opened = [thread for thread in threading.enumerate() if WORKER in thread.name and thread.ident not in before]
    assert len(opened) == 3
    pages = await asyncio.gather(*(pool.fetch_after(n, 500) for n in range(10)))
    assert [len(page.frames) for page in pages] == [10 - n for n in range(10)]
    await pool.close()
    for thread in opened:
        thread.join(timeout=10)
        assert not thread.is_alive()


async def test_a_board_replays_through_the_read_side_and_leaves_no_thread(tmp_path: Path) -> None:
    """A real board on loopback: a stream replays from 0 through the catch-up connections, follows
    live, and after the app's cleanup no read connection's thread is left."""
    before = {thread.ident for thread in threading.enumerate()}
    board = await start_board(tmp_path / "data")
    try:
        await board.store.command(rows, WRITER, 1200, heartbeat_every=10, pad=100)
        head = await board.store.query(lambda conn: conn.execute("SELECT revision FROM global_revision").fetchone()[0])
        expected = await board.store.query(lambda conn: [row[0] for row in conn.execute(
            "SELECT revision FROM task_activities WHERE event != 'task_heartbeat' ORDER BY revision")])
        assert len(expected) == 1080  # heartbeats are never sent
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {board.token}"}) as session:
            async with session.get(f"{board.url}/api/v1/events?after=0") as response:
                assert response.status == 200
                parser, got = SSEParser(), []
                reader = board.app[LOG_READER]
                async with asyncio.timeout(30):
                    async for chunk in response.content.iter_any():
                        for item in parser.feed(chunk):
                            if isinstance(item, SSEMessage) and item.data is not None and item.event is None:
                                got.append(int(item.id or 0))
                        if got and got[-1] == expected[-1]:
                            break
                assert got == expected
                await async_wait_until(lambda: _true(reader.subscribers == 1), what="the stream to go live")
                await board.store.command(rows, WRITER, 1)
                async with asyncio.timeout(10):
                    while not got or got[-1] != head + 1:
                        chunk = await response.content.readany()
                        got += [int(item.id or 0) for item in parser.feed(chunk)
                                if isinstance(item, SSEMessage) and item.data is not None and item.event is None]
    finally:
        await board.runner.cleanup()
    left = [thread for thread in threading.enumerate() if WORKER in thread.name and thread.ident not in before]
    for thread in left:
        thread.join(timeout=10)
    assert not [thread for thread in left if thread.is_alive()]


async def _true(value: bool) -> bool:
    return value
