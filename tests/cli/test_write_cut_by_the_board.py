"""A write whose board dies before answering says the change may have been made.

The attack: the board is held (SIGSTOP) while ``taskctl task create`` sends its request, then
killed with the request unread. taskctl said ``cannot reach the board … is it running?``, the
words for a board that never got the request, and sent the person to start it and create the
card again: had the board committed before it died, that made the card twice. A read, which has
nothing to make twice, keeps the old words.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.board import TaskdProcess
from tests.support.waiting import wait_until

from .conftest import Taskctl

#: /proc/net/tcp's state for an established connection.
ESTABLISHED = "01"


def bytes_waiting_on(port: int) -> int:
    """Bytes received and not yet read on the established sockets of local port ``port``."""
    waiting = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == ESTABLISHED and int(local.rsplit(":", 1)[1], 16) == port:
                waiting += int(queues.split(":")[1], 16)
    return waiting


def test_a_write_the_board_died_holding_says_it_may_have_been_made(taskd: TaskdProcess, taskctl: Taskctl) -> None:
    taskctl.ok("project", "create", "demo")
    assert taskd.process is not None
    port = int(taskd.url.rsplit(":", 1)[1])
    taskd.process.send_signal(signal.SIGSTOP)
    with taskctl.running("task", "create", "--project", "demo", "Made once?", "--url", taskd.url) as create:
        wait_until(lambda: bytes_waiting_on(port) > 0, timeout=30, what="the request in the held board's socket")
        taskd.stop(signal.SIGKILL)
        stdout, stderr = create.communicate(timeout=60)
    assert create.returncode == 1, (stdout, stderr)
    assert "error: BOARD_UNREACHABLE:" in stderr, stderr
    assert "may or may not have been made" in stderr and "look before sending it again" in stderr, stderr
    assert "is it running?" not in stderr, stderr

    # A read of a board that is gone keeps the words for one that is not there.
    listed = taskctl.refused("BOARD_UNREACHABLE", "task", "list", "--url", taskd.url)
    assert "is it running?" in listed.stderr and "may or may not" not in listed.stderr, listed.stderr
