"""``condition_marks``: one row per condition that holds (instant) or has fired (temporal).

Every row is derivable from state, so the table can be rebuilt at start; it exists so that a
restart neither repeats a fired condition nor loses one that holds. Plain SQL, ``?`` placeholders
and ``ON CONFLICT`` upserts: the same statements run on SQLite and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson


class Connectionish(Protocol):
    def execute(self, sql: str, params: Any = ..., /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Mark:
    type: str
    project_id: str
    subject: str
    task_id: str | None
    episode: str
    changes: dict[str, Any]
    since: str


#: The columns of a mark, in the order ``from_row`` reads them.
COLUMNS = "type, project_id, subject, task_id, episode, changes_json, since"


def from_row(row: Any) -> Mark:
    return Mark(row[0], row[1], row[2], row[3], row[4], orjson.loads(row[5]), row[6])


def put(conn: Connectionish, mark: Mark) -> None:
    conn.execute(
        f"INSERT INTO condition_marks ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (type, project_id, subject) DO UPDATE SET task_id = excluded.task_id,"
        " episode = excluded.episode, changes_json = excluded.changes_json, since = excluded.since",
        (mark.type, mark.project_id, mark.subject, mark.task_id, mark.episode, orjson.dumps(mark.changes).decode(),
         mark.since),
    )


def drop(conn: Connectionish, type_: str, project_id: str, subject: str) -> None:
    conn.execute(
        "DELETE FROM condition_marks WHERE type = ? AND project_id = ? AND subject = ?", (type_, project_id, subject)
    )


def get(conn: Connectionish, type_: str, project_id: str, subject: str) -> Mark | None:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM condition_marks WHERE type = ? AND project_id = ? AND subject = ?",
        (type_, project_id, subject),
    ).fetchone()
    return None if row is None else from_row(row)


def of_task(conn: Connectionish, task_id: str) -> dict[str, Mark]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM condition_marks WHERE task_id = ?", (task_id,)).fetchall()
    return {mark.type: mark for mark in map(from_row, rows)}


def every(conn: Connectionish, project_id: str | None = None) -> list[Mark]:
    """Every mark, in a stable order (the breaches list)."""
    if project_id is None:
        rows = conn.execute(f"SELECT {COLUMNS} FROM condition_marks ORDER BY since, project_id, type, subject")
    else:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM condition_marks WHERE project_id = ? ORDER BY since, type, subject", (project_id,)
        )
    return [from_row(row) for row in rows.fetchall()]

