"""A PostgreSQL upgrade is all or nothing, and says in one line why it failed.

Every pending migration runs in one transaction under the migration advisory lock. A board role
cut down to reading and writing rows, on a database of generation 6, meets the current ``taskd``
(0007 creates the pg_trgm extension, which needs CREATE on the database: docs/operations.md,
"Upgrade"); a generation-1 database where someone made 0005's ``retention_window`` table by hand
fails at 0005, after 0002..0004. Either way the start ends with one line naming the file and the
server's message, exit 1, and the database is still at its old version. A generation-1 database
whose ``task_activities_no_delete`` trigger was dropped from outside upgrades (0005 replaces it
with ``DROP TRIGGER IF EXISTS``), and two boards starting at once apply each file once.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from tests.support.board import VENV_BIN
from tests.support.postgres import Cluster, apply_migrations, migration_files
from tests.support.waiting import wait_until

#: The newest schema generation, the one a board upgrades every database to.
LATEST = migration_files()[-1][0]

NOW = "2024-01-01T00:00:00.000Z"


def seed_rows(url: str) -> None:
    """A project and a card in each status, written as the schema of the day accepts them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO board_meta (key, value) VALUES ('board_id', 'brd_00112233aabbccdd')")
        conn.execute("INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', %s, %s)",
                     (NOW, NOW))
        for n, status in enumerate(("backlog", "todo", "in_progress", "awaiting", "blocked", "in_review", "done", "canceled")):
            conn.execute(
                "INSERT INTO tasks (id, project_id, number, identifier, title, status, created_at, updated_at)"
                " VALUES (%s, 'demo', %s, %s, %s, %s, %s, %s)",
                (f"t-{n}", n + 1, f"DEMO-{n + 1:04d}", f"Card {status}", status, NOW, NOW),
            )


def version(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT max(version) FROM schema_version").fetchone()[0])  # type: ignore[index]


def clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}


def serve(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    # In the environment: a URL holding a password (another role's, below) is refused in argv.
    env = {**clean_env(), "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run"), "TASKLOOM_DATABASE_URL": url}
    return subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )


def one_line(done: subprocess.CompletedProcess[str], what: str) -> str:
    """The one error line of a start that failed."""
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, f"{what}: a traceback instead of a one-line error:\n{done.stderr[-1500:]}"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), done.stderr
    return lines[0]


def test_an_upgrade_by_a_role_that_only_reads_and_writes_rows_fails_in_one_line(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    apply_migrations(postgres_url, upto=6)
    seed_rows(postgres_url)
    role, password = f"rw_{secrets.token_hex(4)}", secrets.token_hex(12)
    pg_cluster.admin(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(sql.Identifier(role)))
    parts = urlsplit(postgres_url)
    as_role = parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}").geturl()
    done = serve(tmp_path, as_role)
    assert version(postgres_url) == 6
    line = one_line(done, "an upgrade the board's role may not apply")
    assert "0007_task_search.sql" in line and "pg_trgm" in line and "left at version 6" in line, line


def test_an_upgrade_that_fails_part_way_fails_in_one_line_and_leaves_the_old_version(
    tmp_path: Path, postgres_url: str
) -> None:
    apply_migrations(postgres_url, upto=1)
    seed_rows(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE retention_window (made_by_hand TEXT)")
    done = serve(tmp_path, postgres_url)
    line = one_line(done, "an upgrade that fails at 0005")
    assert version(postgres_url) == 1, f"the failed upgrade left the database at version {version(postgres_url)}: {line}"
    assert "0005_retention_floor.sql" in line and "retention_window" in line and "left at version 1" in line, line
    with psycopg.connect(postgres_url) as conn:
        columns = {row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'tasks'")}
    assert "acceptance_revision" not in columns, "0003, before the file that failed, survived the failed upgrade"


def test_a_pre_0005_database_lacking_the_trigger_0005_replaces_upgrades(tmp_path: Path, postgres_url: str) -> None:
    apply_migrations(postgres_url, upto=1)
    seed_rows(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER task_activities_no_delete ON task_activities")
    board = subprocess.Popen(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--database", postgres_url],
        env={**clean_env(), "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run")},
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "log", "wb"), stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (tmp_path / "run" / "board.json").exists() or board.poll() is not None,
                   timeout=30, what="the board to start")
        assert board.poll() is None, (tmp_path / "log").read_text()[-2000:]
    finally:
        board.terminate()
        board.wait(timeout=20)
    assert version(postgres_url) == LATEST


def test_two_boards_starting_at_once_on_an_old_database_apply_each_migration_once(
    tmp_path: Path, postgres_url: str
) -> None:
    apply_migrations(postgres_url, upto=1)
    seed_rows(postgres_url)
    env = clean_env()
    processes = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        processes.append(subprocess.Popen(
            [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / name / "data"),
             "--database", postgres_url],
            env={**env, "TASKLOOM_RUNTIME_DIR": str(tmp_path / name / "run")},
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / name / "log", "wb"), stdin=subprocess.DEVNULL,
        ))
    try:
        for name, process in zip(("a", "b"), processes):
            wait_until(lambda name=name, process=process: (  # type: ignore[misc]
                           (tmp_path / name / "run" / "board.json").exists() or process.poll() is not None),
                       timeout=30, what=f"board {name} to start")
            assert process.poll() is None, (tmp_path / name / "log").read_text()[-2000:]
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=20)
    with psycopg.connect(postgres_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        cards = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]  # type: ignore[index]
    assert versions == list(range(1, LATEST + 1)) and cards == 8, (versions, cards)
