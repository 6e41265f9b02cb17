"""The loop's state directory on a disk that fills up or is read-only
(services/subscriber/state.py ``Publisher.flush``; taskctl/loop_cmd.py).

0. A full disk under a running subscriber: the periodic flush died with ENOSPC unseen (its task
   was not among those the runner watches), and the next turn's write of the state file killed
   the driver, so the subscriber exited 1 with a traceback and woke nobody until the disk had
   room again. A state file it cannot write now costs only the file's freshness: the old one
   stays whole (an older cursor resumes earlier, which loses nothing), the subscriber says so
   once, keeps waking the supervisor, and writes the file again once the disk has room.
1. A read-only state directory at start: a traceback from ``os.open``; now a one-line error that
   names the directory and exit 1.

Real tmpfs disks (tests/support/disks.py, root), real taskd, hub and ``taskctl loop subscribe``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.board import BoardClient, TaskdProcess
from tests.support.disks import fill, remount, tmpfs

from .test_loop_e2e import API, SubscriberProcess, board, head, subscriber  # noqa: F401 (fixtures)


@pytest.fixture
def state_disk(subscriber: SubscriberProcess) -> Iterator[Path]:  # noqa: F811
    """The subscriber's state directory on a 1 MiB tmpfs of its own, with this process as its pool."""
    with tmpfs(subscriber.state_dir, "1m") as disk:
        subscriber.write_pool([os.getpid()])
        yield disk


def log_events(process: SubscriberProcess) -> list[dict[str, object]]:
    found = []
    for line in process.log.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


async def test_a_full_disk_costs_the_state_files_freshness_not_the_wakes(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess, state_disk: Path  # noqa: F811
) -> None:
    _, client = board
    await subscriber.start()
    await subscriber.ready()
    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    await subscriber.settled(await head(client))
    before = subscriber.state()

    filler = fill(state_disk)
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Written while the disk is full"})).status == 201
    full = await head(client)
    [woke] = await subscriber.wait_wakes(1)
    assert woke["revision"] == full and woke["events"] == "task_created"
    # The old state file is whole, and says no more than what was true when it was written.
    assert subscriber.state()["revision"] == before["revision"] < full
    assert subscriber.process is not None and subscriber.process.returncode is None, subscriber.log_tail()
    said = [e for e in log_events(subscriber) if e.get("event") == "state_file_unwritable"]
    assert len(said) == 1 and said[0]["path"] == str(subscriber.state_dir / "subscribe.state.json"), subscriber.log_tail()

    # A second wake on the full disk still runs, and is not said again.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Another"})).status == 201
    await subscriber.wait_wakes(2)
    said = [e for e in log_events(subscriber) if e.get("event") == "state_file_unwritable"]
    assert len(said) == 1, subscriber.log_tail()

    filler.unlink()
    last = await head(client)
    state = await subscriber.wait_state(
        lambda s: (s.get("revision") or 0) >= last and (s.get("turns") or {}).get("ran") == 2,
        "the state file to catch up once the disk has room",
    )
    assert state["state"] == "streaming"
    assert [e for e in log_events(subscriber) if e.get("event") == "state_file_writable_again"]
    assert await subscriber.terminate() == 0
    assert subscriber.state()["state"] == "stopped"


async def test_a_read_only_state_dir_is_refused_in_one_line(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess, state_disk: Path  # noqa: F811
) -> None:
    remount(state_disk, "ro")
    try:
        await subscriber.start()
        assert subscriber.process is not None
        code = await subscriber.process.wait()
    finally:
        remount(state_disk, "rw")
    text = subscriber.log.read_text()
    assert code == 1, text
    assert "Traceback" not in text, text
    assert str(subscriber.state_dir) in text and "read-only" in text.lower(), text

