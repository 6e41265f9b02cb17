"""Stopping ``taskd`` and ``taskhub`` as a supervisor or a person does: real processes, real signals.

One signal is a graceful stop (exit 0, pointer gone). A second one during a slow shutdown — a
request whose body is still coming, a hub client that does not read — takes the forced path:
no more waiting, but the listener closes and the pointer naming this pid goes, then exit 130.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.hub.pointer import HubFiles, read_pointer
from services.hub.server import SHUTDOWN_GRACE, Hub, HubSettings
from shared import hub_protocol as hp
from tests.hub.conftest import write_rows
from tests.support.board import VENV_BIN, BoardClient, RunningBoard, TaskdProcess, make_project, make_task
from tests.support.waiting import async_wait_until, wait_until

#: A forced stop must not wait for the graceful path's grace; this is well inside it.
PROMPTLY = SHUTDOWN_GRACE * 0.75


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _logged(path: Path, event: str) -> bool:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        try:
            if json.loads(line).get("event") == event:
                return True
        except ValueError:
            continue
    return False


# -- taskd -------------------------------------------------------------------------------------


def _board_port(taskd: TaskdProcess) -> int:
    return int(taskd.url.rsplit(":", 1)[1])


def test_taskd_sigterm_exits_0_and_removes_its_pointer(taskd: TaskdProcess) -> None:
    taskd.start()
    port = _board_port(taskd)
    pointer = taskd.runtime_dir / "board.json"
    assert json.loads(pointer.read_text())["pid"] == taskd.process.pid  # type: ignore[union-attr]
    assert taskd.stop(signal.SIGTERM) == 0
    assert not pointer.exists()
    assert _refused(port)


def test_taskd_second_signal_during_a_slow_shutdown_exits_130_at_once(taskd: TaskdProcess) -> None:
    taskd.start("--body-timeout", "120")
    assert taskd.process is not None
    port = _board_port(taskd)
    pointer = taskd.runtime_dir / "board.json"
    # A request whose body is still coming: a graceful stop waits for its handler.
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = b'{"name": "half a body"'
    slow.sendall(
        b"POST /api/v1/projects HTTP/1.1\r\n"
        + f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {taskd.token}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
        + body
    )
    try:
        taskd.process.send_signal(signal.SIGTERM)
        wait_until(lambda: _logged(taskd.log_path, "board_stopping"), timeout=20, what="taskd to begin stopping")
        assert taskd.process.poll() is None, "the graceful stop should still be waiting for the request"
        started = time.monotonic()
        taskd.process.send_signal(signal.SIGINT)
        code = taskd.process.wait(timeout=20)
        elapsed = time.monotonic() - started
    finally:
        slow.close()
    assert code == 130
    assert elapsed < PROMPTLY, f"the forced stop took {elapsed:.2f} s"
    assert not pointer.exists()
    assert _refused(port)
    assert _logged(taskd.log_path, "board_forced_exit")


# -- taskhub -------------------------------------------------------------------------------------


class HubProcess:
    """A ``taskhub serve`` subprocess in a private runtime directory, logging to a file we read."""

    def __init__(self, tmp_path: Path, board: RunningBoard) -> None:
        self.runtime = tmp_path / "run"
        self.board = board
        self.log = tmp_path / "taskhub.log"
        self.files = HubFiles(self.runtime, hp.hub_key(board.url, board.token))
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
        env.update(TASKLOOM_RUNTIME_DIR=str(self.runtime), TASKLOOM_TOKEN=self.board.token)
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                str(VENV_BIN / "taskhub"), "serve", "--board", self.board.url, "--idle-exit", "0", "--log-stderr",
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )
        process = self.process

        async def published() -> dict[str, Any] | None:
            if process.returncode is not None:
                raise AssertionError(f"taskhub exited with {process.returncode}: {self.log.read_text()}")
            record = read_pointer(self.files)
            return record if record is not None and record["pid"] == process.pid else None

        return await async_wait_until(published, timeout=20, what="taskhub to publish its pointer")

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()


@pytest.fixture
async def hub(tmp_path: Path, board: RunningBoard) -> AsyncIterator[HubProcess]:
    running = HubProcess(tmp_path, board)
    try:
        yield running
    finally:
        running.kill()
        if running.process is not None:
            await asyncio.wait_for(running.process.wait(), 20)


async def test_taskhub_sigterm_exits_0_and_removes_its_pointer(hub: HubProcess) -> None:
    pointer = await hub.start()
    assert hub.process is not None
    hub.process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(hub.process.wait(), 20) == 0
    assert not hub.files.pointer.exists()
    assert _refused(pointer["port"])
    assert _logged(hub.log, "hub_exited")


async def test_taskhub_second_signal_during_a_slow_shutdown_exits_130_at_once(hub: HubProcess, client: BoardClient) -> None:
    pointer = await hub.start()
    assert hub.process is not None
    # A follower that never reads, and more events than the sockets hold: the hub's writer for
    # it is stuck (it says ``follower_lagging``), so a graceful stop waits SHUTDOWN_GRACE for it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", pointer["port"]))
    try:
        hello = json.dumps(hp.hello(pointer["token"])).encode() + b"\n"
        follow = json.dumps(hp.follow(after=None, idle_ms=0)).encode() + b"\n"
        sock.sendall(hello + follow)
        await make_project(client)
        task = await make_task(client)
        for _ in range(10):
            await write_rows(hub.board, task, 400, size=4000)
            if _logged(hub.log, "follower_lagging"):
                break
        await async_wait_until(lambda: _true(_logged(hub.log, "follower_lagging")), timeout=30,
                               what="the hub's writer to the follower to be stuck")
        hub.process.send_signal(signal.SIGTERM)
        await async_wait_until(lambda: _true(_logged(hub.log, "hub_stopping")), timeout=20,
                               what="taskhub to begin stopping")
        assert hub.process.returncode is None, "the graceful stop should still be waiting for the client"
        started = time.monotonic()
        hub.process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(hub.process.wait(), 20)
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert code == 130
    assert elapsed < PROMPTLY, f"the forced stop took {elapsed:.2f} s"
    assert not hub.files.pointer.exists()
    assert _refused(pointer["port"])
    assert _logged(hub.log, "hub_forced_exit")


async def _true(value: bool) -> bool:
    return value


# -- the hub's stop has one owner ---------------------------------------------------------------


def _stop_tasks() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == "hub-stop"]


async def test_a_stop_asked_for_from_a_callback_is_one_task_the_hub_awaits(board: RunningBoard) -> None:
    # The idle exit and a dead board link ask from synchronous callbacks, like a signal does.
    hub = Hub(HubSettings(board_url=board.url, board_token=board.token, idle_exit=0.05, reconnect_min=0.05))
    await hub.start()
    await asyncio.wait_for(hub.wait_stopped(), 20)  # the idle exit's stop, awaited by its owner
    assert hub.stopped.is_set()
    hub.request_stop("again")  # a late second request starts nothing new
    assert all(task.done() for task in _stop_tasks())
    await asyncio.wait_for(hub.stop(), 5)  # and stop() after it returns at once
