"""What a restart of the loop subscriber resumes from, and queues again, after a kill
(services/subscriber/runner.py ``_resume_after``, ``pending_wakes``; taskctl/loop_cmd.py).

0. A wake pending when the subscriber was SIGKILLed was lost for good: a clean stop kept it, but
   a crash cannot run that code, and the periodic flush had already published ``revision`` = the
   cursor, past the wake's own event. The state file now carries ``resume_after`` below it.

1. ``resume_after`` was pinned below a wake that had already had its turn: ``_floor`` was reset
   only when a turn ended with nothing pending, so a wake arriving during a turn kept it below the
   wake that turn served, and a restart ran that turn again. The floor now moves to the turn when
   the turn takes its wakes.

2. A wake from a ``signal`` record (``claim_stale``: a worker died holding a card) has no
   revision: resuming from below the cursor replays no signal, so a kill lost it. The state file
   now names the pending wakes, and a restart queues them again.

Real taskd, real hub, real ``taskctl loop subscribe`` processes; every wait is a condition with a
deadline. The first turn is held open by a FIFO the test releases (no sleep).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from pathlib import Path

import pytest

from tests.subscriber.test_conditions_wake import live_board, loop_process  # noqa: F401 (fixtures)
from tests.subscriber.test_loop_e2e import API, ON_WAKE, SubscriberProcess, board, head, subscriber  # noqa: F401
from tests.support.board import BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio


def gated_on_wake(hold: Path, gate: Path) -> str:
    """ON_WAKE, then, while ``hold`` exists, wait until the test opens and closes ``gate`` (a FIFO)."""
    return f"{ON_WAKE}; if [ -e {shlex.quote(str(hold))} ]; then cat {shlex.quote(str(gate))} >/dev/null; fi"


def claim_stale_woke(process: SubscriberProcess) -> bool:
    """The subscriber's JSON log has the ``wake`` line of a ``claim_stale`` signal."""
    for line in process.log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "wake" and record.get("name") == "claim_stale" and record.get("signal"):
            return True
    return False


def release(gate: Path) -> None:
    with open(gate, "w"):  # blocks until the turn's ``cat`` has the FIFO open; closing it is EOF
        pass


async def test_a_wake_pending_at_sigkill_runs_after_the_restart(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess  # noqa: F811
) -> None:
    taskd, client = board
    # One event-triggered turn a minute (the production default): the second wake must wait.
    await subscriber.start("--min-interval", "60")
    await subscriber.ready()
    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "First"})).status == 201
    first = await head(client)
    [ran] = await subscriber.wait_wakes(1)
    assert ran["revision"] == first

    # A human creates work: actionable, but the rate limit holds its turn back.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Second, still unserved"})).status == 201
    second = await head(client)
    state = await subscriber.wait_state(
        lambda s: (s.get("revision") or 0) >= second and s.get("pending") is True,
        "the subscriber to hold the second wake pending",
    )
    assert len(subscriber.wakes()) == 1

    # The subscriber dies without a word (OOM killer, kill -9, a host reset).
    assert subscriber.process is not None
    subscriber.process.send_signal(signal.SIGKILL)
    await subscriber.process.wait()
    assert state.get("resume_after") is not None and state["resume_after"] < second, state

    # Restarted (rate limit off, so any wake it still knows about runs at once).
    await subscriber.start()
    wakes = await subscriber.wait_wakes(2, timeout=8.0)
    assert wakes[1]["revision"] >= second and "task_created" in wakes[1]["events"].split(","), wakes
    assert await subscriber.terminate() == 0


async def test_resume_after_does_not_stay_below_a_wake_already_served(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess  # noqa: F811
) -> None:
    _, client = board
    hold, gate = subscriber.dir / "hold", subscriber.dir / "gate"
    os.mkfifo(gate)
    # One turn a minute: the second wake waits, observably, after the first turn has ended.
    await subscriber.start("--min-interval", "60", "--on-wake", gated_on_wake(hold, gate))
    await subscriber.ready()
    hold.touch()

    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "First"})).status == 201
    first = await head(client)
    [ran] = await subscriber.wait_wakes(1)
    assert ran["revision"] == first
    await subscriber.wait_state(lambda s: s.get("turn_running") is True, "the first turn to be running")

    # While that turn runs, more work arrives.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Second"})).status == 201
    second = await head(client)
    await subscriber.wait_state(lambda s: (s.get("revision") or 0) >= second and s.get("pending") is True,
                                "the second wake to be pending")

    hold.unlink()
    await asyncio.get_running_loop().run_in_executor(None, release, gate)
    state = await subscriber.wait_state(
        lambda s: s.get("turn_running") is False and (s.get("last_turn") or {}).get("revision") == first
        and s.get("pending") is True,
        "the first turn to have run, the second wake still pending",
    )
    assert len(subscriber.wakes()) == 1
    # The wake at ``first`` has had its turn; only ``second`` waits. A restart from below ``first``
    # replays the served wake and runs its turn again.
    assert state["resume_after"] is not None and first <= state["resume_after"] < second, state
    assert await subscriber.terminate() == 0


async def test_a_signal_wake_pending_at_sigkill_runs_after_the_restart(
    live_board: tuple[TaskdProcess, BoardClient], loop_process: SubscriberProcess  # noqa: F811
) -> None:
    _, client = live_board
    await loop_process.start("--min-interval", "60")
    await loop_process.ready()
    made = await client.post(f"{API}/tasks", {"project": "demo", "title": "Dig the well"})
    assert made.status == 201, made.body
    assert (await loop_process.wait_wakes(1))[0]["events"] == "task_created"

    # Another loop's worker claims, beats once and dies: claim_stale (a signal) wakes this loop,
    # and the rate limit holds its turn back.
    worker = client.as_actor("claude", "worker-9")
    assert (await worker.post(f"{API}/tasks/{made.body['id']}/claim")).status == 200
    assert (await worker.post(f"{API}/tasks/{made.body['id']}/heartbeat")).status == 200
    pending = await loop_process.wait_state(
        lambda s: s.get("pending") is True and s.get("resume_after") is not None and claim_stale_woke(loop_process),
        "the claim_stale wake to be pending", timeout=15)
    assert len(loop_process.wakes()) == 1

    assert loop_process.process is not None
    loop_process.process.send_signal(signal.SIGKILL)
    await loop_process.process.wait()

    await loop_process.start()  # rate limit off: anything it still knows of runs at once
    await loop_process.wait_state(lambda s: s.get("state") == "streaming", "the restarted subscriber to stream")
    # A marker: its turn comes after whatever the restart replays.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Marker"})).status == 201
    marker = await head(client)

    async def marker_ran() -> list[dict[str, object]] | None:
        found = loop_process.wakes()[1:]
        return found if any(int(w["revision"]) >= marker for w in found) else None  # type: ignore[call-overload]

    after = await async_wait_until(marker_ran, timeout=10, what="the marker's turn")
    events = {name for wake in after for name in str(wake["events"]).split(",")}
    assert "claim_stale" in events, (
        f"the claim_stale wake pending at the kill (state {pending}) never ran after the restart: turns {after}"
    )
    assert await loop_process.terminate() == 0
