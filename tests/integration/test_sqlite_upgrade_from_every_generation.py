"""Upgrading a SQLite board from every older schema generation.

Each older file holds real rows (tests/support/old_schema.py); the current ``taskd serve``
starts on it as a user runs it. Every row must come through with its meaning, the schema objects
must be exactly a fresh file's, and the activity log must read back the same.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from services.board.sqlite_store import schema_version
from tests.support.board import TaskdProcess
from tests.support.old_schema import build_source_board, make_old_file, user_version

#: Columns an older generation did not have; the migration fills them in by rule (documented).
FILLED_BY_MIGRATION = {("tasks", "status_since")}
#: Derived state the board rebuilds at start (the moment a mark was judged is that start's).
REBUILT_AT_START = {("condition_marks", "since")}


def schema_objects(path: Path) -> list[tuple[str, str, str, str | None]]:
    with closing(sqlite3.connect(path)) as conn:
        return [tuple(row) for row in conn.execute(  # type: ignore[misc]
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")]


def table_rows(path: Path, *, skip_new_columns: bool) -> dict[str, list[tuple[object, ...]]]:
    with closing(sqlite3.connect(path)) as conn:
        ordinary = {row[1] for row in conn.execute("PRAGMA table_list") if row[2] == "table" and row[0] == "main"}
        found = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            if name not in ordinary or name.startswith("tasks_search"):
                continue
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({name})")
                       if not (skip_new_columns and (name, row[1]) in FILLED_BY_MIGRATION | REBUILT_AT_START)]
            order = "rowid" if name not in ("status_transitions", "actors", "labels") else ", ".join(columns)
            found[name] = [tuple(row) for row in conn.execute(f"SELECT {', '.join(columns)} FROM {name} ORDER BY {order}")]
            if name == "condition_marks":
                found[name].sort()
        return found


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
async def test_an_older_file_upgrades_to_a_fresh_files_schema_with_every_row(tmp_path: Path, version: int) -> None:
    source = await build_source_board(tmp_path / "source")
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.data_dir.mkdir(mode=0o700)
    (board.data_dir / "token").write_text((tmp_path / "source" / "token").read_text())
    old = board.data_dir / "board.sqlite"
    make_old_file(source, old, version)
    assert user_version(old) == version
    board.start()
    health = board.api("GET", "/api/v1/tasks?limit=200")
    assert health["items"], "the upgraded board serves its tasks"
    assert board.stop() == 0
    assert user_version(old) == schema_version()
    assert schema_objects(old) == schema_objects(source), "an upgraded file's schema differs from a fresh file's"
    before, after = table_rows(source, skip_new_columns=True), table_rows(old, skip_new_columns=True)
    for table in before:
        assert after[table] == before[table], f"rows of {table} changed meaning in the upgrade from version {version}"
