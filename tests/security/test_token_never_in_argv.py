"""``taskctl`` never carries the board token in ``argv``, which every local user can read.

docs/security.md: "``argv`` never holds a secret". Another uid reads ``/proc/<pid>/cmdline`` (``ps
-ef``) of a long-lived ``events tail`` or ``loop subscribe`` for as long as it runs, and a token
there is the whole API. So ``--token VALUE`` is refused before anything else runs, naming the
safe ways (``TASKLOOM_TOKEN``, ``--token-file FILE``, ``--token -`` for stdin), and a command
given the token through a file shows another user only the file's name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

READ_CMDLINE = r"""
import sys
print(open(f"/proc/{sys.argv[1]}/cmdline", "rb").read().replace(b"\0", b" ").decode())
"""


def test_a_token_value_is_refused_and_a_token_file_keeps_it_out_of_another_users_sight(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    token = board.token
    env = {**board.env(), "TASKLOOM_NO_AUTOSTART": "1"}
    env.pop("TASKLOOM_TOKEN", None)
    taskctl = str(VENV_BIN / "taskctl")
    out = tmp_path / "tail.out"
    tail: subprocess.Popen[bytes] | None = None
    try:
        refused = subprocess.run([taskctl, "--url", board.url, "--token", token, "events", "tail"], env=env,
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert "TASKLOOM_TOKEN" in refused.stderr and "--token-file" in refused.stderr, refused.stderr
        assert token not in refused.stdout + refused.stderr

        token_file = tmp_path / "board-token"  # the test's temp directory: unreadable to the other uid
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        with open(out, "wb") as sink:
            tail = subprocess.Popen([taskctl, "--url", board.url, "--token-file", str(token_file), "events", "tail"],
                                    env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
        wait_until(lambda: b'"type":"open"' in out.read_bytes() or tail.poll() is not None,  # type: ignore[union-attr]
                   timeout=20, what="events tail to open its stream")
        board.api("POST", "/api/v1/projects", {"id": "demo"})
        wait_until(lambda: b'"demo"' in out.read_bytes() or tail.poll() is not None,  # type: ignore[union-attr]
                   timeout=20, what="events tail to print the project created after it opened")
        assert tail.poll() is None, out.read_text()
        seen = other_user.run(READ_CMDLINE, str(tail.pid))
        assert seen.returncode == 0 and "events tail" in seen.stdout, seen.stderr
        assert token not in seen.stdout, f"uid {other_user.uid} read the board token from argv of pid {tail.pid}"
        assert token not in out.read_text()
    finally:
        if tail is not None:
            tail.kill()
            tail.wait(timeout=10)
        board.stop()
