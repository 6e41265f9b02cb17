"""The PostgreSQL schema holds every rule SQLite's triggers hold, refusing with the same text.

Each raw statement below is what an outside writer (psql, a script, a bug) could send past the
board's commands. It runs on a real PostgreSQL database made by the shipped PostgreSQL migrations
AND on a real SQLite file made by the SQLite store's migrate, from the same seed; both must refuse
it with the same message (the stable code first) and leave every table exactly as it was. The
legal statements next to them must succeed on both and stamp the same revisions, so a trigger that
refused everything, or stamped differently, fails here too. Together they keep the two schemas from
drifting apart.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pytest

from services.board.sqlite_store import migrate as migrate_sqlite
from services.board.sqlite_store import migrations as sqlite_migrations
from tests.support.postgres import Cluster, apply_migrations, fresh_database, migration_files
from tests.support.waiting import wait_until

#: Tables only the PostgreSQL schema has: what SQLite's board keeps as files in its data dir.
POSTGRES_ONLY_TABLES = {"schema_version", "board_secrets", "attachment_blobs"}

TS = "2026-01-01T00:00:00.000Z"


def activity(event: str, changes: str, *, task: str = "t_a", revision: str = "revision + 1") -> str:
    """An activity insert as the writer makes it: the revision its own insert produces."""
    return (
        "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision, created_at)"
        f" SELECT '{task}', 'demo', 'human', 'ann', '{event}', '{changes}', {revision}, '{TS}'"
        " FROM global_revision WHERE singleton = 1"
    )


def task(task_id: str, *, kind: str = "task", status: str = "todo", project: str = "demo", number: int) -> str:
    return (
        "INSERT INTO tasks (id, project_id, number, identifier, title, kind, status, created_at, updated_at)"
        f" VALUES ('{task_id}', '{project}', {number}, '{project.upper()}-{number}', 'Task {task_id}', '{kind}', '{status}',"
        f" '{TS}', '{TS}')"
    )


def parent(source: str, target: str, relation_id: str | None = None) -> str:
    return (
        "INSERT INTO relations (id, type, source_id, target_id, created_at)"
        f" VALUES ('{relation_id or f'rel_{source}_{target}'}', 'parent', '{source}', '{target}', '{TS}')"
    )


def blocks(source: str, target: str) -> str:
    return (
        "INSERT INTO relations (id, type, source_id, target_id, created_at)"
        f" VALUES ('blk_{source}_{target}', 'blocks', '{source}', '{target}', '{TS}')"
    )


#: The same seed on both engines: two projects, tasks of each kind, one row of each append-only kind.
SEED: list[str] = [
    f"INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', '{TS}', '{TS}')",
    f"INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('other', 'Other', 'OTHER', '{TS}', '{TS}')",
    task("t_a", number=1),
    task("t_b", number=2),
    task("t_c", number=3),
    task("t_done", status="done", number=4),
    task("t_canceled", status="canceled", number=5),
    task("t_review", status="in_review", number=6),
    *(task(f"e{i}", kind="epic", number=10 + i) for i in range(1, 11)),
    task("t_far", project="other", number=1),
    task("e_far", kind="epic", project="other", number=2),
    "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
    f" VALUES ('c1', 't_a', 'note', 'First note', 'human', 'ann', 1, '{TS}')",
    "INSERT INTO reports (id, task_id, round, body, actor_kind, actor_id, created_at)"
    f" VALUES ('r1', 't_a', 1, 'The report', 'agent', 'bot', '{TS}')",
    f"INSERT INTO relations (id, type, source_id, target_id, created_at) VALUES ('rel1', 'related', 't_a', 't_b', '{TS}')",
    f"INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES ('acc1', 't_a', 1, 'It builds', '{TS}')",
    f"INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES ('acc2', 't_a', 2, 'It ships', '{TS}')",
    activity("task_created", '{"title": "Task t_a"}'),
    activity("comment_added", '{"comment_id": "c1"}'),
    # e1 > e2 > … > e7: a parent chain 7 deep, so one more level is still allowed and two are not.
    *(parent(f"e{i}", f"e{i + 1}") for i in range(1, 7)),
]

#: Compared whole before and after each refusal: nothing written means these are unchanged.
COMPARED_TABLES = (
    "global_revision", "projects", "tasks", "comments", "reports", "relations", "acceptance_items", "task_activities",
    "board_meta", "retention_window",
)


class Engine(Protocol):
    name: str

    def run(self, statement: str) -> None: ...

    def refusal(self, statement: str) -> str | None:
        """The error message the statement is refused with, or None if it succeeded."""
        ...

    def rows(self, query: str) -> list[tuple[Any, ...]]: ...


@dataclass
class SqliteEngine:
    conn: sqlite3.Connection
    name: str = "sqlite"

    def run(self, statement: str) -> None:
        self.conn.execute(statement)

    def refusal(self, statement: str) -> str | None:
        try:
            self.conn.execute(statement)
        except sqlite3.DatabaseError as exc:
            return str(exc)
        return None

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(query).fetchall()]


@dataclass
class PostgresEngine:
    conn: psycopg.Connection[tuple[Any, ...]]
    name: str = "postgresql"

    def run(self, statement: str) -> None:
        self.conn.execute(statement.encode())

    def refusal(self, statement: str) -> str | None:
        try:
            self.conn.execute(statement.encode())
        except psycopg.errors.RaiseException as exc:
            return exc.diag.message_primary
        except psycopg.DatabaseError as exc:
            return f"{type(exc).__name__}: {exc.diag.message_primary}"
        return None

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        return self.conn.execute(query.encode()).fetchall()


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    return {table: engine.rows(f"SELECT * FROM {table} ORDER BY 1") for table in COMPARED_TABLES}


# -- the databases ------------------------------------------------------------------------------


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresEngine]:
    apply_migrations(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(";\n".join(SEED).encode())  # one round trip, one transaction
        yield PostgresEngine(conn)


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[SqliteEngine]:
    path = tmp_path / "board.sqlite"
    migrate_sqlite(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        for statement in SEED:
            conn.execute(statement)
        yield SqliteEngine(conn)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest) -> Engine:
    fixture: Engine = request.getfixturevalue("lite" if request.param == "sqlite" else "pg")
    return fixture


# -- refusals: the same text on both engines, nothing written ----------------------------------

#: Compaction's first step: the floor raised to the oldest kept revision, which opens the window.
RAISE_FLOOR_TO_OLDEST = "UPDATE board_meta SET value = (SELECT CAST(min(revision) AS TEXT) FROM task_activities) WHERE key = 'floor'"

#: (case, statements that set the scene, the raw statement refused, the exact message)
REFUSALS: list[tuple[str, list[str], str, str]] = [
    ("activity update", [], "UPDATE task_activities SET event = 'rewritten'", "ACTIVITY_APPEND_ONLY"),
    ("activity update of one row", [],
     "UPDATE task_activities SET changes_json = '{}' WHERE revision = (SELECT max(revision) FROM task_activities)", "ACTIVITY_APPEND_ONLY"),
    ("activity delete", [], "DELETE FROM task_activities", "ACTIVITY_APPEND_ONLY"),
    ("activity revision from the past", [], activity("task_updated", "{}", revision="revision"), "ACTIVITY_REVISION_MISMATCH"),
    ("activity revision skipping ahead", [], activity("task_updated", "{}", revision="revision + 2"), "ACTIVITY_REVISION_MISMATCH"),
    ("activity changes not JSON", [], activity("task_updated", "not json"), "ACTIVITY_CHANGES_NOT_JSON"),
    ("activity changes an array", [], activity("task_updated", "[1, 2]"), "ACTIVITY_CHANGES_NOT_JSON"),
    ("activity changes not JSON and a wrong revision: JSON first", [], activity("task_updated", "{", revision="0"),
     "ACTIVITY_CHANGES_NOT_JSON"),
    ("comment edit", [], "UPDATE comments SET body = 'I never said that' WHERE id = 'c1'", "COMMENT_APPEND_ONLY"),
    ("comment delete", [], "DELETE FROM comments WHERE id = 'c1'", "COMMENT_APPEND_ONLY"),
    ("report edit", [], "UPDATE reports SET body = 'A better report' WHERE id = 'r1'", "REPORT_APPEND_ONLY"),
    ("report delete", [], "DELETE FROM reports", "REPORT_APPEND_ONLY"),
    ("relation rewrite", [], "UPDATE relations SET target_id = 't_c' WHERE id = 'rel1'", "RELATION_IMMUTABLE"),
    ("relation retype", [], "UPDATE relations SET type = 'blocks' WHERE id = 'rel1'", "RELATION_IMMUTABLE"),
    ("todo straight to done", [], "UPDATE tasks SET status = 'done' WHERE id = 't_a'", "INVALID_TRANSITION"),
    ("in_review to awaiting", [], "UPDATE tasks SET status = 'awaiting' WHERE id = 't_review'", "INVALID_TRANSITION"),
    ("done back to in_progress", [], "UPDATE tasks SET status = 'in_progress' WHERE id = 't_done'", "TERMINAL_STATE"),
    ("done to todo in the same round", [], "UPDATE tasks SET status = 'todo' WHERE id = 't_done'", "TERMINAL_STATE"),
    ("canceled to todo two rounds on", [], "UPDATE tasks SET status = 'todo', delivery_round = delivery_round + 2 WHERE id = 't_canceled'",
     "TERMINAL_STATE"),
    ("canceled to backlog", [], "UPDATE tasks SET status = 'backlog', delivery_round = delivery_round + 1 WHERE id = 't_canceled'",
     "TERMINAL_STATE"),
    ("a parent that is not an epic", [], parent("t_a", "t_b"), "RELATION_INVALID: parent must be an epic"),
    ("a parent that does not exist", [], parent("t_ghost", "t_b"), "RELATION_INVALID: parent must be an epic"),
    ("a parent in another project", [], parent("e_far", "t_a"), "RELATION_INVALID: parent and child must be in the same project"),
    ("a parent cycle", [], parent("e7", "e1"), "RELATION_CYCLE: the child is an ancestor of the parent"),
    ("a parent of itself through one step", [], parent("e2", "e1"), "RELATION_CYCLE: the child is an ancestor of the parent"),
    ("a ninth parent", [parent(f"e{i}", "t_c") for i in range(1, 9)], parent("e9", "t_c"), "RELATION_FAN_IN: a task has at most 8 parents"),
    ("a chain nine deep from above", [parent("e7", "e8")], parent("e8", "e9"), "RELATION_DEPTH: a parent chain is at most 8 deep"),
    ("a chain nine deep from below", [parent("e9", "e10"), parent("e8", "e9")], parent("e7", "e8"),
     "RELATION_DEPTH: a parent chain is at most 8 deep"),
    ("a blocks cycle of two", [blocks("t_a", "t_b")], blocks("t_b", "t_a"), "RELATION_CYCLE: the target already blocks the source"),
    ("a blocks cycle of three", [blocks("t_a", "t_b"), blocks("t_b", "t_c")], blocks("t_c", "t_a"),
     "RELATION_CYCLE: the target already blocks the source"),
    ("an acceptance item edited", [], "UPDATE acceptance_items SET text = 'It compiles' WHERE id = 'acc1'", "ACCEPTANCE_IMMUTABLE"),
    ("an acceptance item deleted without its audit row", [],
     "DELETE FROM acceptance_items WHERE id = 'acc1'", "ACCEPTANCE_PRUNE_UNAUDITED"),
    ("an acceptance item deleted under another item's audit row",
     [activity("acceptance_pruned", '{"removed": [{"id": "acc2", "text": "It ships"}]}')],
     "DELETE FROM acceptance_items WHERE id = 'acc1'", "ACCEPTANCE_PRUNE_UNAUDITED"),
    ("an acceptance item deleted under another task's audit row",
     [activity("acceptance_pruned", '{"removed": [{"id": "acc1"}]}', task="t_b")],
     "DELETE FROM acceptance_items WHERE id = 'acc1'", "ACCEPTANCE_PRUNE_UNAUDITED"),
    ("an acceptance item deleted under an audit row of another event",
     [activity("acceptance_changed", '{"removed": [{"id": "acc1"}]}')],
     "DELETE FROM acceptance_items WHERE id = 'acc1'", "ACCEPTANCE_PRUNE_UNAUDITED"),
    ("an epic with children made a task", [], "UPDATE tasks SET kind = 'task' WHERE id = 'e1'",
     "RELATION_INVALID: an epic with children must stay an epic"),
    ("a task moved to another project", [], "UPDATE tasks SET project_id = 'other' WHERE id = 't_a'", "TASK_PROJECT_FIXED"),
    ("an epic with children moved and made a task: the project rule first", [],
     "UPDATE tasks SET kind = 'task', project_id = 'other' WHERE id = 'e1'", "TASK_PROJECT_FIXED"),
    ("an epic with children made a task and done: the epic rule first", [],
     "UPDATE tasks SET kind = 'task', status = 'done' WHERE id = 'e1'", "RELATION_INVALID: an epic with children must stay an epic"),
    ("a second row of a multi-row update breaks the graph", [],
     "UPDATE tasks SET status = 'in_progress' WHERE id IN ('t_a', 't_done')", "TERMINAL_STATE"),
    ("the revision counter lowered", [], "UPDATE global_revision SET revision = revision - 1", "REVISION_LOWERED"),
    ("the revision counter set to where it stands", [], "UPDATE global_revision SET revision = revision",
     "REVISION_LOWERED"),
    ("the revision counter row deleted", [], "DELETE FROM global_revision", "REVISION_LOWERED"),
    ("an attachment named by a path instead of its digest", [],
     "INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
     f" VALUES ('att9', 't_a', 'x.txt', 'text/plain', 1, '/etc/passwd', '{TS}', '{TS}')", "ATTACHMENT_DIGEST"),
    ("an attachment's digest rewritten into a path",
     ["INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
      f" VALUES ('att9', 't_a', 'x.txt', 'text/plain', 1, '{'cd' * 32}', '{TS}', '{TS}')"],
     "UPDATE attachments SET sha256 = '../../../etc/passwd' WHERE id = 'att9'", "ATTACHMENT_DIGEST"),
    ("the floor lowered", [], "UPDATE board_meta SET value = '-1' WHERE key = 'floor'", "FLOOR_LOWERED"),
    ("the floor row deleted", [], "DELETE FROM board_meta WHERE key = 'floor'", "FLOOR_LOWERED"),
    ("a row above the floor deleted while the window is open", [RAISE_FLOOR_TO_OLDEST],
     "DELETE FROM task_activities", "ACTIVITY_APPEND_ONLY"),
    ("a row at the floor deleted after the window closed", [RAISE_FLOOR_TO_OLDEST, "DELETE FROM retention_window"],
     "DELETE FROM task_activities WHERE revision = (SELECT min(revision) FROM task_activities)", "ACTIVITY_APPEND_ONLY"),
]


@pytest.fixture(scope="module")
def seeded_pair(pg_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SqliteEngine, PostgresEngine]]:
    """One seeded database per engine for the refusal cases, each case inside a transaction rolled
    back at its end (a fresh database per case would cost more than the case)."""
    path = tmp_path_factory.mktemp("refusals") / "board.sqlite"
    migrate_sqlite(path)
    url = fresh_database(pg_cluster)
    apply_migrations(url)
    with closing(sqlite3.connect(path, isolation_level=None)) as lite_conn, psycopg.connect(url, autocommit=True) as pg_conn:
        lite_conn.execute("PRAGMA foreign_keys = ON")
        for statement in SEED:
            lite_conn.execute(statement)
        pg_conn.execute(";\n".join(SEED).encode())
        yield SqliteEngine(lite_conn), PostgresEngine(pg_conn)
    pg_cluster.drop_later(url)


@pytest.mark.parametrize(("case", "scene", "statement", "message"), REFUSALS, ids=[case for case, *_ in REFUSALS])
def test_a_raw_statement_is_refused_with_the_same_text_on_both_engines_and_writes_nothing(
    seeded_pair: tuple[SqliteEngine, PostgresEngine], case: str, scene: list[str], statement: str, message: str,
) -> None:
    for engine in seeded_pair:
        seed_state = snapshot(engine)
        if not scene:
            # As an outside writer sends it: one autocommit statement, then look at what is stored.
            assert engine.refusal(statement) == message, f"{engine.name}: {case}"
            assert snapshot(engine) == seed_state, f"{engine.name} wrote something while refusing: {case}"
            continue
        # The scene's rows (some append-only) must not outlive the case: all of it in one
        # transaction, rolled back. SQLite's transaction goes on after a refused statement, so its
        # state is read as the refusal left it; PostgreSQL's needs a savepoint to go on, and then
        # what a failed statement leaves is whatever its atomicity leaves: nothing.
        engine.run("BEGIN")
        try:
            for setup in scene:
                engine.run(setup)
            before = snapshot(engine)
            if isinstance(engine, PostgresEngine):
                engine.run("SAVEPOINT refused")
            refusal = engine.refusal(statement)
            if isinstance(engine, PostgresEngine):
                engine.run("ROLLBACK TO SAVEPOINT refused")
            after = snapshot(engine)
        finally:
            engine.run("ROLLBACK")
        assert refusal == message, f"{engine.name}: {case}"
        assert after == before, f"{engine.name} wrote something while refusing: {case}"
        assert snapshot(engine) == seed_state


# -- what the rules allow: the same outcome and the same revisions on both engines ------------

#: Legal raw statements, run in this order from the seed. Each must succeed on both engines.
ALLOWED: list[str] = [
    "UPDATE tasks SET status = 'in_progress' WHERE id = 't_a'",
    "UPDATE tasks SET status = 'todo', delivery_round = delivery_round + 1 WHERE id = 't_done'",
    "UPDATE tasks SET status = 'todo', delivery_round = 2 WHERE id = 't_canceled'",
    "UPDATE tasks SET status = 'done' WHERE id = 't_review'",
    "UPDATE tasks SET title = 'Renamed' WHERE id = 't_b'",
    "UPDATE tasks SET acceptance_revision = 3 WHERE id = 't_b'",  # not a stamped column: no revision
    "UPDATE tasks SET kind = 'task' WHERE id = 'e10'",  # an epic without children may change kind
    "UPDATE tasks SET project_id = 'demo' WHERE id = 't_a'",  # naming the same project is no move
    parent("e7", "e8"),  # the chain is now 8 deep: allowed
    *(parent(f"e{i}", "t_c") for i in (1, 2, 3, 4, 5, 6, 7, 9)),  # eight parents, the deepest 8 levels down: allowed
    blocks("t_a", "t_b"),
    blocks("t_b", "t_c"),
    "DELETE FROM relations WHERE id = 'blk_t_b_t_c'",
    blocks("t_c", "t_a"),  # no cycle once b no longer blocks c
    activity("acceptance_pruned", '{"removed": [{"id": "acc1", "text": "It builds"}]}'),
    "DELETE FROM acceptance_items WHERE id = 'acc1'",
    "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
    f" VALUES ('c2', 't_b', 'question', 'Why?', 'human', 'ann', 1, '{TS}')",
    f"INSERT INTO agent_sessions (id, task_id, owner_kind, owner_id, seg, phase, created_at, updated_at)"
    f" VALUES ('s1', 't_a', 'agent', 'bot', 1, 'work', '{TS}', '{TS}')",
    f"UPDATE agent_sessions SET status = 'closed', closed_at = '{TS}' WHERE id = 's1'",
    "INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
    f" VALUES ('att1', 't_b', 'log.txt', 'text/plain', 3, '{'ab' * 32}', '{TS}', '{TS}')",
    "UPDATE projects SET readme = 'Read me' WHERE id = 'demo'",
    # An upsert that finds its row counts as the update it becomes, or as nothing: never as an insert.
    f"INSERT INTO projects (id, name, prefix, created_at, updated_at) VALUES ('demo', 'Demo', 'DEMO', '{TS}', '{TS}')"
    " ON CONFLICT (id) DO NOTHING",
    task("t_b", number=2) + " ON CONFLICT (id) DO UPDATE SET title = excluded.title",
    task("t_b", number=2) + " ON CONFLICT (id) DO UPDATE SET acceptance_revision = 4",
    task("t_new", number=50) + " ON CONFLICT (id) DO NOTHING",
    "UPDATE projects SET updated_at = 'later' WHERE id = 'other'",  # not a stamped column
    activity("task_updated", '{"title": "Renamed"}', task="t_b"),
    activity("task_updated", '{"note": "with a NUL escape \\u0000"}', task="t_b"),
    f"INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, created_at)"
    f" VALUES (NULL, NULL, 'system', 'board', 'board_note', '{{}}', '{TS}')",  # no revision given: still counted
    # Compaction: raise the floor, delete at or below it, close the window, in that order.
    "UPDATE board_meta SET value = (SELECT CAST(min(revision) AS TEXT) FROM task_activities) WHERE key = 'floor'",
    "DELETE FROM task_activities WHERE revision = (SELECT min(revision) FROM task_activities)",
    "DELETE FROM retention_window",
    "UPDATE board_meta SET value = value WHERE key = 'floor'",  # the same floor opens no window
]

REVISIONS = (
    ("global_revision", "SELECT revision FROM global_revision"),
    ("tasks", "SELECT id, revision, status, kind, delivery_round FROM tasks ORDER BY id"),
    ("projects", "SELECT id, revision FROM projects ORDER BY id"),
    ("activity", "SELECT id, revision, event FROM task_activities ORDER BY id"),
    ("relations", "SELECT id FROM relations ORDER BY id"),
    ("acceptance", "SELECT id FROM acceptance_items ORDER BY id"),
    ("floor", "SELECT value FROM board_meta WHERE key = 'floor'"),
    ("window", "SELECT singleton, floor FROM retention_window"),
)


def test_what_the_rules_allow_succeeds_on_both_engines_and_stamps_the_same_revisions(
    lite: SqliteEngine, pg: PostgresEngine
) -> None:
    assert {name: lite.rows(query) for name, query in REVISIONS} == {name: pg.rows(query) for name, query in REVISIONS}
    for statement in ALLOWED:
        for engine in (lite, pg):
            assert engine.refusal(statement) is None, f"{engine.name} refused: {statement}"
        seen = {name: lite.rows(query) for name, query in REVISIONS}
        assert seen == {name: pg.rows(query) for name, query in REVISIONS}, f"the engines differ after: {statement}"
    assert pg.rows("SELECT revision FROM global_revision")[0][0] > 40  # the statements above did stamp


def test_a_multi_row_activity_insert_counts_each_row_as_sqlite_does(engine: Engine) -> None:
    (start,) = engine.rows("SELECT revision FROM global_revision")[0]
    engine.run(
        "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision, created_at)"
        f" VALUES ('t_a', 'demo', 'human', 'ann', 'one', '{{}}', {start + 1}, '{TS}'),"
        f" ('t_a', 'demo', 'human', 'ann', 'two', '{{}}', {start + 2}, '{TS}')"
    )
    assert engine.rows("SELECT revision FROM global_revision")[0] == (start + 2,)
    rows = engine.rows("SELECT id, revision, event FROM task_activities ORDER BY id")
    assert rows[-2:] == [(3, start + 1, "one"), (4, start + 2, "two")]


# -- PostgreSQL only: what SQLite needs no rule for --------------------------------------------


def test_truncate_and_an_upsert_cannot_move_the_revision_counter(pg: PostgresEngine) -> None:
    """Every revision comes from the counter's one row: lowered, the board's next write would
    collide with a revision in the log; gone, it could not write at all."""
    before = snapshot(pg)
    assert pg.refusal("TRUNCATE global_revision") == "REVISION_LOWERED"
    assert pg.refusal("INSERT INTO global_revision (singleton, revision) VALUES (1, 0)"
                      " ON CONFLICT (singleton) DO UPDATE SET revision = excluded.revision") == "REVISION_LOWERED"
    assert snapshot(pg) == before


@pytest.mark.parametrize(("table", "message"), [
    ("task_activities", "ACTIVITY_APPEND_ONLY"),
    ("comments", "COMMENT_APPEND_ONLY"),
    ("reports", "REPORT_APPEND_ONLY"),
    ("acceptance_items", "ACCEPTANCE_PRUNE_UNAUDITED"),
])
def test_truncate_cannot_empty_an_append_only_table(pg: PostgresEngine, table: str, message: str) -> None:
    # SQLite has no TRUNCATE (its DELETE without WHERE fires the row triggers); PostgreSQL's skips them.
    before = snapshot(pg)
    assert pg.refusal(f"TRUNCATE {table} CASCADE") == message
    assert pg.refusal("TRUNCATE tasks CASCADE") in {"ACTIVITY_APPEND_ONLY", "COMMENT_APPEND_ONLY", "REPORT_APPEND_ONLY",
                                                     "ACCEPTANCE_PRUNE_UNAUDITED"}
    assert snapshot(pg) == before


def test_psql_raw_update_and_delete_on_the_activity_log_are_refused(pg_cluster: Cluster, pg: PostgresEngine) -> None:
    before = snapshot(pg)
    for statement in ("UPDATE task_activities SET event = 'rewritten'", "DELETE FROM task_activities WHERE revision > 0"):
        done = pg_cluster.psql(pg_url(pg_cluster, pg), statement)
        assert done.returncode != 0, (statement, done.stdout)
        assert "ERROR:  ACTIVITY_APPEND_ONLY" in done.stderr, done.stderr
    assert snapshot(pg) == before


def pg_url(cluster: Cluster, engine: PostgresEngine) -> str:
    return cluster.url(engine.conn.info.dbname)


def waiting_on_a_lock(observer: psycopg.Connection[tuple[Any, ...]], pid: int) -> bool:
    row = observer.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def race(cluster: Cluster, engine: PostgresEngine, first: str, second: str) -> str | None:
    """``first`` in an open transaction; ``second`` from another connection (autocommit, no lock
    taken first, as a raw writer would) once it waits; then ``first`` commits. ``second``'s refusal."""
    url = pg_url(cluster, engine)
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as racer:
        holder.execute(first.encode())  # the transaction stays open: its rows are not yet visible
        outcome: list[str | None] = []
        thread = threading.Thread(target=lambda: outcome.append(PostgresEngine(racer).refusal(second)))
        thread.start()
        wait_until(lambda: waiting_on_a_lock(engine.conn, racer.info.backend_pid), what="the second writer to wait")
        holder.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
    return outcome[0]


def test_two_writers_closing_a_blocks_cycle_at_once_cannot_both_pass(pg_cluster: Cluster, pg: PostgresEngine) -> None:
    refused = race(pg_cluster, pg, blocks("t_a", "t_b"), blocks("t_b", "t_a"))
    assert refused == "RELATION_CYCLE: the target already blocks the source"
    assert pg.rows("SELECT id FROM relations WHERE type = 'blocks'") == [("blk_t_a_t_b",)]


def test_two_writers_adding_the_ninth_parent_at_once_cannot_both_pass(pg_cluster: Cluster, pg: PostgresEngine) -> None:
    for i in range(1, 8):
        pg.run(parent(f"e{i}", "t_c"))
    refused = race(pg_cluster, pg, parent("e8", "t_c"), parent("e9", "t_c"))
    assert refused == "RELATION_FAN_IN: a task has at most 8 parents"
    assert pg.rows("SELECT count(*) FROM relations WHERE type = 'parent' AND target_id = 't_c'") == [(8,)]


def test_an_epic_losing_its_kind_while_a_child_is_added_cannot_both_pass(pg_cluster: Cluster, pg: PostgresEngine) -> None:
    refused = race(pg_cluster, pg, parent("e10", "t_a"), "UPDATE tasks SET kind = 'task' WHERE id = 'e10'")
    assert refused == "RELATION_INVALID: an epic with children must stay an epic"
    assert pg.rows("SELECT kind FROM tasks WHERE id = 'e10'") == [("epic",)]


def test_a_writer_holding_a_stale_revision_is_refused_once_the_other_commits(pg_cluster: Cluster, pg: PostgresEngine) -> None:
    (current,) = pg.rows("SELECT revision FROM global_revision")[0]
    stale = activity("task_updated", "{}", revision=str(current + 1))
    refused = race(pg_cluster, pg, activity("task_updated", '{"first": true}'), stale)
    assert refused == "ACTIVITY_REVISION_MISMATCH"
    # Revisions and ids both follow commit order, with no gap.
    assert pg.rows("SELECT id, revision FROM task_activities ORDER BY id")[-1] == (3, current + 1)


# -- the schema itself: same numbers, same tables and columns ----------------------------------


def test_every_sqlite_migration_number_has_its_postgresql_twin() -> None:
    assert [number for number, _, _ in migration_files()] == [number for number, _ in sqlite_migrations()]
    for number, name, script in migration_files():
        # Each file records itself, so psql -f of the files gives the same database as the store.
        assert re.search(rf"INSERT INTO schema_version \(version, applied_at\)\s+VALUES \({number},", script), name


def test_the_version_table_records_each_migration_applied(engine: Engine) -> None:
    if engine.name == "sqlite":
        assert engine.rows("PRAGMA user_version") == [(len(sqlite_migrations()),)]
        return
    rows = engine.rows("SELECT version, applied_at FROM schema_version ORDER BY version")
    assert [version for version, _ in rows] == [number for number, _, _ in migration_files()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", applied_at) for _, applied_at in rows)


SQLITE_TYPES = {"INTEGER": "bigint", "TEXT": "text", "BLOB": "bytea"}


def sqlite_columns(engine: SqliteEngine) -> dict[str, list[tuple[str, str, bool, str | None, int]]]:
    # Ordinary tables only: a virtual table (an FTS index) and its shadow tables are SQLite's own
    # machinery, which PostgreSQL answers another way.
    tables = sorted(name for _, name, kind, *_ in engine.rows("PRAGMA table_list")
                    if kind == "table" and not name.startswith("sqlite_"))
    return {
        table: [(name, SQLITE_TYPES[kind], bool(notnull) or pk == 1, default, pk)
                for _, name, kind, notnull, default, pk in engine.rows(f"PRAGMA table_info({table})")]
        for table in tables
    }


def postgres_columns(engine: PostgresEngine) -> dict[str, list[tuple[str, str, bool, str | None, int]]]:
    rows = engine.rows(
        "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default,"
        " coalesce((SELECT k.ordinal_position FROM information_schema.key_column_usage k"
        "   JOIN information_schema.table_constraints t USING (constraint_schema, constraint_name)"
        "  WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name AND k.column_name = c.column_name), 0)"
        " FROM information_schema.columns c WHERE c.table_schema = 'public' ORDER BY c.table_name, c.ordinal_position"
    )
    columns: dict[str, list[tuple[str, str, bool, str | None, int]]] = {}
    for table, name, kind, nullable, default, pk in rows:
        if default is not None:
            default = re.sub(r"::(text|bigint)$", "", default)
        columns.setdefault(table, []).append((name, kind, nullable == "NO", default, pk))
    return columns


def test_the_tables_columns_types_and_defaults_are_the_same_on_both_engines(lite: SqliteEngine, pg: PostgresEngine) -> None:
    sqlite_side = sqlite_columns(lite)
    postgres_side = postgres_columns(pg)
    assert set(postgres_side) - set(sqlite_side) == POSTGRES_ONLY_TABLES
    # SQLite's implicit rowid, which queries page by, is a column on exactly the tables that have one.
    with_rowid = {name for _, name, kind, _, wr, _ in lite.rows("PRAGMA table_list") if kind == "table" and not wr
                  and not name.startswith("sqlite_")}
    assert {table for table, columns in postgres_side.items() if any(column[0] == "rowid" for column in columns)} == with_rowid
    visible = {table: [column for column in postgres_side[table] if column[0] != "rowid"] for table in sqlite_side}
    assert visible == sqlite_side


def test_the_rowid_grows_in_insertion_order_and_is_the_id_on_the_activity_log(engine: Engine) -> None:
    engine.run("INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
               f" VALUES ('a_late_but_small_id', 't_b', 'note', 'Second', 'human', 'ann', 1, '{TS}')")
    assert engine.rows("SELECT id FROM comments ORDER BY rowid") == [("c1",), ("a_late_but_small_id",)]
    assert engine.rows("SELECT count(*) FROM task_activities WHERE rowid = id") == engine.rows("SELECT count(*) FROM task_activities")
    assert engine.rows("SELECT rowid, singleton FROM global_revision") == [(1, 1)]


def test_text_compares_byte_wise_as_in_sqlite(lite: SqliteEngine, pg: PostgresEngine) -> None:
    # The C collation on every text column: ORDER BY and UNIQUE mean the same whatever the locale.
    for engine in (lite, pg):
        for number, title in enumerate(["b", "B", "a", "Z", "é", "_", "10", "9"], start=100):
            engine.run(task(f"order{number}", number=number).replace(f"'Task order{number}'", f"'{title}'"))
    query = "SELECT title FROM tasks WHERE id LIKE 'order%' ORDER BY title"
    assert lite.rows(query) == pg.rows(query) == [(t,) for t in ["10", "9", "B", "Z", "_", "a", "b", "é"]]
    label = "INSERT INTO labels (project_id, name, created_at, last_used_at) VALUES ('demo', 'É', 'x', 'x')"
    assert lite.refusal(label) is None and pg.refusal(label) is None  # lower() folds ASCII only, on both


# -- the store's migrate on PostgreSQL: a newer schema refused untouched ------------------------


def whole_database(url: str) -> dict[str, Any]:
    """Everything a migrate could change: each table's rows, the objects, the triggers."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
        state: dict[str, Any] = {table: conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'.encode()).fetchall() for table in tables}
        state["objects"] = conn.execute(
            "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY 1").fetchall()
        state["triggers"] = conn.execute("SELECT tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1").fetchall()
        state["functions"] = conn.execute(
            "SELECT proname, md5(prosrc) FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1").fetchall()
    return state


def test_a_database_of_a_newer_schema_is_refused_untouched(postgres_url: str) -> None:
    from services.board.postgres_store import migrate, schema_version
    from services.board.store import SchemaTooNew

    migrate(postgres_url)
    newer = schema_version() + 1
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, %s)", (newer, TS))
    before = whole_database(postgres_url)

    with pytest.raises(SchemaTooNew) as refused:
        migrate(postgres_url)

    assert f"schema version {newer}" in str(refused.value) and "not modified" in str(refused.value)
    assert whole_database(postgres_url) == before


def test_the_store_migrate_and_the_files_applied_by_hand_give_the_same_database(pg_cluster: Cluster) -> None:
    from services.board.postgres_store import migrate

    by_store, by_hand = fresh_database(pg_cluster), fresh_database(pg_cluster)
    try:
        migrate(by_store)
        migrate(by_store)  # a second start changes nothing
        apply_migrations(by_hand)
        store_side, hand_side = whole_database(by_store), whole_database(by_hand)
        # The store adds the board's id; the files record when they ran.
        assert [key for key, _, _ in store_side.pop("board_meta")] == ["board_id", "floor"]
        assert [key for key, _, _ in hand_side.pop("board_meta")] == ["floor"]
        assert [row[0] for row in store_side.pop("schema_version")] == [row[0] for row in hand_side.pop("schema_version")]
        assert store_side == hand_side
        migrate(by_hand)  # a database made by psql is taken up as it is
        assert [row[0] for row in whole_database(by_hand)["schema_version"]] == [n for n, _, _ in migration_files()]
    finally:
        pg_cluster.drop_later(by_store)
        pg_cluster.drop_later(by_hand)


def test_every_trigger_the_files_define_exists_and_is_enabled(pg: PostgresEngine) -> None:
    defined: set[str] = set()
    for _, _, script in migration_files():
        for verb, name in re.findall(r"(?im)^(CREATE|DROP) TRIGGER (?:IF EXISTS )?(\w+)", script):
            (defined.add if verb.upper() == "CREATE" else defined.discard)(name)
    present = dict(pg.rows("SELECT tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal"))
    assert set(present) == defined and len(defined) > 30
    assert set(present.values()) == {"O"}  # enabled ("origin"): none disabled


def test_the_postgresql_triggers_raise_exactly_the_texts_the_sqlite_triggers_raise() -> None:
    # One error translation (services/board/store.py trigger_refusal) serves both engines only if
    # neither engine has a refusal text the other lacks.
    sqlite_texts = {text for _, script in sqlite_migrations() for text in re.findall(r"RAISE\(ABORT, '([^']*)'\)", script)}
    postgres_texts = {text for _, _, script in migration_files() for text in re.findall(r"RAISE EXCEPTION '([^']*)'", script)}
    assert postgres_texts == sqlite_texts and len(sqlite_texts) > 15
