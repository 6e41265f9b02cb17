"""Another local user on the same host: a second uid that runs standard-library Python.

The tests run as root (the suite's machine user); ``other_user`` creates a system account for the
run when it does not exist yet (``useradd``) and removes it afterwards. Its code runs through
``runuser -u USER -- /usr/bin/python3 -c CODE`` from ``/``: it cannot read the test's temp
directories, as a real other user could not.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.support.waiting import wait_until

#: One account per pytest worker: each worker's session creates its own and removes it at its end,
#: which must not pull the account from under a test another worker is still running.
USER = "tlother" + (f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else "")
#: A Python every uid can run (the venv's lives under /root, which is 0700).
SYSTEM_PYTHON = "/usr/bin/python3"

#: Standard-library code for the other user's scripts: redeem a login path (``/login?code=…``) it
#: found at the board ``board`` (a urlsplit result), and what that got it: a session cookie, and
#: with it the board's meta. Put at the top of a script, before the code that calls it.
REDEEM_LOGIN = r"""
import http.client, os


def redeem(board, path_and_query):
    conn = http.client.HTTPConnection(board.hostname, board.port, timeout=10)
    conn.request("GET", path_and_query)
    answer = conn.getresponse()
    answer.read()
    cookie = next((v.split(";")[0] for k, v in answer.getheaders()
                   if k.lower() == "set-cookie" and v.startswith("taskloom_session_")), None)
    meta = None
    if cookie:
        conn.request("GET", "/api/v1/meta", headers={"Cookie": cookie})
        reply = conn.getresponse()
        meta = [reply.status, reply.read().decode()[:200]]
    return {"uid": os.getuid(), "login_status": answer.status, "got_cookie": cookie is not None,
            "meta_with_cookie": meta}
"""


@dataclass
class OtherUser:
    name: str
    uid: int

    def popen(self, code: str, *args: str) -> OtherProcess:
        process = subprocess.Popen(
            ["runuser", "-u", self.name, "--", SYSTEM_PYTHON, "-u", "-c", code, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/",
            start_new_session=True,  # runuser does not pass a kill on: the group is killed whole
        )
        return OtherProcess(process)

    def run(self, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", self.name, "--", SYSTEM_PYTHON, "-c", code, *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd="/", timeout=timeout,
        )


@dataclass
class OtherProcess:
    """A running process of the other user; its output lines are collected by a thread."""

    process: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    #: Set once the output is read to its end: the lines are all there.
    read_out: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        def pump() -> None:
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
            self.read_out.set()

        threading.Thread(target=pump, daemon=True).start()

    def ended(self) -> bool:
        """The process has exited and every line it printed is in ``lines`` (its exit comes
        before the thread reading its output has read the last of it)."""
        return self.process.poll() is not None and self.read_out.is_set()

    def text(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # runuser and the Python under it
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def other_user() -> Iterator[OtherUser]:
    if os.geteuid() != 0:
        pytest.fail("these tests need root to create and act as a second local user (useradd, runuser)")
    assert shutil.which("useradd") and shutil.which("runuser"), "useradd and runuser are needed"
    created = False
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", USER], check=True)
        created = True
        entry = pwd.getpwnam(USER)
    try:
        yield OtherUser(USER, entry.pw_uid)
    finally:
        if created:
            # A killed process may not be gone yet, and userdel refuses a user that still runs one.
            wait_until(lambda: subprocess.run(["pgrep", "-u", USER], capture_output=True).returncode == 1,
                       timeout=10, what=f"the processes of {USER} to end")
            subprocess.run(["userdel", USER], check=True)
