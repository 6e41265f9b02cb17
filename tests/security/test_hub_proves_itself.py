"""A client trusts a hub only when the hub proves it holds the pointer's token.

A hub that dies without removing its pointer (SIGKILL, the OOM killer, a crash) leaves
``hub-<key>.json`` naming a port that is now free, and every local user can see and bind it.
What must hold: the client never takes another user's listener there for its hub, never hands it
the hub token, and starts a fresh hub instead. Two guards, each tested here on its own: a pointer
whose pid is not a live process of this user is stale; and whatever the pid, a listener that
cannot answer the client's nonce with the hub's HMAC of it is not the hub (a pid can be reused).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.hub.client import HubAddress, HubSession, find_or_start, hub_files, stop_pid
from services.hub.pointer import pid_alive, write_json_atomic
from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherProcess, OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

#: Another user's listener on a port: it says welcome and pong to whoever greets it, and prints
#: what it was sent, so the test can look for the hub token in it.
LISTENER = r"""
import json, socket, sys, threading
port = int(sys.argv[1])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
print("LISTENING", flush=True)
def serve(conn):
    buffer = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            print("GOT " + line.decode(), flush=True)
            message = json.loads(line)
            if message.get("type") == "hello":
                answer = {"type": "welcome", "protocol": 2, "board": {"url": "", "board_id": None},
                          "revision": None, "proof": "0" * 64}
            elif message.get("type") == "ping":
                answer = {"type": "pong", "revision": None, "clients": 1, "registrations": 0}
            else:
                answer = {"type": "heartbeat", "revision": None}
            conn.sendall(json.dumps(answer).encode() + b"\n")
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@pytest.fixture
def board(tmp_path: Path) -> Iterator[TaskdProcess]:
    running = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def listen_as(user: OtherUser, port: int) -> OtherProcess:
    listener = user.popen(LISTENER, str(port))
    wait_until(lambda: "LISTENING" in listener.lines or listener.process.poll() is not None, timeout=10,
               what="the other user's listener")
    assert "LISTENING" in listener.lines, listener.text()
    return listener


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_dead_hubs_pointer_is_not_trusted_when_another_user_listens_on_its_port(
    tmp_path: Path, board: TaskdProcess, other_user: OtherUser  # noqa: F811
) -> None:
    token = board.token
    files = hub_files(board.url, token, runtime=board.runtime_dir)
    env = {**board.env(), "TASKLOOM_TOKEN": token}
    with open(tmp_path / "hub.log", "ab") as log:
        hub = subprocess.Popen(
            [str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0", "--log-stderr"],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
    listener = None
    started: HubAddress | None = None
    try:
        def pointer() -> dict[str, Any] | None:
            try:
                record = json.loads(files.pointer.read_text())
            except (OSError, ValueError):
                return None
            return record if record.get("pid") == hub.pid else None

        record = wait_until(pointer, timeout=20, what="the hub's pointer")
        port, hub_token = int(record["port"]), str(record["token"])
        hub.send_signal(signal.SIGKILL)  # no chance to remove the pointer
        hub.wait(timeout=10)
        assert files.pointer.exists()
        listener = listen_as(other_user, port)

        started = await asyncio.wait_for(
            find_or_start(board.url, token, runtime=board.runtime_dir, environ=env, timeout=15), timeout=30)
        assert started.port != port, f"the client took uid {other_user.uid}'s listener on the dead hub's port for its hub"
        assert started.pid != hub.pid and pid_alive(started.pid), started
        assert not any(hub_token in line for line in listener.lines), listener.text()
    finally:
        if listener is not None:
            listener.stop()
        if hub.poll() is None:
            hub.kill()
            hub.wait(timeout=10)
        if started is not None and pid_alive(started.pid):
            await stop_pid(started.pid)


async def test_a_listener_that_cannot_prove_the_hub_token_is_refused_even_when_the_pointers_pid_is_ours(
    tmp_path: Path, board: TaskdProcess, other_user: OtherUser  # noqa: F811
) -> None:
    """The pointer names a live process of this user (as a reused pid would) and another user's
    port: the client says hello with a proof, never the token, and refuses the unproven welcome."""
    token = board.token
    files = hub_files(board.url, token, runtime=board.runtime_dir)
    env = {**board.env(), "TASKLOOM_TOKEN": token}
    port = free_port()
    listener = listen_as(other_user, port)
    bystander = subprocess.Popen(["sleep", "600"])  # ours and alive, but no hub and no lock
    hub_token = "th_" + "5" * 48
    started: HubAddress | None = None
    try:
        write_json_atomic(files.pointer, {
            "version": hp.POINTER_VERSION, "protocol": hp.HUB_PROTOCOL, "key": files.key, "board": board.url,
            "board_id": None, "pid": bystander.pid, "port": port, "token": hub_token, "log": None,
            "started_at": "2026-05-04T09:12:44Z",
        })
        address = HubAddress(port=port, token=hub_token, pid=bystander.pid, key=files.key)
        with pytest.raises(ConnectionError, match="did not prove"):
            (await HubSession.connect(address)).close()

        started = await asyncio.wait_for(
            find_or_start(board.url, token, runtime=board.runtime_dir, environ=env, timeout=15), timeout=30)
        assert started.port != port and started.pid != bystander.pid, started
        hellos = [line for line in listener.lines if line.startswith("GOT ") and '"hello"' in line]
        assert hellos, listener.text()  # it was asked, and answered welcome…
        assert not any(hub_token in line for line in listener.lines), listener.text()  # …but never told the token
        assert all('"pong"' not in line and '"ping"' not in line for line in listener.lines), listener.text()
    finally:
        listener.stop()
        bystander.kill()
        bystander.wait(timeout=10)
        if started is not None and pid_alive(started.pid):
            await stop_pid(started.pid)
