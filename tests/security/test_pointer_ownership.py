"""``taskctl`` believes only this user's board pointer, processes and token file.

``taskd``, ``taskhub`` and ``loop subscribe`` refuse a runtime directory that belongs to another
uid (docs/security.md). ``taskctl`` reads ``board.json`` from whatever runtime directory it is
pointed at (``TASKLOOM_RUNTIME_DIR``, say a path under ``/tmp`` that another user may create
first), trusts the pointer's ``url`` once its ``pid`` is alive and ``/health`` answers, and reads
the token from the file the pointer names -- this user's own token file, whose default path
anyone can guess. So it must ignore a runtime directory or pointer that another uid owns or that
group or others may write, a pid that is not this uid's process, and a token file that is not
this uid's or that others may read.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from taskctl.discovery import live_pointer, pointer_path, read_pointer, resolve_board
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

#: The other user: a runtime directory of its own with a pointer naming its listener and this
#: user's token file; the listener says /health ok and prints every request head.
PLANT = r"""
import json, os, socket, sys
runtime, token_file = sys.argv[1], sys.argv[2]
os.makedirs(runtime, mode=0o755, exist_ok=True)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
port = listener.getsockname()[1]
with open(os.path.join(runtime, "board.json"), "w") as f:
    json.dump({"url": f"http://127.0.0.1:{port}", "pid": os.getpid(), "board_id": "brd_0000000000000000",
               "data_dir": os.path.dirname(token_file), "token_file": token_file}, f)
print("PLANTED", flush=True)
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
    body = b'{"ok": true}' if data.startswith(b"GET /health") else b'{"items": [], "next_cursor": null}'
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    conn.close()
"""

#: A process of the other user that does nothing until it is killed.
IDLE = "import sys, time\nprint('UP', flush=True)\nwhile True:\n    time.sleep(3600)\n"


def test_taskctl_ignores_a_pointer_in_another_users_runtime_directory(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    """The other user's pointer names its own listener and this user's token file: ``taskctl``
    does not read it, finds no board (autostart off) and sends the listener nothing."""
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    token = board.token
    board.stop()  # the user's board is not running; the token file stays where it always is
    runtime = Path(f"/tmp/taskloom-other-{tmp_path.name}")
    planted = other_user.popen(PLANT, str(runtime), str(board.data_dir / "token"))
    try:
        wait_until(lambda: "PLANTED" in planted.lines or planted.process.poll() is not None, timeout=10,
                   what="the other user's pointer")
        assert "PLANTED" in planted.lines, planted.text()
        assert runtime.stat().st_uid == other_user.uid
        env = {**board.env(), "TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_NO_AUTOSTART": "1"}
        for name in ("TASKLOOM_URL", "TASKLOOM_TOKEN"):
            env.pop(name, None)
        done = subprocess.run([str(VENV_BIN / "taskctl"), "--json", "task", "list"], env=env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert done.returncode == 1 and json.loads(done.stdout)["error"]["code"] == "NO_BOARD", done.stdout
        assert not any(line.startswith("REQUEST") for line in planted.lines), planted.text()
        assert not any(token in line for line in planted.lines)
    finally:
        planted.stop()
        subprocess.run(["rm", "-rf", str(runtime)], check=False)


def test_a_pointer_others_may_write_is_not_read(tmp_path: Path) -> None:
    """A live board's own pointer stops counting once group or others may write it or its
    directory, and counts again when both are owner-only."""
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    env = board.env()
    pointer = pointer_path(board.env())  # the pointer this client reads: its data directory's
    try:
        assert live_pointer(env) is not None
        board.runtime_dir.chmod(0o777)
        assert read_pointer(env) is None and live_pointer(env) is None
        board.runtime_dir.chmod(0o700)
        pointer.chmod(0o620)
        assert read_pointer(env) is None
        pointer.chmod(0o600)
        assert live_pointer(env) is not None
    finally:
        board.stop()


def test_a_pointer_naming_another_users_process_is_not_trusted(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    """A pointer in this user's directory naming a live board URL counts only while its pid is a
    process of this uid: another user's live process is no board of ours."""
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    idle = other_user.popen(IDLE)
    pointer = pointer_path(board.env())  # the pointer this client reads: its data directory's
    try:
        wait_until(lambda: "UP" in idle.lines or idle.process.poll() is not None, timeout=10,
                   what="the other user's process")
        theirs = int(subprocess.run(["pgrep", "-u", other_user.name, "-s", str(idle.process.pid), "python3"],
                                    capture_output=True, text=True, check=True).stdout.split()[0])
        assert Path(f"/proc/{theirs}").stat().st_uid == other_user.uid
        record = json.loads(pointer.read_text())
        assert live_pointer(board.env()) is not None
        pointer.write_text(json.dumps({**record, "pid": theirs}))
        assert read_pointer(board.env()) is not None and live_pointer(board.env()) is None
    finally:
        idle.stop()
        board.stop()


def test_a_token_file_others_may_read_is_not_used_and_the_refusal_says_why(tmp_path: Path) -> None:
    """The token file is believed only while it is owner-only: readable by others it is not
    read, the board answers 401, and the hint names the file and its mode."""
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    token_file = board.data_dir / "token"
    env = {**board.env(), "TASKLOOM_NO_AUTOSTART": "1"}
    for name in ("TASKLOOM_URL", "TASKLOOM_TOKEN"):
        env.pop(name, None)
    try:
        assert resolve_board(environ=env).token == board.token
        token_file.chmod(0o644)
        found = resolve_board(environ=env)
        assert found.token is None and found.token_problem is not None
        assert str(token_file) in found.token_problem and "0644" in found.token_problem
        done = subprocess.run([str(VENV_BIN / "taskctl"), "--json", "task", "list"], env=env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
        error = json.loads(done.stdout)["error"]
        assert (done.returncode, error["code"]) == (1, "UNAUTHORIZED")
        assert str(token_file) in error["hint"] and "chmod 600" in error["hint"]
        assert board.token not in done.stdout + done.stderr
        token_file.chmod(0o600)
        assert resolve_board(environ=env).token == board.token
        assert os.stat(token_file).st_uid == os.geteuid()
    finally:
        board.stop()
