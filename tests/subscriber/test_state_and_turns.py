"""The state file, the resident-pool check, the continue lock and the turn command, on real files."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from services.subscriber import state as st
from services.subscriber.coalesce import Turn
from services.subscriber.turns import (
    CONTINUE_LOCK,
    REFUSED,
    SESSIONS_FILE,
    SKIPPED,
    ContinueLock,
    TurnRunner,
    read_pool,
)

# -- state ---------------------------------------------------------------------------------------


def test_publisher_writes_state_changes_at_once_and_cursor_moves_on_flush(tmp_path: Path) -> None:
    path = st.state_path(tmp_path / "loop")
    publisher = st.Publisher(path, {"board": "http://127.0.0.1:1"}, flush_interval=1.0)
    publisher.set_state(st.STARTING, revision=None)
    record = st.read_state(path)
    assert record is not None and record["state"] == "starting" and record["pid"] == os.getpid()
    assert record["version"] == st.STATE_VERSION and record["updated_at"].endswith("Z")
    publisher.update(revision=7)
    assert st.read_state(path)["revision"] is None  # type: ignore[index]
    assert publisher.dirty
    publisher.flush()
    assert st.read_state(path)["revision"] == 7  # type: ignore[index]
    assert not publisher.dirty
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_the_board_id_of_the_cursor_is_written_with_it_and_read_back(tmp_path: Path) -> None:
    path = st.state_path(tmp_path / "loop")
    board = "http://127.0.0.1:1"
    publisher = st.Publisher(path, {"board": board}, flush_interval=1.0)
    publisher.set_state(st.STARTING, revision=None, board_id=None)
    publisher.update(revision=7, board_id="brd_0123456789abcdef")
    publisher.flush()
    record = st.read_state(path)
    assert record is not None and (record["revision"], record["board_id"]) == (7, "brd_0123456789abcdef")
    assert st.saved_board_id(record, board) == "brd_0123456789abcdef"
    # Another board URL: neither its cursor nor its board id is this board's.
    assert st.saved_board_id(record, "http://127.0.0.1:2") is None


def test_a_state_file_from_before_the_board_id_loads_without_one(tmp_path: Path) -> None:
    path = st.state_path(tmp_path)
    board = "http://127.0.0.1:1"
    st.write_state(path, {"version": 1, "state": "stopped", "pid": 1, "board": board, "revision": 12,
                          "resume_after": None, "pending_wakes": []})
    record = st.read_state(path)
    assert record is not None and record["revision"] == 12
    assert st.saved_board_id(record, board) is None
    assert st.saved_board_id(None, board) is None  # no file at all
    assert st.saved_board_id({**record, "board_id": None}, board) is None  # written while none was known


@pytest.mark.parametrize("garbled", ["", "b" * 129, 17, True, ["brd_1"], {"id": "brd_1"}])
def test_a_board_id_the_hub_would_refuse_is_ignored_with_a_log_line(tmp_path: Path, garbled: object) -> None:
    board = "http://127.0.0.1:1"
    with structlog.testing.capture_logs() as logs:
        assert st.saved_board_id({"board": board, "revision": 12, "board_id": garbled}, board) is None
    assert [line["event"] for line in logs] == ["state_board_id_ignored"]
    assert logs[0]["log_level"] == "warning" and "1 to 128 characters" in logs[0]["reason"]


def test_publisher_refuses_an_unknown_state_word(tmp_path: Path) -> None:
    path = st.state_path(tmp_path)
    publisher = st.Publisher(path, {}, flush_interval=1.0)
    with pytest.raises(ValueError):
        publisher.set_state("dreaming")
    assert not path.exists()


def test_status_trusts_the_state_only_while_its_pid_lives(tmp_path: Path) -> None:
    assert st.status(tmp_path) == st.Status(False, "not running", None)
    path = st.state_path(tmp_path)
    st.write_state(path, {"state": "streaming", "pid": os.getpid()})
    assert st.status(tmp_path).running and st.status(tmp_path).state == "streaming"

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    st.write_state(path, {"state": "streaming", "pid": gone.pid})
    assert st.status(tmp_path).state == "not running"  # killed without a last word

    st.write_state(path, {"state": "stopped", "pid": os.getpid()})
    assert st.status(tmp_path).state == "not running"
    st.write_state(path, {"state": "dreaming", "pid": os.getpid()})
    assert st.status(tmp_path).state == "not running"
    path.write_text("{half a rec")
    assert st.status(tmp_path) == st.Status(False, "not running", None)


def test_a_zombie_pid_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        assert not st.pid_alive(child.pid)
    finally:
        child.wait()
    assert not st.pid_alive(0) and not st.pid_alive(-1) and not st.pid_alive(True) and not st.pid_alive("1")


# -- the resident pool ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "missing"),
        ("not json", "unreadable"),
        (json.dumps([1, 2]), "malformed"),
        (json.dumps({"sessions": {"pid": 1}}), "malformed"),
        (json.dumps({"sessions": []}), "empty"),
        (json.dumps({"sessions": [{"pid": "12"}, {"pid": True}, "x"]}), "empty"),
    ],
)
def test_no_pool(tmp_path: Path, content: str | None, reason: str) -> None:
    if content is not None:
        (tmp_path / SESSIONS_FILE).write_text(content)
    pool = read_pool(tmp_path)
    assert not pool and pool.reason == reason


def test_a_pool_is_live_when_one_listed_pid_runs(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / SESSIONS_FILE).write_text(json.dumps({"version": 1, "sessions": [{"pid": gone.pid}]}))
    assert read_pool(tmp_path).reason == "dead"
    sessions = [{"pid": gone.pid}, {"pid": os.getpid(), "session_id": "s-1", "agent": "worker-1"}]
    (tmp_path / SESSIONS_FILE).write_text(json.dumps({"version": 1, "sessions": sessions}))
    pool = read_pool(tmp_path)
    assert pool and pool.live == (os.getpid(),)


# -- the continue lock ----------------------------------------------------------------------------


def test_the_continue_lock_is_refused_while_another_process_holds_it(tmp_path: Path) -> None:
    path = tmp_path / CONTINUE_LOCK
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX);"
         " print('held', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert ContinueLock.try_take(path) is None
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    lock = ContinueLock.try_take(path)
    assert lock is not None
    lock.release()


# -- the turn -------------------------------------------------------------------------------------


async def test_a_turn_runs_the_command_with_the_wake_in_its_environment(tmp_path: Path) -> None:
    (tmp_path / SESSIONS_FILE).write_text(json.dumps({"sessions": [{"pid": os.getpid()}]}))
    out = tmp_path / "env.txt"
    runner = TurnRunner(f'echo "$TASKLOOM_WAKE_REVISION|$TASKLOOM_WAKE_EVENTS" > {out}; exit 3', tmp_path)
    started: list[Turn] = []
    result = await runner.run(Turn(42, ("task_created", "reset")), on_start=lambda turn, at: started.append(turn))
    assert result.outcome == "ran" and result.exit_code == 3 and result.started is not None
    assert out.read_text() == "42|task_created,reset\n"
    assert started == [Turn(42, ("task_created", "reset"))]
    # The lock was let go when the command ended.
    probe = os.open(tmp_path / CONTINUE_LOCK, os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(probe)


async def test_a_turn_is_skipped_without_a_pool_and_refused_under_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "ran"
    runner = TurnRunner(f"touch {out}", tmp_path)
    skipped = await runner.run(Turn(1, ("task_created",)))
    assert skipped.outcome == SKIPPED and "missing" in skipped.reason
    (tmp_path / SESSIONS_FILE).write_text(json.dumps({"sessions": [{"pid": os.getpid()}]}))
    held = os.open(tmp_path / CONTINUE_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        refused = await runner.run(Turn(1, ("task_created",)))
    finally:
        os.close(held)
    assert refused.outcome == REFUSED
    assert not out.exists()


async def test_stop_ends_the_commands_whole_process_group(tmp_path: Path) -> None:
    (tmp_path / SESSIONS_FILE).write_text(json.dumps({"sessions": [{"pid": os.getpid()}]}))
    pidfile = tmp_path / "child.pid"
    # A shell that ignores nothing and a grandchild that would outlive a plain kill of the shell.
    runner = TurnRunner(f"sleep 30 & echo $! > {pidfile}; wait", tmp_path)
    turn = asyncio.create_task(runner.run(Turn(1, ("task_created",))))

    async def started() -> bool:
        return pidfile.exists() and pidfile.read_text().strip() != ""

    from tests.support.waiting import async_wait_until

    await async_wait_until(started, what="the command to start its child")
    grandchild = int(pidfile.read_text())
    await runner.stop(grace=2.0)
    result = await asyncio.wait_for(turn, 5)
    assert result.outcome == "ran" and result.exit_code != 0

    async def gone() -> bool:
        return not st.pid_alive(grandchild)

    await async_wait_until(gone, what="the grandchild to end")
