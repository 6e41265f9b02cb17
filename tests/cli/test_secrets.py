"""The token is never printed: not by a success, a refusal, --json, or a rotation."""

from __future__ import annotations

from pathlib import Path

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


def test_a_token_value_on_the_command_line_is_refused_unechoed_and_stdin_or_a_file_work(
    taskctl: Taskctl, taskd: TaskdProcess, tmp_path: Path
) -> None:
    """argv is readable by every local user, so ``--token VALUE`` is a usage error that never
    quotes the value; ``--token -`` (stdin) and ``--token-file FILE`` carry the token instead."""
    secret = taskd.token
    token_file = tmp_path / "board-token"
    token_file.write_text(secret + "\n")
    token_file.chmod(0o600)
    refused = [
        taskctl("--json", "board", "status", "--token", secret),
        taskctl("board", "status", "--token", secret),
        taskctl("--token", secret, "task", "list"),
    ]
    assert [run.code for run in refused] == [2, 2, 2], [str(run) for run in refused]
    for run in refused:
        said = run.stdout + run.stderr  # --json puts the usage error on stdout
        assert "readable by every local user" in said and "--token-file" in said, str(run)
    runs = [
        taskctl("--json", "board", "status", "--token", "-", input=secret + "\n"),
        taskctl("board", "status", "--token-file", str(token_file)),
        taskctl("--token-file", "-", "board", "status", input=secret),
        taskctl("task", "show", "NOPE-0001", "--token-file", str(token_file)),
        taskctl("--json", "task", "show", "NOPE-0001", "--token", "-", input=secret),
        taskctl("task", "list", "--token-file", str(token_file), "--url", "http://127.0.0.1:9"),
        taskctl("task", "list", "--token-file", str(token_file), "--url", "not a url"),
        taskctl("task", "list", "--token-file", str(token_file), "--limit", "-3"),
        taskctl("board", "status", "--token-file", str(tmp_path / "missing")),
        taskctl("board", "status", "--token", "-", input="\n"),
    ]
    assert [run.code for run in runs] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2], [str(run) for run in runs]
    assert runs[0].json["data"]["pid"] == taskd.process.pid
    assert "no token in stdin" in runs[-1].stderr
    taskctl.assert_no_secret(secret)
    # Anything shaped like a token is masked, even one taskctl was never told about.
    shaped = "tl_" + "5e" * 32
    leaked = taskctl("task", "show", shaped)
    assert leaked.code == 1 and "error: NOT_FOUND: task 'tl_[redacted]' not found" in leaked.stderr
    taskctl.assert_no_secret(secret, shaped)
