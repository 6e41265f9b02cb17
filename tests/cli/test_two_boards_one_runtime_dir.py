"""Two boards, two data directories, one user, one runtime directory (docs/operations.md: a second
board on one data directory is refused — "give the second its own --data-dir").

Each board writes the pointer of its own data directory beside ``board.json`` (the board started
last): a ``taskctl`` told ``TASKLOOM_DATA_DIR=A`` reaches board A while B runs, and still finds A
after B stops and removes ``board.json``; before, both shared ``board.json``, the client reached B,
and then could not find A at all.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.board import VENV_BIN, TaskdProcess


def taskctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "taskctl"), "--json", *args], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)


def test_taskctl_for_data_dir_a_finds_board_a_while_a_second_board_serves_b(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    a = TaskdProcess(data_dir=tmp_path / "a", runtime_dir=runtime, log_path=tmp_path / "a.log").start()
    b = TaskdProcess(data_dir=tmp_path / "b", runtime_dir=runtime, log_path=tmp_path / "b.log").start()
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env.update(TASKLOOM_RUNTIME_DIR=str(runtime), TASKLOOM_DATA_DIR=str(a.data_dir), TASKLOOM_NO_AUTOSTART="1")
    try:
        while_both = taskctl(env, "board", "status")
        assert b.stop() == 0
        after_b = taskctl(env, "board", "status")
    finally:
        for board in (a, b):
            if board.process is not None and board.process.poll() is None:
                board.stop()
    problems = []
    if while_both.returncode != 0 or json.loads(while_both.stdout)["data"].get("url") != a.url:
        problems.append(f"with both running, TASKLOOM_DATA_DIR={a.data_dir} reached {while_both.stdout.strip()[:300]} "
                        f"(board A is {a.url}, B is {b.url})")
    if after_b.returncode != 0:
        problems.append(f"after B stopped, board A (still running at {a.url}) was not found: {after_b.stdout.strip()[:300]}")
    assert not problems, "; ".join(problems)
