"""A SQLite upgrade is all or nothing, and ``--repair-schema`` mends an old file too.

Every pending migration runs in one transaction: a script that fails part of the way (here 0005,
whose ``retention_window`` table someone already made by hand) leaves the file at the version it
had, with the schema it had, and the start says in one line which script failed and at which
version the file still is. A generation-1 file whose ``task_activities_no_delete`` trigger was
dropped from outside (the damage docs/operations.md says ``--repair-schema`` mends) upgrades:
0005 replaces that trigger with ``DROP TRIGGER IF EXISTS``, and the repair runs after the
migrations, against the schema they define.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

from services.board.sqlite_store import defined_triggers, schema_version
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.old_schema import build_source_board, make_old_file, user_version


def schema_objects(path: Path) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return [tuple(row) for row in conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")]


def triggers(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}


def serve(data_dir: Path, runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
    env["TASKLOOM_RUNTIME_DIR"] = str(runtime)
    return subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir), *args],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )


async def generation_one(tmp_path: Path, *damage: str) -> Path:
    """A generation-1 board.sqlite with real rows, ``damage`` done to it from outside."""
    source = await build_source_board(tmp_path / "source")
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "token").write_text((tmp_path / "source" / "token").read_text())
    old = data_dir / "board.sqlite"
    make_old_file(source, old, 1)
    with closing(sqlite3.connect(old, isolation_level=None)) as conn:
        for statement in damage:
            conn.execute(statement)
    return old


async def test_an_upgrade_that_fails_part_way_leaves_the_file_at_its_old_version(tmp_path: Path) -> None:
    old = await generation_one(tmp_path, "CREATE TABLE retention_window (made_by_hand TEXT)")
    objects = schema_objects(old)
    done = serve(old.parent, tmp_path / "run")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), done.stderr
    assert "0005_retention_floor.sql" in lines[0] and "retention_window" in lines[0], lines[0]
    assert "left at version 1" in lines[0], lines[0]
    assert user_version(old) == 1 and schema_objects(old) == objects, (
        f"the failed upgrade left the file at schema version {user_version(old)} (was 1), while it said {lines[0]!r}"
    )


async def test_repair_schema_mends_a_pre_0005_file_that_lacks_the_trigger_0005_replaces(tmp_path: Path) -> None:
    old = await generation_one(tmp_path, "DROP TRIGGER task_activities_no_delete")
    board = TaskdProcess(data_dir=old.parent, runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start("--repair-schema")
    assert board.api("GET", "/api/v1/tasks?limit=200")["items"], "the upgraded board serves its tasks"
    assert board.stop() == 0
    assert user_version(old) == schema_version()
    assert set(defined_triggers()) <= triggers(old)
