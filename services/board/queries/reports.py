"""A task's delivery reports, oldest first."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, Row
from .activities import board_meta
from .paging import page
from .positions import board_key, resume_after
from .tasks import require_task


def report_to_dict(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "task_id": row["task_id"],
        "round": row["round"],
        "body": row["body"],
        "actor_kind": row["actor_kind"],
        "actor_id": row["actor_id"],
        "created_at": row["created_at"],
    }


def list_reports(
    conn: Connection, ref: str, *, round_: int | None = None, cursor: str | None = None, limit: int = 100
) -> dict[str, Any]:
    """A task's reports, oldest first, optionally of one round, paged by an opaque keyset cursor."""
    task = require_task(conn, ref)
    meta = board_meta(conn)
    clauses = ["task_id = ?", "rowid > ?"]
    params: list[Any] = [task["id"], resume_after(cursor, meta)[0] if cursor is not None else 0]
    if round_ is not None:
        clauses.append("round = ?")
        params.append(round_)
    rows = conn.execute(
        f"SELECT rowid AS _rowid, * FROM reports WHERE {' AND '.join(clauses)} ORDER BY rowid LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    return page(rows, limit=limit, item=report_to_dict, key=lambda row: board_key(meta, row["_rowid"]))
