"""The board's lifecycle, measured on ``taskd serve`` subprocesses:

1. state export (``GET /api/v1/state``) and import (``POST /api/v1/state``) of a 50,000-task board,
   in tasks/s (the round trip is checked: the imported board exports the same lines);
2. an online backup (``POST /api/v1/admin/backup``) of that board while 8 clients write: how long
   it takes, and how the writes' latency looks before and during it (the writer stall);
3. ``--durability full`` (``synchronous=FULL``, the default) against ``--durability normal``:
   HTTP mutations/s at 16 clients, the two interleaved in one run (goal: FULL ≥ 0.8 × NORMAL).

    .venv/bin/python -m bench lifecycle
    TASKLOOM_BENCH_STATE_TASKS=5000 .venv/bin/python -m bench lifecycle   # a quicker look
    TASKLOOM_BENCH_DURABILITY_ROUNDS=8 .venv/bin/python -m bench lifecycle  # a steadier FULL/NORMAL
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.support import Board, start_board
from services.board.commands import comments, projects, tasks
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx

COMMAND = ".venv/bin/python -m bench lifecycle"
TASKS = int(os.environ.get("TASKLOOM_BENCH_STATE_TASKS", "50000"))
BATCH = 1000
BACKUP_WRITERS = 8
BASELINE_SECONDS = 3.0
DURABILITY_CLIENTS = 16
DURABILITY_SECONDS = 5.0
DURABILITY_ROUNDS = int(os.environ.get("TASKLOOM_BENCH_DURABILITY_ROUNDS", "3"))
GOAL_RATIO = 0.8
BUILDER = Actor("human", "bench")


def build(data_dir: Path, count: int) -> None:
    """``count`` tasks in one project through the real commands, a comment on every tenth."""
    store = SqliteStore(data_dir / "board.sqlite")
    store.open()
    try:
        store.run_command(projects.create_project, BUILDER, id="bench", name="Bench")

        def batch(tx: Tx, start: int, size: int) -> None:
            for n in range(start, start + size):
                made, _ = tasks.create_task(tx, project="bench", title=f"Card {n}",
                                         description=f"What card {n} is about, in a sentence or two.",
                                         labels=["bench", f"l{n % 7}"])
                if n % 10 == 0:
                    comments.add_comment(tx, made["id"], body=f"A note on card {n}.")

        for start in range(0, count, BATCH):
            store.run_command(batch, BUILDER, start, min(BATCH, count - start))
    finally:
        store.close()


def headers(board: Board) -> dict[str, str]:
    return {"Authorization": f"Bearer {board.token}", "X-Taskloom-Actor": "bench", "X-Taskloom-Actor-Kind": "claude"}


async def export_state(session: aiohttp.ClientSession, board: Board) -> tuple[bytes, float]:
    started = time.perf_counter()
    async with session.get(f"{board.url}/api/v1/state", headers=headers(board)) as response:
        assert response.status == 200, await response.text()
        data = await response.read()
    return data, time.perf_counter() - started


async def import_state(session: aiohttp.ClientSession, board: Board, data: bytes) -> float:
    started = time.perf_counter()
    async with session.post(f"{board.url}/api/v1/state", data=data,
                            headers={**headers(board), "Content-Type": "application/x-ndjson"}) as response:
        assert response.status == 201, await response.text()
        await response.read()
    return time.perf_counter() - started


@dataclass
class Writes:
    """Latencies of acknowledged writes, each with the moment it was acknowledged."""

    done: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0

    def between(self, start: float, end: float) -> list[float]:
        return [latency for at, latency in self.done if start <= at <= end]


async def writer(session: aiohttp.ClientSession, board: Board, task_id: str, stop: asyncio.Event, writes: Writes) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        started = time.perf_counter()
        async with session.patch(f"{board.url}/api/v1/tasks/{task_id}", json={"title": f"title {n}"},
                                 headers=headers(board)) as response:
            await response.read()
            if response.status == 200:
                writes.done.append((time.perf_counter(), time.perf_counter() - started))
            else:
                writes.errors += 1


async def first_tasks(session: aiohttp.ClientSession, board: Board, count: int) -> list[str]:
    async with session.get(f"{board.url}/api/v1/tasks?project=bench&limit={count}", headers=headers(board)) as response:
        return [task["id"] for task in (await response.json())["items"]]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000 if ordered else float("nan")


async def backup_under_writers(session: aiohttp.ClientSession, board: Board, target: Path) -> dict[str, Any]:
    ids = await first_tasks(session, board, BACKUP_WRITERS)
    stop, writes = asyncio.Event(), Writes()
    running = [asyncio.create_task(writer(session, board, task_id, stop, writes)) for task_id in ids]
    await asyncio.sleep(BASELINE_SECONDS)  # a bench measures a stretch of time: the baseline's
    baseline_end = time.perf_counter()
    async with session.post(f"{board.url}/api/v1/admin/backup", json={"path": str(target)},
                            headers=headers(board)) as response:
        answer = await response.json()
        assert response.status == 200, answer
    backup_end = time.perf_counter()
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.gather(*running)
    baseline = writes.between(baseline_end - BASELINE_SECONDS, baseline_end)
    during = writes.between(baseline_end, backup_end)
    # The longest the writers went without any acknowledgement while the backup ran: the stall.
    acks = sorted(at for at, _ in writes.done if baseline_end <= at <= backup_end)
    gaps = [b - a for a, b in zip([baseline_end, *acks], [*acks, backup_end], strict=True)]
    return {
        "seconds": backup_end - baseline_end, "bytes": answer["bytes"], "board_seconds": answer["seconds"],
        "baseline": baseline, "during": during, "longest_gap_ms": max(gaps) * 1000, "errors": writes.errors,
        "baseline_rate": len(baseline) / BASELINE_SECONDS, "during_rate": len(during) / max(backup_end - baseline_end, 1e-9),
    }


async def mutation_rate(board: Board, clients: int, seconds: float) -> tuple[float, list[float]]:
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.post(f"{board.url}/api/v1/projects", json={"id": "rate", "name": "Rate"},
                                headers=headers(board)) as response:
            assert response.status in (201, 409)
        ids = []
        for n in range(clients):
            async with session.post(f"{board.url}/api/v1/tasks", json={"project": "rate", "title": f"t{n}"},
                                    headers=headers(board)) as response:
                ids.append((await response.json())["id"])
        stop, writes = asyncio.Event(), Writes()
        running = [asyncio.create_task(writer(session, board, task_id, stop, writes)) for task_id in ids]
        await asyncio.sleep(0.5)  # warm-up
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        end = time.perf_counter()
        stop.set()
        await asyncio.gather(*running)
        window = writes.between(start, end)
        return len(window) / (end - start), window


def timed(what: str, fn: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    value = fn()
    print(f"{what}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return value


async def run(root: Path) -> None:
    source_dir = root / "source"
    (source_dir / "data").mkdir(parents=True)
    timed(f"building {TASKS:,} tasks", lambda: build(source_dir / "data", TASKS))
    source = start_board(source_dir)
    target = start_board(root / "target")
    try:
        async with aiohttp.ClientSession() as session:
            data, export_seconds = await export_state(session, source)
            import_seconds = await import_state(session, target, data)
            again, _ = await export_state(session, target)
            same = again.splitlines()[1:] == data.splitlines()[1:]
            backup = await backup_under_writers(session, source, root / "backup.sqlite")
    finally:
        source.stop()
        target.stop()

    rates: dict[str, list[float]] = {"full": [], "normal": []}
    latencies: dict[str, list[float]] = {"full": [], "normal": []}
    for round_number in range(DURABILITY_ROUNDS):
        for level in ("full", "normal") if round_number % 2 == 0 else ("normal", "full"):
            folder = root / f"{level}-{round_number}"
            folder.mkdir()
            board = start_board(folder, "--durability", level)
            try:
                rate, window = await mutation_rate(board, DURABILITY_CLIENTS, DURABILITY_SECONDS)
            finally:
                board.stop()
            rates[level].append(rate)
            latencies[level].extend(window)

    print(f"command: {COMMAND}")
    print(f"taskd serve subprocesses ← aiohttp client in the bench process; {TASKS:,} tasks "
          f"(a comment on every tenth) built through the commands; 1-minute load {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print()
    print("| state | seconds | tasks/s | MiB |")
    print("|---|---:|---:|---:|")
    print(f"| export (GET /state, streamed) | {export_seconds:.2f} | {TASKS / export_seconds:,.0f} | {len(data) / 2**20:.1f} |")
    print(f"| import (POST /state, one transaction) | {import_seconds:.2f} | {TASKS / import_seconds:,.0f} | |")
    print(f"\nround trip: the imported board exports the same lines: {'yes' if same else 'NO'}")
    print()
    print(f"backup of the {TASKS:,}-task board ({backup['bytes'] / 2**20:.1f} MiB) under {BACKUP_WRITERS} writers "
          f"(PATCH title): {backup['seconds']:.2f} s over HTTP ({backup['board_seconds']:.2f} s in the board)")
    print()
    print("| writes | n | writes/s | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values, rate in (("before (baseline)", backup["baseline"], backup["baseline_rate"]),
                               ("during the backup", backup["during"], backup["during_rate"])):
        print(f"| {name} | {len(values)} | {rate:,.0f} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} "
              f"| {max(values, default=float('nan')) * 1000:.2f} |")
    print(f"\nlongest time without an acknowledged write during the backup: {backup['longest_gap_ms']:.1f} ms; "
          f"errors: {backup['errors']}")
    print()
    print(f"| durability | mutations/s at {DURABILITY_CLIENTS} clients (mean of {DURABILITY_ROUNDS}) | runs | p50 ms | p99 ms |")
    print("|---|---:|---|---:|---:|")
    for level in ("full", "normal"):
        runs = ", ".join(f"{rate:,.0f}" for rate in rates[level])
        print(f"| {level} | {statistics.mean(rates[level]):,.0f} | {runs} | {percentile(latencies[level], 0.5):.2f} "
              f"| {percentile(latencies[level], 0.99):.2f} |")
    ratio = statistics.mean(rates["full"]) / statistics.mean(rates["normal"])
    print(f"\nFULL / NORMAL = {ratio:.2f} (goal ≥ {GOAL_RATIO}): {'met' if ratio >= GOAL_RATIO else 'missed'}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as folder:
        asyncio.run(run(Path(folder)))


if __name__ == "__main__":
    main()
