"""Removing or replacing ``board.lock`` does not free the data directory.

docs/security.md: a second ``taskd serve`` on the same data directory "exits 1 with one line naming
the first's pid and URL, before it reads or writes anything there". A lock held only on the inode
that ``board.lock`` named at start would be gone with the name (a cleanup script, ``git clean -fdx``
on a data directory inside a checkout, a tmp reaper under ``/tmp``): a second board would create a
fresh ``board.lock``, lock that, and serve the same ``board.sqlite`` beside the first. The board also
locks the data directory itself, which no unlink inside it can free, and puts back a ``board.lock``
naming itself, saying so in its log, so the refusal names it again.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from services.board.lock import CHECK_INTERVAL
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.waiting import wait_until


def second_board(first: TaskdProcess, runtime: Path) -> tuple[int, str]:
    """A second ``taskd serve`` on the first's data directory: its exit status and stderr, once it
    exits; a board that comes up instead (its pointer appears) fails the test and is stopped."""
    pointer = runtime / "board.json"
    second = subprocess.Popen(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(first.data_dir)],
        env={**first.env(), "TASKLOOM_RUNTIME_DIR": str(runtime)},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until(lambda: second.poll() is not None or pointer.exists(), timeout=30, what="the second board")
        assert second.poll() is not None, (
            f"a second board (pid {second.pid}, {json.loads(pointer.read_text())['url']}) serves {first.data_dir} "
            f"beside the first (pid {first.process.pid if first.process else '?'}) once board.lock was tampered with"
        )
        _, err = second.communicate(timeout=10)
        return second.returncode, err
    finally:
        if second.poll() is None:
            second.terminate()
            second.wait(timeout=20)


def remove(lock: Path) -> None:
    lock.unlink()


def replace(lock: Path) -> None:
    stranger = lock.with_name("board.lock.new")
    stranger.write_text("{}\n")
    os.replace(stranger, lock)


@pytest.mark.parametrize("tamper", [remove, replace], ids=["unlinked", "replaced"])
def test_a_second_board_is_refused_after_board_lock_is_removed_or_replaced(tmp_path: Path, tamper: object) -> None:
    first = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run-1", log_path=tmp_path / "first.log")
    first.start()
    assert first.process is not None
    lock = first.data_dir / "board.lock"
    try:
        tamper(lock)  # type: ignore[operator]

        code, err = second_board(first, tmp_path / "run-2")
        assert code == 1, err
        assert "already serves" in err and str(first.data_dir) in err, err
        assert not (tmp_path / "run-2" / "board.json").exists(), "the refused board wrote a pointer"
        assert first.process.poll() is None

        # The running board notices and names itself in a fresh board.lock, loudly.
        def named() -> dict[str, object] | None:
            try:
                record = json.loads(lock.read_text())
            except (OSError, ValueError):
                return None
            return record if record.get("pid") == first.process.pid else None  # type: ignore[union-attr]

        record = wait_until(named, timeout=CHECK_INTERVAL * 4, what="the board to put back its board.lock")
        assert record == {"pid": first.process.pid, "url": first.url}
        assert oct(lock.stat().st_mode & 0o777) == "0o600"
        lines = [json.loads(line) for line in first.log_path.read_text().splitlines() if "data_dir_lock_replaced" in line]
        assert lines and lines[0]["level"] == "error" and lines[0]["recreated"] is True, first.log_path.read_text()

        code, err = second_board(first, tmp_path / "run-2")
        assert code == 1, err
        assert f"pid {first.process.pid}" in err and first.url in err, err
        assert first.api("GET", "/api/v1/board/status")["pid"] == first.process.pid
    finally:
        assert first.stop() == 0
