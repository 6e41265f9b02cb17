"""A deadline another board process sends is applied only if it is not older than what armed the
card here (conditions/timer.py). Notifications from two processes can cross: process B's word
about a card, committed before this process's own later commit, may arrive after it. Applied, it
would replace the newer arming with one whose fire finds the state moved on — and the card's real
deadline would never fire.

The older word goes through the real path: a ``NOTIFY`` on the peer channel from another
connection, heard by the store's LISTEN thread.
"""

from __future__ import annotations

import time

import psycopg

from services.board import postgres_store
from services.board.commands import projects, tasks
from services.board.conditions.signals import Deadlines, Signal
from services.board.conditions.timer import ConditionsEngine, peer_notes
from services.board.postgres_store import PEER_CHANNEL, PostgresStore
from services.board.store import Actor
from shared import events
from tests.postgres.sealing import seal_of
from tests.support.waiting import async_wait_until

ANN = Actor("human", "ann")
TIMEOUT_S = 2


async def test_an_older_deadline_from_another_process_does_not_replace_a_newer_one(postgres_url: str) -> None:
    postgres_store.migrate(postgres_url)
    store = PostgresStore(postgres_url)
    store.open()
    engine = ConditionsEngine(store, claim_fresh_seconds=600)
    heard: list[Signal] = []
    engine.add_signal_listener(heard.append)
    await engine.start()
    try:
        settings = {"monitors": {"max_time_in_status": {"in_progress": TIMEOUT_S}}}
        await store.command(projects.create_project, ANN, id="demo", settings=settings)
        card, _ = await store.command(tasks.create_task, ANN, project="demo", title="timed")
        claimed = await store.command(tasks.claim_task, ANN, card["id"])
        assert engine.armed == 2  # its status timeout and its claim's staleness
        # Another process's word about the card from before the claim: a deadline of an episode
        # the card has left, due at once.
        older = peer_notes([Deadlines(card["id"], ((events.STATUS_TIMEOUT, "todo-episode", time.time()),))],
                           claimed["revision"] - 1)
        seal = seal_of(postgres_url)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for note in older:
                conn.execute("SELECT pg_notify(%s, %s)", (PEER_CHANNEL, seal.seal(f"another-process {note}")))

        async def timed_out() -> bool:
            return any(signal.type == events.STATUS_TIMEOUT for signal in heard)

        await async_wait_until(timed_out, timeout=TIMEOUT_S + 10, what="the claim's status_timeout")
        assert [s.task_id for s in heard if s.type == events.STATUS_TIMEOUT] == [card["id"]]
    finally:
        await engine.stop()
        store.close()
