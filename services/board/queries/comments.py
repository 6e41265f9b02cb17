"""A task's comments, oldest first."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, Row
from .activities import board_meta
from .paging import page
from .positions import board_key, resume_after
from .tasks import require_task


def comment_to_dict(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "task_id": row["task_id"],
        "kind": row["kind"],
        "body": row["body"],
        "actor_kind": row["actor_kind"],
        "actor_id": row["actor_id"],
        "round": row["round"],
        "created_at": row["created_at"],
    }


def list_comments(conn: Connection, ref: str, *, cursor: str | None = None, limit: int = 100) -> dict[str, Any]:
    """A task's comments, oldest first, paged by an opaque keyset cursor."""
    task = require_task(conn, ref)
    meta = board_meta(conn)
    after = resume_after(cursor, meta)[0] if cursor is not None else 0
    rows = conn.execute(
        "SELECT rowid AS _rowid, * FROM comments WHERE task_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
        (task["id"], after, limit + 1),
    ).fetchall()
    return page(rows, limit=limit, item=comment_to_dict, key=lambda row: board_key(meta, row["_rowid"]))
