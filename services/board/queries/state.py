"""The board's card state as JSON lines: the export of ``GET /api/v1/state`` (the git-portable form).

One object a line, in a fixed order of kinds and, inside a kind, of primary keys, encoded with
sorted keys: the same board gives the same bytes. The first line is the header, the last the
``end`` line with the count of each kind, so a file cut short at a line boundary is told from a
whole one. Everything that rebuilds the card state is here: archived tasks too (they are the
tombstones that keep old references resolvable) and every attachment's bytes (base64), read from
wherever the engine keeps them: files under the data directory (SQLite) or ``attachment_blobs``
rows of the same snapshot (PostgreSQL). The file is the same either way, so it moves a board
between engines. The activity log is not in it: it is the board's own history, not card state
(docs/operations.md).

A row's ``revision`` is left out: it is the revision of the board it was read from, and an import
stamps its own. A line is ``{"kind": …, "row": {…}}`` (an attachment's line adds ``data``, its
bytes as base64); ``*_json`` columns are written decoded under their name without the suffix.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from shared.errors import TaskloomError

from . import activities
from .attachments import blob_content

STATE_KIND: Final = "taskloom-state"
STATE_VERSION: Final = 1
END_KIND: Final = "end"


@dataclass(frozen=True)
class Kind:
    """One kind of line: the table it comes from, its columns, the order it is read in."""

    name: str
    table: str
    columns: tuple[str, ...]
    order: str
    #: Columns holding JSON text, written decoded (``meta_json`` → ``meta``).
    json_columns: tuple[str, ...] = ()

    def field(self, column: str) -> str:
        return column.removesuffix("_json") if column in self.json_columns else column


#: Every kind, in file order: what a line refers to always comes before it.
KINDS: Final[tuple[Kind, ...]] = (
    Kind("project", "projects",
         ("id", "name", "prefix", "workspace_path", "readme", "meta_json", "settings_json", "next_number",
          "created_at", "updated_at"),
         "id", ("meta_json", "settings_json")),
    Kind("label", "labels", ("project_id", "name", "use_count", "created_at", "last_used_at", "archived_at"),
         "project_id, name"),
    Kind("actor", "actors", ("kind", "id", "use_count", "first_seen_at", "last_seen_at"), "kind, id"),
    Kind("task", "tasks",
         ("id", "project_id", "number", "identifier", "title", "description", "kind", "priority", "status",
          "labels_json", "assignee_kind", "assignee_id", "reporter_kind", "reporter_id", "claimed_by_kind",
          "claimed_by", "claimed_at", "heartbeat_at", "delivered_by", "delivery_round", "acceptance_mode",
          "waiver_reason", "awaiting_reason", "blocked_reason", "idem", "meta_json", "version",
          "acceptance_revision", "terminal_at", "archived_at", "created_at", "updated_at", "status_since"),
         "project_id, number", ("labels_json", "meta_json")),
    Kind("comment", "comments", ("id", "task_id", "kind", "body", "actor_kind", "actor_id", "round", "created_at"),
         "id"),
    Kind("relation", "relations", ("id", "type", "source_id", "target_id", "created_at"), "id"),
    Kind("report", "reports", ("id", "task_id", "round", "body", "actor_kind", "actor_id", "created_at"), "id"),
    Kind("acceptance_item", "acceptance_items", ("id", "task_id", "position", "text", "created_at"), "id"),
    Kind("session", "agent_sessions",
         ("id", "task_id", "owner_kind", "owner_id", "seg", "phase", "status", "created_at", "updated_at",
          "closed_at"),
         "id"),
    Kind("attachment", "attachments",
         ("id", "task_id", "filename", "content_type", "size", "sha256", "created_at", "updated_at"), "id"),
)
KIND_BY_NAME: Final = {kind.name: kind for kind in KINDS}


def encode_line(record: dict[str, Any]) -> bytes:
    """One line of the file: sorted keys, no spaces, a newline (the same bytes for the same record)."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def header(conn: Any, exported_at: str) -> dict[str, Any]:
    return {
        "kind": STATE_KIND,
        "version": STATE_VERSION,
        "board_id": activities.board_meta(conn)["board_id"],
        "revision": activities.head(conn),
        "exported_at": exported_at,
    }


def _record(kind: Kind, row: Any) -> dict[str, Any]:
    """``{"kind": …, "row": {field: value}}``: the row's own fields apart from the line's kind
    (tasks, comments and actors have a ``kind`` column of their own)."""
    fields: dict[str, Any] = {}
    for column in kind.columns:
        value = row[column]
        if column in kind.json_columns:
            value = orjson.loads(value)
        fields[kind.field(column)] = value
    return {"kind": kind.name, "row": fields}


def _blob(root: Path, sha256: str) -> bytes:
    """An attachment's bytes; a missing blob ends the export (the file would not rebuild the card)."""
    path = root / sha256[:2] / sha256
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TaskloomError(
            "NOT_FOUND",
            f"the content of an attachment ({sha256}) is missing from {path.parent}; the export would be incomplete",
            details={"sha256": sha256},
            hint="restore the data directory's attachments/ folder from a backup",
        ) from None


def _blob_row(conn: Any, sha256: str) -> bytes:
    """An attachment's bytes kept in the database, read in the export's own snapshot."""
    content = blob_content(conn, sha256)
    if content is None:
        raise TaskloomError(
            "NOT_FOUND",
            f"the content of an attachment ({sha256}) is missing from the database; the export would be incomplete",
            details={"sha256": sha256},
        )
    return content


def export_lines(
    conn: Any, *, exported_at: str, attachments_dir: Path, blobs_in_database: bool = False
) -> Iterator[bytes]:
    """Every line of the export, read from one snapshot (the caller holds the read transaction).

    ``blobs_in_database``: the attachment bytes are ``attachment_blobs`` rows (the store says so),
    not files under ``attachments_dir``."""
    yield encode_line(header(conn, exported_at))
    counts: dict[str, int] = {}
    for kind in KINDS:
        counts[kind.name] = 0
        cursor = conn.execute(f"SELECT {', '.join(kind.columns)} FROM {kind.table} ORDER BY {kind.order}")
        while rows := cursor.fetchmany(500):
            for row in rows:
                record = _record(kind, row)
                if kind.name == "attachment":
                    content = _blob_row(conn, row["sha256"]) if blobs_in_database else _blob(attachments_dir, row["sha256"])
                    record["data"] = base64.b64encode(content).decode("ascii")
                counts[kind.name] += 1
                yield encode_line(record)
    yield encode_line({"kind": END_KIND, "counts": counts})
