"""The PostgreSQL connection adapter reuses a psycopg cursor only once nobody can read its result."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from services.board import postgres_store
from services.board.postgres_store import PgConnection


class CountedCursor(psycopg.Cursor[Any]):
    """psycopg's own cursor, counted as the connection makes them."""

    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        CountedCursor.made += 1
        super().__init__(*args, **kwargs)


@pytest.fixture
def conn(postgres_url: str) -> Iterator[PgConnection]:
    raw = postgres_store.connect(postgres_url)
    raw.cursor_factory = CountedCursor
    CountedCursor.made = 0
    try:
        yield PgConnection(raw)
    finally:
        raw.close()


def numbers(upto: int) -> str:
    return f"SELECT n FROM generate_series(1, {upto}) AS n"


def test_a_result_nobody_holds_lends_its_cursor_to_the_next_statement(conn: PgConnection) -> None:
    for n in range(20):
        assert conn.execute("SELECT ?", (n,)).fetchone()[0] == n  # type: ignore[index]
    assert CountedCursor.made == 1


def test_a_held_result_keeps_its_rows_while_later_statements_run(conn: PgConnection) -> None:
    first = conn.execute(numbers(3))
    second = conn.execute(numbers(5))
    assert conn.execute("SELECT 'other'").fetchone()[0] == "other"  # type: ignore[index]
    assert [row[0] for row in first.fetchall()] == [1, 2, 3]
    assert [row[0] for row in second.fetchall()] == [1, 2, 3, 4, 5]
    assert CountedCursor.made == 3


def test_an_iteration_keeps_its_result_while_the_loop_runs_statements(conn: PgConnection) -> None:
    seen = []
    for row in conn.execute(numbers(4)):
        # Each statement in the loop may take a spare cursor, never the one being iterated.
        seen.append((row["n"], conn.execute("SELECT ? * 10", (row["n"],)).fetchone()[0]))  # type: ignore[index]
    assert seen == [(1, 10), (2, 20), (3, 30), (4, 40)]


def test_a_refused_statement_leaves_the_connection_usable(conn: PgConnection) -> None:
    conn.execute("SELECT 1").fetchone()
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    assert conn.execute("SELECT 2").fetchone()[0] == 2  # type: ignore[index]


def test_a_script_moves_through_its_statements_and_returns_its_cursor(conn: PgConnection) -> None:
    result = conn.script("SELECT 1; SELECT 'two' AS word")
    assert result.fetchone()[0] == 1  # type: ignore[index]
    assert result.nextset()
    assert result.fetchone()["word"] == "two"  # type: ignore[index]
    del result
    assert conn.execute("SELECT 3").fetchone()[0] == 3  # type: ignore[index]
    assert CountedCursor.made == 1


def test_a_commit_of_a_failed_transaction_answers_rollback(conn: PgConnection) -> None:
    """The server ends a transaction a statement left failed with a ROLLBACK at COMMIT, without an
    error: only the command tag tells (the writer's last check before anyone hears "committed")."""
    conn.execute("BEGIN")
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1 / 0")
    result = conn.script("COMMIT")
    while result.nextset():
        pass
    assert result.statusmessage == "ROLLBACK"
    fine = conn.script("BEGIN; COMMIT")
    while fine.nextset():
        pass
    assert fine.statusmessage == "COMMIT"


def test_rowcount_is_the_statements_own(conn: PgConnection) -> None:
    conn.execute("CREATE TEMPORARY TABLE scratch (n BIGINT)")
    assert conn.execute("INSERT INTO scratch SELECT n FROM generate_series(1, 7) AS n").rowcount == 7
    assert conn.execute("DELETE FROM scratch WHERE n > ?", (4,)).rowcount == 3


def test_no_more_spares_are_kept_than_the_limit(conn: PgConnection) -> None:
    many = postgres_store.SPARE_CURSORS + 5
    held = [conn.execute("SELECT ?", (n,)) for n in range(many)]
    assert CountedCursor.made == many
    del held  # all of them free at once: only SPARE_CURSORS are kept
    held = [conn.execute("SELECT ?", (n,)) for n in range(many)]
    assert CountedCursor.made == many + 5
    assert [result.fetchone()[0] for result in held] == list(range(many))  # type: ignore[index]


def test_a_result_read_in_pages_and_one_closed_by_its_reader(conn: PgConnection) -> None:
    result = conn.execute(numbers(5))
    assert [row[0] for row in result.fetchmany(2)] == [1, 2]
    assert [row[0] for row in result.fetchmany(10)] == [3, 4, 5]
    assert result.fetchmany(10) == []
    closed = conn.execute("SELECT 1")
    closed.close()  # psycopg's own method: a closed cursor is not lent again
    del result, closed
    assert [conn.execute("SELECT ?", (n,)).fetchone()[0] for n in range(3)] == [0, 1, 2]  # type: ignore[index]


def test_a_statement_that_carried_an_attachments_bytes_does_not_keep_its_cursor(conn: PgConnection) -> None:
    """A spare holds its last parameters until its next statement: megabytes of blob must not
    stay on the writer's connection between writes."""
    big = b"x" * (postgres_store.SPARE_PARAMETER_BYTES + 1)
    conn.execute("SELECT length(?)", (big,)).fetchone()
    conn.execute("SELECT 1").fetchone()
    assert CountedCursor.made == 2, "the cursor that carried the bytes was lent again"
    conn.execute("SELECT length(?)", (b"x" * 100,)).fetchone()
    assert CountedCursor.made == 2  # a small one goes back as before


def test_a_session_is_named_for_what_it_does_unless_the_url_names_it(postgres_url: str) -> None:
    """``pg_stat_activity`` tells an operator which session is the writer's; the URL's own
    ``application_name`` is the operator's choice and wins."""
    with postgres_store.connect(postgres_url, purpose="writer") as raw:
        assert raw.execute("SHOW application_name").fetchone() == ("taskd writer",)
    separator = "&" if "?" in postgres_url else "?"
    with postgres_store.connect(f"{postgres_url}{separator}application_name=ops-board", purpose="writer") as raw:
        assert raw.execute("SHOW application_name").fetchone() == ("ops-board",)
