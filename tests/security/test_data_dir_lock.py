"""Two boards on one data directory: the second refuses, naming the first, and changes nothing.

The attack: a second ``taskd serve`` on the same data dir started without complaint, overwrote
``board.json`` and deleted it on exit, orphaning the first (``taskctl`` then autostarted a third
on the same file).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.board import VENV_BIN, TaskdProcess


def snapshot(*roots: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every file's inode, mode, mtime and bytes: what "left alone" means."""
    seen = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                info = path.stat()
                seen[str(path)] = (info.st_ino, info.st_mode, info.st_mtime_ns, path.read_bytes())
    return seen


def get(board: TaskdProcess, path: str) -> Any:
    request = urllib.request.Request(board.url + path, headers={"Authorization": f"Bearer {board.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def second_board(board: TaskdProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(board.data_dir), *args],
        env=board.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


def test_a_second_board_on_the_same_data_dir_refuses_and_the_first_keeps_serving(tmp_path: Path) -> None:
    first = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "first.log")
    first.start()
    assert first.process is not None
    pointer = first.runtime_dir / "board.json"
    try:
        before = snapshot(first.data_dir, first.runtime_dir)
        assert str(pointer) in before

        refused = second_board(first)

        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"pid {first.process.pid}" in lines[0] and first.url in lines[0], lines[0]
        assert str(first.data_dir) in lines[0]
        assert snapshot(first.data_dir, first.runtime_dir) == before, "the second board touched the first's files"
        assert json.loads(pointer.read_text())["pid"] == first.process.pid
        # The first board is untouched and still answers, with its own token.
        assert get(first, "/api/v1/board/status")["pid"] == first.process.pid
    finally:
        assert first.stop() == 0
    assert not pointer.exists()


def test_the_lock_dies_with_its_board_so_a_restart_after_sigkill_serves(tmp_path: Path) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    assert board.process is not None
    killed = board.process.pid
    board.stop(signal.SIGKILL)
    # The pointer of the dead board is still there; the lock is not.
    assert json.loads((board.runtime_dir / "board.json").read_text())["pid"] == killed
    board.start()
    try:
        assert board.process.pid != killed
        assert get(board, "/api/v1/board/status")["pid"] == board.process.pid
        lock = json.loads((board.data_dir / "board.lock").read_text())
        assert lock == {"pid": board.process.pid, "url": board.url}
        assert oct((board.data_dir / "board.lock").stat().st_mode & 0o777) == "0o600"
    finally:
        assert board.stop() == 0


def test_a_board_on_another_data_dir_is_not_refused(tmp_path: Path) -> None:
    first = TaskdProcess(data_dir=tmp_path / "one", runtime_dir=tmp_path / "run-one", log_path=tmp_path / "one.log")
    other = TaskdProcess(data_dir=tmp_path / "two", runtime_dir=tmp_path / "run-two", log_path=tmp_path / "two.log")
    first.start()
    try:
        other.start()
        try:
            assert os.path.exists(other.data_dir / "board.lock")
            assert get(other, "/api/v1/board/status")["data_dir"] == str(other.data_dir)
        finally:
            assert other.stop() == 0
    finally:
        assert first.stop() == 0
