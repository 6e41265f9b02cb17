"""A deadline that comes due while the PostgreSQL server is away (docs/conditions.md §2, "At the
deadline"; docs/operations.md, "Faults"). Its fire transaction fails; it is tried again a second
later, as a client is told by ``Retry-After: 1``, and fires once the server is back. It used to be
tried again at once, each failure with its traceback in the log: about 500 times a second in every
board process, megabytes of log a second for as long as the server stayed away."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import aiohttp

from tests.postgres.support_taskd import board_process
from tests.support.board import BoardClient
from tests.support.postgres import Cluster, cut_off, let_back
from tests.support.waiting import async_wait_until


def fire_failures(log: Path) -> list[datetime]:
    """When the process's log says a fire transaction failed, in order."""
    times = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.startswith("{") and (record := json.loads(line)).get("event") == "condition_fire_failed":
            times.append(datetime.fromisoformat(record["timestamp"]))
    return times


async def test_a_deadline_due_while_the_server_is_away_is_tried_each_second_then_fires_once(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster,
) -> None:
    a = board_process(tmp_path, "a", postgres_url)
    b = board_process(tmp_path, "b", postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            on_a, on_b = BoardClient(a.url, a.token, session), BoardClient(b.url, b.token, session)
            settings = {"monitors": {"max_time_in_status": {"in_progress": 1}}, "persist_conditions": ["status_timeout"]}
            assert (await on_a.post("/api/v1/projects", {"id": "demo", "settings": settings})).status == 201
            card = (await on_a.post("/api/v1/tasks", {"project": "demo", "title": "due while away"})).body
            claimed = await on_a.as_actor("claude", "worker").post(f"/api/v1/tasks/{card['id']}/claim", {})
            assert claimed.status == 200, claimed.body
            cut_off(pg_cluster.admin_url, postgres_url)  # before the deadline, a second away
            try:
                for process in (a, b):  # both armed it (b from a's commit): both try, neither spins

                    async def two_failures(log: Path = process.log_path) -> list[datetime] | None:
                        failures = fire_failures(log)
                        return failures if len(failures) >= 2 else None

                    failures = await async_wait_until(two_failures, timeout=20, what="two failed fires")
                    gap = (failures[1] - failures[0]).total_seconds()
                    assert gap >= 0.5, f"tried again {gap * 1000:.1f} ms after a failure, not a second"
            finally:
                let_back(pg_cluster.admin_url, postgres_url)

            async def breached() -> list[dict[str, str]] | None:
                reply = await on_b.get("/api/v1/breaches?project=demo")
                return reply.body["items"] if reply.status == 200 and reply.body["items"] else None

            items = await async_wait_until(breached, timeout=20, what="the timeout to fire once the server is back")
            assert [(item["type"], item["task_id"]) for item in items] == [("status_timeout", card["id"])]
            rows = (await on_a.get(f"/api/v1/tasks/{card['id']}/activities")).body["items"]
            assert [row["event"] for row in rows].count("status_timeout") == 1, "fired once, by one process"
    finally:
        a.stop()
        b.stop()
