"""Where ``taskhub serve`` logs: stderr under a supervisor (the journal), its own file in a terminal.

Real ``taskhub`` subprocesses in front of a real board, a private runtime directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
from typing import Any

import pytest

from services.hub import client as hub_client
from services.hub.pointer import read_pointer
from tests.support.board import VENV_BIN, RunningBoard
from tests.support.waiting import async_wait_until

from .conftest import Runtime

pytestmark = pytest.mark.asyncio


async def published(runtime: Runtime, board: RunningBoard, served: asyncio.subprocess.Process) -> dict[str, Any]:
    files = runtime.files(board)

    async def pointer() -> dict[str, Any] | None:
        if served.returncode is not None:
            raise AssertionError(f"taskhub serve exited with {served.returncode}")
        record = read_pointer(files)
        return record if record is not None and record["pid"] == served.pid else None

    return await async_wait_until(pointer, timeout=20, what="taskhub serve to publish its pointer")


def events_in(text: str) -> list[str]:
    return [json.loads(line)["event"] for line in text.splitlines() if line.strip()]


async def test_under_a_supervisor_the_lines_go_to_stderr_and_no_file_is_written(
    runtime: Runtime, board: RunningBoard
) -> None:
    env = runtime.env(board)
    served = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    runtime.processes.append(served)
    pointer = await published(runtime, board, served)
    assert pointer["log"] is None  # nothing to tail: the lines are in the supervisor's journal
    served.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(served.communicate(), 20)
    assert served.returncode == 0
    seen = events_in(err.decode())
    assert seen[0] == "hub_starting" and "hub_listening" in seen and seen[-1] == "hub_exited", seen
    assert board.token not in err.decode()
    assert not runtime.files(board).log.exists()


async def test_no_log_stderr_keeps_the_file(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    served = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0", "--no-log-stderr",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    runtime.processes.append(served)
    files = runtime.files(board)
    assert (await published(runtime, board, served))["log"] == str(files.log)
    served.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(served.communicate(), 20)
    assert served.returncode == 0 and err == b""
    assert "hub_listening" in events_in(files.log.read_text())
    assert oct(files.log.stat().st_mode & 0o777) == "0o600"


async def test_in_a_terminal_the_lines_go_to_the_file(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    controller, terminal = pty.openpty()
    try:
        served = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0",
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal,
        )
        runtime.processes.append(served)
        files = runtime.files(board)
        assert (await published(runtime, board, served))["log"] == str(files.log)
        served.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(served.wait(), 20) == 0
        os.set_blocking(controller, False)
        try:
            on_terminal = os.read(controller, 65536)
        except (BlockingIOError, OSError):
            on_terminal = b""
        assert on_terminal == b""
        assert "hub_exited" in events_in(files.log.read_text())
    finally:
        os.close(controller)
        os.close(terminal)


async def test_a_hub_a_client_starts_writes_each_line_to_its_file_once(runtime: Runtime, board: RunningBoard) -> None:
    env = runtime.env(board)
    address = await hub_client.find_or_start(board.url, board.token, runtime=runtime.dir, environ=env)
    files = runtime.files(board)
    assert read_pointer(files)["log"] == str(files.log)  # its stderr is that file
    os.kill(address.pid, signal.SIGTERM)

    async def exited() -> bool:
        return "hub_exited" in files.log.read_text()

    await async_wait_until(exited, timeout=20, what="the hub to log its exit")
    seen = events_in(files.log.read_text())
    assert seen.count("hub_starting") == 1 and seen.count("hub_listening") == 1, seen
