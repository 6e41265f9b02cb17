"""``GET /breaches``: the conditions that hold now — the catch-up for a consumer that missed signals."""

from __future__ import annotations

from typing import Any

from ..conditions import marks
from ..dialect import Connection
from .paging import whole
from .projects import require_project


def list_breaches(conn: Connection, *, project: str | None = None) -> dict[str, Any]:
    """Every holding condition (instant ones that hold, temporal ones that fired and still hold),
    oldest first. Read from ``condition_marks``, which every command keeps equal to its state."""
    if project is not None:
        require_project(conn, project)
    return whole([
        {"type": mark.type, "project_id": mark.project_id, "task_id": mark.task_id, "changes": mark.changes,
         "since": mark.since}
        for mark in marks.every(conn, project)
    ])
