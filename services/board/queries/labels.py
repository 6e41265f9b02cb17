"""Labels by (project, name) and the actor dictionary by (kind, id)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dialect import Connection, Row
from .paging import decode_key_cursor, page
from .projects import require_project

LABEL_FIELDS = ("project_id", "name", "use_count", "created_at", "last_used_at", "archived_at")
ACTOR_FIELDS = ("kind", "id", "use_count", "first_seen_at", "last_seen_at")


def _fields(names: tuple[str, ...]) -> Callable[[Row], dict[str, Any]]:
    return lambda row: {name: row[name] for name in names}


def list_labels(
    conn: Connection,
    *,
    project: str | None = None,
    archived: bool = False,
    cursor: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Labels by (project, name); archived ones only when asked for."""
    clauses: list[str] = []
    params: list[Any] = []
    if project is not None:
        require_project(conn, project)
        clauses.append("project_id = ?")
        params.append(project)
    if not archived:
        clauses.append("archived_at IS NULL")
    if cursor is not None:
        clauses.append("(project_id, name) > (?, ?)")
        params.extend(decode_key_cursor(cursor, 2))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT * FROM labels {where} ORDER BY project_id, name LIMIT ?", (*params, limit + 1)
    ).fetchall()
    return page(rows, limit=limit, item=_fields(LABEL_FIELDS), key=lambda row: (row["project_id"], row["name"]))


def list_actors(
    conn: Connection, *, kind: str | None = None, cursor: str | None = None, limit: int = 100
) -> dict[str, Any]:
    """The assignee/reporter dictionary by (kind, id)."""
    clauses: list[str] = []
    params: list[Any] = []
    if kind is not None:
        clauses.append("kind = ?")
        params.append(kind)
    if cursor is not None:
        clauses.append("(kind, id) > (?, ?)")
        params.extend(decode_key_cursor(cursor, 2))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(f"SELECT * FROM actors {where} ORDER BY kind, id LIMIT ?", (*params, limit + 1)).fetchall()
    return page(rows, limit=limit, item=_fields(ACTOR_FIELDS), key=lambda row: (row["kind"], row["id"]))
