"""Another local user's listener on the board's port gets no token, from the hub or from taskctl.

The supervised setup (docs/operations.md) runs the board on a fixed port (7431) and a hub with
``--board http://127.0.0.1:7431 --idle-exit 0``. A board restart (an upgrade, a crash the unit
restarts) frees the port for a moment, and any local user may bind it then. Loopback TCP carries
no peer credentials, so before the token goes on a new connection the client asks the kernel who
holds the far end (``services/hub/port_owner.py``) and sends nothing to another uid's socket
(docs/security.md, *Who listens on the board's port*). The other user runs as a real second uid.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from services.hub.port_owner import ForeignListener, check_listener
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherProcess, OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

#: The other user's listener: bind the port given (0: any), say which, print every request head
#: it receives (``b''`` for a connection that sent nothing), answer 503.
LISTENER = r"""
import socket, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(64)
print("LISTENING", listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    conn.settimeout(5)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    print("REQUEST " + repr(data), flush=True)
    try:
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass
    conn.close()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listen_as(user: OtherUser, port: int) -> tuple[OtherProcess, int]:
    """The other user's listener on ``port`` (0: any) and the port it holds."""
    listener = user.popen(LISTENER, str(port))
    wait_until(lambda: any(line.startswith("LISTENING") for line in listener.lines) or listener.process.poll() is not None,
               timeout=10, what="the other user's listener")
    said = [line for line in listener.lines if line.startswith("LISTENING")]
    if not said:
        listener.stop()
        raise AssertionError(f"the other user's listener did not start: {listener.text()}")
    return listener, int(said[0].split()[1])


def requests(listener: OtherProcess) -> list[str]:
    """The request heads the listener received that held any byte."""
    return [line for line in listener.lines if line.startswith("REQUEST") and line != "REQUEST b''"]


def test_the_kernel_names_the_uid_that_holds_a_loopback_port(other_user: OtherUser) -> None:  # noqa: F811
    """Our own listeners pass (IPv4, and a dual-stack IPv6 one reached over IPv4 and IPv6); the
    other uid's is refused with its port and uid, checked on the socket that connected."""
    with socket.socket() as own:
        own.bind(("127.0.0.1", 0))
        own.listen()
        with socket.create_connection(own.getsockname()) as conn:
            check_listener(conn)
    with socket.socket(socket.AF_INET6) as dual:
        dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        dual.bind(("::", 0))
        dual.listen()
        for host in ("127.0.0.1", "::1"):
            with socket.create_connection((host, dual.getsockname()[1])) as conn:
                check_listener(conn)
    listener, port = listen_as(other_user, 0)
    try:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            with pytest.raises(ForeignListener) as refused:
                check_listener(conn)
        assert (refused.value.port, refused.value.uid) == (port, other_user.uid)
        assert f"127.0.0.1:{port}" in str(refused.value) and f"uid {other_user.uid}" in str(refused.value)
        assert f"uid {os.geteuid()}" in str(refused.value)
    finally:
        listener.stop()


def test_the_hub_sends_nothing_to_another_users_listener_on_the_boards_port_and_resumes_with_the_board(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    """While the board is down, the hub's reconnect ladder meets the other user's listener on the
    board's port: each attempt is refused before a byte goes out and logged as ``board_impostor``
    naming the port and the uid; once the board is back on its port, the hub streams again."""
    port = free_port()
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start(port=port)
    token = board.token
    hub_log = tmp_path / "hub.log"
    env = dict(board.env())
    env.update({"TASKLOOM_TOKEN": token, "TASKLOOM_HUB_RECONNECT_MIN": "0.05", "TASKLOOM_HUB_RECONNECT_MAX": "0.2"})
    with open(hub_log, "ab") as log:
        hub = subprocess.Popen(
            [str(VENV_BIN / "taskhub"), "serve", "--board", board.url, "--idle-exit", "0", "--log-stderr"],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )

    def logged(event: str) -> list[dict[str, object]]:
        lines = [json.loads(line) for line in hub_log.read_text().splitlines() if line.startswith("{")]
        return [line for line in lines if line.get("event") == event]

    listener = None
    try:
        wait_until(lambda: logged("board_streaming"), timeout=20, what="the hub to stream from the board")
        assert board.stop() == 0  # the board restarts (an upgrade): its port is free for a moment
        listener, _ = listen_as(other_user, port)
        refusals = wait_until(lambda: len(logged("board_impostor")) >= 3 and logged("board_impostor"), timeout=20,
                              what="the hub to refuse the other user's listener three times")
        assert requests(listener) == [], "the hub wrote a request to another user's listener"
        assert not any(token in line for line in listener.lines)
        assert {(line["port"], line["uid"]) for line in refusals} == {(port, other_user.uid)}
        listener.stop()
        listener = None
        board.start(port=port)
        wait_until(lambda: len(logged("board_streaming")) >= 2, timeout=20,
                   what="the hub to stream again once the board is back on its port")
        assert hub.poll() is None
    finally:
        if listener is not None:
            listener.stop()
        if hub.poll() is None:
            hub.kill()
        hub.wait(timeout=10)
        if board.process is not None and board.process.poll() is None:
            board.stop()


def test_taskctl_refuses_another_users_listener_on_the_board_url_and_sends_it_nothing(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    """``TASKLOOM_URL`` as the units and scripts set it, the board down and the other user on its
    port: ``taskctl`` exits 1 with ``BOARD_IMPOSTOR`` naming the port and the uid, and the
    listener receives not a byte (the token from the token file least of all)."""
    port = free_port()
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start(port=port)
    token = board.token
    assert board.stop() == 0
    listener, _ = listen_as(other_user, port)
    try:
        env = dict(board.env())
        env.pop("TASKLOOM_TOKEN", None)
        env.update({"TASKLOOM_URL": f"http://127.0.0.1:{port}", "TASKLOOM_NO_AUTOSTART": "1"})

        def taskctl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(VENV_BIN / "taskctl"), *args], env=env, capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)

        as_json = taskctl("--json", "task", "list")
        assert as_json.returncode == 1, as_json.stderr
        error = json.loads(as_json.stdout)["error"]
        assert error["code"] == "BOARD_IMPOSTOR"
        assert (error["details"]["port"], error["details"]["uid"]) == (port, other_user.uid)
        human = taskctl("task", "list")
        assert human.returncode == 1
        first = human.stderr.splitlines()[0]
        assert f"127.0.0.1:{port}" in first and f"uid {other_user.uid}" in first, human.stderr
        assert requests(listener) == [], "taskctl wrote a request to another user's listener"
        assert not any(token in output for output in (*listener.lines, as_json.stdout, as_json.stderr, human.stderr))
    finally:
        listener.stop()
