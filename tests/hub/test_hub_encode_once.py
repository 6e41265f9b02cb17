"""The hub encodes each board event as one line, once, and writes those bytes to every follower.

The line carries the board's own frame JSON spliced in, not decoded and encoded again; it must be
exactly the line the hub used to build with ``encode_line(hp.event(...))``.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

import orjson
import pytest

from services.board.queries.activities import ACTIVITY_COLUMNS, to_frame
from services.hub.server import Hub, event_line
from shared import hub_protocol as hp
from shared.ndjson import encode_line
from tests.support.board import BoardClient, RunningBoard

from .conftest import RawClient, hub_caught_up, make_task, write_rows

pytestmark = pytest.mark.asyncio


async def event_lines(raw: RawClient, count: int) -> list[bytes]:
    lines: list[bytes] = []
    while len(lines) < count:
        line = await raw.reader.readline()
        assert line, "the hub closed the connection"
        if orjson.loads(line)["type"] == "event":
            lines.append(line)
    return lines


def board_frames(board: RunningBoard, after: int) -> dict[int, dict[str, object]]:
    """The activity frames as the board's replay builds them from the file."""
    with closing(sqlite3.connect(board.store.path)) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(f"SELECT {ACTIVITY_COLUMNS} FROM task_activities WHERE revision > ?", (after,))
        return {row["revision"]: to_frame(row) for row in rows}


async def test_every_follower_gets_the_same_line_encoded_once_per_event(
    hub: Hub, board: RunningBoard, client: BoardClient
) -> None:
    task = await make_task(client)
    start = await hub_caught_up(hub, board)
    followers = [await RawClient.greeted(hub) for _ in range(4)]
    for raw in followers:
        await raw.send(hp.follow())
        await raw.recv_type("open")
    encoded = hub.lines_encoded
    await write_rows(board, task, 20)
    comment = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "ünïcode \"quoted\" \u2028 line"})
    assert comment.status == 201
    received = [await event_lines(raw, 21) for raw in followers]
    for raw in followers:
        await raw.close()
    assert all(lines == received[0] for lines in received), "the same bytes for every follower"
    assert hub.lines_encoded - encoded == 21, "one encoding per event, not per follower"
    frames = board_frames(board, start)
    expected = [encode_line(hp.event(revision=revision, activity=frame)) for revision, frame in sorted(frames.items())]
    assert received[0] == expected, "byte for byte the line built by encoding the activity"


async def test_a_frame_spanning_several_data_lines_is_encoded_again_into_one_line() -> None:
    activity = {"revision": 3, "event": "comment_added", "changes": {"body": "a"}}
    data = '{"revision": 3,\n "event": "comment_added",\n "changes": {"body": "a"}}'
    line = event_line(3, activity, data)
    assert line == encode_line(hp.event(revision=3, activity=activity))
    assert line.count(b"\n") == 1 and line.endswith(b"\n")


async def test_a_single_line_frame_is_spliced_verbatim() -> None:
    activity = {"revision": 9, "event": "task_updated", "changes": {"title": "x"}}
    data = orjson.dumps(activity).decode()
    line = event_line(9, activity, data)
    assert line == encode_line(hp.event(revision=9, activity=activity))
    assert data.encode() in line
