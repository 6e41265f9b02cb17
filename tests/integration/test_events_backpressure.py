"""A client that stops reading while 50,000 events are written: bounded board memory, then every event.

The board runs as ``taskd serve`` (a subprocess) so its RSS can be measured; the rows come from a
second process writing the SQLite file through the board's store code, which also proves the
external-writer path (``PRAGMA data_version``) under load.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from shared.sse import SSEMessage, SSEParser
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.asyncio

REPO = Path(__file__).resolve().parents[2]
EVENTS = 50_000
ROW_PAD = 2_000  # bytes of changes per row: unbounded buffering would cost > 100 MB
#: Board RSS may grow by at most this much while the client is stalled (SQLite cache, one batch, …).
RSS_BUDGET_MB = 60

BULK_WRITER = """
import sys
from pathlib import Path
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor
from services.board.commands.comments import add_comment
from shared import events

path, task_id, total, per_tx, pad = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def rows(tx, start, count):
    for n in range(start, start + count):
        changes = events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * pad}})
        tx.record(events.TASK_UPDATED, changes, task_id=task_id, project_id="demo")

store = SqliteStore(path)
try:
    actor = Actor("codex", "bulk")
    for start in range(0, total, per_tx):
        store.run_command(rows, actor, start, min(per_tx, total - start))
    store.run_command(add_comment, actor, task_id, body="the last one")
finally:
    store.close()
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_stalled_client_costs_bounded_memory_then_gets_everything(taskd: TaskdProcess) -> None:
    assert Path("/proc/self/status").exists(), "this test reads the board's RSS from Linux's /proc"
    taskd.start()
    assert taskd.process is not None
    pid = taskd.process.pid
    auth = {"Authorization": f"Bearer {taskd.token}", "X-Taskloom-Actor": "ann"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(headers=auth, timeout=timeout) as session:
        assert (await session.post(f"{taskd.url}/api/v1/projects", json={"id": "demo"})).status == 201
        created = await session.post(f"{taskd.url}/api/v1/tasks", json={"project": "demo", "title": "bulk"})
        task = await created.json()
        start = (await (await session.get(f"{taskd.url}/api/v1/meta")).json())["revision"]

        stalled = await session.get(f"{taskd.url}/api/v1/events?after={start}")
        watcher = await session.get(f"{taskd.url}/api/v1/events?after={start}&event=comment_added")
        assert stalled.status == 200 and watcher.status == 200
        assert (await stalled.content.readany()).startswith(b"retry:")  # open, then stop reading
        baseline = rss_mb(pid)

        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", BULK_WRITER, str(taskd.data_dir / "board.sqlite"), task["id"], str(EVENTS), "200",
            str(ROW_PAD), cwd=REPO, stderr=subprocess.PIPE,
        )
        peak = baseline

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mb(pid))
                await asyncio.sleep(0.02)  # a measurement cadence, not synchronisation

        sampler = asyncio.create_task(sample())
        try:
            # The board has read and fanned out every row once the active watcher sees the last one.
            parser = SSEParser()
            last_comment: int | None = None
            async with asyncio.timeout(60):
                while last_comment is None:
                    chunk = await watcher.content.readany()
                    assert chunk, "the watcher's stream ended"
                    for item in parser.feed(chunk):
                        if isinstance(item, SSEMessage) and item.data is not None:
                            last_comment = int(item.id or 0)
            _, stderr = await asyncio.wait_for(writer.communicate(), 60)
            assert writer.returncode == 0, stderr.decode()
        finally:
            sampler.cancel()
        growth = peak - baseline
        print(f"board RSS baseline {baseline:.1f} MB, peak {peak:.1f} MB (+{growth:.1f} MB) for {EVENTS} events")
        assert growth < RSS_BUDGET_MB, f"board RSS grew {growth:.1f} MB while a client was stalled"

        # The stalled client reads again and gets every event, in order, exactly once.
        began = time.monotonic()
        parser = SSEParser()
        revisions: list[int] = []
        checked = 0
        async with asyncio.timeout(60):
            while not revisions or revisions[-1] < last_comment:
                chunk = await stalled.content.readany()
                assert chunk, "the stalled stream ended"
                for item in parser.feed(chunk):
                    if isinstance(item, SSEMessage) and item.data is not None:
                        revision = int(item.id or 0)
                        revisions.append(revision)
                        if checked < 100 or revision == last_comment:
                            assert orjson.loads(item.data)["revision"] == revision
                            checked += 1
        print(f"caught up {len(revisions)} events in {time.monotonic() - began:.1f} s")
        assert len(revisions) == EVENTS + 1
        assert revisions == sorted(set(revisions))
        async with session.get(f"{taskd.url}/api/v1/activities?after={start}&limit=1&order=desc") as reply:
            assert (await reply.json())["items"][0]["revision"] == revisions[-1]
        stalled.close()
        watcher.close()
    assert taskd.stop() == 0
