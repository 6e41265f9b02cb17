"""What only the SQLite store adds to the store contract (SPEC §1, §3).

The contract itself — a command is one function in one transaction, state and its activity rows
commit or vanish together, the triggers hold every invariant for a raw writer too — is
``tests/store/test_store_contract.py``, run once per engine. Here: SQLite's own connection rules.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.board.commands import projects
from services.board.sqlite_store import SqliteStore, connect
from services.board.store import Actor

ANN = Actor("human", "ann")


@pytest.fixture
def board(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "board.sqlite")
    store.open()
    try:
        store.run_command(projects.create_project, ANN, id="demo", name="Demo")
        yield store
    finally:
        store.close()


def test_store_connections_enforce_foreign_keys(board: SqliteStore) -> None:
    """SQLite leaves foreign keys off per connection unless asked: every store connection asks."""
    conn = connect(board.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute(
                "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
                " VALUES ('c1', 'no-such-task', 'note', 'hello', 'human', 'ann', 1, 'now')"
            )
    finally:
        conn.close()


def open_temporary_files() -> list[str]:
    """What this process holds open that SQLite made as a temporary file (``etilqs_…``, unlinked
    as soon as it is opened, so only ``/proc/self/fd`` still names it)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the directory's own descriptor, closed by the time it is read
    return [name for name in names if "etilqs_" in name]


def test_a_savepoints_journal_is_kept_in_memory_not_spilled_to_a_temporary_file(board: SqliteStore) -> None:
    """A batch of commands runs inside ``SAVEPOINT batch``, whose journal holds the first image of
    every page the batch changes. SQLite spills that journal to a new temporary file past 64 KiB
    (an open, an unlink and a write per page, every batch) unless the connection keeps temporary
    data in memory, as every store connection does."""
    conn = connect(board.path)
    try:
        conn.execute("CREATE TABLE scratch (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        conn.executemany("INSERT INTO scratch (body) VALUES (?)", [("x" * 2000,) for _ in range(200)])
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT batch")
        conn.execute("UPDATE scratch SET body = upper(body)")  # about 100 pages, 400 KiB of first images
        assert open_temporary_files() == []
        conn.execute("ROLLBACK")
    finally:
        conn.close()
