"""A PostgreSQL board refuses to serve a database whose rules are gone, and ``--repair-schema``
puts them back (services/board/postgres_schema.py).

The attack: an operator (or a migration tool, or a bug) runs ``DROP TRIGGER``, ``ALTER TABLE …
DISABLE TRIGGER`` or ``DROP FUNCTION … CASCADE`` through psql while the board is stopped; the
board then started and served an editable activity log. Every step below goes through the real
``psql`` and the real ``taskd serve`` processes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg

from services.board import postgres_store
from services.board.postgres_schema import defined, statements
from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.postgres import Cluster

DROPPED = "task_activities_no_update"
DISABLED = ("tasks_update_rules", "tasks")
#: Dropped with CASCADE: the function and the triggers that call it go together.
FUNCTION = "relations_immutable"



def rows(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT revision, event, changes_json FROM task_activities ORDER BY revision").fetchall()


def board_triggers(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {
            name: enabled for name, enabled in conn.execute(
                "SELECT t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                " WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace"
            )
        }


def test_the_split_keeps_bodies_quotes_and_comments_whole() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n  RAISE EXCEPTION 'A; B';\nEND;\n$$;\n"
        "INSERT INTO t VALUES ('it''s; fine');\n"
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$;\n"
        "SELECT 1"
    )
    found = statements(script)
    assert len(found) == 4, found
    assert found[0].endswith("$$;") and "RAISE EXCEPTION 'A; B';" in found[0]
    assert found[1] == "INSERT INTO t VALUES ('it''s; fine');"
    assert found[2].endswith("$body$;") and found[3] == "SELECT 1"


def test_the_declared_triggers_are_exactly_what_the_migrations_create(postgres_url: str) -> None:
    postgres_store.migrate(postgres_url)
    created = board_triggers(postgres_url)
    wanted = defined()
    assert set(wanted.triggers) == set(created) and len(created) > 40
    assert {trigger.function for trigger in wanted.triggers.values()} <= set(wanted.functions)


def test_dropped_disabled_and_cascaded_rules_are_refused_at_start_and_repaired(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start("--database", postgres_url)
    board.api("POST", "/api/v1/projects", {"id": "demo"})
    first = board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Keep the log honest"})
    second = board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Then the page"})
    board.api("POST", f"/api/v1/tasks/{first['id']}/relations", {"type": "blocks", "target": second["id"]})
    assert board.stop() == 0
    healthy = board_triggers(postgres_url)
    cascaded = sorted(t.name for t in defined().triggers.values() if t.function == FUNCTION)
    for statement in (f"DROP TRIGGER {DROPPED} ON task_activities",
                      f"ALTER TABLE {DISABLED[1]} DISABLE TRIGGER {DISABLED[0]}",
                      f"DROP FUNCTION {FUNCTION}() CASCADE"):
        done = pg_cluster.psql(postgres_url, statement)
        assert done.returncode == 0, done.stderr
    before = rows(postgres_url)
    pointer = board.runtime_dir / "board.json"

    refused = subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(board.data_dir), "--database", postgres_url],
        env=board.env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )

    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    for name in (DROPPED, DISABLED[0], *cascaded):
        assert name in lines[0], lines[0]
    assert "disabled" in lines[0] and "--repair-schema" in lines[0], lines[0]
    assert not pointer.exists(), "a refused board must not advertise itself"
    assert rows(postgres_url) == before
    still = board_triggers(postgres_url)  # refused means untouched
    assert DROPPED not in still and still[DISABLED[0]] == "D"

    board.start("--database", postgres_url, "--repair-schema")
    try:
        assert f"Put back {2 + len(cascaded)} trigger(s)" in board.log_path.read_text()
        assert board_triggers(postgres_url) == healthy
        for statement, code in (("UPDATE task_activities SET event = 'task_updated'", "ACTIVITY_APPEND_ONLY"),
                                ("UPDATE tasks SET status = 'done'", "INVALID_TRANSITION"),
                                ("UPDATE relations SET type = 'relates'", "RELATION_IMMUTABLE")):
            refusal = pg_cluster.psql(postgres_url, statement)
            assert refusal.returncode != 0 and code in refusal.stderr, (statement, refusal.stderr)
        assert rows(postgres_url) == before
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Written after the repair"})
        assert len(rows(postgres_url)) == len(before) + 1
    finally:
        assert board.stop() == 0

    board.start("--database", postgres_url)  # once repaired, a plain start is not refused
    assert board.stop() == 0
