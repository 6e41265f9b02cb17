"""The token is never printed: not by a success, a refusal, --json, or a rotation."""

from __future__ import annotations

from tests.cli.conftest import Taskctl, activity_count
from tests.support.board import TaskdProcess


def test_token_rotation_writes_a_new_token_file_and_never_prints_it(taskctl: Taskctl, taskd: TaskdProcess) -> None:
    old = taskd.token
    before = activity_count(taskd.data_dir)
    rotated = taskctl.ok("token", "rotate")
    assert rotated.stdout.strip() == f"rotated the board token; the new one is in {taskd.data_dir / 'token'}"
    new = taskd.token
    assert new != old and new.startswith("tl_") and len(new) == 67
    assert (taskd.data_dir / "token").stat().st_mode & 0o777 == 0o600
    assert activity_count(taskd.data_dir) == before  # rotation is not an event

    # The old token is refused at once; the file's new one works (taskctl re-reads the file).
    stale = taskctl.refused("UNAUTHORIZED", "board", "status", env={"TASKLOOM_TOKEN": old})
    assert old not in stale.stdout + stale.stderr
    assert taskctl.data("board", "status")["pid"] == taskd.process.pid

    again = taskctl.data("token", "rotate", env={"TASKLOOM_TOKEN": new})
    assert again == {"rotated": True, "token_file": str(taskd.data_dir / "token")}
    taskctl.assert_no_secret(old, new, taskd.token)


def test_a_token_given_on_the_command_line_is_never_echoed(taskctl: Taskctl, taskd: TaskdProcess) -> None:
    secret = taskd.token
    runs = [
        taskctl("--json", "board", "status", "--token", secret),
        taskctl("board", "status", "--token", secret),
        taskctl("task", "show", "NOPE-0001", "--token", secret),
        taskctl("--json", "task", "show", "NOPE-0001", "--token", secret),
        taskctl("task", "list", "--token", secret, "--url", "http://127.0.0.1:9"),
        taskctl("task", "list", "--token", secret, "--url", "not a url"),
        taskctl("task", "list", "--token", secret, "--limit", "-3"),
    ]
    assert [run.code for run in runs] == [0, 0, 1, 1, 1, 1, 2]
    taskctl.assert_no_secret(secret)
    # Anything shaped like a token is masked, even one taskctl was never told about.
    shaped = "tl_" + "5e" * 32
    leaked = taskctl("task", "show", shaped)
    assert leaked.code == 1 and "error: NOT_FOUND: task 'tl_[redacted]' not found" in leaked.stderr
    taskctl.assert_no_secret(secret, shaped)
