"""A wake that is pending when the subscriber is SIGKILLed runs after the restart; it was lost for good.

A clean stop keeps a pending wake (runner.py ``_floor``: "a stop with a wake pending publishes
this, so a restart replays that wake instead of losing it"). A crash cannot run that code, and
the periodic flush has already published ``revision`` = the cursor, past the wake's own event,
so the restarted subscriber resumes after the actionable write and never runs its turn.

Real taskd, real hub, real ``taskctl loop subscribe`` processes (the e2e harness of
test_loop_e2e.py); no sleeps: every wait is a condition with a deadline.
"""

from __future__ import annotations

import signal

import pytest

from tests.subscriber.test_loop_e2e import API, SubscriberProcess, board, head, subscriber  # noqa: F401 (fixtures)
from tests.support.board import BoardClient, TaskdProcess

pytestmark = pytest.mark.asyncio


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
