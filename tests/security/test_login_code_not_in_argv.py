"""``taskctl open`` keeps the one-time login link out of the browser's argv (it was there).

docs/security.md: "``argv`` never holds a secret", and another local user "cannot redeem a login
link: the one-time link is printed only on a terminal". ``taskctl open`` (taskctl/admin_cmd.py
``open_board``) called ``webbrowser.open(link)``, which starts the browser (``xdg-open``,
``$BROWSER``, firefox, chromium …) with ``http://127.0.0.1:PORT/login?code=…`` as an argument.
``/proc/<pid>/cmdline`` is readable by every user (mode 0444, ``ps``), so another local user who
watches the process table reads the code while the browser is starting and redeems it first: they
get a session cookie, which grants what the token grants, and the user's browser gets "This login
link no longer works". Now the browser is handed an owner-only page in the runtime directory
that sends it on.

Real parts: a ``taskd serve`` subprocess, the real ``taskctl open``, Debian's real Chromium as the
user's browser (``$BROWSER``, the standard way to name one), and the watcher as another uid
(``nobody``, when the tests run as root) that only reads ``/proc`` and speaks HTTP to the port.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import REDEEM_LOGIN

CHROMIUM = "/usr/bin/chromium"
NOBODY = 65534

#: Another local user: scans every process's argv for a login link and redeems the first it sees.
WATCHER = REDEEM_LOGIN + textwrap.dedent(
    r"""
    import json, os, re, select, sys, urllib.parse
    board = urllib.parse.urlsplit(sys.argv[1])
    pattern = re.compile(rb"http://[^\x00 ]+/login\?code=[A-Za-z0-9_-]+")
    me = os.getpid()
    print("ready", flush=True)
    while True:
        if select.select([sys.stdin], [], [], 0)[0]:
            print(json.dumps(None), flush=True)  # taskctl open is done: nothing seen
            break
        found = None
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    match = pattern.search(f.read())
            except OSError:
                continue
            if match:
                found = (int(pid), match.group().decode())
                break
        if found is None:
            continue
        pid, link = found
        url = urllib.parse.urlsplit(link)
        print(json.dumps({**redeem(board, f"{url.path}?{url.query}"), "pid": pid, "link": link}), flush=True)
        break
    """
)


def as_other_user() -> dict[str, object]:
    if os.geteuid() != 0:
        return {}  # same uid: /proc/<pid>/cmdline is 0444, so another uid reads exactly the same
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def test_taskctl_open_keeps_the_login_code_out_of_every_argv(taskd: TaskdProcess, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed")
    taskd.start()
    profile = tmp_path / "chromium-profile"
    browser = (
        f"{CHROMIUM} --headless=new --no-sandbox --disable-gpu --disable-background-networking "
        f"--disable-component-update --no-first-run --user-data-dir={profile} --dump-dom %s"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
    env.update(TASKLOOM_URL=taskd.url, TASKLOOM_TOKEN=taskd.token, TASKLOOM_NO_AUTOSTART="1",
               TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), BROWSER=browser)

    watcher = subprocess.Popen(
        [sys.executable if os.geteuid() != 0 else "/usr/bin/python3", "-c", WATCHER, taskd.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/", **as_other_user(),  # type: ignore[arg-type]
    )
    try:
        assert watcher.stdout is not None and watcher.stdin is not None
        assert watcher.stdout.readline().strip() == "ready"
        opened = subprocess.run([str(VENV_BIN / "taskctl"), "open"], env=env, capture_output=True,
                                text=True, timeout=25, cwd=tmp_path)
        assert opened.returncode == 0, opened.stderr
        assert "in your browser" in opened.stdout + opened.stderr, (opened.stdout, opened.stderr)
        try:
            watcher.stdin.write("done\n")  # the watcher may have finished already (it saw a link)
            watcher.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([watcher.stdout], [], [], 10)
        assert ready, "the watcher answers within 10 s"
        seen = json.loads(watcher.stdout.readline())
    finally:
        watcher.kill()
        watcher.wait()

    assert seen is None, (
        f"uid {seen['uid']} read the one-time login link {seen['link']} from pid {seen['pid']}'s argv "
        f"(/proc/{seen['pid']}/cmdline) while `taskctl open` ran; redeeming it answered {seen['login_status']}, "
        f"session cookie obtained: {seen['got_cookie']}, GET /api/v1/meta with it: {seen['meta_with_cookie']}"
    )
