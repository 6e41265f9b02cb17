"""``taskctl export state``, ``import state``, ``board backup``, ``board compact``, ``board settings``
and ``board status`` as a user runs them, against real ``taskd`` processes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.board import TaskdProcess

from .conftest import Taskctl, activity_count, taskctl_for


@pytest.fixture
def other(tmp_path: Path, pycache: Path) -> Iterator[tuple[TaskdProcess, Taskctl]]:
    """A second, empty board (its own data and runtime directories) and a taskctl for it."""
    process = TaskdProcess(data_dir=tmp_path / "other-data", runtime_dir=tmp_path / "other-run",
                           log_path=tmp_path / "other.log")
    process.start()
    cwd = tmp_path / "other-cwd"
    cwd.mkdir()
    runner = taskctl_for(process, pycache, cwd)
    yield process, runner
    runner.assert_no_secret(process.token)
    process.stop()


def seed(taskctl: Taskctl, tasks: int = 4) -> None:
    taskctl.ok("project", "create", "demo")
    for n in range(tasks):
        taskctl.ok("task", "create", "--project", "demo", f"Card {n}")
    taskctl.ok("comment", "add", "DEMO-0001", "a first note")


def test_export_then_import_into_another_board(taskctl: Taskctl, other: tuple[TaskdProcess, Taskctl]) -> None:
    seed(taskctl)
    out = taskctl.cwd / "state.jsonl"
    done = taskctl.data("export", "state", "--out", "state.jsonl")
    assert done["path"] == str(out) and done["counts"]["task"] == 4
    assert not [p for p in taskctl.cwd.iterdir() if p.name.endswith(".tmp")]
    _, target = other
    imported = target.data("import", "state", str(out))
    assert imported["imported"]["task"] == 4 and imported["imported"]["comment"] == 1
    again = target.ok("export", "state").stdout.encode()
    assert again.splitlines()[1:] == out.read_bytes().splitlines()[1:]
    shown = target.data("task", "show", "DEMO-0003")
    assert shown["title"] == "Card 2"
    human = target.refused("BOARD_NOT_EMPTY", "import", "state", str(out))
    assert "without projects" in human.stderr


def test_a_bad_file_is_named_by_line_and_nothing_is_imported(
    taskctl: Taskctl, other: tuple[TaskdProcess, Taskctl]
) -> None:
    seed(taskctl, tasks=2)
    lines = taskctl.ok("export", "state").stdout.splitlines()
    bad = taskctl.cwd / "bad.jsonl"
    bad.write_text("\n".join([lines[0], '{"kind": "widget", "row": {}}', *lines[1:]]) + "\n")
    process, target = other
    run = target.refused("VALIDATION_FAILED", "import", "state", str(bad))
    assert "line 2: unknown kind 'widget'" in run.stderr
    assert activity_count(process.data_dir) == 0
    truncated = taskctl.cwd / "cut.jsonl"
    truncated.write_text("\n".join(lines[:-1]) + "\n")
    assert "truncated" in target.refused("VALIDATION_FAILED", "import", "state", str(truncated)).stderr
    assert activity_count(process.data_dir) == 0


def test_board_backup_writes_a_whole_copy_and_refuses_bad_paths(taskctl: Taskctl) -> None:
    seed(taskctl, tasks=2)
    result = taskctl.data("board", "backup", "copy.sqlite")  # relative to where taskctl runs
    target = taskctl.cwd / "copy.sqlite"
    assert result["path"] == str(target)
    with closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2
    human = taskctl.ok("board", "backup", "second.sqlite").stdout
    assert "at revision" in human and str(taskctl.cwd / "second.sqlite") in human
    taskctl.refused("VALIDATION_FAILED", "board", "backup", str(taskctl.cwd))
    taskctl.refused("CONFLICT", "board", "backup", "copy.sqlite")


def test_board_compact_settings_and_status(taskctl: Taskctl) -> None:
    seed(taskctl, tasks=5)
    status = taskctl.data("board", "status")
    head, rows = status["revision"], status["log_rows"]
    assert status["floor"] == 0 and status["durability"] == "full" and rows >= 7
    taskctl.refused("VALIDATION_FAILED", "board", "compact", "--through", str(head + 100))
    assert taskctl("board", "compact").code == 2
    dry = taskctl.data("board", "compact", "--through", str(head - 1), "--dry-run")
    assert dry["dry_run"] and taskctl.data("board", "status")["log_rows"] == rows
    done = taskctl.data("board", "compact", "--older-than", "1")
    assert done["removed"] == 0  # nothing is a day old
    done = taskctl.data("board", "compact", "--through", str(head - 3))
    assert done["removed"] > 0 and Path(done["archive"]).is_file()
    after = taskctl.data("board", "status")
    assert after["floor"] == head - 3 and after["log_rows"] == rows - done["removed"]
    assert after["oldest_revision"] > after["floor"]
    assert "floor" in taskctl.ok("board", "status").stdout
    expired = taskctl("events", "tail", "--after", "0")
    record = json.loads(expired.stdout.splitlines()[0])
    assert expired.code == 1 and record["type"] == "error" and record["code"] == "CURSOR_EXPIRED", str(expired)

    for bad in ("0", "-1"):
        taskctl.refused("VALIDATION_FAILED", "board", "settings", "--event-retention-days", bad)
    assert taskctl("board", "settings", "--event-retention-days", "soon").code == 2
    assert taskctl.data("board", "settings") == {"event_retention_days": None}
    assert taskctl.data("board", "settings", "--event-retention-days", "90") == {"event_retention_days": 90}
    assert "90" in taskctl.ok("board", "settings").stdout
    assert taskctl.data("board", "settings", "--event-retention-days", "off") == {"event_retention_days": None}
    assert json.loads(taskctl.ok("--json", "board", "status").stdout)["data"]["event_retention_days"] is None
