"""A task's acceptance criteria: the items, the mode and the list's revision."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, Row
from .tasks import require_task


def list_revision(conn: Connection, task_id: str) -> int:
    """How many times the task's acceptance list has changed."""
    revision: int = conn.execute("SELECT acceptance_revision FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
    return revision


def acceptance_view(conn: Connection, task: Row, mode: str) -> dict[str, Any]:
    rows = conn.execute(
        "SELECT id, position, text, created_at FROM acceptance_items WHERE task_id = ? ORDER BY position, rowid",
        (task["id"],),
    ).fetchall()
    return {
        "task_id": task["id"],
        "mode": mode,
        "revision": list_revision(conn, task["id"]),
        "items": [dict(row) for row in rows],
    }


def get_acceptance(conn: Connection, ref: str) -> dict[str, Any]:
    task = require_task(conn, ref)
    return acceptance_view(conn, task, task["acceptance_mode"])
