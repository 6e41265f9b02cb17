"""A subscriber with no live resident pool says at start which file it waits for, publishes it,
and ``taskctl loop status`` shows it; once the supervisor lists a live pid, the wait is over."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from services.subscriber.turns import SESSIONS_FILE
from tests.support.board import TaskdProcess
from tests.support.waiting import async_wait_until

from .conftest import Loop, write_pool
from .test_loop_e2e import TASKCTL, SubscriberProcess, status


async def test_with_no_pool_it_says_and_publishes_the_file_it_waits_for(loop_env: Loop) -> None:
    pool_file = loop_env.state_dir / SESSIONS_FILE
    pool_file.unlink()
    with capture_logs() as logs:
        loop_env.start()
        await loop_env.streaming()
    said = [entry for entry in logs if entry["event"] == "waiting_for_resident_pool"]
    assert len(said) == 1 and said[0]["log_level"] == "warning"
    assert said[0]["file"] == str(pool_file) and said[0]["reason"] == "missing"
    assert loop_env.state()["waiting_for"] == {"file": str(pool_file), "reason": "missing"}

    # A turn skipped for want of a pool keeps it published; one that runs clears it.
    await loop_env.make_task("nobody home")
    await loop_env.settled(await loop_env.head())
    assert loop_env.state()["waiting_for"] == {"file": str(pool_file), "reason": "missing"}
    write_pool(loop_env.state_dir, [os.getpid()])
    await loop_env.make_task("somebody")
    await loop_env.wait_wakes(1)
    async def cleared() -> bool:
        return loop_env.state().get("waiting_for", "unset") is None

    await async_wait_until(cleared, what="the published wait to clear after a turn ran")


async def test_with_a_live_pool_it_waits_for_nothing(loop_env: Loop) -> None:
    with capture_logs() as logs:
        loop_env.start()
        await loop_env.streaming()
    assert not [entry for entry in logs if entry["event"] == "waiting_for_resident_pool"]
    assert loop_env.state()["waiting_for"] is None


@pytest.fixture
async def subscriber(taskd: TaskdProcess, tmp_path: Path) -> AsyncIterator[SubscriberProcess]:
    """A real ``taskctl loop subscribe`` against a real ``taskd``, with no resident pool written."""
    taskd.start()
    process = SubscriberProcess(tmp_path / "sub", taskd)
    process.dir.mkdir()
    try:
        yield process
    finally:
        await process.cleanup()


async def test_loop_subscribe_says_it_and_loop_status_shows_it(subscriber: SubscriberProcess) -> None:
    pool_file = subscriber.state_dir / "sessions.state.json"
    assert not pool_file.exists()
    await subscriber.start()
    await subscriber.ready()
    logged = [json.loads(line) for line in subscriber.log.read_text().splitlines() if line.startswith("{")]
    waits = [entry for entry in logged if entry.get("event") == "waiting_for_resident_pool"]
    assert len(waits) == 1 and waits[0]["file"] == str(pool_file), subscriber.log_tail()

    shown = status(subscriber)
    assert shown.returncode == 0, shown.stderr
    assert f"waiting for  {pool_file} (no live resident pool: missing;" in shown.stdout, shown.stdout
    as_json = subprocess.run([TASKCTL, "--json", "loop", "status", "--state-dir", str(subscriber.state_dir)],
                             capture_output=True, text=True, timeout=30, env=subscriber.env())
    assert json.loads(as_json.stdout)["data"]["waiting_for"] == {"file": str(pool_file), "reason": "missing"}

    # The supervisor lists a live pid: `loop status` reads the file afresh and the wait is gone.
    subscriber.write_pool([os.getpid()])
    shown = status(subscriber)
    assert shown.returncode == 0 and "waiting for" not in shown.stdout, shown.stdout
    assert json.loads(subprocess.run(
        [TASKCTL, "--json", "loop", "status", "--state-dir", str(subscriber.state_dir)],
        capture_output=True, text=True, timeout=30, env=subscriber.env(),
    ).stdout)["data"]["waiting_for"] is None
    assert await subscriber.terminate() == 0
