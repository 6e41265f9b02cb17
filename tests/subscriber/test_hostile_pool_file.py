"""A ``sessions.state.json`` the supervisor got wrong, or someone else put there, is no pool: never
a hang, a crash or an unbounded read (services/subscriber/turns.py ``read_pool``).

0. A FIFO in its place blocked the subscriber for ever: ``read_text`` waits for a writer, inside
   the event loop, so it never streamed and SIGTERM went unanswered until systemd's SIGKILL.
1. JSON nested deeper than the parser's recursion limit raised ``RecursionError`` (not a
   ``ValueError``) out of ``run`` and the subscriber exited at every start.
2. A symlink to ``/dev/zero`` (or any endless file) was read to its end: memory until the OOM
   killer. The file is now read only when it is a regular file, and at most ``MAX_POOL_BYTES``.

Real ``taskctl loop subscribe`` against a real taskd for the FIFO; the rest read the file directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from services.subscriber.turns import MAX_POOL_BYTES, SESSIONS_FILE, read_pool
from tests.support.board import BoardClient, TaskdProcess

from .test_loop_e2e import API, TASKCTL, SubscriberProcess, board, head, subscriber  # noqa: F401 (fixtures)


def read_with_deadline(state_dir: Path, unblock: Path | None = None, timeout: float = 5.0) -> object:
    """``read_pool`` in a thread; if it is still reading after ``timeout``, open ``unblock`` (a FIFO)
    for writing so the thread ends, and fail."""
    result: list[object] = []

    def read() -> None:
        try:
            result.append(read_pool(state_dir))
        except BaseException as exc:  # noqa: BLE001 - reported below as the failure it is
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        if unblock is not None:
            with open(unblock, "w"):
                pass
            reader.join(timeout)
        pytest.fail(f"read_pool was still reading {state_dir / SESSIONS_FILE} after {timeout} s")
    if isinstance(result[0], BaseException):
        pytest.fail(f"read_pool raised {result[0]!r}")
    return result[0]


def test_a_fifo_in_place_of_the_pool_file_is_unreadable_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / SESSIONS_FILE)
    pool = read_with_deadline(tmp_path, unblock=tmp_path / SESSIONS_FILE)
    assert not pool and pool.reason == "unreadable"  # type: ignore[attr-defined]


def test_a_symlink_to_an_endless_file_is_not_read_to_its_end(tmp_path: Path) -> None:
    (tmp_path / SESSIONS_FILE).symlink_to("/dev/zero")
    pool = read_with_deadline(tmp_path)
    assert not pool and pool.reason == "unreadable"  # type: ignore[attr-defined]


def test_a_symlink_to_a_good_pool_file_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "pool.json"
    real.write_text(json.dumps({"version": 1, "sessions": [{"pid": os.getpid()}]}))
    (tmp_path / SESSIONS_FILE).symlink_to(real)
    assert read_pool(tmp_path).live == (os.getpid(),)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[" * 100_000, "unreadable"),
        ('{"sessions": ' * 100_000, "unreadable"),
        (json.dumps({"sessions": [{"pid": 2**31}, {"pid": 10**30}]}), "dead"),
        (json.dumps({"sessions": [{"pid": os.getpid()}], "pad": "x" * MAX_POOL_BYTES}), "unreadable"),
    ],
    ids=["nested-lists", "nested-objects", "pids-beyond-pid_t", "over-the-size-limit"],
)
def test_a_hostile_pool_file_is_no_pool(tmp_path: Path, content: str, reason: str) -> None:
    (tmp_path / SESSIONS_FILE).write_text(content)
    pool = read_with_deadline(tmp_path)
    assert not pool and pool.reason == reason  # type: ignore[attr-defined]


def test_a_directory_in_place_of_the_pool_file_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / SESSIONS_FILE).mkdir()
    pool = read_with_deadline(tmp_path)
    assert not pool and pool.reason == "unreadable"  # type: ignore[attr-defined]


async def test_the_subscriber_streams_and_stops_with_a_fifo_as_its_pool_file(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess  # noqa: F811
) -> None:
    _, client = board
    pool_file = subscriber.state_dir / SESSIONS_FILE
    pool_file.unlink()
    os.mkfifo(pool_file)
    await subscriber.start()
    state = await subscriber.wait_state(lambda s: s.get("state") == "streaming", "the subscriber to stream", timeout=10)
    assert state["waiting_for"] == {"file": str(pool_file), "reason": "unreadable"}
    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Nobody to take it"})).status == 201
    revision = await head(client)
    state = await subscriber.wait_state(
        lambda s: (s.get("turns") or {}).get("skipped", 0) >= 1 and (s.get("revision") or 0) >= revision,
        "the turn to be skipped for want of a pool", timeout=10,
    )
    assert "unreadable" in state["last_turn"]["reason"]
    assert subscriber.wakes() == []
    # SIGTERM is answered: nothing blocks the event loop (the fixture SIGKILLs one that hangs).
    assert await subscriber.terminate() == 0


async def test_a_continue_lock_that_cannot_be_opened_defers_the_turn_without_losing_it(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess  # noqa: F811
) -> None:
    _, client = board
    lock = subscriber.state_dir / "continue.lock"
    lock.mkdir()  # in the way: open(O_RDWR) is EISDIR
    await subscriber.start()
    await subscriber.ready()
    assert (await client.post(f"{API}/projects", {"id": "demo", "name": "Demo"})).status == 201
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Locked out"})).status == 201
    revision = await head(client)
    state = await subscriber.wait_state(
        lambda s: (s.get("last_turn") or {}).get("outcome") == "refused", "the turn to be refused", timeout=10)
    assert "continue.lock" in state["last_turn"]["reason"] and str(lock) in state["last_turn"]["reason"], state
    assert subscriber.wakes() == []
    lock.rmdir()
    [woke] = await subscriber.wait_wakes(1)
    assert woke["revision"] == revision and "task_created" in woke["events"].split(","), woke
    assert await subscriber.terminate() == 0


# -- subscribe.state.json in the way ---------------------------------------------------------------


def put_in_place(path: Path, what: str) -> None:
    if what == "fifo":
        os.mkfifo(path)
    elif what == "nested":
        path.write_text('{"revision": ' * 100_000)
    elif what == "endless":
        path.symlink_to("/dev/zero")
    else:
        raise AssertionError(what)


@pytest.mark.parametrize("what", ["fifo", "nested", "endless"])
def test_loop_status_of_a_state_file_in_the_way_is_not_running_at_once(tmp_path: Path, what: str) -> None:
    state_dir = tmp_path / "loop"
    state_dir.mkdir()
    put_in_place(state_dir / "subscribe.state.json", what)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
    done = subprocess.run([TASKCTL, "loop", "status", "--state-dir", str(state_dir)], check=False,
                          capture_output=True, text=True, env={**env, "TASKLOOM_NO_AUTOSTART": "1"}, timeout=20)
    assert done.returncode == 3 and done.stdout.strip() == "not running", (done.stdout, done.stderr)


@pytest.mark.parametrize("what", ["fifo", "nested", "endless"])
async def test_a_state_file_in_the_way_at_start_is_a_rescan_not_a_hang_or_a_crash(
    board: tuple[TaskdProcess, BoardClient], subscriber: SubscriberProcess, what: str  # noqa: F811
) -> None:
    path = subscriber.state_dir / "subscribe.state.json"
    put_in_place(path, what)
    await subscriber.start()
    # A previous run's cursor that cannot be read: whatever it had not dealt with is owed one rescan.
    [woke] = await subscriber.wait_wakes(1)
    assert woke["events"] == "reset", woke
    state = await subscriber.wait_state(lambda s: s.get("state") == "streaming", "the subscriber to stream", timeout=10)
    assert state["pid"] == subscriber.process.pid  # type: ignore[union-attr]
    assert path.is_file() and not path.is_symlink()
    assert await subscriber.terminate() == 0
