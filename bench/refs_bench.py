"""Task lookups by reference on a board of 50,000 tasks: full uuid, identifier, unique uuid prefix,
and an unknown ref (which now also pays the prefix lookup before its 404).

The exact lookups use the primary key and the identifier index; a prefix is ``id LIKE ? ESCAPE``
(queries/refs.py), which SQLite cannot answer from the binary-collated primary key (its LIKE is
case-insensitive), so it scans the ids. This measures what that costs, on the read connection
the board's queries use, one ``find_task`` call per sample.

    .venv/bin/python -m bench refs
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from services.board.commands import projects, tasks
from services.board.queries.tasks import find_task
from services.board.sqlite_store import SqliteStore, connect
from services.board.store import Actor

COMMAND = ".venv/bin/python -m bench refs"
TASKS = 50_000
SAMPLES = 400
ACTOR = Actor("claude", "bench")


def seed(tx: Any) -> list[tuple[str, str]]:
    """Every task in one transaction: the bench measures reads, not 50,000 commits."""
    made = []
    for n in range(TASKS):
        task, _ = tasks.create_task(tx, project="bench", title=f"task {n}")
        made.append((task["id"], task["identifier"]))
    return made


def timed(conn: sqlite3.Connection, refs: list[str]) -> tuple[float, float]:
    samples = []
    for ref in refs:
        started = time.perf_counter()
        find_task(conn, ref)
        samples.append((time.perf_counter() - started) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as folder:
        store = SqliteStore(Path(folder) / "board.sqlite")
        store.open()
        try:
            store.run_command(projects.create_project, ACTOR, id="bench", name="Bench")
            started = time.perf_counter()
            made, _ = store.run_command(seed, ACTOR)
            seeded = time.perf_counter() - started
            picked = random.Random(7).sample(made, SAMPLES)
            conn = connect(store.path)
            try:
                rows = [
                    ("full uuid", timed(conn, [task_id for task_id, _ in picked])),
                    ("identifier", timed(conn, [identifier for _, identifier in picked])),
                    ("uuid prefix, 8 characters", timed(conn, [task_id[:8] for task_id, _ in picked])),
                    ("unknown ref (404)", timed(conn, [f"nope{n:04d}" for n in range(SAMPLES)])),
                ]
            finally:
                conn.close()
        finally:
            store.close()
    print(f"command: {COMMAND}")
    print(f"SQLite {sqlite3.sqlite_version}, {TASKS:,} tasks (seeded in {seeded:.1f} s), {SAMPLES} lookups each")
    print(f"1-minute load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print()
    print("| ref | p50 (ms) | p99 (ms) |")
    print("|---|---:|---:|")
    for label, (p50, p99) in rows:
        print(f"| {label} | {p50:.3f} | {p99:.3f} |")


if __name__ == "__main__":
    main()
