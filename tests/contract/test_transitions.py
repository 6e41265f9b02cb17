"""The status graph lives once in code and once in the schema; they must be the same graph
(SPEC §4.3), and the schema's trigger must enforce exactly that graph for a raw writer."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.board.sqlite_store import connect, migrate
from shared import domain


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "board.sqlite"
    migrate(path)
    connection = connect(path)
    try:
        yield connection
    finally:
        connection.close()


def code_pairs() -> set[tuple[str, str]]:
    return {(source, target) for source, targets in domain.TRANSITIONS.items() for target in targets} | set(domain.REOPEN)


def test_code_table_equals_schema_table(conn: sqlite3.Connection) -> None:
    schema = {tuple(row) for row in conn.execute("SELECT from_status, to_status FROM status_transitions")}
    assert code_pairs() - schema == set(), "in code, missing from the schema"
    assert schema - code_pairs() == set(), "in the schema, missing from code"


def test_code_table_names_every_status_and_only_reopen_leaves_terminal() -> None:
    assert set(domain.TRANSITIONS) == set(domain.STATUSES)
    assert all(domain.TRANSITIONS[status] == frozenset() for status in domain.TERMINAL)
    assert {source for source, _ in domain.REOPEN} == set(domain.TERMINAL)
    assert {target for _, target in domain.REOPEN} == {"todo"}


def test_schema_check_constraint_lists_the_same_statuses(conn: sqlite3.Connection) -> None:
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'tasks'").fetchone()[0]
    for status in domain.STATUSES:
        assert f"'{status}'" in sql


def test_the_trigger_enforces_exactly_the_graph(conn: sqlite3.Connection) -> None:
    """Every ordered pair of statuses, written raw: allowed iff the code table allows it."""
    conn.execute(
        "INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', 'now', 'now')"
    )
    refused = {}
    for number, (source, target) in enumerate(itertools.permutations(domain.STATUSES, 2), start=1):
        task_id = f"t{number}"
        conn.execute(
            "INSERT INTO tasks (id, project_id, number, identifier, title, status, created_at, updated_at)"
            " VALUES (?, 'demo', ?, ?, 'x', ?, 'now', 'now')",
            (task_id, number, f"DEMO-{number:04d}", source),
        )
        # Reopen's shape: out of a terminal status only to todo, in the next delivery round.
        bump = ", delivery_round = delivery_round + 1" if source in domain.TERMINAL else ""
        try:
            conn.execute(f"UPDATE tasks SET status = ?{bump} WHERE id = ?", (target, task_id))
        except sqlite3.IntegrityError as exc:
            refused[(source, target)] = str(exc)
    allowed = set(itertools.permutations(domain.STATUSES, 2)) - set(refused)
    assert allowed == code_pairs()
