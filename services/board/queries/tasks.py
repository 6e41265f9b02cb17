"""Tasks as the board answers them: by uuid or identifier, and filtered pages in creation order."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from shared.errors import not_found

from .paging import decode_cursor, page
from .refs import resolve_prefix

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
    """A task by uuid, by identifier (``PREFIX-0001``, case-insensitive), or by a unique uuid prefix."""
    row: sqlite3.Row | None = conn.execute("SELECT * FROM tasks WHERE id = ?", (ref,)).fetchone()
    if row is None:
        row = conn.execute("SELECT * FROM tasks WHERE identifier = ?", (ref.upper(),)).fetchone()
    if row is None and (task_id := resolve_prefix(conn, "task", ref)) is not None:
        row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
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
    if not include_archived:
        clauses.append("archived_at IS NULL")
    if cursor is not None:
        clauses.append("rowid > ?")
        params.append(decode_cursor(cursor))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT rowid AS _rowid, * FROM tasks {where} ORDER BY rowid LIMIT ?", (*params, limit + 1)
    ).fetchall()
    return page(rows, limit=limit, item=task_to_dict, key=lambda row: row["_rowid"])
