"""A task's agent sessions."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, Row
from .paging import whole
from .tasks import require_task

SESSION_FIELDS = (
    "id", "task_id", "owner_kind", "owner_id", "seg", "phase", "status", "created_at", "updated_at", "closed_at",
)


def session_to_dict(row: Row) -> dict[str, Any]:
    return {name: row[name] for name in SESSION_FIELDS}


def list_sessions(conn: Connection, ref: str, *, status: str | None = None) -> dict[str, Any]:
    task = require_task(conn, ref)
    rows = conn.execute(
        "SELECT * FROM agent_sessions WHERE task_id = ? AND (CAST(? AS TEXT) IS NULL OR status = ?) ORDER BY created_at, seg, rowid",
        (task["id"], status, status),
    ).fetchall()
    return whole([session_to_dict(row) for row in rows])
