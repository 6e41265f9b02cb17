"""The board's read side in one process: the ``sqlite3`` reader thread against aiosqlite.

Both read the same file, interleaved in short slices so a busy machine slows them alike:

* replay: pages of 500 rows after a cursor until the head, as a stream catching up reads them
  (``store.query(read_page)`` on the store's reader threads, against ``ActivityReader.fetch_after``
  on an aiosqlite connection); rows of ~100 bytes of changes and of ~4 KB;
* live wake: one committed row read right after its commit, as the log reader does on a commit
  listener's wake (the old reader thread: data_version, BEGIN, page, COMMIT in one hop; aiosqlite:
  one statement);
* idle poll: ``PRAGMA data_version`` when nothing changed (every 50 ms per board).

    .venv/bin/python -m bench read
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from services.board import activities
from services.board.pages import Page, read_page
from services.board.readers import ActivityReader
from services.board.store import Actor, SqliteStore, Tx, connect
from shared import events

COMMAND = ".venv/bin/python -m bench read"
ROWS = 10_000
PAGE = 500
ROUNDS = 15
WAKES = 600
POLLS = 6000
ACTOR = Actor("codex", "bench")


def bulk(tx: Tx, start: int, count: int, pad: int) -> None:
    for n in range(start, start + count):
        changes = events.task_updated(fields=["meta"], after={"meta": {"n": n, "pad": "x" * pad}})
        tx.record(events.TASK_UPDATED, changes, task_id=None, project_id="bench")


class ThreadReader:
    """The read side before aiosqlite: one thread and one ``sqlite3`` connection, one hop per read."""

    def __init__(self, path: Path) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-reader")
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.data_version: int | None = None

    async def open(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.executor, self._open)

    def _open(self) -> None:
        self.conn = connect(self.path)

    def close(self) -> None:
        self.executor.submit(lambda: self.conn.close() if self.conn else None).result()
        self.executor.shutdown()

    async def live(self, position: int) -> Page:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._live, position)

    def _live(self, position: int) -> Page:
        conn = self.conn
        assert conn is not None
        self.data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        conn.execute("BEGIN")
        try:
            return read_page(conn, position, PAGE)
        finally:
            conn.execute("COMMIT")

    async def poll(self) -> bool:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._poll)

    def _poll(self) -> bool:
        assert self.conn is not None
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        changed, self.data_version = version != self.data_version, version
        return changed


async def replay(fetch: Callable[[int], Awaitable[Page]], start: int) -> tuple[int, float]:
    """Rows read from ``start`` to the head, page by page; (rows, seconds)."""
    began = time.perf_counter()
    position, rows = start, 0
    while True:
        page = await fetch(position)
        rows += len(page.frames)
        if page.end <= position:
            break
        position = page.end
    return rows, time.perf_counter() - began


async def measure(folder: Path) -> dict[str, Any]:
    store = SqliteStore(folder / "board.sqlite")
    store.open()
    loop = asyncio.get_running_loop()
    starts: dict[str, int] = {}
    for label, pad in (("small", 0), ("4 KB", 4000)):
        starts[label] = await store.query(activities.head)
        for start in range(0, ROWS, 1000):
            store.run_command(bulk, ACTOR, start, 1000, pad)
    ends = {"small": starts["4 KB"], "4 KB": await store.query(activities.head)}
    thread = ThreadReader(store.path)
    await thread.open()
    aio = await store.open_reader()
    results: dict[str, Any] = {}
    try:
        for label, start in starts.items():
            end = ends[label]

            # Each replay stops at the last row of its kind (the other kind's rows follow).
            async def old(position: int, end: int = end) -> Page:
                return await store.query(read_page, position, PAGE) if position < end else Page(position, position, ())

            async def new(position: int, end: int = end) -> Page:
                return await aio.fetch_after(position, PAGE) if position < end else Page(position, position, ())

            rates: dict[str, list[float]] = {"sqlite3 thread": [], "aiosqlite": []}
            for _ in range(ROUNDS):
                for name, fetch in (("sqlite3 thread", old), ("aiosqlite", new)):
                    rows, seconds = await replay(fetch, start)
                    assert rows == ROWS, (name, rows)
                    rates[name].append(rows / seconds)
            results[f"replay, {label} rows"] = rates

        # A live wake: one row committed, then read by the reader that was woken for it.
        wake: dict[str, list[float]] = {"sqlite3 thread": [], "aiosqlite": []}
        for _ in range(ROUNDS):
            for name in wake:
                total = 0.0
                for _ in range(WAKES // ROUNDS):
                    position = await store.query(activities.head)
                    store.run_command(bulk, ACTOR, 0, 1, 0)
                    began = time.perf_counter()
                    page = await (thread.live(position) if name == "sqlite3 thread" else aio.fetch_after(position, PAGE))
                    total += time.perf_counter() - began
                    assert len(page.frames) == 1
                wake[name].append(total / (WAKES // ROUNDS) * 1e6)
        results["live wake, µs per read"] = wake

        poll: dict[str, list[float]] = {"sqlite3 thread": [], "aiosqlite": []}
        for _ in range(ROUNDS):
            for name, call in (("sqlite3 thread", thread.poll), ("aiosqlite", aio.changed)):
                began = time.perf_counter()
                for _ in range(POLLS // ROUNDS):
                    await call()
                poll[name].append((time.perf_counter() - began) / (POLLS // ROUNDS) * 1e6)
        results["idle poll, µs per poll"] = poll
    finally:
        await aio.close()
        await loop.run_in_executor(None, thread.close)
        store.close()
    return results


def main() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as folder:
        results = asyncio.run(measure(Path(folder)))
    print(f"command: {COMMAND}")
    print(f"SQLite {sqlite3.sqlite_version}; {ROWS:,} rows per replay, pages of {PAGE}; {ROUNDS} rounds, "
          "the two sides alternating; medians, then every round")
    print(f"1-minute load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print()
    print("| measure | sqlite3 thread | aiosqlite | aiosqlite / thread | every round (thread; aiosqlite) |")
    print("|---|---:|---:|---:|---|")
    for measure_name, rates in results.items():
        old, new = statistics.median(rates["sqlite3 thread"]), statistics.median(rates["aiosqlite"])
        unit = "rows/s" if measure_name.startswith("replay") else "µs"
        rounds = f"{', '.join(f'{v:,.0f}' for v in rates['sqlite3 thread'])}; {', '.join(f'{v:,.0f}' for v in rates['aiosqlite'])}"
        print(f"| {measure_name} | {old:,.0f} {unit} | {new:,.0f} {unit} | {new / old:.2f} | {rounds} |")


if __name__ == "__main__":
    main()
