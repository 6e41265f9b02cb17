"""The LISTEN connection of board process B drops and comes back; a deadline process A armed
meanwhile is armed on B too (it was not: once A stopped, the condition never fired)
(services/board/postgres_store.py ``_listen``, services/board/conditions/timer.py).

docs/conditions.md §3: "every process arms every deadline: one armed by a process that then stops
still fires, on time, from another". Deadlines reach the other processes only as ``taskloom_peer``
notifications, which PostgreSQL delivers to the sessions listening at COMMIT. When B's listener
reconnects (an idle-session killer, a network blip, an operator's ``pg_terminate_backend``, a
server restart where A's writer is back before B's listener), it reads the head so the log
reader catches up, but nothing re-derives what the missed commits armed: B's timer never hears of
A's deadline. Here the gap is made deterministic by holding new connections off
(``ALLOW_CONNECTIONS false``) while A commits; every part is real (cluster, two ``taskd``, HTTP).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import aiohttp
import psycopg
from psycopg import sql

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient, TaskdProcess
from tests.support.postgres import Cluster
from tests.support.waiting import async_wait_until, wait_until

TIMEOUT_S = 4
#: What B's LISTEN thread last ran once it is listening (``_listen``: the head, for the log reader).
LISTENER_LAST_QUERY = "SELECT revision FROM global_revision WHERE singleton = 1"


def local_ports(process: TaskdProcess, server_port: int) -> set[int]:
    """The local ports of ``process``'s TCP connections to the server (from /proc)."""
    assert process.process is not None
    pid = process.process.pid
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if found := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(found[1])
    ports = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.split(":")[1], 16) == server_port:
                ports.add(int(local.split(":")[1], 16))
    return ports


async def test_a_deadline_armed_while_the_listener_was_away_still_fires_once_its_process_stops(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster
) -> None:
    dbname = postgres_url.rsplit("/", 1)[1].split("?", 1)[0]
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    admin = psycopg.connect(pg_cluster.admin_url, autocommit=True)
    watcher = psycopg.connect(postgres_url, autocommit=True)
    try:
        async with aiohttp.ClientSession() as session:
            on_a = BoardClient(a.url, a.token, session)
            settings = {"monitors": {"max_time_in_status": {"in_progress": TIMEOUT_S}}}
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": settings})).status == 201
            card = (await on_a.post("/api/v1/tasks", {"project": "demo", "title": "watched"})).body

            def b_listener() -> list[int]:
                ports = local_ports(b, pg_cluster.port)
                return [pid for pid, port in watcher.execute(
                    "SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s AND state = 'idle' AND query = %s",
                    (dbname, LISTENER_LAST_QUERY)).fetchall() if port in ports]

            listener = wait_until(b_listener, what="B's LISTEN connection")
            assert len(listener) == 1, listener

            # B's listener goes away and cannot come back for the moment.
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
            admin.execute("SELECT pg_terminate_backend(%s)", (listener[0],))
            wait_until(lambda: not watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (listener[0],)).fetchone(),
                       what="B's listener to be gone")

            reply = await on_a.post(f"/api/v1/tasks/{card['id']}/claim", {})
            assert reply.status == 200, reply.body
            claimed = time.monotonic()
            a.stop(signal.SIGKILL)
            assert time.monotonic() - claimed < TIMEOUT_S, "A outlived the deadline: the test proves nothing"

            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))
            wait_until(lambda: b_listener() not in ([], listener), timeout=10, what="B's listener to come back")

            def fired() -> bool:
                return bool(watcher.execute(
                    "SELECT 1 FROM condition_marks WHERE type = 'status_timeout' AND task_id = %s", (card["id"],)
                ).fetchone())

            async def fired_async() -> bool:
                return fired()

            try:
                await async_wait_until(fired_async, timeout=TIMEOUT_S + 8, what="status_timeout")
            except AssertionError as exc:
                raise AssertionError(
                    f"A armed a {TIMEOUT_S}s status_timeout while B's listener was reconnecting, then stopped;"
                    f" B's listener came back and B never fired it ({exc})"
                ) from None
    finally:
        with psycopg.connect(pg_cluster.admin_url, autocommit=True) as again:
            again.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))
        admin.close()
        watcher.close()
        if a.process is not None and a.process.poll() is None:
            a.stop()
        b.stop()
