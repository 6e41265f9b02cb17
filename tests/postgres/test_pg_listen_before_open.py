"""A board's listener may start before its store has migrated a new database: it waits, quietly.

The board adds its log reader as a commit listener before the store's ``open`` runs the
migrations, so on a database no process has opened yet the listener finds no ``board_secrets``
table. That is the normal start of a new board, not a lost connection: nothing is logged as one,
and the listener hears commits once the database is opened.
"""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from services.board.commands import projects
from services.board.postgres_store import PostgresStore
from services.board.store import Actor
from tests.support.waiting import async_wait_until

ACTOR = Actor("human", "ada")


async def test_a_listener_started_before_the_first_migration_waits_without_a_warning(postgres_url: str) -> None:
    listening = PostgresStore(postgres_url)
    writer = PostgresStore(postgres_url)
    heard: list[int] = []
    with capture_logs() as logs:
        listening.add_commit_listener(heard.append)
        try:
            async def waited() -> bool:
                return listening.listen_waits >= 1

            await async_wait_until(waited, timeout=10, what="the listener to find the database not opened yet")
            await asyncio.to_thread(listening.open)
            await asyncio.to_thread(writer.open)
            # Written by another store, so only the listener's LISTEN can tell ``listening`` of it.
            _, revisions = await asyncio.to_thread(writer.run_command, projects.create_project, ACTOR,
                                                   id="demo", name="Demo")
            async def told() -> bool:
                return revisions[-1] in heard

            await async_wait_until(told, timeout=10, what="the listener to hear the other store's commit")
        finally:
            listening.close()
            writer.close()
    warnings = [entry for entry in logs if entry["log_level"] in ("warning", "error")]
    assert warnings == [], warnings
