"""Store-level write throughput: ``move`` and ``update`` through the store seam, against the same
statements as a bare ``sqlite3`` loop on the same file, pragmas and transaction shape.

The raw loop is the floor of what SQLite costs here (BEGIN IMMEDIATE, the task UPDATE, the
revision read, the activity INSERT, COMMIT); the seam adds validation, the reloads a command does
and the Python around it. Goal: the seam keeps at least half the raw rate. The last two columns
go through the writer thread as HTTP handlers do: one command at a time (the thread hop alone),
and 16 callers at once (the writer groups what queues up into one transaction).

    .venv/bin/python -m bench store
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from services.board.commands import projects, tasks
from services.board.sqlite_store import SqliteStore, connect
from services.board.store import Actor, utc_now
from shared import events

COMMAND = ".venv/bin/python -m bench store"
TASKS = 200
SECONDS = 4.0
SLICES = 16
WARMUP_OPS = 200
GOAL_RATIO = 0.5
#: Concurrent callers of ``store.command`` in the group-commit column, as in the HTTP bench.
CLIENTS = 16
ACTOR = Actor("claude", "bench")

MOVE_SQL = (
    "UPDATE tasks SET status = ?, version = version + 1, updated_at = ?, claimed_by = NULL,"
    " claimed_by_kind = NULL, claimed_at = NULL, heartbeat_at = NULL, awaiting_reason = NULL,"
    " blocked_reason = NULL WHERE id = ?"
)
UPDATE_SQL = "UPDATE tasks SET title = ?, version = version + 1, updated_at = ? WHERE id = ?"
NEXT_REVISION_SQL = "SELECT revision + 1 FROM global_revision WHERE singleton = 1"
INSERT_ACTIVITY_SQL = (
    "INSERT INTO task_activities (task_id, project_id, actor_kind, actor_id, event, changes_json, revision,"
    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass
class Tally:
    """Operations done, and the wall and CPU seconds they took."""

    ops: int = 0
    wall: float = 0.0
    cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.ops / self.wall

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.ops * 1e6


def run_slice(step: Callable[[int], Any], tally: Tally, seconds: float) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while time.perf_counter() < deadline:
        for _ in range(25):
            step(tally.ops)
            tally.ops += 1
    tally.wall += time.perf_counter() - wall
    tally.cpu += time.process_time() - cpu


def compare(*steps: Callable[[int], Any], seconds: float = SECONDS) -> list[Tally]:
    """Interleave short slices of each step so a busy machine slows them all alike."""
    for step in steps:
        for i in range(WARMUP_OPS):
            step(i)
    tallies = [Tally() for _ in steps]
    for _ in range(SLICES):
        for step, tally in zip(steps, tallies):
            run_slice(step, tally, seconds / SLICES)
    return tallies


class Bench:
    def __init__(self, folder: Path) -> None:
        self.store = SqliteStore(folder / "board.sqlite")
        self.store.open()
        self.store.run_command(projects.create_project, ACTOR, id="bench", name="Bench")
        self.ids = [
            self.store.run_command(tasks.create_task, ACTOR, project="bench", title=f"task {n}")[0][0]["id"]
            for n in range(TASKS)
        ]
        self.status = {task_id: "todo" for task_id in self.ids}
        self.raw = connect(self.store.path)

    def close(self) -> None:
        self.raw.close()
        self.store.close()

    def _next_move(self, i: int) -> tuple[str, str, str]:
        task_id = self.ids[i % TASKS]
        before = self.status[task_id]
        after = "backlog" if before == "todo" else "todo"
        self.status[task_id] = after
        return task_id, before, after

    # -- through the seam ---------------------------------------------------------------------

    def store_move(self, i: int) -> None:
        task_id, _, after = self._next_move(i)
        self.store.run_command(tasks.move_task, ACTOR, task_id, to=after)

    def store_update(self, i: int) -> None:
        self.store.run_command(tasks.update_task, ACTOR, self.ids[i % TASKS], title=f"title {i}")

    # -- the same statements, bare ------------------------------------------------------------

    def _raw(self, task_id: str, sql: str, params: tuple[Any, ...], event: str, changes: dict[str, Any], now: str) -> None:
        conn = self.raw
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(sql, params)
            revision = conn.execute(NEXT_REVISION_SQL).fetchone()[0]
            conn.execute(
                INSERT_ACTIVITY_SQL,
                (task_id, "bench", ACTOR.kind, ACTOR.id, event, orjson.dumps(changes).decode(), revision, now),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def raw_move(self, i: int) -> None:
        task_id, before, after = self._next_move(i)
        now = utc_now()
        changes = events.task_moved(from_=before, to=after, delivery_round=1)
        self._raw(task_id, MOVE_SQL, (after, now, task_id), events.TASK_MOVED, changes, now)

    def raw_update(self, i: int) -> None:
        task_id = self.ids[i % TASKS]
        now = utc_now()
        title = f"title {i}"
        changes = events.task_updated(fields=["title"], before={"title": "x"}, after={"title": title})
        self._raw(task_id, UPDATE_SQL, (title, now, task_id), events.TASK_UPDATED, changes, now)

    # -- through the seam with its thread hop, as the HTTP handlers call it ---------------------

    def hop_rate(self, workload: str) -> float:
        async def run() -> float:
            async def step(i: int) -> None:
                if workload == "move":
                    task_id, _, after = self._next_move(i)
                    await self.store.command(tasks.move_task, ACTOR, task_id, to=after)
                else:
                    await self.store.command(tasks.update_task, ACTOR, self.ids[i % TASKS], title=f"hop {i}")

            for i in range(WARMUP_OPS):
                await step(i)
            done, started = 0, time.perf_counter()
            while time.perf_counter() - started < SECONDS / 2:
                await step(WARMUP_OPS + done)
                done += 1
            return done / (time.perf_counter() - started)

        return asyncio.run(run())

    def group_rate(self, workload: str, clients: int = CLIENTS) -> tuple[float, float]:
        """``clients`` coroutines awaiting ``store.command`` at once, each on its own tasks: the
        writer groups what queues up into one transaction. Returns (ops/s, commands per batch)."""
        async def run() -> tuple[float, float]:
            stop_at = 0.0
            done = 0

            async def client(k: int) -> None:
                nonlocal done
                mine = self.ids[k::clients]
                n = 0
                while time.perf_counter() < stop_at:
                    task_id = mine[n % len(mine)]
                    if workload == "move":
                        after = "backlog" if self.status[task_id] == "todo" else "todo"
                        self.status[task_id] = after
                        await self.store.command(tasks.move_task, ACTOR, task_id, to=after)
                    else:
                        await self.store.command(tasks.update_task, ACTOR, task_id, title=f"group {k} {n}")
                    n += 1
                    done += 1

            stop_at = time.perf_counter() + 0.5
            await asyncio.gather(*(client(k) for k in range(clients)))  # warm-up
            done, batches, commands = 0, self.store.batches, self.store.batched_commands
            started = time.perf_counter()
            stop_at = started + SECONDS / 2
            await asyncio.gather(*(client(k) for k in range(clients)))
            elapsed = time.perf_counter() - started
            per_batch = (self.store.batched_commands - commands) / max(1, self.store.batches - batches)
            return done / elapsed, per_batch

        return asyncio.run(run())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as folder:
        bench = Bench(Path(folder))
        try:
            results = []
            for workload in ("move", "update"):
                raw, seam = compare(getattr(bench, f"raw_{workload}"), getattr(bench, f"store_{workload}"))
                results.append((workload, raw, seam, bench.hop_rate(workload), *bench.group_rate(workload)))
        finally:
            bench.close()
    print(f"command: {COMMAND}")
    print(f"SQLite {sqlite3.sqlite_version}, WAL, synchronous=NORMAL, {TASKS} tasks; raw and seam interleaved in "
          f"{SLICES} slices over ~{SECONDS:.0f} s each")
    print(f"1-minute load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print()
    print("| workload | raw sqlite3 (ops/s) | SqliteStore.run_command (ops/s) | ratio | CPU µs/op raw → seam "
          f"| store.command, one at a time (ops/s) | store.command, {CLIENTS} at once (ops/s, per batch) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for workload, raw, seam, hop, group, per_batch in results:
        ratio = seam.rate / raw.rate
        verdict = "ok" if ratio >= GOAL_RATIO else f"below the {GOAL_RATIO} goal"
        print(f"| {workload} | {raw.rate:,.0f} | {seam.rate:,.0f} | {ratio:.2f} ({verdict}) "
              f"| {raw.cpu_us:,.0f} → {seam.cpu_us:,.0f} | {hop:,.0f} | {group:,.0f} ({per_batch:.1f}) |")


if __name__ == "__main__":
    main()
