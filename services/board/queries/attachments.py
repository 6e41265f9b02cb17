"""Attachments' metadata (the bytes are blobs on disk, read by the route)."""

from __future__ import annotations

from typing import Any

from shared.errors import not_found

from ..dialect import Connection, Row
from .paging import whole
from .tasks import require_task

ATTACHMENT_FIELDS = ("id", "task_id", "filename", "content_type", "size", "sha256", "created_at", "updated_at")


def attachment_to_dict(row: Row) -> dict[str, Any]:
    return {name: row[name] for name in ATTACHMENT_FIELDS}


def require_attachment(conn: Connection, attachment_id: str) -> Row:
    row: Row | None = conn.execute("SELECT * FROM attachments WHERE id = ?", (attachment_id,)).fetchone()
    if row is None:
        raise not_found("attachment", attachment_id)
    return row


def get_attachment(conn: Connection, attachment_id: str) -> dict[str, Any]:
    return attachment_to_dict(require_attachment(conn, attachment_id))


def blob_content(conn: Connection, sha256: str) -> bytes | None:
    """The bytes a database that keeps them (PostgreSQL) holds for a digest."""
    row = conn.execute("SELECT content FROM attachment_blobs WHERE sha256 = ?", (sha256,)).fetchone()
    return None if row is None else bytes(row[0])


def list_attachments(conn: Connection, ref: str) -> dict[str, Any]:
    task = require_task(conn, ref)
    rows = conn.execute(
        "SELECT * FROM attachments WHERE task_id = ? ORDER BY created_at, rowid", (task["id"],)
    ).fetchall()
    return whole([attachment_to_dict(row) for row in rows])
