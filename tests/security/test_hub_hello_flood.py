"""Connections that never say hello cannot lock the hub's owner out.

Any local user can connect to the hub's port without a token, and each connection costs the hub
a descriptor until its hello deadline. What must hold: the hub raises its soft ``RLIMIT_NOFILE``
to the hard limit at start (as the board does), and holds at most ``MAX_AWAITING_HELLO``
connections that have not said hello, dropping the oldest first, so even at a limit it cannot
raise, another user's flood leaves room for the owner's own sessions, whose hello comes at once.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.hub.client import hub_files
from shared import hub_protocol as hp
from shared.ndjson import encode_line
from tests.security.support_connections import ensure_own_descriptors
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

LIMIT = 256
#: More connections than the hub has descriptors.
FLOOD = LIMIT + 64
#: Sessions of the owner's that must each be welcomed while the flood goes on.
OWNER_SESSIONS = 5

#: The other user: hold FLOOD connections to the hub, opening a new one for each the hub closes.
FLOODER = r"""
import select, socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
held = set()
def more():
    while len(held) < count:
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            return
        s.setblocking(False)
        held.add(s)
more()
print("HELD", len(held), flush=True)
while True:
    readable, _, _ = select.select(list(held), [], [], 0.2)
    for s in readable:
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            held.discard(s)
            s.close()
    more()
"""


class Hub:
    def __init__(self, board: TaskdProcess, log: Path, nofile: tuple[int, int]) -> None:
        env = {**board.env(), "TASKLOOM_TOKEN": board.token}

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0", "--log-stderr"],
                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=limit,
            )
        files = hub_files(board.url, board.token, runtime=board.runtime_dir)

        def pointer() -> dict[str, Any] | None:
            try:
                record = json.loads(files.pointer.read_text())
            except (OSError, ValueError):
                return None
            return record if record.get("pid") == self.process.pid else None

        record = wait_until(pointer, timeout=20, what="the hub's pointer")
        self.port, self.token = int(record["port"]), str(record["token"])

    def open_files_limit(self) -> tuple[int, int]:
        for line in Path(f"/proc/{self.process.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
        raise AssertionError("no open-file limit in /proc")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[TaskdProcess]:
    running = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_the_hub_raises_its_soft_open_file_limit_to_the_hard_limit(tmp_path: Path, board: TaskdProcess) -> None:
    hub = Hub(board, tmp_path / "hub.log", (LIMIT, 16 * LIMIT))
    try:
        assert hub.open_files_limit() == (16 * LIMIT, 16 * LIMIT)
        assert welcomed(hub.port, hub.token, timeout=5)
    finally:
        hub.stop()


def test_another_users_connections_that_never_say_hello_leave_room_for_the_owners_sessions(
    tmp_path: Path, board: TaskdProcess, other_user: OtherUser  # noqa: F811
) -> None:
    """At a limit the hub cannot raise (soft = hard = 256), more silent connections than that."""
    ensure_own_descriptors(FLOOD + 64)
    hub = Hub(board, tmp_path / "hub.log", (LIMIT, LIMIT))
    flooder = None
    try:
        assert hub.open_files_limit() == (LIMIT, LIMIT)
        flooder = other_user.popen(FLOODER, str(hub.port), str(FLOOD))
        wait_until(lambda: any(line.startswith("HELD") for line in flooder.lines) or flooder.process.poll() is not None,
                   timeout=30, what="the other user's connections")
        assert flooder.process.poll() is None, flooder.text()
        for n in range(OWNER_SESSIONS):
            assert welcomed(hub.port, hub.token, timeout=5), (
                f"session {n}: while uid {other_user.uid} floods the hub with {FLOOD} connections that never say "
                f"hello, the owner's hello got no welcome within 5 s"
            )
        assert hub.process.poll() is None
    finally:
        if flooder is not None:
            flooder.stop()
        hub.stop()
    assert "connections_dropped_before_hello" in (tmp_path / "hub.log").read_text()


def welcomed(port: int, hub_token: str, *, timeout: float) -> bool:
    """Whether a session with the hub's token gets ``welcome`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(encode_line(hp.hello(hub_token)))
            data = b""
            while b"\n" not in data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    return False
                data += chunk
    except OSError:
        return False
    return json.loads(data.split(b"\n", 1)[0]).get("type") == "welcome"
