"""The largest row the board accepts reaches every reader (issue: one large row stalls every hub).

A move reason the size of the body limit used to make a 1,048,770-byte SSE data line: the SSE
parser caps lines at 1 MiB, so the hub reconnected at that revision forever and every follower,
brief and loop stalled. Now every text that lands in an activity row is bounded (shared/limits.py)
and the caps downstream are derived from the largest row. The end-to-end test refuses the old
attack, then writes the largest rows the limits allow, with the characters that cost most on
the wire, and follows them through SSE, a real ``taskhub``, ``taskctl events follow``,
``taskctl events tail`` and a card brief kept by the hub.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from services.hub.server import Hub, HubSettings
from shared import hub_protocol as hp
from shared import limits
from shared.ndjson import LineFramer, encode_line
from shared.sse import SSEParser, SSEProtocolError, encode_event
from tests.support.board import API, VENV_BIN, BoardClient, TaskdProcess, raw_connection, start_board

from .support_bounds import head, sse_frames, start_taskd, stop_taskd

TASKCTL = str(VENV_BIN / "taskctl")
#: orjson writes U+0001 as ``\u0001``: six bytes for one character, the most any character costs.
WORST = "\x01"
#: In a header a ``"`` is the dearest character JSON can be asked to carry (``\"``).
WORST_ACTOR = '"' * limits.ACTOR_ID_MAX_CHARS
#: A four-byte character: dearest per character where the limit counts encoded characters (meta).
WIDE = "\U0001f600"


# -- the arithmetic, as pure units ---------------------------------------------------------------


def test_the_caps_are_derived_so_the_largest_activity_fits_every_line() -> None:
    assert limits.MAX_CHANGES_BYTES + limits.ACTIVITY_ENVELOPE_BYTES <= limits.MAX_ACTIVITY_BYTES
    assert limits.SSE_DATA_PREFIX_BYTES + limits.MAX_ACTIVITY_BYTES <= limits.SSE_MAX_LINE
    assert limits.SSE_MAX_LINE + limits.HUB_EVENT_ENVELOPE_BYTES <= limits.HUB_MAX_LINE
    # The body limit is no longer what bounds a row: every text field that reaches a row is capped.
    assert limits.REASON_MAX_CHARS * limits.JSON_CHAR_MAX_BYTES < limits.MAX_CHANGES_BYTES


def test_whatever_the_sse_parser_accepts_the_hub_forwards_as_one_line() -> None:
    # The longest data the parser takes, as JSON (a string of the activity's size).
    activity = {"pad": "x" * (limits.SSE_MAX_LINE - limits.SSE_DATA_PREFIX_BYTES - len('{"pad":""}'))}
    frame = encode_event(2**63 - 1, orjson.dumps(activity))
    parsed = SSEParser().feed(frame)
    assert len(parsed) == 1 and orjson.loads(parsed[0].data or "") == activity
    line = encode_line(hp.event(revision=2**63 - 1, activity=activity))
    assert LineFramer().feed(line) == [line[:-1]]
    with pytest.raises(SSEProtocolError):  # one byte more is refused by the parser, so never forwarded
        SSEParser().feed(encode_event(1, orjson.dumps({"pad": activity["pad"] + "x"})))


# -- end to end ------------------------------------------------------------------------------------


class Processes:
    """``taskctl`` subprocesses of one test and the hub they start; all ended at teardown."""

    def __init__(self, runtime: Path) -> None:
        self.runtime = runtime
        self.running: list[asyncio.subprocess.Process] = []

    def env(self, taskd: TaskdProcess) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
        env.update(
            TASKLOOM_RUNTIME_DIR=str(self.runtime),
            TASKLOOM_URL=taskd.url,
            TASKLOOM_TOKEN=taskd.token,
            TASKLOOM_NO_AUTOSTART="1",
            TASKLOOM_HUB_IDLE_EXIT="60",
            TASKLOOM_HUB_REFRESH_DEBOUNCE="0.03",
            TASKLOOM_HUB_REFRESH_MAX_WAIT="0.2",
            TASKLOOM_HUB_REFRESH_FLOOR="0.1",
        )
        return env

    async def start(self, env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            TASKCTL, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            limit=4 << 20,  # our own reader must not be the one that chokes on a long line
        )
        self.running.append(process)
        return process

    async def record(self, process: asyncio.subprocess.Process, *, timeout: float = 30.0) -> dict[str, Any]:
        assert process.stdout is not None and process.stderr is not None
        try:
            raw = await asyncio.wait_for(process.stdout.readline(), timeout)
        except TimeoutError:
            raise AssertionError(f"no record in {timeout:g} s; hub log:\n{self.hub_log()}") from None
        if not raw:
            err = await process.stderr.read()
            raise AssertionError(f"taskctl ended (rc={process.returncode}): {err.decode()}\n{self.hub_log()}")
        return json.loads(raw)

    async def until(self, process: asyncio.subprocess.Process, done: Any, *, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Records up to and including the first for which ``done(record)`` holds."""
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(timeout):
            while True:
                seen.append(await self.record(process, timeout=timeout))
                if done(seen[-1]):
                    return seen

    def hub_log(self) -> str:
        return "\n".join(log.read_text(errors="replace")[-3000:] for log in sorted(self.runtime.glob("hub-*.log")))

    async def close(self) -> None:
        for process in self.running:
            if process.returncode is None:
                process.kill()
            await process.wait()
        for pointer in self.runtime.glob("hub-*.json"):
            try:
                os.kill(int(json.loads(pointer.read_text())["pid"]), signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[Processes]:
    running = Processes(tmp_path / "run")
    yield running
    await running.close()


@pytest.fixture
def taskd(tmp_path: Path) -> Any:
    process = start_taskd(tmp_path / "board")
    yield process
    stop_taskd(process)


def distinct(n: int, length: int) -> str:
    """``length`` of the dearest characters, made unique by a two-digit prefix."""
    return f"{n:02d}" + WORST * (length - 2)


async def test_the_largest_rows_reach_sse_the_hub_follow_tail_and_a_brief(
    taskd: TaskdProcess, processes: Processes, tmp_path: Path
) -> None:
    env = processes.env(taskd)
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session, actor=("human", WORST_ACTOR))
        assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
        task = (await client.post(f"{API}/tasks", {"project": "demo", "title": "Carry the largest row"})).body
        ref = task["identifier"]

        follower = await processes.start(env, "events", "follow", "--idle", "0")
        assert (await processes.record(follower))["type"] == "open"
        card = tmp_path / "card.md"
        watcher = await processes.start(env, "export", "watch", ref, "--out", str(card), "--ttl", "0")
        await processes.until(watcher, lambda record: record["type"] == "refresh")
        start = await head(client)

        # The attack of the issue: a reason as long as the body limit allows.
        attack = await client.post(f"{API}/tasks/{ref}/move", {"to": "blocked", "reason": "x" * 1_048_400})
        assert attack.status == 400 and attack.error == "VALIDATION_FAILED", attack.body
        assert attack.body["error"]["details"]["field"] == "reason"
        assert await head(client) == start

        # The largest rows the limits allow, each field at its limit in the dearest characters.
        short = limits.CHANGES_TEXT_MAX_CHARS
        items = [distinct(n, short) for n in range(limits.MAX_ACCEPTANCE_ITEMS_PER_CHANGE)]
        reply = await client.post(f"{API}/tasks/{ref}/acceptance", {"items": items})
        assert reply.status in (200, 201), reply.body
        for round_ in range(2):  # the second patch has long values on both sides, before and after
            reply = await client.patch(f"{API}/tasks/{ref}", {
                "title": distinct(round_, short),
                "description": distinct(round_ + 10, short),
                "priority": ("high", "urgent")[round_],
                "kind": ("bug", "review")[round_],
                "labels": [f"l{round_}{n:02d}-" + "x" * (limits.LABEL_MAX_CHARS - 5) for n in range(limits.MAX_LABELS_PER_TASK)],
                "assignee_kind": f"{round_}" + WORST * (limits.ACTOR_KIND_MAX_CHARS - 1),
                "assignee_id": distinct(round_ + 20, limits.ACTOR_ID_MAX_CHARS),
                "reporter_kind": f"{round_ + 5}" + WORST * (limits.ACTOR_KIND_MAX_CHARS - 1),
                "reporter_id": distinct(round_ + 30, limits.ACTOR_ID_MAX_CHARS),
                "meta": {"k": f"{round_}" + WIDE * (short - 9)},
            })
            assert reply.status == 200, reply.body
        reply = await client.post(f"{API}/tasks/{ref}/move", {"to": "blocked", "reason": distinct(99, limits.REASON_MAX_CHARS)})
        assert reply.status == 200, reply.body

        rows = (await client.get(f"{API}/activities?after={start}&limit=1000")).body["items"]
        assert [row["event"] for row in rows] == ["acceptance_changed", "task_updated", "task_updated", "task_moved"]
        sizes = [len(orjson.dumps(row)) for row in rows]
        # Large indeed (the acceptance row is the largest any command writes), and within the frame cap.
        print("activity frame sizes:", sizes)
        assert max(sizes) > 40_000 and max(sizes) <= limits.MAX_ACTIVITY_BYTES, sizes
        assert rows[0]["changes"]["added"][5]["text"] == items[5]
        assert rows[2]["changes"]["before"]["title"] == distinct(0, short)
        last = rows[-1]["revision"]

        # 1. The board's SSE stream, through the shared parser at its default cap.
        frames = await sse_frames(taskd.url, taskd.token, after=start, until=last)
        assert frames == rows

        # 2. The hub, and `taskctl events follow` reading its NDJSON lines.
        records = await processes.until(follower, lambda record: record.get("revision") == last)
        events = [record for record in records if record["type"] == "event"]
        assert [record["activity"] for record in events] == rows

        # 3. `taskctl events tail`, the direct SSE diagnostic.
        tail = await processes.start(env, "events", "tail", "--after", str(start))
        records = await processes.until(tail, lambda record: record.get("revision") == last)
        assert [record["activity"] for record in records if record["type"] == "event"] == rows

        # 4. The card brief the hub keeps for `export watch`.
        await processes.until(watcher, lambda record: record["type"] == "refresh" and record.get("revision", 0) >= last)
        text = card.read_text()
        assert "status: blocked" in text and items[5] in text, text[:2000]

        # And the stream goes on: the next small row arrives everywhere after the large ones.
        assert (await client.post(f"{API}/tasks/{ref}/comments", {"body": "after the large rows"})).status == 201
        newest = await head(client)
        comment = await processes.until(follower, lambda record: record["type"] == "event")
        assert comment[-1]["activity"]["event"] == "comment_added"
        assert (await sse_frames(taskd.url, taskd.token, after=last, until=comment[-1]["revision"]))[-1]["event"] == "comment_added"
        assert newest >= comment[-1]["revision"]


async def test_a_row_over_the_cap_is_refused_whole(taskd: TaskdProcess) -> None:
    """Past the field limits: more acceptance items than one row may name, and long reasons."""
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
        task = (await client.post(f"{API}/tasks", {"project": "demo", "title": "Refuse the rest"})).body
        before = await head(client)
        too_many = [f"item {n}" for n in range(limits.MAX_ACCEPTANCE_ITEMS_PER_CHANGE + 1)]
        cases = [
            ("acceptance", {"items": too_many}, "items"),
            ("acceptance", {"items": ["x" * (limits.ACCEPTANCE_ITEM_MAX_CHARS + 1)]}, "items"),
            ("move", {"to": "blocked", "reason": "r" * (limits.REASON_MAX_CHARS + 1)}, "reason"),
            ("reopen", {"reason": "r" * (limits.REASON_MAX_CHARS + 1)}, "reason"),
            ("claim", {"steal": True, "reason": "r" * (limits.REASON_MAX_CHARS + 1)}, "reason"),
            ("comments", {"body": "c" * (limits.COMMENT_MAX_CHARS + 1)}, "body"),
        ]
        for verb, body, field in cases:
            reply = await client.post(f"{API}/tasks/{task['id']}/{verb}", body)
            assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (verb, reply.body)
            assert reply.body["error"]["details"]["field"] == field, (verb, reply.body)
        labels = [f"label-{n}" for n in range(limits.MAX_LABELS_PER_TASK + 1)]
        for path, body, field in [
            (f"/tasks/{task['id']}", {"labels": labels}, "labels"),
            (f"/tasks/{task['id']}", {"description": "d" * (limits.DESCRIPTION_MAX_CHARS + 1)}, "description"),
            (f"/tasks/{task['id']}", {"assignee_kind": "human", "assignee_id": "a" * (limits.ACTOR_ID_MAX_CHARS + 1)},
             "assignee_id"),
        ]:
            reply = await client.patch(API + path, body)
            assert reply.status == 400 and reply.error == "VALIDATION_FAILED", (path, reply.body)
            assert reply.body["error"]["details"]["field"] == field, reply.body
        assert await head(client) == before
        assert (await client.get(f"{API}/tasks/{task['id']}")).body["labels"] == []


async def test_a_row_written_before_the_limits_is_streamed_with_its_changes_omitted(tmp_path: Path) -> None:
    """A row over the cap already in the file (an older board wrote it) must not stall the streams."""
    board = await start_board(tmp_path / "data")
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
            task = (await client.post(f"{API}/tasks", {"project": "demo", "title": "Old row"})).body
            before = await head(client)
            with raw_connection(board) as conn:
                conn.execute(
                    "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json,"
                    " revision, created_at) VALUES (?, 'demo', 'human', 'ann', 'task_moved', ?,"
                    " (SELECT revision + 1 FROM global_revision), '2026-01-01T00:00:00.000Z')",
                    (task["id"], orjson.dumps({"from": "todo", "to": "blocked", "blockedReason": "x" * (1 << 20)}).decode()),
                )
            assert (await client.post(f"{API}/tasks/{task['id']}/comments", {"body": "after it"})).status == 201
            newest = await head(client)
            frames = await sse_frames(board.url, board.token, after=before, until=newest)
            assert [frame["event"] for frame in frames] == ["task_moved", "comment_added"]
            assert frames[0]["changes"] == {"omitted": True}
            listed = (await client.get(f"{API}/activities?after={before}")).body["items"]
            assert listed == frames
    finally:
        await board.runner.cleanup()


async def test_the_hub_never_writes_a_line_over_its_cap() -> None:
    """Defence in depth for boards that are not ours: an oversize activity goes out without changes."""
    hub = Hub(HubSettings(board_url="http://127.0.0.1:9", board_token="tl_x", max_line=2000))
    activity = {"id": 7, "revision": 7, "task_id": "t", "project_id": "demo", "actor_kind": "human",
                "actor_id": "ann", "event": "task_updated", "changes": {"pad": "x" * 5000}, "created_at": "now"}
    hub.ring.restart(6)  # as after the board's first contact at revision 6
    hub.board_event(7, activity)
    hub.board_flush()  # as the link does at the end of every read: the ring takes the line here
    ((revision, line),) = hub.ring.since(6) or []
    assert revision == 7 and len(line) <= 2000 + 1
    assert orjson.loads(line)["activity"] == {**activity, "changes": {"omitted": True}}


async def test_a_long_meta_source_still_deduplicates_and_its_row_stays_small(taskd: TaskdProcess) -> None:
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
        body = {"project": "demo", "title": "From a long source", "meta": {"source": "s" * 20_000}}
        first = await client.post(f"{API}/tasks", body)
        again = await client.post(f"{API}/tasks", body)
        assert (first.status, again.status) == (201, 200) and again.body["id"] == first.body["id"]
        row = (await client.get(f"{API}/tasks/{first.body['id']}/activities")).body["items"][0]
        assert row["changes"]["idem"].startswith("task|:|sha256:")
        assert len(row["changes"]["idem"]) <= limits.IDEM_MAX_CHARS
