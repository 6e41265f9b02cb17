"""SIGKILL and SIGTERM of ``taskd serve`` while 16 clients write (some refused) and streams are open.

After the restart: every acknowledged write is in the log exactly once, no refused write left
anything, every frame a stream got before the death is in the log as it was sent, and a stream
resumed by ``Last-Event-ID`` (with its original ``?after=`` beside it, as an ``EventSource`` sends
them) continues exactly where it stopped: no frame twice, none skipped.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import aiohttp
import orjson
import pytest

from shared.sse import SSEMessage, SSEParser
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.asyncio

CLIENTS = 16


class Follower:
    def __init__(self) -> None:
        self.frames: dict[int, bytes] = {}
        self.order: list[int] = []
        self.last_id = 0
        self.shutdown = False

    async def follow(self, response: aiohttp.ClientResponse, until: int | None = None) -> None:
        parser = SSEParser()
        try:
            while until is None or self.last_id < until:
                chunk = await response.content.readany()
                if not chunk:
                    return
                for item in parser.feed(chunk):
                    if not isinstance(item, SSEMessage):
                        continue
                    if item.event == "shutdown":
                        self.shutdown = True
                    if item.id is not None:
                        self.last_id = int(item.id)
                        if item.data is not None:
                            self.order.append(self.last_id)
                            self.frames[self.last_id] = item.data.encode()
        except (aiohttp.ClientError, ConnectionError):
            return


async def writer(session: aiohttp.ClientSession, url: str, task_id: str, n: int, acked: list[str],
                 refused: list[str], stop: asyncio.Event) -> None:
    version = 1
    count = 0
    while not stop.is_set():
        count += 1
        title = f"c{n}-{count}"
        stale = count % 3 == 0
        body = {"title": title, "if_version": version - 1 if stale else version}
        try:
            async with session.patch(f"{url}/api/v1/tasks/{task_id}", json=body) as reply:
                data = await reply.json()
                if reply.status == 200:
                    assert not stale, data
                    acked.append(title)
                    version = data["version"]
                else:
                    assert reply.status == 409 and data["error"]["code"] == "VERSION_CONFLICT", data
                    refused.append(title)
            if count % 5 == 0:
                async with session.post(f"{url}/api/v1/tasks/{task_id}/move", json={"to": "done"}) as reply:
                    assert reply.status == 409, await reply.text()
        except (aiohttp.ClientError, ConnectionError):
            return


async def every_row(session: aiohttp.ClientSession, url: str, after: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = f"after={after}&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        async with session.get(f"{url}/api/v1/activities?{query}") as reply:
            page = await reply.json()
        rows += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return rows


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_a_death_mid_burst_loses_nothing_acknowledged_and_streams_resume_exactly(
    taskd: TaskdProcess, sig: int
) -> None:
    taskd.start()
    headers = {"Authorization": f"Bearer {taskd.token}", "X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    acked: list[str] = []
    refused: list[str] = []
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        assert (await session.post(f"{taskd.url}/api/v1/projects", json={"id": "demo"})).status == 201
        ids = []
        for n in range(CLIENTS):
            async with session.post(f"{taskd.url}/api/v1/tasks", json={"project": "demo", "title": f"t{n}"}) as r:
                ids.append((await r.json())["id"])
        async with session.get(f"{taskd.url}/api/v1/meta") as r:
            start = (await r.json())["revision"]
        everything, one_task = Follower(), Follower()
        stream_all = await session.get(f"{taskd.url}/api/v1/events?after={start}")
        stream_one = await session.get(f"{taskd.url}/api/v1/events?after={start}&task={ids[0]}")
        assert stream_all.status == 200 and stream_one.status == 200
        followers = [asyncio.ensure_future(everything.follow(stream_all)),
                     asyncio.ensure_future(one_task.follow(stream_one))]
        stop = asyncio.Event()
        writers = [asyncio.ensure_future(writer(session, taskd.url, ids[n], n, acked, refused, stop))
                   for n in range(CLIENTS)]

        async def enough() -> None:
            while len(acked) < 300:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(enough(), 60)
        assert taskd.process is not None
        taskd.process.send_signal(sig)
        await asyncio.wait_for(asyncio.gather(*writers), 30)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*followers), 30)
        taskd.stop(timeout=30)
        before_all, before_one = dict(everything.frames), dict(one_task.frames)
        acked_at_death = list(acked)

        taskd.start()
        rows = await every_row(session, taskd.url, start)
        streamable = [row for row in rows if row["event"] != "task_heartbeat"]
        by_revision = {row["revision"]: row for row in rows}
        # Every acknowledged title is in the log exactly once; no refused one is.
        titles = [row["changes"]["after"]["title"] for row in rows
                  if row["event"] == "task_updated" and "after" in row["changes"]]
        assert len(titles) == len(set(titles)), "a write is in the log twice"
        missing = set(acked_at_death) - set(titles)
        assert not missing, f"acknowledged but lost: {sorted(missing)[:5]}"
        assert not set(refused) & set(titles), "a refused write left a row"
        # What was streamed is in the log, byte for byte as the log serves it.
        for revision, data in before_all.items():
            assert revision in by_revision, f"streamed revision {revision} is not in the log after restart"
            assert orjson.loads(data) == by_revision[revision]
        # Resume both streams the way an EventSource does: its URL's ?after= plus Last-Event-ID.
        async with session.get(f"{taskd.url}/api/v1/meta") as r:
            head = (await r.json())["revision"]
        resumed_all = await session.get(f"{taskd.url}/api/v1/events?after={start}",
                                        headers={"Last-Event-ID": str(everything.last_id)})
        resumed_one = await session.get(f"{taskd.url}/api/v1/events?after={start}&task={ids[0]}",
                                        headers={"Last-Event-ID": str(one_task.last_id)})
        assert resumed_all.status == 200 and resumed_one.status == 200, (resumed_all.status, everything.last_id)
        after_all, after_one = Follower(), Follower()
        after_all.last_id, after_one.last_id = everything.last_id, one_task.last_id
        last_streamable = max((row["revision"] for row in streamable), default=start)
        await asyncio.wait_for(after_all.follow(resumed_all, until=last_streamable), 30)
        mine = [row["revision"] for row in streamable if row["task_id"] == ids[0]]
        if mine and mine[-1] > one_task.last_id:
            await asyncio.wait_for(after_one.follow(resumed_one, until=mine[-1]), 30)
        resumed_all.close()
        resumed_one.close()
        got_all = everything.order + after_all.order
        assert got_all == [row["revision"] for row in streamable], "the unfiltered stream lost or repeated a frame"
        got_one = one_task.order + after_one.order
        assert got_one == mine, "the filtered stream lost or repeated a frame"
        for revision in after_all.order:
            assert orjson.loads(after_all.frames[revision]) == by_revision[revision]
        assert set(before_one) <= set(before_all)
        assert head >= last_streamable
    assert taskd.stop() == 0
