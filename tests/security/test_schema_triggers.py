"""A dropped trigger must not go unnoticed: the board refuses to serve a file whose rules are gone.

The attack: an outside ``DROP TRIGGER task_activities_no_update`` on a stopped board's file, then a
restart — and the board served an editable activity log.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from services.board.sqlite_store import defined_triggers, migrate, migrations
from tests.support.board import VENV_BIN, TaskdProcess

DROPPED = ("task_activities_no_update", "tasks_status_graph")



def raw(board: TaskdProcess) -> sqlite3.Connection:
    return sqlite3.connect(board.data_dir / "board.sqlite", isolation_level=None, timeout=5)


def activity_rows(board: TaskdProcess) -> list[tuple[object, ...]]:
    with closing(raw(board)) as conn:
        return conn.execute("SELECT revision, event, changes_json FROM task_activities ORDER BY revision").fetchall()


def test_the_declared_triggers_are_exactly_what_the_migrations_create(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    migrate(path)
    with closing(sqlite3.connect(path)) as conn:
        created = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert set(defined_triggers()) == created
    # What the scripts spell, in order: a later migration may drop a trigger an earlier one made.
    spelled: set[str] = set()
    for _, script in migrations():
        for verb, name in re.findall(r"(?im)^(CREATE|DROP) TRIGGER (?:IF EXISTS )?(\w+)", script):
            if verb.upper() == "CREATE":
                spelled.add(name)
            else:
                spelled.discard(name)
    assert spelled == created and len(created) > 30


def test_a_dropped_trigger_is_refused_at_start_and_repair_schema_restores_it(tmp_path: Path) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    board.api("POST", "/api/v1/projects", {"id": "demo"})
    board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Keep the log honest"})
    assert board.stop() == 0
    with closing(raw(board)) as conn:
        for name in DROPPED:
            conn.execute(f"DROP TRIGGER {name}")
    rows = activity_rows(board)
    pointer = board.runtime_dir / "board.json"

    refused = subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(board.data_dir)],
        env=board.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )

    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert all(name in lines[0] for name in DROPPED) and "--repair-schema" in lines[0], lines[0]
    assert not pointer.exists(), "a refused board must not advertise itself"
    with closing(raw(board)) as conn:  # refused means refused: still missing, and the log is as it was
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert not present & set(DROPPED)
    assert activity_rows(board) == rows

    board.start("--repair-schema")
    try:
        assert "Put back 2 trigger(s)" in board.log_path.read_text()
        with closing(raw(board)) as conn:
            with pytest.raises(sqlite3.IntegrityError, match="ACTIVITY_APPEND_ONLY"):
                conn.execute("UPDATE task_activities SET event = 'task_updated'")
            with pytest.raises(sqlite3.IntegrityError, match="INVALID_TRANSITION"):
                conn.execute("UPDATE tasks SET status = 'done'")
        assert activity_rows(board) == rows
        # And it serves: a new write lands on the repaired file.
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Written after the repair"})
        assert len(activity_rows(board)) == len(rows) + 1
    finally:
        assert board.stop() == 0

    # Once repaired, a plain restart is not refused.
    board.start()
    assert board.stop() == 0
