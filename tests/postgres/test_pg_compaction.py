"""Retention on a PostgreSQL board: the archive first, then the floor raised in one transaction; 410
CURSOR_EXPIRED below it; the PL/pgSQL window that lets only the compaction's deletes through; the
daily compaction; and a second board process on the same database answering by the same floor.

The checks themselves are the SQLite suite's (tests/integration/test_compaction.py), run here on
a board whose store is PostgreSQL; only what reaches past the board is written for this engine.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import psycopg
import psycopg.errors
import pytest

from services.board import compaction
from services.board.postgres_store import PostgresStore
from services.board.store import SYSTEM_ACTOR
from shared.errors import TaskloomError
from tests.integration import test_compaction as on_sqlite
from tests.postgres.support_taskd import Follower, board_process
from tests.support import board as board_support
from tests.support.board import API, BoardClient, RunningBoard, TaskdProcess, make_task, start_board
from tests.support.waiting import wait_until

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def pg_client(pg_board: RunningBoard) -> AsyncIterator[BoardClient]:
    async with aiohttp.ClientSession() as session:
        yield BoardClient(pg_board.url, pg_board.token, session)


async def test_the_board_under_test_is_on_postgresql(pg_board: RunningBoard, postgres_url: str) -> None:
    assert pg_board.store.engine == "postgresql" and pg_board.store.url == postgres_url  # type: ignore[attr-defined]
    assert not (pg_board.data_dir / "board.sqlite").exists()


async def test_compaction_archives_then_raises_the_floor(pg_board: RunningBoard, pg_client: BoardClient) -> None:
    await on_sqlite.test_compaction_archives_then_raises_the_floor(pg_board, pg_client)


async def test_a_dry_run_and_an_empty_range_change_nothing(pg_board: RunningBoard, pg_client: BoardClient) -> None:
    await on_sqlite.test_a_dry_run_and_an_empty_range_change_nothing(pg_board, pg_client)


@pytest.mark.parametrize("body", [{"through": 10_000}, {"older_than_days": 0}, {"through": 1, "older_than_days": 1}])
async def test_bad_compactions_are_refused_and_change_nothing(
    pg_board: RunningBoard, pg_client: BoardClient, body: dict[str, int]
) -> None:
    await on_sqlite.test_bad_compactions_are_refused_and_change_nothing(pg_board, pg_client, body)


async def test_a_stream_above_the_floor_keeps_streaming_one_below_gets_410(
    pg_board: RunningBoard, pg_client: BoardClient
) -> None:
    await on_sqlite.test_a_stream_above_the_floor_keeps_streaming_one_below_gets_410(pg_board, pg_client)


async def test_a_paged_reader_behind_the_floor_is_told(pg_board: RunningBoard, pg_client: BoardClient) -> None:
    await on_sqlite.test_a_paged_reader_behind_the_floor_is_told(pg_board, pg_client)


async def test_a_brief_says_its_earlier_history_was_archived(pg_board: RunningBoard, pg_client: BoardClient) -> None:
    await on_sqlite.test_a_brief_says_its_earlier_history_was_archived(pg_board, pg_client)


async def test_the_board_compacts_by_itself_when_retention_is_on(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SQLite suite's test starts its own board (with a clock); pointed at this engine, the
    # board it starts is a PostgresStore on this test's database.
    monkeypatch.setenv(board_support.ENGINE_ENV, "postgresql")
    monkeypatch.setattr(board_support, "fresh_database_url", lambda: postgres_url)
    await on_sqlite.test_the_board_compacts_by_itself_when_retention_is_on(tmp_path)
    with psycopg.connect(postgres_url) as conn:
        floor = conn.execute("SELECT value FROM board_meta WHERE key = 'floor'").fetchone()
        assert floor is not None and int(floor[0]) > 0, "the compaction ran on the PostgreSQL database"


# -- the PL/pgSQL window: the only deletes are the compaction's -------------------------------------


def refused(conn: psycopg.Connection[tuple[object, ...]], statement: str, params: tuple[object, ...], code: str) -> None:
    with pytest.raises(psycopg.errors.RaiseException) as caught:
        conn.execute(statement, params)
    assert caught.value.diag.message_primary == code


async def test_raw_deletes_and_updates_of_the_log_are_refused_on_postgresql(
    pg_board: RunningBoard, pg_client: BoardClient, postgres_url: str
) -> None:
    task = await make_task(pg_client)
    revisions = await on_sqlite.rows_of(pg_board, task, 6)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        refused(conn, "DELETE FROM task_activities WHERE revision = %s", (revisions[0],), "ACTIVITY_APPEND_ONLY")
        refused(conn, "UPDATE task_activities SET actor_id = 'mallory' WHERE revision = %s", (revisions[0],),
                "ACTIVITY_APPEND_ONLY")
        refused(conn, "UPDATE board_meta SET value = '-1' WHERE key = 'floor'", (), "FLOOR_LOWERED")
        refused(conn, "DELETE FROM board_meta WHERE key = 'floor'", (), "FLOOR_LOWERED")
        with pytest.raises(psycopg.errors.RaiseException):
            conn.execute("TRUNCATE task_activities")
        # Raising the floor in a transaction lets exactly the rows at or below it go, in it.
        with pytest.raises(psycopg.errors.RaiseException, match="ACTIVITY_APPEND_ONLY"), conn.transaction():
            conn.execute("UPDATE board_meta SET value = %s WHERE key = 'floor'", (str(revisions[2]),))
            conn.execute("DELETE FROM task_activities WHERE revision = %s", (revisions[4],))
        row = conn.execute("SELECT value FROM board_meta WHERE key = 'floor'").fetchone()
        assert row is not None and row[0] == "0", "the refused transaction rolled back its floor"
    assert (await pg_client.post(f"{API}/admin/compact", {"through": revisions[2]})).status == 200
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        refused(conn, "DELETE FROM task_activities WHERE revision = %s", (revisions[3],), "ACTIVITY_APPEND_ONLY")
        counted = conn.execute("SELECT count(*) FROM retention_window").fetchone()
        assert counted is not None and counted[0] == 0, "the window closed with the compaction's transaction"
        oldest = conn.execute("SELECT min(revision) FROM task_activities").fetchone()
        assert oldest is not None and oldest[0] == revisions[3]


# -- two board processes, one floor ---------------------------------------------------------------


async def test_a_compaction_on_one_process_is_the_floor_of_every_process(tmp_path: Path, postgres_url: str) -> None:
    """Process A compacts; process B, serving the same database, answers 410 below the new floor,
    and its stream above the floor goes on. The archive is written in A's data directory."""
    first = board_process(tmp_path, "a", postgres_url)
    second = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(first.url, first.token, session)
            on_b = BoardClient(second.url, second.token, session)
            task = await make_task(on_a)
            for n in range(20):
                assert (await on_a.patch(f"{API}/tasks/{task['id']}", {"meta": {"n": n}})).status == 200
            rows = (await on_b.get(f"{API}/activities?limit=100")).body["items"]
            revisions = [row["revision"] for row in rows]
            follower = Follower(session, second.url, second.token, after=revisions[12]).start()
            try:
                await follower.opened.wait()
                await follower.until(revisions[-1])
                reply = await on_a.post(f"{API}/admin/compact", {"through": revisions[9]})
                assert reply.status == 200, reply.body
                archive = Path(reply.body["archive"])
                assert archive.parent == first.data_dir / "archive" and archive.is_file()
                assert [row["revision"] for row in on_sqlite.archived(archive)] == revisions[:10]
                expired = await on_b.get(f"{API}/activities?after={revisions[3]}")
                assert expired.status == 410 and expired.error == "CURSOR_EXPIRED", expired.body
                assert expired.body["error"]["details"] == {"after": revisions[3], "floor": revisions[9]}
                assert (await on_b.get(f"{API}/meta")).body["floor"] == revisions[9]
                below = await on_b.get(f"{API}/events?after={revisions[5]}")
                assert below.status == 410 and below.error == "CURSOR_EXPIRED"
                later = (await on_a.patch(f"{API}/tasks/{task['id']}", {"meta": {"n": "after"}})).body
                head = (await on_a.get(f"{API}/meta")).body["revision"]
                await follower.until(head)
                assert follower.revisions == [r for r in revisions if r > revisions[12]] + [head]
                assert later["id"] == task["id"]
            finally:
                await follower.close()
    finally:
        first.stop()
        second.stop()


async def test_a_compaction_overtaken_by_another_process_takes_its_archive_back(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two board processes' daily runs plan at once; the one that commits second finds the floor
    moved (409) and removes the archive it wrote, which names rows nobody removed through it. A
    loser that planned the very range the winner committed keeps the file: it is the winner's."""
    first = await start_board(tmp_path / "a", database=postgres_url)
    second = await start_board(tmp_path / "b", database=postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(first.url, first.token, session)
            task = await make_task(on_a)
            revisions = await on_sqlite.rows_of(first, task, 20)
            now = datetime.now(UTC)
            stale = await second.store.query(compaction.plan, through=revisions[5], older_than_days=None, now=now)
            overtaken = await second.store.query(compaction.write_archive, second.data_dir, stale)
            assert overtaken.is_file()
            won = await on_a.post(f"{API}/admin/compact", {"through": revisions[9]})
            assert won.status == 200, won.body
            with pytest.raises(TaskloomError) as caught:
                await compaction.commit_plan(second.store, stale, overtaken, SYSTEM_ACTOR)
            assert caught.value.code == "CONFLICT" and caught.value.details == {"floor": revisions[9]}
            assert not overtaken.exists(), "the overtaken run's archive went with it"
            assert Path(won.body["archive"]).is_file()

            # The same range committed by the winner in the loser's own directory: the file stays.
            same = await first.store.query(compaction.plan, through=revisions[14], older_than_days=None, now=now)
            mine = await first.store.query(compaction.write_archive, first.data_dir, same)
            again = await on_a.post(f"{API}/admin/compact", {"through": revisions[14]})
            assert again.status == 200 and Path(again.body["archive"]) == mine
            with pytest.raises(TaskloomError):
                await compaction.commit_plan(first.store, same, mine, SYSTEM_ACTOR)
            assert [row["revision"] for row in on_sqlite.archived(mine)] == revisions[10:15]
    finally:
        await second.runner.cleanup()
        await first.runner.cleanup()


# -- SIGKILL in the middle, on PostgreSQL ---------------------------------------------------------


def pg_state(url: str) -> tuple[int, list[int]]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT value FROM board_meta WHERE key = 'floor'").fetchone()
        assert row is not None
        kept = [int(r[0]) for r in conn.execute("SELECT revision FROM task_activities ORDER BY revision")]
        return int(row[0]), kept


async def test_sigkill_during_compaction_on_postgresql_leaves_one_whole_state(
    tmp_path: Path, postgres_url: str
) -> None:
    """As the SQLite test: a taskd killed at any moment of a compaction leaves either the old floor
    with every row above it or the new floor with its archive complete (the server, not the
    killed process, decides which by whether the COMMIT arrived)."""
    store = PostgresStore(postgres_url)
    store.open()
    try:
        everything, _ = store.run_command(on_sqlite.one_task_log, on_sqlite.WRITER, 20_000)
    finally:
        store.close()
    rng = random.Random(20261202)
    process = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    outcomes = {"old": 0, "new": 0}
    floor = 0
    for attempt in range(5):
        process.start("--database", postgres_url)
        through = floor + rng.randint(2_000, 3_000)
        request = threading.Thread(target=on_sqlite._post,
                                   args=(process.url, process.token, f"{API}/admin/compact", {"through": through}))
        request.start()
        if attempt == 4:
            # Right after the commit, seen from another connection: then the kill.
            wait_until(lambda target=through: pg_state(postgres_url)[0] == target, what="the compaction's commit", timeout=60)
        elif attempt:
            await asyncio.sleep(rng.uniform(0.0, 0.05 * attempt))  # a random moment to kill at, not a synchronisation
        assert process.process is not None
        process.process.send_signal(signal.SIGKILL)
        process.process.wait(timeout=20)
        request.join(timeout=30)
        # The server rolls back a transaction whose client vanished before COMMIT; wait until
        # no connection of the killed process is left, so what we read is what stays.
        wait_until(lambda: not _backends(postgres_url), what="the killed board's connections to end", timeout=30)
        new_floor, kept = pg_state(postgres_url)
        if new_floor == floor:
            outcomes["old"] += 1
            assert kept == [r for r in everything if r > floor], "the old floor keeps every row above it"
        else:
            outcomes["new"] += 1
            assert new_floor == through and kept == [r for r in everything if r > through]
            archive = process.data_dir / "archive" / f"activities-{floor + 1}-{through}.jsonl.gz"
            assert [row["revision"] for row in on_sqlite.archived(archive)] == [r for r in everything if floor < r <= through]
            floor = new_floor
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1, outcomes


def _backends(url: str) -> int:
    """Other sessions on this database (the killed board's, until the server notices they are gone)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND pid <> pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])
