"""``taskctl open`` writes its login page only into a runtime directory that is this user's.

``taskctl open`` mints a one-time login code and hands the browser ``<runtime_dir>/login.html``,
a page that sends it on to ``/login?code=…``. The runtime directory is whatever
``TASKLOOM_RUNTIME_DIR`` says, and another local user may create ``/tmp/x`` before the user names
it there (docs/security.md, *The pointer*). ``taskd``, ``taskhub`` and autostart refuse such a
directory; ``taskctl open`` wrote into it, when the board was named by ``TASKLOOM_URL`` (no
pointer read, no autostart). The directory's owner controls every name in it: it could hold a
``login.html`` of its own open and read the code as it was written (the user here is root, whom
the file's mode does not stop), or swap the page before the browser loads it and send the
browser wherever it likes. Now the directory is checked (and a loose one of ours tightened)
before any code is minted, and another user's is refused in one line.

Real parts: a ``taskd serve`` subprocess, the real ``taskctl open`` with ``$BROWSER`` set, and the
planter as a second uid (``runuser``) that redeems whatever code it reads at the board.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import REDEEM_LOGIN, OtherUser, other_user  # noqa: F401 (fixture)
from tests.support.waiting import wait_until

#: The other user: its own runtime directory, a ``login.html`` in it that anyone may write, held
#: open; a code that appears there is redeemed at the board. It stops when the test leaves
#: ``done`` in the directory.
PLANT = REDEEM_LOGIN + r"""
import json, os, re, sys, time, urllib.parse
runtime, board = sys.argv[1], urllib.parse.urlsplit(sys.argv[2])
os.umask(0)
os.makedirs(runtime, mode=0o777)
fd = os.open(os.path.join(runtime, "login.html"), os.O_RDONLY | os.O_CREAT, 0o666)
print("PLANTED", flush=True)
pattern = re.compile(rb"/login\?code=[A-Za-z0-9_-]+")
while True:
    found = pattern.search(os.pread(fd, 65536, 0))
    if found is None:
        if os.path.exists(os.path.join(runtime, "done")):
            print(json.dumps(None), flush=True)
            break
        time.sleep(0.002)  # a polling interval, as tests.support.waiting polls: the page is read again
        continue
    print(json.dumps({**redeem(board, found.group().decode()), "link": found.group().decode()}), flush=True)
    break
"""


def test_taskctl_open_refuses_another_users_runtime_directory_and_puts_no_code_there(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    runtime = Path(f"/tmp/taskloom-other-{tmp_path.name}")
    planted = other_user.popen(PLANT, str(runtime), board.url)
    try:
        wait_until(lambda: "PLANTED" in planted.lines or planted.process.poll() is not None, timeout=10,
                   what="the other user's runtime directory")
        assert "PLANTED" in planted.lines, planted.text()
        assert runtime.stat().st_uid == other_user.uid
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
        env.update(TASKLOOM_URL=board.url, TASKLOOM_TOKEN=board.token, TASKLOOM_NO_AUTOSTART="1",
                   TASKLOOM_RUNTIME_DIR=str(runtime), BROWSER="/bin/true %s")
        opened = subprocess.run([str(VENV_BIN / "taskctl"), "open"], env=env, capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
        (runtime / "done").touch()
        wait_until(planted.ended, timeout=20, what="the other user's reader to end")
        seen = json.loads(planted.lines[-1])
        assert seen is None, (
            f"uid {seen['uid']} read the one-time login link {seen['link']} from the login page `taskctl open` "
            f"wrote into {runtime}, a directory that uid owns; redeeming it answered {seen['login_status']}, "
            f"session cookie obtained: {seen['got_cookie']}, GET /api/v1/meta with it: {seen['meta_with_cookie']}"
        )
        assert opened.returncode == 1, opened.stdout + opened.stderr
        first = opened.stderr.splitlines()[0]
        assert first.startswith("error: VALIDATION_FAILED") and f"{runtime} belongs to uid {other_user.uid}" in first, (
            opened.stderr
        )
        assert (runtime / "login.html").stat().st_size == 0
        assert board.token not in opened.stdout + opened.stderr
    finally:
        planted.stop()
        board.stop()
        subprocess.run(["rm", "-rf", str(runtime)], check=False)
