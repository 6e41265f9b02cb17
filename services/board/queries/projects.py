"""Projects as the board answers them: one by id, or all of them."""

from __future__ import annotations

from typing import Any

import orjson

from shared.errors import not_found

from ..dialect import Connection, Row
from .paging import whole


def project_to_dict(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "prefix": row["prefix"],
        "workspace_path": row["workspace_path"],
        "readme": row["readme"],
        "meta": orjson.loads(row["meta_json"]),
        "settings": orjson.loads(row["settings_json"]),
        "revision": row["revision"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def require_project(conn: Connection, project_id: str) -> Row:
    """The project a command or a filter names: an unknown one is 404, never an empty list
    (docs/architecture.md, "List filters")."""
    row: Row | None = conn.execute("SELECT * FROM projects WHERE id = ?", (project_id,)).fetchone()
    if row is None:
        raise not_found("project", project_id)
    return row


def get_project(conn: Connection, project_id: str) -> dict[str, Any]:
    return project_to_dict(require_project(conn, project_id))


def list_projects(conn: Connection) -> dict[str, Any]:
    rows = conn.execute("SELECT * FROM projects ORDER BY id").fetchall()
    return whole([project_to_dict(row) for row in rows])
