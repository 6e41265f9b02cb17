"""Schema versions (SPEC §3): a fresh file is built whole, a re-open changes nothing, and a file
from a newer Taskloom is refused without a single byte, sibling file or timestamp changing."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from services.board import sqlite_store as store
from services.board.sqlite_store import connect, migrate, schema_version
from services.board.store import SchemaTooNew
from tests.support.board import VENV_BIN

BACKDATED_NS = 1_600_000_000 * 10**9  # 2020-09-13, long before any test runs
EXPECTED_TABLES = {
    "global_revision", "board_meta", "status_transitions", "projects", "actors", "tasks", "labels", "comments",
    "reports", "acceptance_items", "relations", "agent_sessions", "attachments", "task_activities",
}


def fingerprint(path: Path) -> tuple[str, int, int, list[str], int]:
    """Everything a refusal must leave alone: content, size, mtime, the folder's entries and its mtime."""
    stat = path.stat()
    folder = path.parent
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        stat.st_size,
        stat.st_mtime_ns,
        sorted(os.listdir(folder)),
        folder.stat().st_mtime_ns,
    )


def make_newer_file(path: Path, *, journal_mode: str) -> None:
    """A board file as a future Taskloom would leave it: our schema, plus a newer version stamp."""
    migrate(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode = {journal_mode}")
    conn.execute("CREATE TABLE future_things (id INTEGER PRIMARY KEY) STRICT")
    conn.execute(f"PRAGMA user_version = {schema_version() + 1}")
    conn.close()
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{path}{suffix}").exists()
    # Backdate the file and its folder: any write, or a sibling created and removed again, sets
    # "now", which then differs however coarse the filesystem's clock is.
    for target in (path, path.parent):
        os.utime(target, ns=(BACKDATED_NS, BACKDATED_NS))


def test_newer_rollback_journal_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    make_newer_file(path, journal_mode="DELETE")
    before = fingerprint(path)
    with pytest.raises(SchemaTooNew, match=rf"schema version {schema_version() + 1}.*not modified"):
        migrate(path)
    assert fingerprint(path) == before


def test_newer_wal_file_is_refused_without_creating_siblings(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    make_newer_file(path, journal_mode="WAL")
    before = fingerprint(path)
    with pytest.raises(SchemaTooNew):
        migrate(path)
    assert fingerprint(path) == before


def test_newer_wal_file_keeps_its_bytes(tmp_path: Path) -> None:
    """Whatever happens to the siblings, the database itself is never written."""
    path = tmp_path / "board.sqlite"
    make_newer_file(path, journal_mode="WAL")
    content, size, mtime, _, _ = fingerprint(path)
    with pytest.raises(SchemaTooNew):
        migrate(path)
    assert fingerprint(path)[:3] == (content, size, mtime)
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_store_open_refuses_a_newer_file(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    make_newer_file(path, journal_mode="DELETE")
    before = fingerprint(path)
    board = store.SqliteStore(path)
    with pytest.raises(SchemaTooNew):
        board.open()
    board.close()
    assert fingerprint(path) == before


def test_taskd_serve_refuses_a_newer_file_with_a_clear_message(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    runtime = tmp_path / "run"
    data_dir.mkdir()
    path = data_dir / "board.sqlite"
    make_newer_file(path, journal_mode="DELETE")
    before = fingerprint(path)
    env = {**os.environ, "TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_DATA_DIR": str(data_dir)}
    result = subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir)],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    assert "newer than this Taskloom understands" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (runtime / "board.json").exists()
    content, size, mtime, _, _ = before
    assert fingerprint(path)[:3] == (content, size, mtime)


def test_fresh_file_is_built_whole(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "board.sqlite"
    migrate(path)
    conn = connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema_version()
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        # A virtual table (the FTS5 search index) and its shadow tables are SQLite's own, never STRICT.
        ordinary = {row["name"] for row in conn.execute("PRAGMA table_list") if row["type"] == "table"}
        tables = {
            row["name"]: row["sql"]
            for row in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            if not row["name"].startswith("sqlite_") and row["name"] in ordinary
        }
        assert EXPECTED_TABLES <= set(tables)
        not_strict = [name for name, sql in tables.items() if "STRICT" not in sql.rsplit(")", 1)[-1].upper()]
        assert not_strict == [], "every table is STRICT"
        strict_flags = {row["name"]: row["strict"] for row in conn.execute("PRAGMA table_list") if row["schema"] == "main"}
        assert all(strict_flags[name] == 1 for name in tables)
        assert conn.execute("SELECT revision FROM global_revision").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM task_activities").fetchone()[0] == 0, "migrations are not events"
        board_id = conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0]
        assert board_id.startswith("brd_") and len(board_id) == len("brd_") + 16
    finally:
        conn.close()


def test_foreign_keys_are_enforced_on_store_connections(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    migrate(path)
    conn = connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute(
                "INSERT INTO tasks (id, project_id, number, identifier, title, created_at, updated_at)"
                " VALUES ('t1', 'no-such-project', 1, 'X-0001', 'orphan', 'now', 'now')"
            )
    finally:
        conn.close()


def test_strict_tables_refuse_wrong_types(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    migrate(path)
    conn = connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="cannot store TEXT value in INTEGER column"):
            conn.execute("UPDATE global_revision SET revision = 'many'")
    finally:
        conn.close()


def test_reopening_is_idempotent_and_keeps_the_board_id(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    migrate(path)

    def snapshot() -> tuple[object, ...]:
        conn = connect(path)
        try:
            return (
                conn.execute("PRAGMA user_version").fetchone()[0],
                conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0],
                conn.execute("SELECT revision FROM global_revision").fetchone()[0],
                tuple(tuple(row) for row in conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name")),
                tuple(tuple(row) for row in conn.execute("SELECT key, value FROM board_meta ORDER BY key")),
                conn.execute("SELECT count(*) FROM status_transitions").fetchone()[0],
            )
        finally:
            conn.close()

    first = snapshot()
    migrate(path)
    migrate(path)
    assert snapshot() == first


def test_an_empty_file_is_migrated_from_version_zero(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    sqlite3.connect(path).close()  # a zero-byte file: version 0
    assert path.stat().st_size == 0
    migrate(path)
    conn = connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema_version()
    finally:
        conn.close()


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    numbers = [number for number, _ in store.migrations()]
    assert numbers == list(range(1, len(numbers) + 1))
    assert schema_version() == numbers[-1]


def test_the_revision_counter_only_rises_and_keeps_its_one_row(tmp_path: Path) -> None:
    """Every revision comes from ``global_revision``: a raw session that lowered it would make the
    board's next write collide with the log, one that removed it would stop every write. Raising
    it (a bump, a restore skipping a lost future) is what the board does, and stays allowed."""
    path = tmp_path / "board.sqlite"
    migrate(path)
    conn = connect(path)
    try:
        conn.execute("UPDATE global_revision SET revision = revision + 5")
        for statement in (
            "UPDATE global_revision SET revision = revision - 1",
            "UPDATE global_revision SET revision = revision",
            "DELETE FROM global_revision",
            "INSERT OR REPLACE INTO global_revision (singleton, revision) VALUES (1, 0)",
            "REPLACE INTO global_revision (singleton, revision) VALUES (1, 0)",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="REVISION_LOWERED"):
                conn.execute(statement)
        assert [tuple(row) for row in conn.execute("SELECT singleton, revision FROM global_revision")] == [(1, 5)]
    finally:
        conn.close()
