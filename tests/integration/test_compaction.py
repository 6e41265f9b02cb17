"""Retention over real boards: the archive first, then one transaction raising the floor; readers
below the floor told 410, streams above it untouched; the trigger refusing every other delete; a
SIGKILL at any moment leaving one of the two whole states."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import signal
import sqlite3
import threading
import urllib.request
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx
from shared import events
from shared.timestamps import format_timestamp
from tests.support.board import API, BoardClient, RunningBoard, TaskdProcess, make_task, raw_connection, start_board
from tests.support.waiting import async_wait_until, wait_until

pytestmark = pytest.mark.asyncio

WRITER = Actor("human", "ann")


def bulk_rows(tx: Tx, task_id: str, project_id: str, count: int) -> list[int]:
    return [
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {"n": n}}),
                  task_id=task_id, project_id=project_id)
        for n in range(count)
    ]


def one_task_log(tx: Tx, count: int) -> list[int]:
    """A project, one task and ``count`` log rows on it, written past the commands so that a large
    log takes seconds to build; the rows' revisions."""
    tx.execute("INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', ?, ?)",
               (tx.now, tx.now))
    tx.execute("INSERT INTO tasks (id, project_id, number, identifier, title, created_at, updated_at)"
               " VALUES ('t1', 'demo', 1, 'DEMO-0001', 'x', ?, ?)", (tx.now, tx.now))
    return bulk_rows(tx, "t1", "demo", count)


async def rows_of(board: RunningBoard, task: dict[str, Any], count: int) -> list[int]:
    return await board.store.command(bulk_rows, WRITER, task["id"], task["project_id"], count)


async def meta(client: BoardClient) -> dict[str, Any]:
    return (await client.get(f"{API}/meta")).body


def archived(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


async def test_compaction_archives_then_raises_the_floor(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 40)
    before = (await client.get(f"{API}/activities?limit=500")).body["items"]
    through = revisions[19]
    reply = await client.post(f"{API}/admin/compact", {"through": through})
    assert reply.status == 200, reply.body
    removed = [row for row in before if row["revision"] <= through]
    assert reply.body["floor"] == through and reply.body["previous_floor"] == 0
    assert reply.body["removed"] == len(removed)
    archive = Path(reply.body["archive"])
    assert archive == board.data_dir / "archive" / f"activities-1-{through}.jsonl.gz"
    assert archived(archive) == removed, "the archive holds exactly the removed rows, as their frames"
    assert (await meta(client))["floor"] == through
    kept = (await client.get(f"{API}/activities?limit=500")).body["items"]
    assert kept == [row for row in before if row["revision"] > through]
    # Card state is never trimmed.
    assert (await client.get(f"{API}/tasks/{task['id']}")).status == 200

    expired = await client.get(f"{API}/activities?after={through - 1}")
    assert expired.status == 410 and expired.error == "CURSOR_EXPIRED"
    assert expired.body["error"]["details"] == {"after": through - 1, "floor": through}
    assert (await client.get(f"{API}/activities?after={through}")).status == 200
    status = (await client.get(f"{API}/board/status")).body
    assert status["floor"] == through and status["oldest_revision"] == kept[0]["revision"]
    assert status["log_rows"] == len(kept)

    again = await client.post(f"{API}/admin/compact", {"through": revisions[29]})
    assert again.body["previous_floor"] == through
    assert Path(again.body["archive"]).name == f"activities-{through + 1}-{revisions[29]}.jsonl.gz"


async def test_a_dry_run_and_an_empty_range_change_nothing(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 10)
    rows = (await client.get(f"{API}/activities")).body["items"]
    dry = await client.post(f"{API}/admin/compact", {"through": revisions[4], "dry_run": True})
    assert dry.status == 200 and dry.body["dry_run"]
    assert dry.body["removed"] == len([row for row in rows if row["revision"] <= revisions[4]])
    assert (await meta(client))["floor"] == 0 and not (board.data_dir / "archive").exists()
    # The newest row is kept whatever is asked: row ids are never handed out twice.
    head = (await meta(client))["revision"]
    full = await client.post(f"{API}/admin/compact", {"through": head})
    assert full.status == 200 and full.body["floor"] == revisions[-2]
    assert [row["revision"] for row in (await client.get(f"{API}/activities")).body["items"]] == [revisions[-1]]


@pytest.mark.parametrize("body", [
    {"through": 10_000},
    {"older_than_days": 0},
    {"older_than_days": -3},
    # A day count too large for a date: once a timedelta overflow answered 500.
    {"older_than_days": 9_223_372_036_854_775_806},
    {"through": -1},
    {},
    {"through": 1, "older_than_days": 1},
])
async def test_bad_compactions_are_refused_and_change_nothing(board: RunningBoard, client: BoardClient, body: dict) -> None:
    task = await make_task(client)
    await rows_of(board, task, 5)
    before = (await client.get(f"{API}/activities")).body["items"]
    reply = await client.post(f"{API}/admin/compact", body)
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    if body == {"through": 10_000}:
        assert "above the head" in reply.body["error"]["message"]
    assert (await client.get(f"{API}/activities")).body["items"] == before
    assert (await meta(client))["floor"] == 0 and not (board.data_dir / "archive").exists()


@pytest.mark.parametrize("days", [0, -1, 1.5, "7", True, 36_501])
async def test_bad_retention_settings_are_refused(client: BoardClient, days: Any) -> None:
    reply = await client.patch(f"{API}/admin/settings", {"event_retention_days": days})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert (await client.get(f"{API}/admin/settings")).body == {"event_retention_days": None}


async def test_retention_settings_round_trip(client: BoardClient) -> None:
    assert (await client.patch(f"{API}/admin/settings", {"event_retention_days": 30})).body == {"event_retention_days": 30}
    assert (await client.get(f"{API}/admin/settings")).body == {"event_retention_days": 30}
    assert (await client.get(f"{API}/board/status")).body["event_retention_days"] == 30
    assert (await client.patch(f"{API}/admin/settings", {"event_retention_days": None})).body == {"event_retention_days": None}


# -- the trigger: the only deletes are the compaction's ---------------------------------------------


async def test_raw_deletes_and_updates_of_the_log_are_still_refused(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 6)
    with raw_connection(board) as conn:
        for statement in ("DELETE FROM task_activities WHERE revision = ?",
                          "UPDATE task_activities SET actor_id = 'mallory' WHERE revision = ?"):
            with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
                conn.execute(statement, (revisions[0],))
        # Raising the floor lets exactly the rows at or below it go, in that transaction.
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE board_meta SET value = ? WHERE key = 'floor'", (str(revisions[2]),))
        with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
            conn.execute("DELETE FROM task_activities WHERE revision = ?", (revisions[4],))
        conn.execute("ROLLBACK")
        with pytest.raises(sqlite3.IntegrityError, match="FLOOR_LOWERED"):
            conn.execute("UPDATE board_meta SET value = '-1' WHERE key = 'floor'")
        with pytest.raises(sqlite3.IntegrityError, match="FLOOR_LOWERED"):
            conn.execute("DELETE FROM board_meta WHERE key = 'floor'")
    reply = await client.post(f"{API}/admin/compact", {"through": revisions[2]})
    assert reply.status == 200
    with raw_connection(board) as conn:
        # The window closed with the compaction's transaction: rows at or below the floor are
        # gone, and every later delete is refused again.
        with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
            conn.execute("DELETE FROM task_activities WHERE revision = ?", (revisions[3],))
        assert conn.execute("SELECT count(*) FROM retention_window").fetchone()[0] == 0
        assert conn.execute("SELECT min(revision) FROM task_activities").fetchone()[0] == revisions[3]


# -- live streams across a compaction ---------------------------------------------------------------


class SSE:
    """A raw SSE reader: the ids of the frames, in order."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.ids: list[int] = []

    async def until(self, revision: int, timeout: float = 20.0) -> list[int]:
        async def read() -> None:
            while not self.ids or self.ids[-1] < revision:
                line = await self.response.content.readline()
                assert line, "the stream ended"
                if line.startswith(b"id: "):
                    self.ids.append(int(line[4:]))

        await asyncio.wait_for(read(), timeout)
        return self.ids


async def test_a_stream_above_the_floor_keeps_streaming_one_below_gets_410(
    board: RunningBoard, client: BoardClient
) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 30)
    headers = {"Authorization": f"Bearer {board.token}"}
    above = await client.session.get(f"{board.url}{API}/events?after={revisions[20]}", headers=headers)
    assert above.status == 200
    stream = SSE(above)
    try:
        assert await stream.until(revisions[-1]) == revisions[21:]
        reply = await client.post(f"{API}/admin/compact", {"through": revisions[15]})
        assert reply.status == 200, reply.body
        later = await rows_of(board, task, 5)
        assert (await stream.until(later[-1]))[-5:] == later, "the live stream went on across the compaction"
    finally:
        above.close()
    below = await client.get(f"{API}/events?after={revisions[10]}")
    assert below.status == 410 and below.error == "CURSOR_EXPIRED"
    assert below.body["error"]["details"] == {"after": revisions[10], "floor": revisions[15]}
    exact = await client.session.get(f"{board.url}{API}/events?after={revisions[15]}", headers=headers)
    try:
        assert exact.status == 200
        assert (await SSE(exact).until(later[-1]))[0] == revisions[16]
    finally:
        exact.close()


async def test_a_paged_reader_behind_the_floor_is_told(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 20)
    first = (await client.get(f"{API}/activities?limit=5")).body
    await client.post(f"{API}/admin/compact", {"through": revisions[10]})
    reply = await client.get(f"{API}/activities?limit=5&cursor={first['next_cursor']}")
    assert reply.status == 410 and reply.error == "CURSOR_EXPIRED"
    assert reply.body["error"]["details"]["floor"] == revisions[10]


# -- the daily compaction ------------------------------------------------------------------------------


async def test_the_board_compacts_by_itself_when_retention_is_on(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    moment = {"at": now - timedelta(days=10)}

    def clock() -> str:
        return format_timestamp(moment["at"])

    board = await start_board(tmp_path / "data", clock=clock, compaction_interval=0.05)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client)
            old = await rows_of(board, task, 8)
            moment["at"] = now
            new = await rows_of(board, task, 4)
            assert (await client.patch(f"{API}/admin/settings", {"event_retention_days": 5})).status == 200

            async def compacted() -> bool:
                return bool((await meta(client))["floor"] == old[-1])

            await async_wait_until(compacted, what="the board's own compaction", timeout=20)
            kept = [row["revision"] for row in (await client.get(f"{API}/activities")).body["items"]]
            assert kept == new
            assert (board.data_dir / "archive" / f"activities-1-{old[-1]}.jsonl.gz").is_file()
    finally:
        await board.runner.cleanup()


# -- SIGKILL in the middle ----------------------------------------------------------------------------


def _post(url: str, token: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "X-Taskloom-Actor": "ann"},
    )
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except OSError:
        pass  # the board was killed under the request: that is the point


def _state(database: Path) -> tuple[int, list[int]]:
    with closing(sqlite3.connect(database, timeout=10)) as conn:
        floor = int(conn.execute("SELECT value FROM board_meta WHERE key = 'floor'").fetchone()[0])
        kept = [row[0] for row in conn.execute("SELECT revision FROM task_activities ORDER BY revision")]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return floor, kept


async def test_sigkill_during_compaction_leaves_old_floor_and_rows_or_new_floor_and_archive(
    taskd: TaskdProcess, tmp_path: Path
) -> None:
    database = taskd.data_dir / "board.sqlite"
    store = SqliteStore(database)
    store.open()
    try:
        everything, _ = store.run_command(one_task_log, WRITER, 60_000)
    finally:
        store.close()
    rng = random.Random(20261201)
    outcomes: dict[str, int] = {"old": 0, "new": 0}
    floor = 0
    for attempt in range(6):
        taskd.start()
        through = floor + rng.randint(5_000, 9_000)
        request = threading.Thread(target=_post, args=(taskd.url, taskd.token, f"{API}/admin/compact", {"through": through}))
        request.start()
        if attempt == 0:
            pass  # at once: before the board has read the request
        elif attempt == 5:
            # Right after the commit: the floor is seen moved by another connection, then the kill.
            wait_until(lambda target=through: _state(database)[0] == target, what="the compaction's commit", timeout=60)
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.1 * attempt))
        assert taskd.process is not None
        taskd.process.send_signal(signal.SIGKILL)
        taskd.process.wait(timeout=20)
        request.join(timeout=30)
        new_floor, kept = _state(database)
        if new_floor == floor:
            outcomes["old"] += 1
            assert kept == [r for r in everything if r > floor], "the old floor keeps every row above it"
        else:
            outcomes["new"] += 1
            assert new_floor == through and kept == [r for r in everything if r > through]
            archive = taskd.data_dir / "archive" / f"activities-{floor + 1}-{through}.jsonl.gz"
            assert [row["revision"] for row in archived(archive)] == [r for r in everything if floor < r <= through]
            floor = new_floor
        # Only the archives of committed compactions remain (a killed one's is replaced next time).
        # (A temp file of a killed run may be there too; it is never renamed, and the next run removes it.)
        names = sorted(path.name for path in (taskd.data_dir / "archive").glob("activities-*"))
        assert all(int(name.split("-")[2].split(".")[0]) <= floor or name.startswith(f"activities-{floor + 1}-")
                   for name in names), names
    assert outcomes["old"] >= 1 and outcomes["new"] >= 1, outcomes


async def test_a_brief_says_its_earlier_history_was_archived(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    revisions = await rows_of(board, task, 6)
    before = (await client.post(f"{API}/export", {"ref": task["id"]})).body["markdown"]
    assert "archived by retention" not in before
    await client.post(f"{API}/admin/compact", {"through": revisions[2]})
    after = (await client.post(f"{API}/export", {"ref": task["id"]})).body["markdown"]
    history = after.split("## History", 1)[1]
    assert f"Earlier events (up to revision {revisions[2]}) were archived by retention" in history
    assert "activities-*.jsonl.gz" in history


async def test_two_compactions_at_once_lose_no_archive(board: RunningBoard, client: BoardClient) -> None:
    """Two compactions sent together (a person and the daily run, or two scripts): every row the
    log lost is in an archive on disk. One clears the files a killed run left past the floor, and
    must not take the other's archive for one of those."""
    task = await make_task(client)
    revisions = await rows_of(board, task, 60)
    before = {row["revision"]: row for row in (await client.get(f"{API}/activities?limit=500")).body["items"]}
    replies = await asyncio.gather(
        client.post(f"{API}/admin/compact", {"through": revisions[19]}),
        client.post(f"{API}/admin/compact", {"through": revisions[39]}),
    )
    assert all(reply.status in (200, 409) for reply in replies), [reply.body for reply in replies]
    assert any(reply.status == 200 for reply in replies), [reply.body for reply in replies]
    floor = (await meta(client))["floor"]
    kept = {row["revision"] for row in (await client.get(f"{API}/activities?after={floor}&limit=500")).body["items"]}
    gone = sorted(revision for revision in before if revision not in kept)
    assert gone and gone[-1] == floor
    on_disk = {
        row["revision"]: row for path in sorted((board.data_dir / "archive").glob("activities-*.jsonl.gz"))
        for row in archived(path)
    }
    assert sorted(on_disk) == gone, "every removed row is archived, and only those"
    assert all(on_disk[revision] == before[revision] for revision in gone)
