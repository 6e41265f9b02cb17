"""What only the SQLite store adds to the store contract (SPEC §1, §3).

The contract itself — a command is one function in one transaction, state and its activity rows
commit or vanish together, the triggers hold every invariant for a raw writer too — is
``tests/store/test_store_contract.py``, run once per engine. Here: SQLite's own connection rules.
"""

from __future__ import annotations

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
