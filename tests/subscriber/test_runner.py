"""The subscriber runner against a real board and a real hub: wakes, silence, resets, reconnects, stop."""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from services.board.store import Actor, Tx
from services.subscriber.runner import RESET_WAKE, Timing
from services.subscriber.state import read_state, state_path
from services.subscriber.turns import CONTINUE_LOCK, SESSIONS_FILE
from shared import events
from shared import hub_protocol as hp
from tests.support.waiting import async_wait_until

from .conftest import API, DIRECTOR, FAST, OWN_AGENT, Loop, write_pool


async def test_a_human_task_wakes_one_turn_with_its_revision(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    task = await loop_env.make_task()
    head = await loop_env.head()
    [wake] = await loop_env.wait_wakes(1)
    assert wake["revision"] == head and wake["events"] == "task_created"
    await loop_env.settled(head)
    assert loop_env.state()["turns"]["ran"] == 1
    assert task["status"] == "todo"


async def test_a_burst_of_fifty_wake_rows_is_one_turn(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    task = await loop_env.make_task("first")
    await loop_env.wait_wakes(1)

    def burst(tx: Tx) -> None:
        for n in range(50):
            changes = events.task_updated(fields=["labels"], after={"labels": [f"l{n}"]})
            tx.record(events.TASK_UPDATED, changes, task_id=task["id"], project_id=task["project_id"])

    await loop_env.board.store.command(burst, Actor("human", "ann"))
    head = await loop_env.head()
    wakes = await loop_env.wait_wakes(2)
    assert wakes[1] == {"revision": head, "events": "task_updated", "note": ""}
    await loop_env.settled(head)
    assert len(loop_env.wakes()) == 2


async def test_own_claims_and_heartbeats_do_not_wake_but_questions_and_answers_do(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    task = await loop_env.make_task()
    await loop_env.wait_wakes(1)
    worker = loop_env.client.as_actor("claude", OWN_AGENT)
    assert (await worker.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    assert (await worker.post(f"{API}/tasks/{task['id']}/heartbeat")).status == 200
    # A human title edit is not dispatchable either; its row proves the claim was seen first.
    assert (await loop_env.client.patch(f"{API}/tasks/{task['id']}", {"title": "Renamed"})).status == 200
    await loop_env.settled(await loop_env.head())
    assert len(loop_env.wakes()) == 1

    asked = await worker.post(f"{API}/tasks/{task['id']}/ask", {"body": "Which port?"})
    assert asked.status == 200 and asked.body["status"] == "awaiting"
    wakes = await loop_env.wait_wakes(2)
    assert wakes[1]["events"] == "comment_added"  # the ask's move to awaiting stays silent

    answer = await loop_env.client.post(f"{API}/tasks/{task['id']}/comments", {"body": "7431"})
    assert answer.status == 201
    head = await loop_env.head()
    wakes = await loop_env.wait_wakes(3)
    assert wakes[2] == {"revision": head, "events": "comment_added,task_resumed", "note": ""}


async def test_the_directors_release_wakes_and_its_other_writes_do_not(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    director = loop_env.client.as_actor("claude", DIRECTOR)
    task = await loop_env.make_task()
    await loop_env.wait_wakes(1)
    assert (await director.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    assert (await director.post(f"{API}/tasks/{task['id']}/comments", {"body": "looking"})).status == 201
    await loop_env.settled(await loop_env.head())
    assert len(loop_env.wakes()) == 1
    assert (await director.post(f"{API}/tasks/{task['id']}/move", {"to": "todo"})).status == 200
    wakes = await loop_env.wait_wakes(2)
    assert wakes[1]["events"] == "task_moved"


async def test_a_turn_without_a_live_pool_is_skipped_then_the_next_wake_runs(loop_env: Loop) -> None:
    (loop_env.state_dir / SESSIONS_FILE).unlink()
    loop_env.start()
    await loop_env.streaming()
    await loop_env.make_task("nobody home")
    await loop_env.settled(await loop_env.head())
    assert loop_env.wakes() == []
    state = loop_env.state()
    assert state["turns"] == {"ran": 0, "refused": 0, "skipped": 1}
    assert state["last_turn"]["outcome"] == "skipped" and "missing" in state["last_turn"]["reason"]

    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    write_pool(loop_env.state_dir, [dead.pid])  # a pool whose only pid has exited
    await loop_env.make_task("still nobody")
    await loop_env.settled(await loop_env.head())
    assert loop_env.wakes() == [] and "dead" in loop_env.state()["last_turn"]["reason"]

    write_pool(loop_env.state_dir, [dead.pid, os.getpid()])
    await loop_env.make_task("somebody")
    [wake] = await loop_env.wait_wakes(1)
    assert wake["events"] == "task_created"


async def test_a_held_continue_lock_defers_the_turn_until_it_is_free(loop_env: Loop) -> None:
    held = os.open(loop_env.state_dir / CONTINUE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # what the supervisor does while it runs its own turn
    try:
        loop_env.start()
        await loop_env.streaming()
        await loop_env.make_task()
        head = await loop_env.head()

        async def refused_twice() -> bool:
            return (loop_env.state().get("turns") or {}).get("refused", 0) >= 2

        await async_wait_until(refused_twice, what="two refusals")
        assert loop_env.wakes() == []
        assert loop_env.subscriber is not None and loop_env.subscriber.coalescer.pending  # kept, not dropped
    finally:
        os.close(held)
    [wake] = await loop_env.wait_wakes(1)
    assert wake == {"revision": head, "events": "task_created", "note": ""}
    # The subscriber let go of the lock when its command ended.
    probe = os.open(loop_env.state_dir / CONTINUE_LOCK, os.O_RDWR)
    try:
        await loop_env.settled(head)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)


async def test_the_minute_limit_defers_a_second_burst_without_losing_it(loop_env: Loop) -> None:
    loop_env.timing = dataclasses.replace(FAST, min_interval=1.0)
    loop_env.start()
    await loop_env.streaming()
    await loop_env.make_task("one")
    await loop_env.wait_wakes(1)
    started = asyncio.get_running_loop().time()
    await loop_env.make_task("two")
    await loop_env.make_task("three")
    head = await loop_env.head()
    wakes = await loop_env.wait_wakes(2)
    assert asyncio.get_running_loop().time() - started >= 0.8  # held back by the interval, then run
    assert wakes[1]["revision"] == head


async def test_unknown_event_names_are_ignored_and_logged_once(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    task = await loop_env.make_task()
    await loop_env.wait_wakes(1)

    def newer_board_rows(tx: Tx) -> None:
        # What a newer board writes: a name this code does not declare (the store refuses to).
        for _ in range(2):
            row = tx.one("SELECT revision + 1 FROM global_revision WHERE singleton = 1")
            assert row is not None
            revision = row[0]
            tx.execute(
                "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json,"
                " revision, created_at) VALUES (?, ?, 'human', 'ann', 'card_sparkled', '{}', ?, ?)",
                (task["id"], task["project_id"], revision, tx.now),
            )
        changes = events.task_updated(fields=["meta"], after={"meta": {"seen": True}})
        tx.record(events.TASK_UPDATED, changes, task_id=task["id"], project_id=task["project_id"])

    with capture_logs() as logs:
        await loop_env.board.store.command(newer_board_rows, Actor("human", "ann"))
        head = await loop_env.head()
        wakes = await loop_env.wait_wakes(2)
        await loop_env.settled(head)
    assert wakes[1]["events"] == "task_updated"
    unknown = [entry for entry in logs if entry["event"] == "unknown_event_ignored"]
    assert [entry["name"] for entry in unknown] == ["card_sparkled"]


async def test_a_cursor_older_than_the_ring_is_one_reset_wake(loop_env: Loop) -> None:
    await loop_env.make_task("before")
    await loop_env.make_task("also before")
    await loop_env.stop_hub()
    await loop_env.start_hub()  # a fresh hub: its ring starts at the board's head
    loop_env.start(after=1)
    head = await loop_env.head()
    [wake] = await loop_env.wait_wakes(1)
    assert wake == {"revision": head, "events": RESET_WAKE, "note": ""}


async def test_a_stopped_hub_means_reconnecting_then_a_resume_without_a_missed_wake(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    await loop_env.make_task("before")
    await loop_env.wait_wakes(1)
    await loop_env.stop_hub()  # the hub says shutdown; the subscriber retries at once, then climbs

    async def reconnecting() -> bool:
        return loop_env.state().get("state") == "reconnecting" and loop_env.state().get("reconnects", 0) >= 2

    await async_wait_until(reconnecting, what="the subscriber to report reconnecting")
    await loop_env.make_task("while the hub is down")
    head = await loop_env.head()
    await loop_env.start_hub()
    await loop_env.streaming()
    wakes = await loop_env.wait_wakes(2)
    # The new hub's ring starts at the head, so the gap comes back as a reset: a rescan wake.
    assert wakes[1]["revision"] == head and RESET_WAKE in wakes[1]["events"].split(",")


async def test_a_silent_hub_connection_is_dropped_and_resumed(loop_env: Loop) -> None:
    """Resumed, the connection replays the rows of the gap but no signal: a claim_stale the hub
    sent while we were away reached nobody. So the first turn after it names signals_missed too
    (it used to name task_created alone, and a signal of the gap was lost without a word)."""
    await loop_env.stop_hub()
    await loop_env.start_hub(heartbeat_interval=60.0)
    loop_env.timing = dataclasses.replace(FAST, silence_timeout=0.3)
    loop_env.start()
    await loop_env.streaming()

    async def dropped() -> bool:
        return (loop_env.state().get("last_problem") or "").startswith("silent")

    await async_wait_until(dropped, what="the silence timeout")
    await loop_env.streaming()
    await loop_env.make_task()

    # The hub stays silent, so the link keeps dropping and opening again, each time with its wake:
    # how many turns there are depends on timing; the first names the gap, one names the task.
    async def task_woke() -> list[list[str]] | None:
        named = [wake["events"].split(",") for wake in loop_env.wakes()]
        return named if any("task_created" in names for names in named) else None

    named = await async_wait_until(task_woke, what="a turn naming task_created")
    assert hp.SIGNALS_MISSED in named[0], named


async def test_stop_lets_a_running_turn_finish_and_publishes_stopped(loop_env: Loop, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    done = tmp_path / "done"
    loop_env.start(command=f"while [ ! -e {gate} ]; do sleep 0.01; done; touch {done}")
    await loop_env.streaming()
    await loop_env.make_task()
    subscriber = loop_env.subscriber
    assert subscriber is not None

    async def running() -> bool:
        return subscriber.turns.running

    await async_wait_until(running, what="the turn to start")
    with capture_logs() as logs:
        subscriber.request_stop()

        async def finishing() -> bool:
            return any(entry["event"] == "turn_finishing" for entry in logs)

        await async_wait_until(finishing, what="the stop to wait for the turn")
        assert subscriber.turns.running
        gate.touch()
        assert await asyncio.wait_for(loop_env.task, 10) == 0  # type: ignore[arg-type]
    assert done.exists()
    record = read_state(state_path(loop_env.state_dir))
    assert record is not None and record["state"] == "stopped" and record["turns"]["ran"] == 1


async def test_abandon_terminates_a_running_turn(loop_env: Loop, tmp_path: Path) -> None:
    done = tmp_path / "done"
    loop_env.start(command=f"sleep 30; touch {done}")
    await loop_env.streaming()
    await loop_env.make_task()
    subscriber = loop_env.subscriber
    assert subscriber is not None

    async def running() -> bool:
        return subscriber.turns.running

    await async_wait_until(running, what="the turn to start")
    started = asyncio.get_running_loop().time()
    subscriber.abandon()
    assert await asyncio.wait_for(loop_env.task, 10) == 0  # type: ignore[arg-type]
    assert asyncio.get_running_loop().time() - started < FAST.stop_grace / 2  # not the grace period
    assert not done.exists()
    assert loop_env.state()["state"] == "stopped"


async def test_a_turn_terminated_by_the_stop_is_owed_again_to_the_next_start(loop_env: Loop, tmp_path: Path) -> None:
    # The turn outlives the stop's grace and is terminated: it did not run to its end, so the
    # stopped record keeps its wake (resume_after below it, its name in pending_wakes), as a
    # SIGKILL's record does; it used to publish the wake as served. A plain stop (SIGTERM), not
    # an abandon: the turn is terminated only once the grace has run out.
    loop_env.timing = dataclasses.replace(FAST, stop_grace=0.3)
    loop_env.start(command="sleep 30")
    await loop_env.streaming()
    await loop_env.make_task()
    made = await loop_env.head()
    subscriber = loop_env.subscriber
    assert subscriber is not None

    async def running() -> bool:
        return subscriber.turns.running

    await async_wait_until(running, what="the turn to start")
    with capture_logs() as logs:
        subscriber.request_stop()
        assert await asyncio.wait_for(loop_env.task, 10) == 0  # type: ignore[arg-type]
    assert [entry["reason"] for entry in logs if entry["event"] == "turn_abandoned"] == ["stopping"], logs
    state = loop_env.state()
    assert state["state"] == "stopped"
    assert state["resume_after"] is not None and state["resume_after"] < made, state
    assert "task_created" in state["pending_wakes"], state

    loop_env.start(after=state["resume_after"])
    [woke] = await loop_env.wait_wakes(1)
    assert "task_created" in woke["events"].split(","), woke


async def test_the_subscriber_never_writes_board_state(loop_env: Loop) -> None:
    loop_env.start()
    await loop_env.streaming()
    await loop_env.make_task()
    await loop_env.wait_wakes(1)
    rows = await loop_env.board.store.query(
        lambda conn: [tuple(row) for row in conn.execute("SELECT actor_kind, actor_id, event FROM task_activities")]
    )
    assert rows == [("human", "ann", "project_created"), ("human", "ann", "task_created")]


def test_the_cli_defaults_are_the_runners() -> None:
    from services.subscriber import runner
    from taskctl.loop_cmd import subscribe

    options = {param.name: param.default for param in subscribe.params}
    timing = runner.Timing()
    for name in timing.__dataclass_fields__:
        assert options[name] == getattr(timing, name), name
    assert (timing.state_flush, timing.stop_grace) == (runner.STATE_FLUSH, runner.STOP_GRACE)


def test_timing_refuses_intervals_that_would_spin_or_never_fire() -> None:
    for bad in ({"debounce": -1.0}, {"reconnect_min": 0.0}, {"silence_timeout": 0.0},
                {"reconnect_min": 5.0, "reconnect_max": 1.0}):
        with pytest.raises(ValueError):
            Timing(**bad)  # type: ignore[arg-type]


async def test_starting_before_the_hub_reaches_the_board_brings_one_rescan_wake(tmp_path: Path) -> None:
    import aiohttp
    from aiohttp import web

    from services.board.app import BoardSettings, create_app
    from tests.support.board import BoardClient, start_board

    from .conftest import start_hub

    first = await start_board(tmp_path / "data")
    port = int(first.url.rsplit(":", 1)[1])
    await first.runner.cleanup()  # the board is down when the hub and the subscriber start
    hub = await start_hub(first, first_contact_timeout=0.1)
    runner: web.AppRunner | None = None
    async with aiohttp.ClientSession() as session:
        loop = Loop(first, BoardClient(first.url, first.token, session), tmp_path, FAST)
        loop.hub = hub
        write_pool(loop.state_dir, [os.getpid()])
        try:
            loop.start()
            await loop.streaming()
            assert loop.subscriber is not None and loop.subscriber.cursor is None  # nobody knows the head yet
            runner = web.AppRunner(create_app(BoardSettings(data_dir=tmp_path / "data", port=port)),
                                   handle_signals=False, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
            # Written while the hub may or may not have reached the board yet: either way one turn
            # comes, and it says rescan.
            await loop.make_task()
            [wake] = await loop.wait_wakes(1)
            assert RESET_WAKE in wake["events"].split(",")
            await loop.settled(await loop.head())
            assert len(loop.wakes()) == 1
        finally:
            if loop.task is not None and loop.subscriber is not None:
                loop.subscriber.abandon()
                await asyncio.wait_for(loop.task, 10)
            await hub.stop()
            if runner is not None:
                await runner.cleanup()


async def test_a_wake_pending_at_stop_is_replayed_by_the_next_start(loop_env: Loop) -> None:
    loop_env.timing = dataclasses.replace(FAST, debounce=30.0, max_wait=30.0)
    loop_env.start()
    await loop_env.streaming()
    before = await loop_env.head()
    await loop_env.make_task("queued when the loop stopped")
    head = await loop_env.head()

    async def pending() -> bool:
        return loop_env.subscriber is not None and loop_env.subscriber.coalescer.pending

    await async_wait_until(pending, what="the wake to be queued")
    assert await loop_env.stop() == 0
    record = read_state(state_path(loop_env.state_dir))
    assert record is not None and record["state"] == "stopped" and record["pending"] is True
    assert before <= record["revision"] < head  # resumes before the queued wake
    assert loop_env.wakes() == []

    loop_env.timing = FAST
    loop_env.start(after=record["revision"])
    [wake] = await loop_env.wait_wakes(1)
    assert wake["revision"] == head and "task_created" in wake["events"]
