"""Tasks as the board answers them: by uuid or identifier, and filtered pages in creation order."""

from __future__ import annotations

import string
from typing import Any, Final, NamedTuple

import orjson

from shared import domain, limits
from shared.errors import not_found, validation

from ..conditions import rules
from ..dialect import Connection, Row, dialect_of
from .activities import board_meta
from .paging import encode_cursor, page
from .positions import board_key, resume_after
from .projects import require_project
from .refs import resolve_prefix

TASK_FIELDS = (
    "id", "identifier", "project_id", "number", "title", "description", "kind", "priority", "status",
    "assignee_kind", "assignee_id", "reporter_kind", "reporter_id", "claimed_by_kind", "claimed_by",
    "claimed_at", "heartbeat_at", "delivered_by", "delivery_round", "acceptance_mode", "waiver_reason",
    "awaiting_reason", "blocked_reason", "idem", "version", "revision", "archived_at", "created_at", "updated_at",
    "status_since",
)
#: Priority ranks of the ready queue, urgent first (rules.PRIORITY_RANK_SQL in Python).
_RANKS = tuple(reversed(domain.PRIORITIES))


#: A task row as read, or as a command wrote it (``commands.common.write_task``: column → value).
TaskRow = Row | dict[str, Any]


def task_to_dict(row: TaskRow) -> dict[str, Any]:
    # One C-level pass over the row: a lookup by name on Row scans the column names.
    values = row if isinstance(row, dict) else dict(zip(row.keys(), row))
    task = {name: values[name] for name in TASK_FIELDS}
    task["labels"] = orjson.loads(values["labels_json"])
    task["meta"] = orjson.loads(values["meta_json"])
    return task


def blockers_of(conn: Connection, task_ids: list[str]) -> dict[str, list[str]]:
    """Open blockers (identifiers, sorted) of each card, by the one rule (conditions/rules.py)."""
    found: dict[str, list[str]] = {}
    for task_id in task_ids:
        blockers = rules.open_blockers(conn, task_id)
        if blockers:
            found[task_id] = blockers
    return found


def task_resource(conn: Connection, row: TaskRow, *, blockers: list[str] | None = None) -> dict[str, Any]:
    """A task as the API answers it: its fields and its open blockers (``blocked_by``), read
    unless the caller knows them (a task its own command has just created has none) or the row
    says nothing points ``blocks`` at the card."""
    task = task_to_dict(row)
    if blockers is None:
        blockers = rules.open_blockers(conn, task["id"]) if _may_be_blocked(row) else []
    task["blocked_by"] = blockers
    return task


def _may_be_blocked(row: TaskRow) -> bool:
    """False only for a row of ``find_task`` (or one a command built from it) whose card no
    ``blocks`` relation pointed at when it was read: most cards, which then cost no blockers'
    read. A command that adds such a relation reads the card again before answering it."""
    if isinstance(row, dict):
        return bool(row.get(rules.POINTED_AT, True))
    try:
        return bool(row[rules.POINTED_AT])
    except (IndexError, KeyError):  # a row read by other SQL: look
        return True


#: Every column of a task, and whether a ``blocks`` relation points at it (``_may_be_blocked``).
_FIND_SQL: Final = f"SELECT *, {rules.blocks_pointed_clause()} AS {rules.POINTED_AT} FROM tasks WHERE "


def find_task(conn: Connection, ref: str) -> Row | None:
    """A task by uuid, by identifier (``PREFIX-0001``, case-insensitive), or by a unique uuid prefix."""
    row: Row | None = conn.execute(_FIND_SQL + "id = ?", (ref,)).fetchone()
    if row is None:
        row = conn.execute(_FIND_SQL + "identifier = ?", (ref.upper(),)).fetchone()
    if row is None and (task_id := resolve_prefix(conn, "task", ref)) is not None:
        row = conn.execute(_FIND_SQL + "id = ?", (task_id,)).fetchone()
    return row


def require_task(conn: Connection, ref: str) -> Row:
    row = find_task(conn, ref)
    if row is None:
        raise not_found("task", ref)
    return row


def get_task(conn: Connection, ref: str) -> dict[str, Any]:
    return task_resource(conn, require_task(conn, ref))


def list_tasks(
    conn: Connection,
    *,
    project: str | None = None,
    status: list[str] | None = None,
    assignee: str | None = None,
    label: str | None = None,
    kind: str | None = None,
    q: str | None = None,
    include_archived: bool = False,
    blocked: bool | None = None,
    ready: bool = False,
    for_actor: str | None = None,
    now: str | None = None,
    fresh_seconds: float = domain.CLAIM_FRESH_SECONDS,
    cursor: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Tasks in creation order (rowid), paged by an opaque keyset cursor; ``ready`` answers the
    claimable queue instead, in priority order (conditions/rules.py)."""
    clauses: list[str] = []
    params: list[Any] = []
    if for_actor is not None and not ready:
        raise validation("for applies to the ready queue: add ready=true", field="for")
    if project is not None:
        require_project(conn, project)
        clauses.append("project_id = ?")
        params.append(project)
    if status:
        clauses.append(f"status IN ({', '.join('?' for _ in status)})")
        params.extend(status)
    if assignee is not None:
        clauses.append("assignee_id = ?")
        params.append(assignee)
    if label is not None:
        clauses.append(dialect_of(conn).json_array_has("labels_json"))
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
    if blocked is not None:
        clauses.append(("" if blocked else "NOT ") + rules.blocked_clause())
    if ready:
        if now is None:
            raise ValueError("the ready queue is judged at a moment: pass now")
        rule, rule_params = rules.ready_clause(now=now, fresh_seconds=fresh_seconds, for_actor=for_actor)
        return _ready_page(conn, [*clauses, rule], [*params, *rule_params], cursor=cursor, limit=limit)
    meta = board_meta(conn)
    if cursor is not None:
        clauses.append("rowid > ?")
        params.append(resume_after(cursor, meta)[0])
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT rowid AS _rowid, * FROM {source} {where} ORDER BY rowid LIMIT ?", (*params, limit + 1)
    ).fetchall()
    return _with_blockers(conn, page(rows, limit=limit, item=task_to_dict, key=lambda row: board_key(meta, row["_rowid"])))


def _with_blockers(conn: Connection, answer: dict[str, Any]) -> dict[str, Any]:
    found = blockers_of(conn, [item["id"] for item in answer["items"]])
    for item in answer["items"]:
        item["blocked_by"] = found.get(item["id"], [])
    return answer


def _ready_page(
    conn: Connection, clauses: list[str], params: list[Any], *, cursor: str | None, limit: int
) -> dict[str, Any]:
    """The ready queue: one index walk per priority, urgent first, creation order within each,
    stopping as soon as the page is full (no sort of every todo card)."""
    start_rank, after = 0, 0
    meta = board_meta(conn)
    if cursor is not None:
        start_rank, after = resume_after(cursor, meta, 2)
        if start_rank >= len(_RANKS):
            raise validation("malformed cursor", cursor=cursor)
    where = " AND ".join(clauses)
    rows: list[tuple[int, Row]] = []
    for rank in range(start_rank, len(_RANKS)):
        wanted = limit + 1 - len(rows)
        if wanted <= 0:
            break
        floor = after if rank == start_rank else 0
        found = conn.execute(
            f"SELECT rowid AS _rowid, * FROM tasks WHERE {where} AND priority = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (*params, _RANKS[rank], floor, wanted),
        ).fetchall()
        rows.extend((rank, row) for row in found)
    more = len(rows) > limit
    kept = rows[:limit]
    items = [task_to_dict(row) for _, row in kept]
    for item in items:
        item["blocked_by"] = []  # the rule admitted it: it has no open blocker
    return {
        "items": items,
        "next_cursor": encode_cursor(board_key(meta, kept[-1][0], kept[-1][1]["_rowid"])) if more else None,
    }


# -- text search (``q=``) ---------------------------------------------------------------------------
#
# ``q`` is a filter, not a ranking: the page stays in creation order, so keyset paging holds. Each
# white-space separated word must occur, as a substring, in the title, the identifier or the
# description, case-insensitive in the ASCII letters A-Z and as written in every other character:
# that is the one folding both engines' SQL shares (SQLite's LIKE and lower(), PostgreSQL's lower()
# of the columns' "C" collation), so a word always finds its own text and both engines find the
# same cards. Two paths answer that one question: a portable LIKE scan that any SQL engine runs,
# and SQLite's FTS5 trigram index (migration 0007) that narrows the rows without reading every one.
# ``text_match`` is the one place that knows which engine it talks to.

#: FTS5's trigram tokenizer indexes three characters at a time; a shorter word has no postings.
TRIGRAM: Final = 3
_LIKE_SPECIALS = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})
#: The search's case folding: ASCII letters only, as SQL's lower() folds the columns it compares.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


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


def text_match(conn: Connection, words: list[str]) -> TextMatch:
    """The clause that keeps tasks containing every word, for the engine ``conn`` talks to."""
    if dialect_of(conn).name == "sqlite":
        return sqlite_text_match(words)
    return portable_text_match(words)


def portable_text_match(words: list[str]) -> TextMatch:
    """Standard SQL: each word a LIKE over the three fields (a scan; any engine runs it)."""
    clauses: list[str] = []
    params: list[str] = []
    for word in words:
        # Folded as lower() folds the column (str.lower would fold 'É' to 'é', which lower() of a
        # "C" column never gives back: the exact text would find nothing).
        pattern = f"%{word.translate(_ASCII_LOWER).translate(_LIKE_SPECIALS)}%"
        clauses.append(
            "(lower(title) LIKE ? ESCAPE '\\' OR lower(identifier) LIKE ? ESCAPE '\\'"
            " OR lower(description) LIKE ? ESCAPE '\\')"
        )
        params.extend((pattern, pattern, pattern))
    return TextMatch(" AND ".join(clauses), params)


def sqlite_text_match(words: list[str]) -> TextMatch:
    """SQLite: the FTS5 trigram index narrows the rows for words of three characters or more, and
    LIKE judges every word.

    With the index, the tasks are read by the rowids it answers (``NOT INDEXED`` keeps the planner
    from walking the whole project through ``tasks_by_project_status`` and testing each row against
    the list). The index folds the case of every letter ('école' finds 'École'), PostgreSQL's
    lower() of a "C" column only of A-Z, so its answer is a superset that LIKE, case-insensitive for
    ASCII only, brings back to the one rule; LIKE needs no ``lower()`` of every description.
    """
    indexed = [word for word in words if len(word) >= TRIGRAM]
    clauses: list[str] = []
    params: list[str] = []
    if indexed:
        # Each word as an FTS5 string (double quotes doubled): the person's text, never query syntax.
        phrase = " AND ".join('"' + word.replace('"', '""') + '"' for word in indexed)
        clauses.append("rowid IN (SELECT rowid FROM tasks_search WHERE tasks_search MATCH ?)")
        params.append(phrase)
    for word in words:
        pattern = f"%{word.translate(_LIKE_SPECIALS)}%"
        clauses.append(
            "(title LIKE ? ESCAPE '\\' OR identifier LIKE ? ESCAPE '\\' OR description LIKE ? ESCAPE '\\')"
        )
        params.extend((pattern, pattern, pattern))
    return TextMatch(" AND ".join(clauses), params, "tasks NOT INDEXED" if indexed else "tasks")
