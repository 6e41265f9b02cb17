"""A rule of the PostgreSQL schema that never fires in a board's session is found by the start
check (services/board/postgres_schema.py); it passed it.

``postgres_schema.problems`` counted a trigger as lost only when it was missing or ``tgenabled =
'D'``. A trigger switched to replica mode (``ALTER TABLE … ENABLE REPLICA TRIGGER``, what logical
replication tooling leaves behind: ``tgenabled = 'R'``) never fires in an ordinary session, whose
``session_replication_role`` is ``origin``; likewise a ``session_replication_role = replica`` left
on the database silences every ``'O'`` trigger for each new session. The board started and served
an editable activity log; now it refuses to start, naming the trigger or the setting.
Every step goes through the real ``psql`` and the real ``taskd serve``.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
from pathlib import Path

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.postgres import Cluster
from tests.support.waiting import wait_until

RULE = ("task_activities_no_update", "task_activities")


def seeded_board(tmp_path: Path, postgres_url: str) -> TaskdProcess:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start("--database", postgres_url)
    board.api("POST", "/api/v1/projects", {"id": "demo"})
    board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Keep the log honest"})
    assert board.stop() == 0
    return board


def start_refused(board: TaskdProcess, postgres_url: str) -> subprocess.CompletedProcess[str]:
    """Start ``taskd serve`` once and wait (with a deadline) until it either exits or advertises
    itself; one that came up is stopped again and reported as returncode 0."""
    pointer = board.runtime_dir / "board.json"
    pointer.unlink(missing_ok=True)
    process = subprocess.Popen(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(board.data_dir), "--database", postgres_url],
        env=board.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    wait_until(lambda: process.poll() is not None or pointer.exists(), timeout=20, what="taskd to exit or come up")
    if process.poll() is None:
        served = pointer.read_text()
        process.terminate()
        process.communicate(timeout=20)
        return subprocess.CompletedProcess(process.args, 0, "", f"the board came up and served: {served}")
    out, err = process.communicate(timeout=20)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_a_rule_switched_to_replica_mode_is_refused_at_start(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    board = seeded_board(tmp_path, postgres_url)
    done = pg_cluster.psql(postgres_url, f"ALTER TABLE {RULE[1]} ENABLE REPLICA TRIGGER {RULE[0]}")
    assert done.returncode == 0, done.stderr
    # The rule no longer fires in an ordinary session: the activity log is editable.
    edited = pg_cluster.psql(postgres_url, "BEGIN; UPDATE task_activities SET event = 'task_updated'; ROLLBACK")
    assert edited.returncode == 0, edited.stderr

    refused = start_refused(board, postgres_url)

    assert refused.returncode == 1, f"taskd started on a schema whose {RULE[0]} never fires: {refused.stderr[-300:]}"
    assert RULE[0] in refused.stderr, refused.stderr


def test_a_database_left_in_replica_role_is_refused_at_start_or_served_with_its_rules(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    board = seeded_board(tmp_path, postgres_url)
    dbname = postgres_url.rsplit("/", 1)[1].split("?", 1)[0]
    done = pg_cluster.psql(pg_cluster.admin_url, f'ALTER DATABASE "{dbname}" SET session_replication_role = replica')
    assert done.returncode == 0, done.stderr
    edited = pg_cluster.psql(postgres_url, "BEGIN; UPDATE task_activities SET event = 'task_updated'; ROLLBACK")
    assert edited.returncode == 0, edited.stderr  # no rule fires in any new session

    pointer = board.runtime_dir / "board.json"
    pointer.unlink(missing_ok=True)
    process = subprocess.Popen(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(board.data_dir), "--database", postgres_url],
        env=board.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: process.poll() is not None or pointer.exists(), timeout=20, what="taskd to exit or come up")
        if process.poll() is not None:
            assert process.returncode == 1, process.communicate(timeout=20)[1]
            return  # refused at start: fixed one way
        # Served: then its rules must hold in its own sessions, and an ordinary write must work.
        board.url = json.loads(pointer.read_text())["url"]
        try:
            created = board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Written in replica role"})
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"the board started on a database whose triggers never fire, then refused a plain write:"
                f" {exc.code} {exc.read()[:200]!r}"
            ) from exc
        assert created["title"] == "Written in replica role"
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=20)
