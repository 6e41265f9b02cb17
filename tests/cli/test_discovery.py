"""Finding the board: the pointer, the environment, autostart and its refusal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from shared.paths import board_pointer_for
from tests.cli.conftest import TASKCTL, Taskctl, base_env
from tests.support.board import TaskdProcess
from tests.support.waiting import wait_until


def pid_gone(pid: int) -> bool:
    """Dead or a zombie nobody reaped yet (the autostarted board is not our child)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def fresh_env(tmp_path: Path, pycache: Path) -> dict[str, str]:
    env = base_env(pycache)
    env["TASKLOOM_RUNTIME_DIR"] = str(tmp_path / "run")
    env["TASKLOOM_DATA_DIR"] = str(tmp_path / "data")
    return env


def test_autostart_starts_one_detached_board_and_reuses_it(tmp_path: Path, pycache: Path) -> None:
    env = fresh_env(tmp_path, pycache)
    pointer = tmp_path / "run" / "board.json"
    taskctl = Taskctl(env, tmp_path)
    # `board status` is a diagnostic: it reports that nothing runs and starts nothing.
    absent = taskctl.refused("NO_BOARD", "board", "status")
    assert "autostart is off" not in absent.stderr and not pointer.exists()
    pid: int | None = None
    try:
        # Two first invocations at once: the start lock lets exactly one board come up.
        racers = [
            subprocess.Popen([TASKCTL, "--json", "project", "list"], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outputs = [racer.communicate(timeout=60) for racer in racers]
        assert [racer.returncode for racer in racers] == [0, 0], outputs
        assert [json.loads(stdout) for stdout, _ in outputs] == [{"ok": True, "data": {"items": [], "next_cursor": None}}] * 2
        announced = [stderr for _, stderr in outputs if "started a local board at http://127.0.0.1:" in stderr]
        assert len(announced) == 1, outputs  # the other found the first one's board
        record = json.loads(pointer.read_text())
        pid = record["pid"]
        assert f"(pid {pid}, log {tmp_path / 'data' / 'logs' / 'taskd.log'})" in announced[0]
        assert (tmp_path / "data" / "logs" / "taskd.log").stat().st_size > 0

        # Later invocations find it through the pointer and can work with it.
        status = taskctl.data("board", "status")
        assert (status["found_by"], status["pid"], status["url"]) == ("pointer", pid, record["url"])
        assert status["data_dir"] == str(tmp_path / "data")
        taskctl.ok("project", "create", "auto")
        assert taskctl.data("task", "create", "-p", "auto", "Started for me")["identifier"] == "AUTO-0001"
        human = taskctl.ok("board", "status").stdout
        assert re.search(rf"^pid\s+{pid}$", human, re.M) and re.search(r"^found_by\s+pointer$", human, re.M)
        taskctl.assert_no_secret((tmp_path / "data" / "token").read_text().strip())
    finally:
        if pid is None and pointer.exists():
            pid = json.loads(pointer.read_text()).get("pid")
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: pid_gone(pid), timeout=20, what="the autostarted board to stop")
    assert not pointer.exists()  # the board removed its own pointer on the way out


def test_no_autostart_refuses_clearly_and_starts_nothing(tmp_path: Path, pycache: Path) -> None:
    env = fresh_env(tmp_path, pycache)
    env["TASKLOOM_NO_AUTOSTART"] = "1"
    taskctl = Taskctl(env, tmp_path)
    run = taskctl.refused("NO_BOARD", "task", "list")
    assert "autostart is off" in run.stderr and "hint: start one with `taskd serve`" in run.stderr
    as_json = taskctl("--json", "task", "list")
    assert as_json.code == 1 and as_json.json == {
        "ok": False,
        "error": {
            "code": "NO_BOARD",
            "message": "no running board found and autostart is off (TASKLOOM_NO_AUTOSTART=1)",
            "details": {"pointer": str(tmp_path / "run" / board_pointer_for((tmp_path / "data").resolve()))},
            "hint": "start one with `taskd serve`, or name one with --url / TASKLOOM_URL",
        },
    }
    assert not (tmp_path / "run" / "board.json").exists()
    assert not (tmp_path / "data").exists()


def test_a_pointer_naming_a_dead_pid_is_not_trusted(tmp_path: Path, pycache: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "board.json").write_text(json.dumps({
        "url": "http://127.0.0.1:9", "pid": int(dead.stdout), "board_id": "brd_gone",
        "data_dir": str(tmp_path / "data"), "token_file": str(tmp_path / "data" / "token"),
    }))
    env = fresh_env(tmp_path, pycache)
    env["TASKLOOM_NO_AUTOSTART"] = "1"
    # Not BOARD_UNREACHABLE: the stale URL is never tried.
    Taskctl(env, tmp_path).refused("NO_BOARD", "task", "list")


def test_url_and_token_from_the_environment_need_no_pointer(taskd: TaskdProcess, tmp_path: Path, pycache: Path) -> None:
    taskd.start()
    env = fresh_env(tmp_path, pycache)  # an empty runtime dir: no pointer to find
    env.update(TASKLOOM_URL=taskd.url, TASKLOOM_TOKEN=taskd.token, TASKLOOM_NO_AUTOSTART="1")
    taskctl = Taskctl(env, tmp_path)
    status = taskctl.data("board", "status")
    assert (status["url"], status["found_by"], status["pid"]) == (taskd.url, "env", taskd.process.pid)
    # --url wins over TASKLOOM_URL.
    override = taskctl.data("board", "status", "--url", taskd.url + "/",
                            env={"TASKLOOM_URL": "http://127.0.0.1:9"})
    assert (override["url"], override["found_by"]) == (taskd.url, "option")
    taskctl.assert_no_secret(taskd.token)
