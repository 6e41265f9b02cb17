"""Fixed: ``taskctl export state`` whose board died mid-stream (killed, crashed, restarted by its
supervisor) said ``INTERNAL: taskctl failed: IncompleteRead: IncompleteRead(0 bytes read)`` with
a hint to rerun under TASKLOOM_DEBUG, as if taskctl had a bug. The stream is chunked: a
connection closed in the middle of a chunk is an ``http.client.IncompleteRead``, which is an HTTP
protocol error, not an ``OSError``, and only ``OSError`` was taken for a broken-off export.

Expected: ``BOARD_UNREACHABLE`` saying the export broke off and to run it again, and no file.
"""

from __future__ import annotations

import os
import signal

from tests.support.board import TaskdProcess
from tests.support.waiting import wait_until

from .conftest import Taskctl

#: Attachments whose base64 is far more than the loopback socket buffers hold, so the board is
#: still streaming when it is killed.
BLOBS = 4
BLOB_BYTES = 8 * 1024 * 1024 - 1024


def test_an_export_cut_by_the_board_dying_says_so_and_writes_no_file(taskd: TaskdProcess, taskctl: Taskctl) -> None:
    taskctl.ok("project", "create", "demo")
    taskctl.ok("task", "create", "--project", "demo", "Card with big attachments")
    for n in range(BLOBS):
        blob = taskctl.cwd / f"blob-{n}.bin"
        blob.write_bytes(os.urandom(BLOB_BYTES))
        taskctl.ok("attachment", "upload", "DEMO-0001", str(blob))
        blob.unlink()
    out = taskctl.cwd / "state.jsonl"
    with taskctl.running("export", "state", "--out", str(out)) as export:
        def receiving() -> bool:
            return any(p.name.startswith(".state.jsonl.") and p.stat().st_size > 0 for p in taskctl.cwd.iterdir())

        wait_until(receiving, timeout=30, what="the export's first bytes in its temp file")
        # Held while the board dies, so the board is killed mid-stream, not after its last byte.
        export.send_signal(signal.SIGSTOP)
        taskd.stop(signal.SIGKILL)
        export.send_signal(signal.SIGCONT)
        stdout, stderr = export.communicate(timeout=60)
    assert export.returncode == 1, (stdout, stderr)
    assert "error: BOARD_UNREACHABLE:" in stderr and "broke off" in stderr, stderr
    assert "INTERNAL" not in stderr, stderr
    assert not out.exists()
    assert not [p.name for p in taskctl.cwd.iterdir() if p.name.endswith(".tmp")]
