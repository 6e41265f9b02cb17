"""Online backup while writers write, and restore with a new epoch that no follower can misread.

Real parts throughout: an in-process board under eight HTTP writers for the backup; ``taskd
serve`` and ``taskd restore`` as subprocesses, the real hub over TCP and ``taskctl events tail``
for the epoch.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest

from services.hub.server import Hub, HubSettings
from shared import hub_protocol as hp
from tests.support.board import API, VENV_BIN, BoardClient, RunningBoard, TaskdProcess, make_task, taskd_restore
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

WRITERS = 8


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


async def test_a_backup_under_eight_writers_holds_every_acknowledged_write(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    await make_task(client)
    acknowledged: list[tuple[int, str]] = []  # (position in the ack order, task id)
    stop = asyncio.Event()

    async def writer(n: int) -> None:
        own = client.as_actor("claude", f"writer-{n}")
        while not stop.is_set():
            reply = await own.post(f"{API}/tasks", {"project": "demo", "title": f"from writer {n}"})
            assert reply.status == 201, reply.body
            acknowledged.append((len(acknowledged), reply.body["id"]))

    writers = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    try:
        async def under_way() -> bool:
            return len(acknowledged) >= 200

        await async_wait_until(under_way, what="writers under way", timeout=60)
        before = {task_id for _, task_id in acknowledged}
        target = tmp_path / "backups" / "board-copy.sqlite"
        target.parent.mkdir()
        reply = await client.post(f"{API}/admin/backup", {"path": str(target)})
        assert reply.status == 200, reply.body
        during = len(acknowledged)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert reply.body["path"] == str(target) and reply.body["bytes"] == target.stat().st_size
    with closing(_ro(target)) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        copied = {row[0] for row in copy.execute("SELECT id FROM tasks")}
        head = copy.execute("SELECT revision FROM global_revision").fetchone()[0]
        board_id = copy.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0]
    assert before <= copied, f"{len(before - copied)} acknowledged writes are missing from the backup"
    assert reply.body["revision"] == head and reply.body["board_id"] == board_id
    assert during >= len(before), "the writers kept going"
    assert sorted(p.name for p in target.parent.iterdir()) == ["board-copy.sqlite"], "no temp file left behind"


@pytest.mark.parametrize("case", ["relative", "directory", "exists", "no such directory"])
async def test_a_bad_backup_path_is_refused_and_writes_nothing(
    client: BoardClient, tmp_path: Path, case: str
) -> None:
    await make_task(client)
    place = tmp_path / "place"
    place.mkdir()
    (place / "old.sqlite").write_bytes(b"an older backup")
    path, status, code = {
        "relative": ("backups/board.sqlite", 400, "VALIDATION_FAILED"),
        "directory": (str(place), 400, "VALIDATION_FAILED"),
        "exists": (str(place / "old.sqlite"), 409, "CONFLICT"),
        "no such directory": (str(place / "missing" / "b.sqlite"), 400, "VALIDATION_FAILED"),
    }[case]
    reply = await client.post(f"{API}/admin/backup", {"path": path})
    assert reply.status == status and reply.error == code, reply.body
    assert sorted(p.name for p in place.iterdir()) == ["old.sqlite"]
    assert (place / "old.sqlite").read_bytes() == b"an older backup"
    assert not (tmp_path / "backups").exists() and not Path("backups/board.sqlite").exists()


async def test_a_backup_names_its_actor(client: BoardClient, tmp_path: Path) -> None:
    reply = await client.post(f"{API}/admin/backup", {"path": str(tmp_path / "b.sqlite")}, actor=None)
    assert reply.status == 403 and reply.error == "ACTOR_REQUIRED"
    assert not (tmp_path / "b.sqlite").exists()


# -- restore and the epoch ------------------------------------------------------------------------



class HubFollower:
    """A follower on the real hub over TCP: hello, then follow from a cursor."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def follow(cls, hub: Hub, after: int) -> HubFollower:
        reader, writer = await asyncio.open_connection("127.0.0.1", hub.port, limit=4 << 20)
        follower = cls(reader, writer)
        await follower.send(hp.hello(hub.token))
        assert (await follower.recv())["type"] == "welcome"
        await follower.send({"type": "follow", "after": after, "idle_ms": 0})
        assert (await follower.recv())["type"] == "open"
        return follower

    async def send(self, message: dict[str, Any]) -> None:
        self.writer.write(orjson.dumps(message) + b"\n")
        await self.writer.drain()

    async def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        assert line, "the hub closed the follower"
        return orjson.loads(line)

    async def next_record(self) -> dict[str, Any]:
        """The next record about the log: a heartbeat says nothing of it, and ``signals_missed``
        (sent once the hub reaches the restarted board) only that signals may have been lost."""
        while True:
            record = await self.recv()
            if record["type"] not in ("heartbeat", hp.SIGNALS_MISSED):
                return record

    async def close(self) -> None:
        self.writer.close()


async def tail(taskd: TaskdProcess, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskctl"), "events", "tail", "--url", taskd.url, *args,
        env={**taskd.env(), "TASKLOOM_TOKEN": taskd.token}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )


async def tail_record(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line, "the tail ended without a record"
    return json.loads(line)


async def test_a_follower_past_the_backup_misses_nothing_after_a_restore(taskd: TaskdProcess, tmp_path: Path) -> None:
    taskd.start()
    port = urlsplit(taskd.url).port
    assert port is not None
    backup_file = tmp_path / "backup.sqlite"
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)

        async def comment(text: str) -> int:
            reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": text})
            assert reply.status == 201, reply.body
            return int((await client.get(f"{API}/meta")).body["revision"])

        taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
        assert taken.status == 200, taken.body
        backed_up = taken.body["revision"]
        for n in range(6):
            lost_future = await comment(f"lost future {n}")
        old_board = (await client.get(f"{API}/meta")).body["board_id"]

        # Two followers at revision R = lost_future: one through the hub, one with events tail.
        hub = Hub(HubSettings(board_url=taskd.url, board_token=taskd.token, hello_timeout=5.0,
                              heartbeat_interval=5.0, reconnect_min=0.05, reconnect_max=0.2))
        await hub.start()
        try:
            follower = await HubFollower.follow(hub, lost_future)
            direct = await tail(taskd, "--after", str(lost_future))
            assert await tail_record(direct) == {"type": "open", "after": lost_future, "board_id": old_board}

            taskd.stop()
            assert await tail_record(direct) == {"type": "shutdown", "reason": "server_stopping"}
            assert await direct.wait() == 0
            done = taskd_restore(backup_file, taskd.data_dir)
            assert done.returncode == 0, done.stderr
            taskd.start(port=port)
            new_board = (await client.get(f"{API}/meta")).body["board_id"]
            assert new_board != old_board
            with closing(_ro(taskd.data_dir / "board.sqlite")) as conn:
                meta = dict(conn.execute("SELECT key, value FROM board_meta").fetchall())
            assert meta["previous_board_id"] == old_board and meta["board_id"] == new_board

            # The hub sees the new board_id and resets at the restored head, never resuming at R.
            # That head is past the replaced one: the restored board never reuses a lost revision.
            reset = await follower.next_record()
            assert reset == {"type": "reset", "reason": hp.RESET_BOARD_CHANGED, "revision": lost_future + 1}, reset
            written = [await comment(f"new epoch {n}") for n in range(lost_future - backed_up + 3)]
            assert written[-1] > lost_future, "the restored board writes past the follower's old cursor"
            rows = (await client.get(f"{API}/activities?after={backed_up}&limit=500")).body["items"]
            expected = [row["revision"] for row in rows]
            got = [(await follower.next_record()) for _ in expected]
            assert [record["type"] for record in got] == ["event"] * len(expected)
            assert [record["revision"] for record in got] == expected, "the follower missed none of them"
            assert all(revision > lost_future for revision in expected), "no new row reuses a lost revision"
            await follower.close()

            # events tail resumed with its old cursor and board id reports the reset, it does not skip.
            resumed = await tail(taskd, "--after", str(lost_future), "--board-id", old_board)
            assert await tail_record(resumed) == {
                "type": "reset", "reason": "board_changed", "board_id": new_board, "previous_board_id": old_board,
                "revision": written[-1],
            }
            assert await resumed.wait() == 1
        finally:
            await hub.stop()


async def test_restore_refuses_a_running_board_and_bad_files(taskd: TaskdProcess, tmp_path: Path) -> None:
    taskd.start()
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        await make_task(client)
        backup_file = tmp_path / "backup.sqlite"
        assert (await client.post(f"{API}/admin/backup", {"path": str(backup_file)})).status == 200
        board_id = (await client.get(f"{API}/meta")).body["board_id"]
    before = sorted(p.name for p in taskd.data_dir.iterdir())

    busy = taskd_restore(backup_file, taskd.data_dir)
    assert busy.returncode == 1 and "stop the board" in busy.stderr
    taskd.stop()
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("hello")
    refused = taskd_restore(not_sqlite, taskd.data_dir)
    assert refused.returncode == 1 and "not an SQLite database" in refused.stderr
    torn = tmp_path / "torn.sqlite"
    torn.write_bytes(backup_file.read_bytes()[: 4096 + 100])
    assert taskd_restore(torn, taskd.data_dir).returncode == 1
    with closing(_ro(taskd.data_dir / "board.sqlite")) as conn:
        assert conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0] == board_id
    # Nothing new beside the database: no temp file, no file set aside (SQLite's -wal/-shm come and go).
    transient = {"board.sqlite-wal", "board.sqlite-shm"}
    assert {p.name for p in taskd.data_dir.iterdir()} - transient == set(before) - transient
