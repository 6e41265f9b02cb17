"""Tasks as the board answers them: by uuid or identifier, and filtered pages in creation order."""

from __future__ import annotations

import sqlite3
from typing import Any, Final, NamedTuple

import orjson

from shared import limits
from shared.errors import not_found, validation

from .paging import decode_cursor, page

TASK_FIELDS = (
    "id", "identifier", "project_id", "number", "title", "description", "kind", "priority", "status",
    "assignee_kind", "assignee_id", "reporter_kind", "reporter_id", "claimed_by_kind", "claimed_by",
    "claimed_at", "heartbeat_at", "delivered_by", "delivery_round", "acceptance_mode", "waiver_reason",
    "awaiting_reason", "blocked_reason", "idem", "version", "revision", "archived_at", "created_at", "updated_at",
)


def task_to_dict(row: sqlite3.Row) -> dict[str, Any]:
    # One C-level pass over the row: a lookup by name on sqlite3.Row scans the column names.
    values = dict(zip(row.keys(), row))
    task = {name: values[name] for name in TASK_FIELDS}
    task["labels"] = orjson.loads(values["labels_json"])
    task["meta"] = orjson.loads(values["meta_json"])
    return task


def find_task(conn: sqlite3.Connection, ref: str) -> sqlite3.Row | None:
    """A task by uuid or by identifier (``PREFIX-0001``, case-insensitive)."""
    row: sqlite3.Row | None = conn.execute("SELECT * FROM tasks WHERE id = ?", (ref,)).fetchone()
    if row is None:
        row = conn.execute("SELECT * FROM tasks WHERE identifier = ?", (ref.upper(),)).fetchone()
    return row


def require_task(conn: sqlite3.Connection, ref: str) -> sqlite3.Row:
    row = find_task(conn, ref)
    if row is None:
        raise not_found("task", ref)
    return row


def get_task(conn: sqlite3.Connection, ref: str) -> dict[str, Any]:
    return task_to_dict(require_task(conn, ref))


def list_tasks(
    conn: sqlite3.Connection,
    *,
    project: str | None = None,
    status: list[str] | None = None,
    assignee: str | None = None,
    label: str | None = None,
    kind: str | None = None,
    q: str | None = None,
    include_archived: bool = False,
    cursor: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Tasks in creation order (rowid), paged by an opaque keyset cursor."""
    clauses: list[str] = []
    params: list[Any] = []
    if project is not None:
        clauses.append("project_id = ?")
        params.append(project)
    if status:
        clauses.append(f"status IN ({', '.join('?' for _ in status)})")
        params.extend(status)
    if assignee is not None:
        clauses.append("assignee_id = ?")
        params.append(assignee)
    if label is not None:
        clauses.append("EXISTS (SELECT 1 FROM json_each(labels_json) WHERE value = ?)")
        params.append(label)
    if kind is not None:
        clauses.append("kind = ?")
        params.append(kind)
    source = "tasks"
    if q is not None:
        found = text_match(conn, search_words(q))
        clauses.append(found.clause)
        params.extend(found.params)
        source = found.source
    if not include_archived:
        clauses.append("archived_at IS NULL")
    if cursor is not None:
        clauses.append("rowid > ?")
        params.append(decode_cursor(cursor))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT rowid AS _rowid, * FROM {source} {where} ORDER BY rowid LIMIT ?", (*params, limit + 1)
    ).fetchall()
    return page(rows, limit=limit, item=task_to_dict, key=lambda row: row["_rowid"])


# -- text search (``q=``) ---------------------------------------------------------------------------
#
# ``q`` is a filter, not a ranking: the page stays in creation order, so keyset paging holds. Each
# white-space separated word must occur, as a case-insensitive substring, in the title, the
# identifier or the description. Two paths answer that one question: a portable LIKE scan that any
# SQL engine runs, and SQLite's FTS5 trigram index (migration 0007) that answers it without
# reading every row. ``text_match`` is the one place that knows which engine it talks to.

#: FTS5's trigram tokenizer indexes three characters at a time; a shorter word has no postings.
TRIGRAM: Final = 3
_LIKE_SPECIALS = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def search_words(q: str) -> list[str]:
    """The words of ``q``; blank, too long or too many words is a clear 400."""
    if len(q) > limits.SEARCH_MAX_CHARS:
        raise validation(f"q must be at most {limits.SEARCH_MAX_CHARS} characters", field="q", length=len(q))
    words = list(dict.fromkeys(q.split()))  # repeated words ask nothing more
    if not words:
        raise validation("q must hold some text to search for", field="q")
    if len(words) > limits.SEARCH_MAX_WORDS:
        raise validation(f"q must have at most {limits.SEARCH_MAX_WORDS} words", field="q", words=len(words))
    return words


class TextMatch(NamedTuple):
    """A WHERE clause keeping the tasks that contain every word, and the table expression to read."""

    clause: str
    params: list[str]
    source: str = "tasks"


def text_match(conn: Any, words: list[str]) -> TextMatch:
    """The clause that keeps tasks containing every word, for the engine ``conn`` talks to."""
    if type(conn).__module__ == "sqlite3":
        return sqlite_text_match(words)
    return portable_text_match(words)


def portable_text_match(words: list[str]) -> TextMatch:
    """Standard SQL: each word a LIKE over the three fields (a scan; any engine runs it)."""
    clauses: list[str] = []
    params: list[str] = []
    for word in words:
        pattern = f"%{word.lower().translate(_LIKE_SPECIALS)}%"
        clauses.append(
            "(lower(title) LIKE ? ESCAPE '\\' OR lower(identifier) LIKE ? ESCAPE '\\'"
            " OR lower(description) LIKE ? ESCAPE '\\')"
        )
        params.extend((pattern, pattern, pattern))
    return TextMatch(" AND ".join(clauses), params)


def sqlite_text_match(words: list[str]) -> TextMatch:
    """SQLite: the FTS5 trigram index for words of three characters or more, LIKE for the rest.

    With the index, the tasks are read by the rowids it answers (``NOT INDEXED`` keeps the planner
    from walking the whole project through ``tasks_by_project_status`` and testing each row against
    the list). SQLite's LIKE is case-insensitive for ASCII already, so the short words need no
    ``lower()`` of every description.
    """
    indexed = [word for word in words if len(word) >= TRIGRAM]
    short = [word for word in words if len(word) < TRIGRAM]
    clauses: list[str] = []
    params: list[str] = []
    if indexed:
        # Each word as an FTS5 string (double quotes doubled): the person's text, never query syntax.
        phrase = " AND ".join('"' + word.replace('"', '""') + '"' for word in indexed)
        clauses.append("rowid IN (SELECT rowid FROM tasks_search WHERE tasks_search MATCH ?)")
        params.append(phrase)
    for word in short:
        pattern = f"%{word.translate(_LIKE_SPECIALS)}%"
        clauses.append(
            "(title LIKE ? ESCAPE '\\' OR identifier LIKE ? ESCAPE '\\' OR description LIKE ? ESCAPE '\\')"
        )
        params.extend((pattern, pattern, pattern))
    return TextMatch(" AND ".join(clauses), params, "tasks NOT INDEXED" if indexed else "tasks")
