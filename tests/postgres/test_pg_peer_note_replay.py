"""A login that cannot read the boards' secrets replays a sealed peer note: the other board
processes drop it (they heard the old signal again, once per replay) (services/board/postgres_store.py ``_listen``,
services/board/notification_seal.py).

``taskloom_peer`` payloads are sealed (HMAC over the payload), so a role without ``board_secrets``
cannot invent one. But it can ``LISTEN taskloom_peer``, keep what process A sent with a commit,
and ``pg_notify`` the very same sealed text again, as often as it likes: the seal still matches,
the origin is A's (so B does not drop it as its own), nothing in it says it was already heard, and
B tells its streams the signal once more, with its old ``at``. docs/conditions.md §3: "a stream
open on any process hears every signal once"; docs/operations.md: sealing is there so that a role
that can only connect cannot "put invented events into every live stream".
Real cluster, real ``taskd`` processes, real HTTP; the attacker is a plain client session.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import psycopg
from psycopg import sql

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient
from tests.support.postgres import Cluster
from tests.support.signals import RawStream, of

SNOOP = "snoop"
REPLAYS = 3


def snoop_url(postgres_url: str, pg_cluster: Cluster) -> str:
    """A login with CONNECT and nothing else: it can neither read ``board_secrets`` nor seal."""
    dbname = postgres_url.rsplit("/", 1)[1].split("?", 1)[0]
    role = f"{SNOOP}_{dbname}"  # roles belong to the cluster, which other tests share
    with psycopg.connect(pg_cluster.admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'snoop'").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(dbname), sql.Identifier(role)))
    return f"postgresql://{role}:snoop@127.0.0.1:{pg_cluster.port}/{dbname}"


async def test_a_replayed_peer_note_is_not_heard_again_on_the_other_process(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    attacker = psycopg.connect(snoop_url(postgres_url, pg_cluster), autocommit=True)
    try:
        try:
            attacker.execute("SELECT value FROM board_secrets")
            raise AssertionError("the attacker can read the key: the test proves nothing")
        except psycopg.errors.InsufficientPrivilege:
            pass
        attacker.execute("LISTEN taskloom_peer")
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(a.url, a.token, session)
            settings = {"wip_limits": {"in_progress": 1}}
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": settings})).status == 201
            cards = [(await on_a.post("/api/v1/tasks", {"project": "demo", "title": f"card {n}"})).body for n in range(2)]
            on_stream_b = await RawStream.open(session, b.url, b.token)

            for card in cards:
                reply = await on_a.post(f"/api/v1/tasks/{card['id']}/claim", {})
                assert reply.status == 200, reply.body
            heard = await on_stream_b.signal("wip_exceeded")

            # What A sent with that commit, as the attacker's session received it.
            captured: list[str] = []
            deadline = time.monotonic() + 10
            while not any("wip_exceeded" in payload for payload in captured):
                assert time.monotonic() < deadline, f"the attacker never saw A's note: {captured}"
                captured += [note.payload for note in attacker.notifies(timeout=0.2, stop_after=1)]
            note = next(payload for payload in captured if "wip_exceeded" in payload)

            for _ in range(REPLAYS):
                attacker.execute("SELECT pg_notify('taskloom_peer', %s)", (note,))

            # A later commit of A's: B reads notifications in commit order, so once its signal is
            # here, whatever the replays did has been done.
            reply = await on_a.post(f"/api/v1/tasks/{cards[0]['id']}/move", {"to": "todo"})
            assert reply.status == 200, reply.body
            await on_stream_b.signal("wip_cleared")

            exceeded = of(on_stream_b, "wip_exceeded")
            assert exceeded == [heard], (
                f"B's stream heard A's one wip_exceeded {len(exceeded)} times: a login without the key"
                f" replayed A's sealed note {REPLAYS} times and B took each as new"
            )
            on_stream_b.close()
    finally:
        attacker.close()
        a.stop()
        b.stop()
