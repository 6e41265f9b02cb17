"""The hub as users run it: spawned by taskctl, found through its pointer, replaced, stopped.

Real subprocesses (``taskctl``, ``taskhub``), a real board, a real runtime directory.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.hub import client as hub_client
from services.hub.pointer import pid_alive, read_lock_pid, read_pointer
from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, BoardClient, RunningBoard, start_board
from tests.support.waiting import async_wait_until

from .conftest import Runtime, hub_pids, make_task

pytestmark = pytest.mark.asyncio

HERE = Path(__file__).resolve().parent


async def start_followers(runtime: Runtime, env: dict[str, str], url: str, count: int, *args: str) -> list[Any]:
    processes = await asyncio.gather(*(
        asyncio.create_subprocess_exec(
            str(VENV_BIN / "taskctl"), "events", "follow", "--url", url, *args,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )
        for _ in range(count)
    ))
    runtime.processes.extend(processes)
    for process in processes:
        process.runtime = runtime  # so a stalled read can print the hub's log
    return list(processes)


async def record(process: Any, timeout: float = 20.0) -> dict[str, Any]:
    return await process.runtime.line(process, timeout)


async def events_of(process: Any, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    got = []
    while len(got) < count:
        message = await record(process, timeout)
        assert message["type"] in ("event", "heartbeat"), message
        if message["type"] == "event":
            got.append(message)
    return got


async def pong(runtime: Runtime, board: RunningBoard) -> dict[str, Any] | None:
    pointer = read_pointer(runtime.files(board))
    if pointer is None:
        return None
    return await hub_client.ping(hub_client.HubAddress(port=pointer["port"], token=pointer["token"], pid=pointer["pid"]))


async def test_eight_concurrent_followers_start_exactly_one_hub(
    runtime: Runtime, board: RunningBoard, client: BoardClient
) -> None:
    env = runtime.env(board)
    followers = await start_followers(runtime, env, board.url, 8, "--idle", "0")
    for process in followers:
        assert (await record(process))["type"] == "open"
    assert len(hub_pids(board.url)) == 1
    pointer = read_pointer(runtime.files(board))
    assert pointer is not None and hub_pids(board.url) == [pointer["pid"]]
    assert read_lock_pid(runtime.files(board)) == pointer["pid"]
    answer = await pong(runtime, board)
    assert answer is not None and answer["clients"] == 8 + 1  # the followers and this ping
    task = await make_task(client)
    for process in followers:
        got = await events_of(process, 2)
        assert [m["activity"]["event"] for m in got] == ["project_created", "task_created"]
        assert got[1]["activity"]["task_id"] == task["id"]
    # The board token is in no argv, not in the pointer, not in the log.
    secret = board.token.encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                assert secret not in (entry / "cmdline").read_bytes(), f"token in the argv of pid {entry.name}"
            except OSError:
                pass
    ps = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, check=True).stdout
    assert secret not in ps
    files = runtime.files(board)
    assert secret not in files.pointer.read_bytes()
    log = files.log.read_bytes()
    assert b"hub_listening" in log and secret not in log
    assert oct(files.pointer.stat().st_mode & 0o777) == "0o600"
    assert oct(files.log.stat().st_mode & 0o777) == "0o600"
    assert oct(runtime.dir.stat().st_mode & 0o777) == "0o700"


async def test_a_stale_pointer_is_replaced(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    files = runtime.files(board)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    runtime.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    files.pointer.write_text(json.dumps({
        "version": 1, "protocol": hp.HUB_PROTOCOL, "key": files.key, "pid": gone.pid, "port": 9, "token": "x",
        "log": str(files.log), "started_at": "2020-01-01T00:00:00Z",
    }))
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    assert address.pid != gone.pid and pid_alive(address.pid)
    assert read_pointer(files)["pid"] == address.pid == read_lock_pid(files)
    assert await hub_client.ping(address) is not None


async def test_a_lock_left_by_a_dead_starter_is_reclaimed(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    files = runtime.files(board)
    runtime.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import fcntl, json, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, json.dumps({'pid': os.getpid(), 'role': 'starter'}).encode())\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n",
        str(files.lock), stdout=subprocess.PIPE,
    )
    runtime.processes.append(holder)
    assert (await asyncio.wait_for(holder.stdout.readline(), 10)).strip() == b"locked"
    # While a live starter holds it, nobody else spawns.
    with pytest.raises(hub_client.HubUnavailable):
        await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env, timeout=0.3)
    assert hub_pids(board.url) == []
    holder.kill()
    await holder.wait()
    assert read_lock_pid(files) == holder.pid  # the file still names the dead starter
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    assert read_lock_pid(files) == address.pid and hub_pids(board.url) == [address.pid]


async def _old_hub(runtime: Runtime, board: RunningBoard, *flags: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "old_hub.py"), str(runtime.dir), runtime.files(board).key, *flags,
        stdout=subprocess.PIPE,
    )
    runtime.processes.append(process)
    assert (await asyncio.wait_for(process.stdout.readline(), 10)).strip() == b"ready"
    return process


async def test_a_hub_of_another_generation_is_replaced(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    old = await _old_hub(runtime, board)
    assert read_pointer(runtime.files(board))["protocol"] == 0
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    assert await asyncio.wait_for(old.wait(), 10) == 0  # it was asked to stop (SIGTERM), not killed
    pointer = read_pointer(runtime.files(board))
    assert pointer["protocol"] == hp.HUB_PROTOCOL and pointer["pid"] == address.pid != old.pid
    assert await hub_client.ping(address) is not None


async def test_an_old_pointer_the_lock_does_not_confirm_is_never_signalled(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    old = await _old_hub(runtime, board, "--no-lock")
    files = runtime.files(board)
    files.lock.write_text(json.dumps({"pid": 1, "role": "hub"}))  # names someone else
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    assert old.returncode is None and pid_alive(old.pid)  # untouched
    assert read_pointer(files)["pid"] == address.pid


async def test_hub_stop_works_with_the_board_down(runtime: Runtime, tmp_path: Path) -> None:
    board = await start_board(tmp_path / "data")
    env = runtime.env(board)
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    files = runtime.files(board)
    taskctl = str(VENV_BIN / "taskctl")

    async def run(*args: str) -> tuple[int, Any]:
        process = await asyncio.create_subprocess_exec(
            taskctl, "events", "hub", "--url", board.url, "--json", *args,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 30)
        return process.returncode, json.loads(out) if out.strip() else err.decode()

    code, status = await run()
    assert code == 0 and status["data"]["running"] and status["data"]["pid"] == address.pid
    assert address.token not in json.dumps(status) and board.token not in json.dumps(status)
    await board.runner.cleanup()  # the board is gone; --url still finds the hub's key
    # Pointer and lock disagreeing: refuse to signal.
    real = files.lock.read_text()
    files.lock.write_text(json.dumps({"pid": 1}))
    code, refused = await run("--stop")
    assert code == 0 and refused["data"]["stopped"] is False and pid_alive(address.pid)
    files.lock.write_text(real)
    code, stopped = await run("--stop")
    assert code == 0 and stopped["data"] == {
        "key": files.key, "pid": address.pid, "stopped": True, "message": f"stopped the hub (pid {address.pid})"
    }
    assert not pid_alive(address.pid) and not files.pointer.exists()
    code, again = await run("--stop")
    assert again["data"]["stopped"] is False and again["data"]["message"] == "no hub is running for this board"


async def test_the_hub_exits_when_idle(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board, TASKLOOM_HUB_IDLE_EXIT="0.3")
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    files = runtime.files(board)

    async def gone() -> bool:
        return not pid_alive(address.pid) and not files.pointer.exists()

    await async_wait_until(gone, timeout=15, what="the idle hub to exit and remove its pointer")


async def test_taskhub_serve_under_a_supervisor(runtime: Runtime, board: RunningBoard, client: BoardClient) -> None:
    env = runtime.env(board)
    taskhub = str(VENV_BIN / "taskhub")
    served = await asyncio.create_subprocess_exec(
        taskhub, "serve", "--board", board.url, "--idle-exit", "0", env=env, stderr=subprocess.PIPE,
    )
    runtime.processes.append(served)
    files = runtime.files(board)

    async def published() -> bool:
        pointer = read_pointer(files)
        return pointer is not None and pointer["pid"] == served.pid

    await async_wait_until(published, timeout=20, what="taskhub serve to publish its pointer")
    # Clients find it like any hub; a second one for the same board refuses to start.
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    assert address.pid == served.pid
    second = await asyncio.create_subprocess_exec(taskhub, "serve", "--board", board.url, env=env, stderr=subprocess.PIPE)
    runtime.processes.append(second)
    _, err = await asyncio.wait_for(second.communicate(), 20)
    assert second.returncode == 1 and f"another hub (pid {served.pid})" in err.decode()
    served.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(served.wait(), 20) == 0
    assert not files.pointer.exists()


async def test_taskhub_serve_refuses_a_bad_board_url(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    process = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskhub"), "serve", "--board", "localhost:7431", env=env, stderr=subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 2 and "not a board URL" in err.decode()
    assert not runtime.dir.exists() or not list(runtime.dir.glob("hub-*"))


async def test_follow_replays_with_after_and_exits_on_idle(runtime: Runtime, board: RunningBoard, client: BoardClient) -> None:
    env = runtime.env(board)
    await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    task = await make_task(client)
    replies = [await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": f"n{n}"}) for n in range(3)]
    assert all(reply.status == 201 for reply in replies)
    rows = (await client.get(f"/api/v1/tasks/{task['id']}/activities")).body["items"]
    first = rows[0]["revision"]  # task_created
    (follower,) = await start_followers(runtime, env, board.url, 1, "--after", str(first), "--idle", "0.3")
    out, err = await asyncio.wait_for(follower.communicate(), 30)
    assert follower.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert [line["type"] for line in lines] == ["open", "event", "event", "event", "idle"]
    assert lines[0]["replay"] == "ring"
    assert [line["revision"] for line in lines[1:4]] == [row["revision"] for row in rows[1:]]


async def test_follow_survives_a_hub_restart(runtime: Runtime, board: RunningBoard, client: BoardClient) -> None:
    env = runtime.env(board)
    (follower,) = await start_followers(runtime, env, board.url, 1, "--idle", "0")
    assert (await record(follower))["type"] == "open"
    task = await make_task(client)
    before = await events_of(follower, 2)
    files = runtime.files(board)
    first_hub = read_pointer(files)["pid"]
    result = await hub_client.stop_hub(files)
    assert result.stopped
    assert (await record(follower)) == {"type": "shutdown", "reason": "hub_stopping"}
    # The follower starts the next hub itself and resumes after the last revision it printed.
    reopened = await record(follower)
    assert reopened["type"] == "open"
    second_hub = read_pointer(files)["pid"]
    assert second_hub != first_hub and hub_pids(board.url) == [second_hub]
    reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "after the hub restart"})
    assert reply.status == 201
    (after,) = await events_of(follower, 1)
    assert after["activity"]["event"] == "comment_added" and after["revision"] > before[-1]["revision"]


async def test_follow_refuses_a_missing_token(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    del env["TASKLOOM_TOKEN"]
    env["TASKLOOM_DATA_DIR"] = str(runtime.dir / "nowhere")
    process = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskctl"), "events", "follow", "--url", board.url, "--json",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert json.loads(out)["error"]["code"] == "UNAUTHORIZED"
    assert hub_pids(board.url) == []


async def test_hub_stop_all_stops_every_hub_here(runtime: Runtime, board: RunningBoard, tmp_path: Path) -> None:
    other = await start_board(tmp_path / "other")
    try:
        hubs = [
            await hub_client.find_or_start(b.url, b.token, runtime=runtime.dir, environ=runtime.env(b))
            for b in (board, other)
        ]
        env = runtime.env(board)
        process = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "taskctl"), "events", "hub", "--stop", "--all", "--json",
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()
        results = json.loads(out)["data"]
        assert sorted(r["pid"] for r in results) == sorted(h.pid for h in hubs)
        assert all(r["stopped"] for r in results)
        assert not any(pid_alive(h.pid) for h in hubs)
        process = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "taskctl"), "events", "hub", "--all", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 2 and "--all goes with --stop" in err.decode()
    finally:
        await other.runner.cleanup()
