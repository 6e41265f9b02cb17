"""Reading the activity log: head, replay by revision, filtered pages, and the frame shape.

Every function takes a read connection (``store.query(fn, ...)``) so one call is one snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from shared.errors import TaskloomError
from shared.limits import MAX_CHANGES_BYTES, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX

from ..dialect import Connection, Row
from .paging import page
from .positions import board_key, resume_after
from .projects import require_project

ACTIVITY_COLUMNS = "id, task_id, project_id, actor_kind, actor_id, event, changes_json, revision, created_at"
REPLAY_PAGE = 500
DEFAULT_LIMIT = PAGE_LIMIT_DEFAULT
MAX_LIMIT = PAGE_LIMIT_MAX


def _changes(text: str) -> Any:
    """A row's ``changes``; one larger than a frame allows (written before the bound existed) is
    replaced by a marker, so it cannot stall every stream at its revision (events are signals)."""
    # A character is 1–4 bytes of UTF-8: only a long text needs encoding to be measured.
    if len(text) * 4 > MAX_CHANGES_BYTES and len(text.encode()) > MAX_CHANGES_BYTES:
        return {"omitted": True}
    return orjson.loads(text)


def to_frame(row: Row | Mapping[str, Any]) -> dict[str, Any]:
    """The activity frame of SPEC §6.1; the same shape on every surface."""
    return {
        "id": row["id"],
        "revision": row["revision"],
        "task_id": row["task_id"],
        "project_id": row["project_id"],
        "actor_kind": row["actor_kind"],
        "actor_id": row["actor_id"],
        "event": row["event"],
        "changes": _changes(row["changes_json"]),
        "created_at": row["created_at"],
    }


def head(conn: Connection) -> int:
    revision: int = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()[0]
    return revision


def board_meta(conn: Connection) -> dict[str, str]:
    return {row["key"]: row["value"] for row in conn.execute("SELECT key, value FROM board_meta")}


def floor(conn: Connection) -> int:
    """The retention floor: rows at or below it were compacted away (services/board/compaction.py)."""
    return int(board_meta(conn).get("floor", "0"))


def cursor_expired(after: int | None, floor_revision: int) -> TaskloomError:
    return TaskloomError(
        "CURSOR_EXPIRED",
        f"revisions up to {floor_revision} have been compacted; cursor {after} cannot be resumed",
        details={"after": after, "floor": floor_revision},
        hint="rescan board state, then follow from /api/v1/meta's revision",
    )


#: ``board_meta`` key: the lost futures of the restores this board went through, a JSON list of
#: ``[restored, replaced_head]`` (services/board/backup.py); no revision in them is ever written.
RESTORE_GAPS_KEY = "restore_gaps"


def restore_gaps(meta: Mapping[str, str]) -> list[tuple[int, int]]:
    return [(int(restored), int(replaced)) for restored, replaced in orjson.loads(meta.get(RESTORE_GAPS_KEY, "[]"))]


def cursor_from_replaced_history(after: int, floor_revision: int, restored: int, replaced_head: int) -> TaskloomError:
    return TaskloomError(
        "CURSOR_EXPIRED",
        f"cursor {after} is from a history this board no longer has: it was restored from a backup of revision "
        f"{restored}, and revisions {restored + 1} to {replaced_head} of the history it replaced are not in it",
        details={"after": after, "floor": floor_revision, "reason": "restored",
                 "restored_revision": restored, "replaced_head": replaced_head},
        hint="what this cursor saw may have been undone: rescan board state, then follow from /api/v1/meta's revision",
    )


def check_not_expired(conn: Connection, after: int) -> None:
    """A reader resuming below the floor would miss the rows compacted away, and one resuming
    inside a restore's lost future would keep state the restore undid: 410, never a gap."""
    _check_position(board_meta(conn), after)


def _check_position(meta: Mapping[str, str], after: int) -> None:
    current = int(meta.get("floor", "0"))
    if after < current:
        raise cursor_expired(after, current)
    for restored, replaced_head in restore_gaps(meta):
        if restored < after <= replaced_head:
            raise cursor_from_replaced_history(after, current, restored, replaced_head)


def replay_after(conn: Connection, cursor: int, limit: int = REPLAY_PAGE) -> list[Row]:
    """Streamable rows with ``revision > cursor`` in revision order (NULL revisions never stream)."""
    return conn.execute(
        f"SELECT {ACTIVITY_COLUMNS} FROM task_activities WHERE revision > ? ORDER BY revision LIMIT ?",
        (cursor, limit),
    ).fetchall()


def list_activities(
    conn: Connection,
    *,
    after: int | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
    order: str = "asc",
    project: str | None = None,
    task_id: str | None = None,
    events: list[str] | None = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """A keyset page of activities by id; ``after`` filters by revision, ``cursor`` continues a page."""
    clauses: list[str] = []
    params: list[Any] = []
    meta = board_meta(conn)
    if after is not None:
        _check_position(meta, after)
    descending = order == "desc"
    position = resume_after(cursor, meta)[0] if cursor is not None else None
    if position is not None and not descending:
        # An ascending page continues after a row id; rows past it that were compacted away since
        # the last page would be skipped without a word.
        if position < int(meta.get("floor_id", "0")):
            raise cursor_expired(after, int(meta.get("floor", "0")))
    if after is not None:
        clauses.append("revision > ?")
        params.append(after)
    if project is not None:
        require_project(conn, project)
        clauses.append("project_id = ?")
        params.append(project)
    if task_id is not None:
        clauses.append("task_id = ?")
        params.append(task_id)
    if events:
        clauses.append(f"event IN ({', '.join('?' for _ in events)})")
        params.extend(events)
    if actor is not None:
        clauses.append("actor_id = ?")
        params.append(actor)
    if position is not None:
        clauses.append("id < ?" if descending else "id > ?")
        params.append(position)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    direction = "DESC" if descending else "ASC"
    rows = conn.execute(
        f"SELECT {ACTIVITY_COLUMNS} FROM task_activities {where} ORDER BY id {direction} LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    return page(rows, limit=limit, item=to_frame, key=lambda row: board_key(meta, row["id"]))
