"""Every state write in a command sits next to its activity append (SPEC §1.1).

A function under ``services/board/commands/`` that runs an INSERT, UPDATE or DELETE must also call
``tx.record`` — unless it is a named helper that hands its audit to the caller. The exemption table
checks itself: a stale entry (the helper is gone, no longer writes, or now records on its own)
fails, and so does a caller of a helper that does not record.
"""

from __future__ import annotations

from .sourcescan import (
    COMMANDS,
    ROOT,
    SqlCall,
    defined_functions,
    functions_calling,
    parse,
    parse_text,
    python_files,
    record_calls,
    relative,
    sql_calls,
    sql_calls_in,
)

#: Helpers that write without appending; their caller's event describes the change.
EXEMPT_HELPERS: dict[tuple[str, str], str] = {
    ("services/board/commands/common.py", "apply_labels"):
        "label use counts move with the task_created/task_updated/task_archived row that names the labels",
    ("services/board/commands/common.py", "touch_actor"):
        "the actor dictionary moves with the task row whose `dictionaries` names the actor",
    ("services/board/commands/attachments.py", "purge_blob"):
        "the bytes of a PostgreSQL board go after the attachment_removed/attachment_updated row that released them",
    ("services/board/commands/attachments.py", "ensure_blob"):
        "the bytes of a PostgreSQL board move with the attachment_added/attachment_updated row naming their digest",
    ("services/board/commands/common.py", "set_status"):
        "the status column moves with the caller's task_moved/task_claimed/task_reopened/... row",
    ("services/board/commands/common.py", "write_task"):
        "the task's columns move with the caller's task_updated/task_claimed/task_heartbeat/task_archived row",
    ("services/board/commands/state_import.py", "_insert"):
        "the imported rows move with the import's one import_completed row, written last in the same transaction",
}

#: Writes outside the commands: the schema itself and the seam's own append.
STORE_WRITERS: dict[tuple[str, str], str] = {
    ("services/board/sqlite_store.py", "migrate"): "migrations and the board_id are not events (SPEC §4.4)",
    ("services/board/postgres_store.py", "migrate"): "migrations and the board_id are not events (SPEC §4.4)",
    ("services/board/postgres_store.py", "PostgresStore._write_secret"): "the shared board token is not board state (SPEC §4.4)",
    ("services/board/postgres_store.py", "PostgresStore.take_secret"): "a redeemed login code is not board state (SPEC §4.4)",
    ("services/board/postgres_store.py", "PostgresStore.drop_expired_secrets"): "expired secrets are not board state (SPEC §4.4)",
    ("services/board/store.py", "Tx.record"): "the activity append itself",
    ("services/board/backup.py", "backup"): "the backup's own copy (its journal mode), not the board's file",
    ("services/board/backup.py", "restore"): "a new epoch (board_id) is board identity, not an event; the board is stopped",
    ("services/board/backup.py", "_set_aside"): "folds the replaced file's WAL in before it is set aside; the board is stopped",
    ("services/board/backup.py", "_copy_blobs"): "the attachment bytes written into the backup's own copy, not the board's file",
    ("services/board/backup.py", "_drop_blobs"): "drops the backup-only blob table from the file being installed; the board is stopped",
    ("services/board/backup.py", "_skip_lost_future"): "moves the installed file's counter past the replaced head and "
    "records that gap, part of the new epoch; the board is stopped",
    ("services/board/compaction.py", "raise_floor"):
        "retention moves the floor and removes archived rows: no card changes, no revision moves (SPEC §12)",
    ("services/board/compaction.py", "set_retention"):
        "a board setting in board_meta, not card state (like the token, SPEC §4.4)",
    ("services/board/conditions/marks.py", "put"):
        "condition_marks rows are derived from state (docs/conditions.md); the conditions they mark travel as"
        " signals, or as rows when a project persists them",
    ("services/board/conditions/marks.py", "drop"): "the same derived marks, cleared",
}


def command_writes() -> list[SqlCall]:
    return [call for call in sql_calls([COMMANDS]) if call.writes]


def recording_functions() -> set[tuple[str, str]]:
    return {(call.path, call.function) for call in record_calls([COMMANDS])}


def test_the_scan_finds_command_writes() -> None:
    writes = command_writes()
    assert len(writes) >= 10, "the scanner stopped seeing the commands' INSERT/UPDATE/DELETE statements"
    assert any(call.function == "create_task" for call in writes)


def test_command_sql_is_readable() -> None:
    """A statement built in a way the reader cannot follow could hide a write; keep SQL literal."""
    opaque = [f"{c.path}:{c.line} {c.function}" for c in sql_calls([COMMANDS]) if c.texts is None]
    assert opaque == [], "pass SQL to execute as a literal, an f-string, or a local bound to one"


def test_every_command_write_is_audited() -> None:
    audited = recording_functions() | set(EXEMPT_HELPERS)
    silent = sorted({f"{c.path}:{c.line} {c.function}" for c in command_writes() if (c.path, c.function) not in audited})
    assert silent == [], "these functions change state without appending an activity row in the same function"


def test_exemptions_are_not_stale() -> None:
    writers = {(call.path, call.function) for call in command_writes()}
    # A helper that writes through another exempt helper (set_status through write_task) writes.
    helpers = {function for _, function in EXEMPT_HELPERS}
    for path in python_files(COMMANDS):
        for helper, callers in functions_calling(parse(path), helpers).items():
            if (relative(path), helper) in writers:
                writers.update((relative(path), caller) for caller in callers)
    recorders = recording_functions()
    stale = []
    for (path, function), why in EXEMPT_HELPERS.items():
        assert why, "every exemption says why"
        tree = parse(ROOT / path)
        if function not in defined_functions(tree):
            stale.append(f"{path} {function}: no longer exists")
        elif (path, function) not in writers:
            stale.append(f"{path} {function}: no longer writes")
        elif (path, function) in recorders:
            stale.append(f"{path} {function}: now records its own row; drop the exemption")
    assert stale == []


def test_exempt_helpers_are_called_only_where_an_activity_is_appended() -> None:
    audited = recording_functions() | set(EXEMPT_HELPERS)
    helpers = {function for _, function in EXEMPT_HELPERS}
    unaudited = []
    for path in python_files(COMMANDS):
        for helper, callers in functions_calling(parse(path), helpers).items():
            for caller in callers:
                if (relative(path), caller) not in audited:
                    unaudited.append(f"{relative(path)} {caller} calls {helper} but appends no activity")
    assert unaudited == []


def test_writes_outside_the_commands_are_only_the_stores() -> None:
    writers = {
        (call.path, call.function)
        for call in sql_calls(["services"])
        if call.writes and not call.path.startswith(COMMANDS + "/")
    }
    assert writers == set(STORE_WRITERS), "state changes go through a command in services/board/commands/"


def test_the_reader_classifies_statements() -> None:
    source = '''
TABLE_SQL = "DELETE FROM labels WHERE use_count = 0"

def audited(tx):
    tx.execute(f"UPDATE tasks SET {cols} WHERE id = ?", ())
    tx.record("task_updated", {}, task_id="t", project_id="p")

def silent(tx):
    sql = "INSERT INTO labels (project_id, name) VALUES (?, ?)"
    tx.execute(sql, ("p", "x"))

def via_constant(tx):
    tx.conn.execute(TABLE_SQL)

def reads(conn):
    conn.execute("  SELECT * FROM tasks").fetchall()
    conn.execute("WITH x AS (SELECT 1) SELECT * FROM x")

def cte_write(tx):
    tx.execute("WITH gone AS (SELECT id FROM labels) DELETE FROM labels WHERE id IN gone")

def opaque(tx, statement):
    tx.execute(statement)
'''
    calls = sql_calls_in(parse_text(source), "snippet.py")
    writes = {call.function for call in calls if call.writes}
    assert writes == {"audited", "silent", "via_constant", "cte_write"}
    assert {call.function for call in calls if call.texts is None} == {"opaque"}

