"""One card's snapshot: everything its brief shows, read in one transaction (SPEC §8)."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, placeholders
from .activities import ACTIVITY_COLUMNS, to_frame
from .activities import floor as log_floor
from .tasks import require_task, task_resource

RELATION_EVENTS = ("relation_added", "relation_removed")


def _rows(conn: Connection, sql: str, task_id: str) -> list[dict[str, Any]]:
    return [dict(row) for row in conn.execute(sql, (task_id,))]


def card_snapshot(conn: Connection, ref: str) -> dict[str, Any]:
    """Everything the brief of one card shows, in display order (creation order, rowid breaking ties)."""
    # The task as the API answers it: its ``blocked_by`` is the one rule's (conditions/rules.py).
    task = task_resource(conn, require_task(conn, ref))
    task_id = task["id"]
    relations = [
        dict(row)
        for row in conn.execute(
            "SELECT id, type, source_id, target_id, created_at FROM relations"
            " WHERE source_id = ?1 OR target_id = ?1 ORDER BY type, created_at, rowid",
            (task_id,),
        )
    ]
    activities = [
        to_frame(row)
        for row in conn.execute(
            f"SELECT {ACTIVITY_COLUMNS} FROM task_activities WHERE task_id = ? ORDER BY id", (task_id,)
        )
    ]
    # Other cards are named by identifier; collect every task id the relations and their rows name.
    mentioned = {task_id}
    for rel in relations:
        mentioned.update((rel["source_id"], rel["target_id"]))
    for row in activities:
        if row["event"] in RELATION_EVENTS:
            mentioned.update(str(row["changes"].get(end)) for end in ("source", "target") if row["changes"].get(end))
    identifiers = {
        row["id"]: row["identifier"]
        for row in conn.execute(
            f"SELECT id, identifier FROM tasks WHERE id IN ({placeholders(sorted(mentioned))})",
            sorted(mentioned),
        )
    }
    return {
        "task": task,
        "acceptance": _rows(
            conn,
            "SELECT id, position, text, created_at FROM acceptance_items WHERE task_id = ? ORDER BY position, rowid",
            task_id,
        ),
        "comments": _rows(
            conn,
            "SELECT id, kind, body, actor_kind, actor_id, round, created_at FROM comments"
            " WHERE task_id = ? ORDER BY created_at, rowid",
            task_id,
        ),
        "relations": relations,
        "reports": _rows(
            conn,
            "SELECT id, round, body, actor_kind, actor_id, created_at FROM reports"
            " WHERE task_id = ? ORDER BY round, created_at, rowid",
            task_id,
        ),
        "sessions": _rows(
            conn,
            "SELECT id, owner_kind, owner_id, seg, phase, status, created_at, updated_at, closed_at FROM agent_sessions"
            " WHERE task_id = ? ORDER BY created_at, rowid",
            task_id,
        ),
        "attachments": _rows(
            conn,
            "SELECT id, filename, content_type, size, sha256, created_at, updated_at FROM attachments"
            " WHERE task_id = ? ORDER BY created_at, rowid",
            task_id,
        ),
        "activities": activities,
        "identifiers": identifiers,
        # Retention removed this card's earliest rows (its task_created among them): History says so.
        "archived_through": _archived_through(conn, activities),
    }


def _archived_through(conn: Any, rows: list[dict[str, Any]]) -> int | None:
    floor = log_floor(conn)
    if floor and not any(row["event"] == "task_created" for row in rows):
        return floor
    return None
