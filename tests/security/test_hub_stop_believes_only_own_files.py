"""``taskctl events hub --stop`` signals only a hub this user's own files name.

``--stop`` (and ``--stop --all``) reads ``hub-<key>.json`` and ``hub-<key>.lock`` in the runtime
directory and sends SIGTERM to the pid both name. The runtime directory is whatever
``TASKLOOM_RUNTIME_DIR`` says, and another local user may create ``/tmp/x`` before the user names
it there (docs/security.md, *Who listens on the board's port*, *The pointer*). Those two files
were believed whoever wrote them: another user who planted a pair naming the user's board pid
(``ps`` shows it) had the user's own ``taskctl`` stop the user's board. The hub's files now count
only in a directory and as files this uid owns and nobody else may write, as the board pointer
does, and only a live process of this uid is signalled.

Real parts: a ``taskd serve`` subprocess, the real ``taskctl``, and the planter as a second uid
(``runuser``) writing into a directory of its own under ``/tmp``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shared import hub_protocol as hp
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)

#: The other user: a runtime directory of its own holding a hub pointer and a lock that both
#: name the pid it was given (the user's board) and the user's board URL.
PLANT = r"""
import json, os, sys
runtime, pid, board, protocol = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
os.umask(0o022)
os.makedirs(runtime, mode=0o755)
key = "0123456789abcdef"
with open(os.path.join(runtime, f"hub-{key}.json"), "w") as f:
    json.dump({"pid": pid, "port": 9, "protocol": protocol, "board": board, "token": "th_" + "0" * 48}, f)
with open(os.path.join(runtime, f"hub-{key}.lock"), "w") as f:
    json.dump({"pid": pid, "role": "hub", "since": 0}, f)
print("PLANTED", flush=True)
"""


@pytest.mark.parametrize("every", [False, True], ids=["stop", "stop-all"])
def test_hub_stop_never_signals_a_pid_another_users_files_name(
    every: bool, tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    assert board.process is not None
    runtime = Path(f"/tmp/taskloom-other-{tmp_path.name}")
    try:
        planted = other_user.run(PLANT, str(runtime), str(board.process.pid), board.url, str(hp.HUB_PROTOCOL))
        assert planted.returncode == 0 and "PLANTED" in planted.stdout, planted.stdout + planted.stderr
        assert runtime.stat().st_uid == other_user.uid
        env = {**board.env(), "TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_URL": board.url,
               "TASKLOOM_TOKEN": board.token, "TASKLOOM_NO_AUTOSTART": "1"}
        command = [str(VENV_BIN / "taskctl"), "--json", "events", "hub", "--stop", *(["--all"] if every else [])]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert board.process.poll() is None, (
            f"`taskctl events hub --stop{' --all' if every else ''}` stopped the user's board (pid "
            f"{board.process.pid}, exit {board.process.returncode}) because another user's files in "
            f"{runtime} named it: {done.stdout}{done.stderr}"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        answer = json.loads(done.stdout)["data"]
        rows = answer if isinstance(answer, list) else [answer]
        assert not any(row["stopped"] for row in rows), answer
        assert board.token not in done.stdout + done.stderr
    finally:
        if board.process.poll() is None:
            board.stop()
        subprocess.run(["rm", "-rf", str(runtime)], check=False)
