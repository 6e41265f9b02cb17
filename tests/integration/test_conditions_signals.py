"""Conditions over a real board (docs/conditions.md): every instant condition crosses and clears
exactly once with the right ``changes``; signals are id-less frames that honour the stream's
filters; persisted ones are rows that replay; the dependency gate refuses, and force is audited.

"Exactly once" is checked against a *probe*: a later signal from another project, written after
the command under test. Signals leave in commit order, so once the probe's has arrived every
signal of the earlier commits has too, and a repeat would be in the list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from services.board.keys import LOG_READER, STREAMS
from services.board.store import Actor, Tx
from shared import events
from tests.support.board import API, REPORT, BoardClient, RunningBoard, activity_count, make_project, make_task
from tests.support.signals import RawFrame, RawStream, of
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def settings(client: BoardClient, project: str, value: dict[str, Any]) -> None:
    await make_project(client, project)
    reply = await client.patch(f"{API}/projects/{project}", {"settings": value})
    assert reply.status == 200, reply.body


class Probe:
    """A project whose todo lane drains and refills on demand: the later signal that proves
    every earlier one has arrived."""

    def __init__(self, client: BoardClient, stream: RawStream) -> None:
        self.client, self.stream = client, stream

    async def setup(self) -> None:
        await settings(self.client, "probe", {"monitors": {"lanes": ["todo"]}})

    async def sync(self) -> None:
        task = await make_task(self.client, "probe", title="probe")
        reply = await self.client.post(f"{API}/tasks/{task['id']}/move", {"to": "canceled"})
        assert reply.status == 200, reply.body
        await self.stream.wait_for(
            lambda f: f.is_signal and f.data["type"] == "lane_drained" and f.data["project_id"] == "probe"
        )


async def open_stream(session: aiohttp.ClientSession, board: RunningBoard, query: str = "") -> RawStream:
    return await RawStream.open(session, board.url, board.token, query)


async def finish(client: BoardClient, task: dict[str, Any]) -> None:
    """todo → done through the ordinary path (claim, deliver, close; acceptance mode none)."""
    for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
        reply = await client.post(f"{API}/tasks/{task['id']}/{path}", body)
        assert reply.status == 200, (path, reply.body)


async def test_wip_crosses_and_clears_once_each(client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession) -> None:
    await settings(client, "demo", {"wip_limits": {"in_progress": 1}})
    stream = await open_stream(session, board)
    probe = Probe(client, stream)
    await probe.setup()
    first, second = await make_task(client), await make_task(client)
    assert (await client.post(f"{API}/tasks/{first['id']}/claim", {})).status == 200
    await probe.sync()
    assert of(stream, "wip_exceeded") == []  # 1 of 1 is at the limit, not over it
    assert (await client.post(f"{API}/tasks/{second['id']}/claim", {})).status == 200
    exceeded = await stream.signal("wip_exceeded")
    assert exceeded["changes"] == {"status": "in_progress", "count": 2, "limit": 1}
    assert exceeded["project_id"] == "demo" and exceeded["task_id"] is None and exceeded["at"]
    assert set(exceeded) == {"type", "project_id", "task_id", "changes", "at"}
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert [(b["type"], b["changes"]) for b in breaches] == [("wip_exceeded", exceeded["changes"])]
    assert (await client.post(f"{API}/tasks/{second['id']}/move", {"to": "todo"})).status == 200
    cleared = await stream.signal("wip_cleared")
    assert cleared["changes"] == {"status": "in_progress", "count": 1, "limit": 1}
    await probe.sync()
    assert len(of(stream, "wip_exceeded")) == 1 and len(of(stream, "wip_cleared")) == 1
    assert (await client.get(f"{API}/breaches?project=demo")).body["items"] == []


async def test_lane_drains_and_refills_once_each(client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession) -> None:
    stream = await open_stream(session, board)
    probe = Probe(client, stream)
    await probe.setup()
    # Setting the lane is judged at once: the column is empty, so it is drained from the start.
    await settings(client, "demo", {"monitors": {"lanes": ["in_review"]}})
    task = await make_task(client, acceptance_mode="none")
    await probe.sync()
    assert [s["changes"] for s in of(stream, "lane_drained")] == [{"status": "in_review", "count": 0}]
    for path, body in (("claim", {}), ("deliver", {"body": REPORT})):
        assert (await client.post(f"{API}/tasks/{task['id']}/{path}", body)).status == 200
    refilled = await stream.signal("lane_refilled")
    assert refilled["changes"] == {"status": "in_review", "count": 1}
    assert (await client.post(f"{API}/tasks/{task['id']}/move", {"to": "done"})).status == 200
    drained = await stream.signal("lane_drained")
    assert drained["changes"] == {"status": "in_review", "count": 0}
    await probe.sync()
    assert len(of(stream, "lane_drained")) == 2 and len(of(stream, "lane_refilled")) == 1


async def test_a_blocked_card_is_refused_and_unblocks_when_its_blocker_is_done(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    stream = await open_stream(session, board)
    probe = Probe(client, stream)
    await probe.setup()
    blocker = await make_task(client, title="blocker", acceptance_mode="none")
    blocked = await make_task(client, title="blocked")
    reply = await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
    assert reply.status == 201, reply.body
    signal = await stream.signal("card_blocked")
    assert signal["task_id"] == blocked["id"] and signal["changes"] == {"blockers": [blocker["identifier"]]}

    # Both directions, every surface: the blocker is ready, the card it blocks is not.
    ready = [t["id"] for t in (await client.get(f"{API}/tasks?ready=true")).body["items"]]
    assert blocker["id"] in ready and blocked["id"] not in ready
    assert (await client.get(f"{API}/tasks/{blocked['id']}")).body["blocked_by"] == [blocker["identifier"]]
    assert (await client.get(f"{API}/tasks/{blocker['id']}")).body["blocked_by"] == []
    assert [t["id"] for t in (await client.get(f"{API}/tasks?blocked=true")).body["items"]] == [blocked["id"]]
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert [(b["type"], b["task_id"]) for b in breaches] == [("card_blocked", blocked["id"])]

    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{blocked['id']}/claim", {})
    assert reply.status == 409 and reply.error == "DEPENDENCY_OPEN", reply.body
    assert reply.body["error"]["details"]["blockers"] == [blocker["identifier"]]
    for forced in ({"force": True, "reason": "short"}, {"force": True}, {"force": True, "reason": "        x"}):
        reply = await client.post(f"{API}/tasks/{blocked['id']}/claim", forced)
        assert reply.status == 422 and reply.error == "REASON_REQUIRED", (forced, reply.body)
        assert reply.body["error"]["details"]["blockers"] == [blocker["identifier"]]
    assert await activity_count(board) == before

    await finish(client, blocker)
    unblocked = await stream.signal("card_unblocked")
    assert unblocked["task_id"] == blocked["id"] and unblocked["changes"] == {"blockers": [blocker["identifier"]]}
    ready = [t["id"] for t in (await client.get(f"{API}/tasks?ready=true")).body["items"]]
    assert blocked["id"] in ready
    assert (await client.get(f"{API}/tasks/{blocked['id']}")).body["blocked_by"] == []
    assert (await client.post(f"{API}/tasks/{blocked['id']}/claim", {})).status == 200
    await probe.sync()
    assert len(of(stream, "card_blocked")) == 1 and len(of(stream, "card_unblocked")) == 1


async def test_reopening_a_blocker_blocks_again_and_removing_the_relation_unblocks(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    stream = await open_stream(session, board)
    blocker = await make_task(client, title="blocker")
    blocked = await make_task(client, title="blocked")
    relation = (await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})).body
    await stream.signal("card_blocked")
    assert (await client.post(f"{API}/tasks/{blocker['id']}/move", {"to": "canceled"})).status == 200
    await stream.signal("card_unblocked")
    assert (await client.post(f"{API}/tasks/{blocker['id']}/reopen", {"reason": "not actually obsolete"})).status == 200
    again = await stream.signal("card_blocked")
    assert again["changes"] == {"blockers": [blocker["identifier"]]}
    reply = await client.request("DELETE", f"{API}/tasks/{blocked['id']}/relations/{relation['id']}")
    assert reply.status == 200, reply.body
    await stream.signal("card_unblocked")


async def test_a_blocked_card_hears_each_change_of_its_open_blockers(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    """Two blockers, one finishing: the card stays blocked, and ``card_blocked`` comes again with
    the one still open (the finished blocker's rows hang off it, so nothing else would tell a
    watcher of the card). A reopened blocker joins the list again; the last one closing unblocks."""
    stream = await open_stream(session, board)
    probe = Probe(client, stream)
    await probe.setup()
    first = await make_task(client, title="first blocker")
    second = await make_task(client, title="second blocker")
    blocked = await make_task(client, title="blocked")
    for blocker in (first, second):
        reply = await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
        assert reply.status == 201, reply.body
    both = sorted([first["identifier"], second["identifier"]])
    await stream.wait_for(lambda f: f.is_signal and f.data["changes"].get("blockers") == both)

    assert (await client.post(f"{API}/tasks/{first['id']}/move", {"to": "canceled"})).status == 200
    narrowed = await stream.wait_for(
        lambda f: f.is_signal and f.data["type"] == "card_blocked" and f.data["changes"]["blockers"] == [second["identifier"]]
    )
    assert narrowed.data["task_id"] == blocked["id"]
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert [(b["task_id"], b["changes"]) for b in breaches] == [(blocked["id"], {"blockers": [second["identifier"]]})]

    assert (await client.post(f"{API}/tasks/{first['id']}/reopen", {"reason": "not actually obsolete"})).status == 200
    await stream.wait_for(lambda f: f.is_signal and f.data["type"] == "card_blocked" and f.data["changes"]["blockers"] == both)
    for blocker in (first, second):
        assert (await client.post(f"{API}/tasks/{blocker['id']}/move", {"to": "canceled"})).status == 200
    unblocked = await stream.signal("card_unblocked")
    assert unblocked["task_id"] == blocked["id"] and unblocked["changes"] == {"blockers": [second["identifier"]]}
    await probe.sync()
    # first + second added, first canceled, first reopened, first canceled again: one each, no repeats.
    assert [s["changes"]["blockers"] for s in of(stream, "card_blocked")] == [
        [first["identifier"]], both, [second["identifier"]], both, [second["identifier"]],
    ]
    assert len(of(stream, "card_unblocked")) == 1


async def test_force_claims_a_blocked_card_and_says_so_in_the_audit_row(client: BoardClient) -> None:
    blocker = await make_task(client, title="blocker")
    blocked = await make_task(client, title="blocked")
    await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
    reason = "the blocker is fixed on a branch already"
    reply = await client.post(f"{API}/tasks/{blocked['id']}/claim", {"force": True, "reason": reason})
    assert reply.status == 200 and reply.body["status"] == "in_progress", reply.body
    rows = (await client.get(f"{API}/tasks/{blocked['id']}/activities?order=desc&limit=1")).body["items"]
    assert rows[0]["event"] == "task_claimed"
    assert rows[0]["changes"] == {"from": "todo", "to": "in_progress", "forced": True, "reason": reason}
    # Finishing is gated the same way.
    reply = await client.post(f"{API}/tasks/{blocked['id']}/deliver", {"body": REPORT})
    assert reply.status == 409 and reply.error == "DEPENDENCY_OPEN", reply.body
    reply = await client.post(f"{API}/tasks/{blocked['id']}/deliver", {"body": REPORT, "force": True, "reason": reason})
    assert reply.status == 200, reply.body
    rows = (await client.get(f"{API}/tasks/{blocked['id']}/activities?order=desc&limit=1")).body["items"]
    assert rows[0]["event"] == "task_delivered" and rows[0]["changes"]["forced"] is True


async def test_signal_frames_carry_no_id_and_honour_the_filters(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, "demo", {"monitors": {"lanes": ["todo"]}})
    await settings(client, "other", {"monitors": {"lanes": ["todo"]}})
    everything = await open_stream(session, board)
    only_other = await open_stream(session, board, "?project=other")
    none = await open_stream(session, board, "?signals=0")
    await make_task(client, "demo")
    await make_task(client, "other")
    await everything.signal("lane_refilled")
    await everything.signal("lane_refilled", project="other")
    got = await only_other.signal("lane_refilled", project=None)
    assert got["project_id"] == "other"
    # The cursor moves with the rows only: the last id the stream told is a row's revision.
    ids = [f.fields["id"] for f in everything.frames if "id" in f.fields]
    assert all(not f.is_signal for f in everything.frames if "id" in f.fields) and ids
    # The probe for the two filtered streams: a row after the signals, on each of them.
    last = await make_task(client, "other", title="after")
    await only_other.wait_for(lambda f: f.data is not None and not f.is_signal and f.data.get("task_id") == last["id"])
    await none.wait_for(lambda f: f.data is not None and not f.is_signal and f.data.get("task_id") == last["id"])
    assert [s["project_id"] for s in only_other.signals()] == ["other"]
    assert none.signals() == []


async def test_persisted_conditions_are_rows_that_replay(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, "demo", {"persist_conditions": ["card_blocked", "card_unblocked"]})
    head = (await client.get(f"{API}/meta")).body["revision"]
    blocker = await make_task(client, title="blocker")
    blocked = await make_task(client, title="blocked")
    await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
    rows = (await client.get(f"{API}/activities?event=card_blocked")).body["items"]
    assert len(rows) == 1
    assert rows[0]["actor_kind"] == "system" and rows[0]["task_id"] == blocked["id"]
    assert rows[0]["changes"] == {"blockers": [blocker["identifier"]]}
    replay = await open_stream(session, board, f"?after={head}&signals=0")
    frame = await replay.wait_for(lambda f: f.data is not None and not f.is_signal and f.data["event"] == "card_blocked")
    assert frame.fields["id"] == str(rows[0]["revision"])


async def test_rejections_are_signalled_although_the_change_rolls_back(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, "demo", {"monitors": {"emit_rejections": True}})
    task = await make_task(client)
    stream = await open_stream(session, board)
    before = await activity_count(board)
    reply = await client.post(f"{API}/tasks/{task['id']}/move", {"to": "in_review"})
    assert reply.status == 409 and reply.error == "INVALID_TRANSITION", reply.body
    rejected = await stream.signal("transition_rejected")
    assert rejected["task_id"] == task["id"]
    assert rejected["changes"] == {"from": "todo", "to": "in_review", "code": "INVALID_TRANSITION"}
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/tasks/{task['id']}")).body["status"] == "todo"


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"persist_conditions": ["wip_exceded"]}, "persist_conditions"),
        ({"wip_limits": {"in_progress": -1}}, "wip_limits.in_progress"),
        ({"wip_limits": {"doing": 3}}, "wip_limits.doing"),
        ({"monitors": {"max_time_in_status": {"in_review": 0.5}}}, "monitors.max_time_in_status.in_review"),
        ({"monitors": {"idle_after": 0}}, "monitors.idle_after"),
        ({"monitors": {"lanes": ["todo", "later"]}}, "monitors.lanes"),
        ({"monitors": {"emit_rejection": True}}, "monitors.emit_rejection"),
        ({"monitors": {"emit_rejections": "yes"}}, "monitors.emit_rejections"),
    ],
)
async def test_bad_condition_settings_are_refused_and_write_nothing(
    client: BoardClient, board: RunningBoard, value: dict[str, Any], field: str
) -> None:
    await make_project(client, "demo")
    before = await activity_count(board)
    reply = await client.patch(f"{API}/projects/demo", {"settings": value})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"]["field"] == field
    assert await activity_count(board) == before
    assert (await client.get(f"{API}/projects/demo")).body["settings"] == {}
    reply = await client.post(f"{API}/projects", {"id": "fresh", "settings": value})
    assert reply.status == 400 and reply.body["error"]["details"]["field"] == field
    assert (await client.get(f"{API}/projects/fresh")).status == 404


async def test_a_task_filtered_stream_gets_only_that_cards_signals(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    blocker = await make_task(client, title="blocker")
    mine, other = await make_task(client, title="mine"), await make_task(client, title="other")
    stream = await open_stream(session, board, f"?task={mine['identifier']}")
    for target in (other, mine):
        reply = await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": target["id"]})
        assert reply.status == 201, reply.body
    # The row of the second relation hangs off ``mine``; a signal may come before or after the
    # row of its own commit, so both are awaited, in either order.
    await stream.wait_for(lambda f: f.data is not None and not f.is_signal and f.data["event"] == "relation_added")
    if not stream.signals("card_blocked"):
        await stream.signal("card_blocked")
    assert [(s["type"], s["task_id"]) for s in stream.signals()] == [("card_blocked", mine["id"])]


def backlog(tx: Tx, task_id: str, count: int) -> None:
    """Rows enough that a stream reading them from the start outlasts its socket's buffers."""
    for n in range(count):
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * 400}}),
                  task_id=task_id, project_id="demo")


async def test_a_stream_catching_up_hears_a_signal_after_the_row_that_caused_it(
    board: RunningBoard, client: BoardClient, session: aiohttp.ClientSession,
) -> None:
    """A stream still reading its backlog from the database when a commit crosses a condition:
    the signal waits until the stream has sent that commit's rows, then follows them."""
    await settings(client, "demo", {"wip_limits": {"in_progress": 1}})
    held, card = await make_task(client, title="held"), await make_task(client, title="over the limit")
    assert (await client.post(f"{API}/tasks/{held['id']}/claim", {})).status == 200
    start = board.app[LOG_READER].position
    await board.store.command(backlog, Actor("human", "ann"), held["id"], 50_000)
    stream = await RawStream.open(session, board.url, board.token, f"?after={start}")  # and not read further yet
    registry = board.app[STREAMS]

    async def catching_up() -> bool:
        streams = list(registry)
        return len(streams) == 1 and not streams[0].live and streams[0].catch_up_reads > 0

    await async_wait_until(catching_up, what="the stream catching up")
    reply = await client.post(f"{API}/tasks/{card['id']}/claim", {})
    assert reply.status == 200, reply.body
    try:
        claim = await stream.wait_for(lambda frame: not frame.is_signal and bool(frame.data)
                                      and frame.data.get("event") == "task_claimed"
                                      and frame.data.get("task_id") == card["id"], timeout=120)

        def exceeded(frame: RawFrame) -> bool:
            return frame.is_signal and frame.data["type"] == "wip_exceeded"

        if not any(map(exceeded, stream.frames)):
            await stream.wait_for(exceeded, timeout=30)
        at, cause = next(n for n, frame in enumerate(stream.frames) if exceeded(frame)), stream.frames.index(claim)
        assert at > cause, f"the signal came at frame {at}, before the row that caused it at frame {cause}"
    finally:
        stream.close()
