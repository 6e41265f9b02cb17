"""The log reader below a raised floor on PostgreSQL: the same rule as on SQLite
(tests/integration/test_events_reader_below_floor.py), the reader moving to the floor.

Another writer on the database that sends no ``NOTIFY`` (a script, a ``psql`` session) is read
only at the reader's next wake; a compaction committed before then leaves the reader below the
floor, as a slow poll does on SQLite.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import psycopg

from services.board.store import utc_now
from tests.integration import test_events_reader_below_floor as on_sqlite
from tests.support.board import RunningBoard

#: One activity row as a script writes it: the revision its insert produces, and no NOTIFY.
INSERT_ROW = (
    "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision, created_at)"
    " SELECT %s, 'demo', 'codex', 'elsewhere', 'task_updated', %s, revision + 1, %s"
    " FROM global_revision WHERE singleton = 1 RETURNING revision"
)


def rows_from_a_script(url: str) -> on_sqlite.WriteElsewhere:
    async def write(board: RunningBoard, task_id: str, count: int) -> list[int]:
        def insert() -> list[int]:
            with psycopg.connect(url, autocommit=True) as conn:
                revisions = []
                for n in range(count):
                    changes = orjson.dumps({"fields": ["meta"], "after": {"meta": {"n": n}}}).decode()
                    row = conn.execute(INSERT_ROW, (task_id, changes, utc_now())).fetchone()
                    assert row is not None
                    revisions.append(int(row[0]))
                return revisions

        return await asyncio.to_thread(insert)

    return write


async def test_a_floor_raised_past_unread_rows_cuts_only_the_streams_below_it(tmp_path: Path, postgres_url: str) -> None:
    """On PostgreSQL too, the reader moves to the floor: streams above it follow live, those below
    it close and are answered 410 when they reconnect."""
    await on_sqlite.a_floor_past_unread_rows_moves_the_reader_on(
        tmp_path, rows_from_a_script(postgres_url), database=postgres_url
    )
