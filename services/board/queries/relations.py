"""A task's relations in both directions, each with the task at the other end."""

from __future__ import annotations

from typing import Any

from ..dialect import Connection, Row
from .paging import whole
from .tasks import require_task


def relation_to_dict(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "type": row["type"],
        "source_id": row["source_id"],
        "target_id": row["target_id"],
        "created_at": row["created_at"],
    }


def list_relations(conn: Connection, ref: str, *, type: str | None = None) -> dict[str, Any]:
    """Both directions of ``ref``'s relations, each with the task at the other end."""
    task = require_task(conn, ref)
    rows = conn.execute(
        "SELECT r.*, o.identifier AS other_identifier, o.title AS other_title, o.status AS other_status"
        " FROM relations r JOIN tasks o"
        "   ON o.id = CASE WHEN r.source_id = :me THEN r.target_id ELSE r.source_id END"
        " WHERE (r.source_id = :me OR r.target_id = :me) AND (CAST(:type AS TEXT) IS NULL OR r.type = :type)"
        " ORDER BY r.created_at, r.rowid",
        {"me": task["id"], "type": type},
    ).fetchall()
    items = []
    for row in rows:
        outgoing = row["source_id"] == task["id"]
        item = relation_to_dict(row)
        item["direction"] = "outgoing" if outgoing else "incoming"
        item["other"] = {
            "id": row["target_id"] if outgoing else row["source_id"],
            "identifier": row["other_identifier"],
            "title": row["other_title"],
            "status": row["other_status"],
        }
        items.append(item)
    return whole(items)
