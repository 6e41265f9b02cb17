"""A time option given ``nan`` is refused at start, on the command line and in its variable.

A NaN compares false with any minimum, so a plain ``click.FloatRange`` lets it through; it would
then reach ``loop.call_later`` (``ValueError: cannot convert float NaN to integer``, a traceback
at some later moment) or make a hub end its board link and exit 0, which ``Restart=on-failure``
never restarts. Every time knob is a ``shared.knobs.Seconds``: ``nan`` is one usage line naming
the option, exit 2, as ``--port abc`` is.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from services.subscriber.state import STATE_FILE
from tests.support.board import VENV_BIN
from tests.support.waiting import wait_until

START_DEADLINE_S = 20.0


def outcome(argv: list[str], env: dict[str, str], started: Path, log: Path,
            seen: dict[str, str] | None = None) -> tuple[str, int | None, str]:
    """Run until the process refuses (exits) or publishes ``started``; what happened (``seen``
    gets what ``started`` said, read while the process runs)."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: process.poll() is not None or started.exists(), timeout=START_DEADLINE_S,
                   what=f"{argv[0]} to refuse or start")
        if process.poll() is None:
            if seen is not None:
                seen["started"] = started.read_text(errors="replace")
            return "started", None, log.read_text(errors="replace")
        return "exited", process.returncode, log.read_text(errors="replace")
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env["TASKLOOM_RUNTIME_DIR"] = str(tmp_path / "run")
    env["TASKLOOM_DATA_DIR"] = str(tmp_path / "data")
    # A command that took the value would go on to find a board: it must not leave one running.
    env["TASKLOOM_NO_AUTOSTART"] = "1"
    return env


def assert_refused(what: str, result: tuple[str, int | None, str], flag: str) -> None:
    state, code, text = result
    assert state == "exited" and code == 2 and flag in text and "Traceback" not in text, (
        f"{what}: not refused as a usage error naming {flag}; it {state}"
        f"{'' if code is None else f' with status {code}'}: {text.strip().splitlines()[-1:]!r}"
    )


@pytest.mark.parametrize("flag", ["--ping-interval", "--poll-interval", "--idle-timeout", "--claim-fresh"])
def test_taskd_serve_refuses_nan_seconds(tmp_path: Path, flag: str) -> None:
    env = clean_env(tmp_path)
    result = outcome([str(VENV_BIN / "taskd"), "serve", "--port", "0", flag, "nan"], env,
                     tmp_path / "run" / "board.json", tmp_path / "taskd.log")
    assert_refused(f"taskd serve {flag} nan", result, flag)


def test_taskd_serve_refuses_nan_in_a_variable(tmp_path: Path) -> None:
    env = {**clean_env(tmp_path), "TASKLOOM_BOARD_PING_INTERVAL": "nan"}
    result = outcome([str(VENV_BIN / "taskd"), "serve", "--port", "0"], env,
                     tmp_path / "run" / "board.json", tmp_path / "taskd.log")
    assert_refused("TASKLOOM_BOARD_PING_INTERVAL=nan", result, "TASKLOOM_BOARD_PING_INTERVAL")


@pytest.mark.parametrize("flag", ["--reconnect-min", "--idle-exit"])
def test_taskhub_serve_refuses_nan_seconds(tmp_path: Path, flag: str) -> None:
    env = {**clean_env(tmp_path), "TASKLOOM_TOKEN": "not-checked-before-the-board-answers"}
    (tmp_path / "run").mkdir(mode=0o700)
    # Port 9 (discard) on loopback: nothing listens, so the hub's board link must reconnect.
    argv = [str(VENV_BIN / "taskhub"), "serve", "--board", "http://127.0.0.1:9", "--log-stderr", flag, "nan"]
    log = tmp_path / "hub.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        # Refused at once (exit 2), or else it runs: wait for its exit or for it to say it reconnects.
        wait_until(lambda: process.poll() is not None or "board_reconnect_in" in log.read_text(errors="replace"),
                   timeout=START_DEADLINE_S, what="the hub to refuse or to start")
        state = "exited" if process.poll() is not None else "started"
        result = (state, process.returncode, log.read_text(errors="replace"))
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)
    lines = [json.loads(line) for line in result[2].splitlines() if line.startswith("{")]
    events = [line.get("event") for line in lines]
    assert_refused(f"taskhub serve {flag} nan (events: {events[-4:]})", result, flag)


@pytest.mark.parametrize("flag", ["--debounce", "--silence-timeout"])
def test_taskctl_loop_subscribe_refuses_nan_seconds(tmp_path: Path, flag: str) -> None:
    env = clean_env(tmp_path)
    result = outcome([str(VENV_BIN / "taskctl"), "loop", "subscribe", "--agent", "worker-x", "--on-wake", "true",
                      "--no-start-hub", flag, "nan"], env, tmp_path / "data" / "loop" / STATE_FILE, tmp_path / "loop.log")
    assert_refused(f"taskctl loop subscribe {flag} nan", result, flag)


@pytest.mark.parametrize(("argv", "flag"), [
    (["events", "follow", "--idle", "nan"], "--idle"),
    (["export", "watch", "--ttl", "nan"], "--ttl"),
])
def test_taskctl_time_options_refuse_nan(tmp_path: Path, argv: list[str], flag: str) -> None:
    """A follower that never idles out, or a watch that never expires, is not what nan asked for."""
    env = clean_env(tmp_path)
    result = outcome([str(VENV_BIN / "taskctl"), *argv], env, tmp_path / "never", tmp_path / "taskctl.log")
    assert_refused(f"taskctl {' '.join(argv)}", result, flag)
