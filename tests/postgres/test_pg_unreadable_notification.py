"""A login that can only connect sends another board process a notification whose "seal" is not
ASCII: it is dropped like any unsealed one, and the listener goes on. It ended that process's LISTEN
thread for good (``hmac.compare_digest`` of two ``str`` raises TypeError for non-ASCII text, and
``_listen`` caught only ``psycopg.Error``): no more signals, deadlines or token cues from the
other processes, and no reconnect to resync.

Real cluster, real ``taskd`` processes, real HTTP.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import psycopg
import pytest

from tests.postgres.support_taskd import board_process
from tests.postgres.test_pg_peer_note_replay import snoop_url
from tests.support.board import BoardClient
from tests.support.postgres import Cluster
from tests.support.signals import RawStream


# The ASCII forgery is the control: dropped as ``notification_unsealed``, the listener goes on.
@pytest.mark.parametrize("forged", ["0123 not-a-seal", "\u00e9 not-a-seal"], ids=["ascii", "non-ascii"])
async def test_an_unsealed_note_is_dropped_and_the_listener_goes_on(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster, forged: str
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    attacker = psycopg.connect(snoop_url(postgres_url, pg_cluster), autocommit=True)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(a.url, a.token, session)
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": {"wip_limits": {"in_progress": 1}}})).status == 201
            cards = [(await on_a.post("/api/v1/tasks", {"project": "demo", "title": f"card {n}"})).body for n in range(2)]
            on_stream_b = await RawStream.open(session, b.url, b.token)

            # One forged note; B reads notifications in commit order, so it meets this one first.
            attacker.execute("SELECT pg_notify('taskloom_peer', %s)", (forged,))

            for card in cards:
                reply = await on_a.post(f"/api/v1/tasks/{card['id']}/claim", {})
                assert reply.status == 200, reply.body
            # A's commit's signal reaches B only by B's LISTEN thread.
            await on_stream_b.signal("wip_exceeded", timeout=10)
            on_stream_b.close()
    finally:
        attacker.close()
        a.stop()
        b.stop()
