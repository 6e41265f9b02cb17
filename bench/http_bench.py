"""HTTP write throughput and latency: ``taskd serve`` as a subprocess, an aiohttp client in this
process, 1 and 16 concurrent clients each alternating ``PATCH /tasks/{id}`` (task_updated) and
``POST /tasks/{id}/move`` (task_moved) on its own task. Goal: ≥ 2,000 mutations/s at 16 clients.

    .venv/bin/python -m bench http
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.support import Board, start_board

COMMAND = ".venv/bin/python -m bench http"
CONCURRENCY = (1, 16)
SECONDS = 8.0
WARMUP_SECONDS = 1.0
GOAL_AT_16 = 2000


@dataclass
class Result:
    clients: int
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    wall: float = 0.0
    board_cpu: float = 0.0
    client_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


async def client_loop(session: aiohttp.ClientSession, base: str, task_id: str, stop_at: float, result: Result | None) -> None:
    n = 0
    status = "todo"
    while time.perf_counter() < stop_at:
        n += 1
        started = time.perf_counter()
        if n % 2:
            request = session.patch(f"{base}/tasks/{task_id}", json={"title": f"title {n}"})
        else:
            status = "backlog" if status == "todo" else "todo"
            request = session.post(f"{base}/tasks/{task_id}/move", json={"to": status})
        async with request as response:
            await response.read()
            ok = response.status == 200
        if result is not None:
            if ok:
                result.latencies.append(time.perf_counter() - started)
            else:
                result.errors += 1


async def measure(board: Board, session: aiohttp.ClientSession, task_ids: list[str], clients: int) -> Result:
    base = f"{board.url}/api/v1"
    warm_until = time.perf_counter() + WARMUP_SECONDS
    await asyncio.gather(*(client_loop(session, base, task_ids[n], warm_until, None) for n in range(clients)))
    result = Result(clients)
    board_cpu, client_cpu = board.cpu_seconds(), time.process_time()
    started = time.perf_counter()
    stop_at = started + SECONDS
    await asyncio.gather(*(client_loop(session, base, task_ids[n], stop_at, result) for n in range(clients)))
    result.wall = time.perf_counter() - started
    result.board_cpu = board.cpu_seconds() - board_cpu
    result.client_cpu = time.process_time() - client_cpu
    return result


async def run(board: Board) -> list[Result]:
    headers = {
        "Authorization": f"Bearer {board.token}",
        "X-Taskloom-Actor-Kind": "claude",
        "X-Taskloom-Actor": "bench",
    }
    connector = aiohttp.TCPConnector(limit=max(CONCURRENCY))
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        base = f"{board.url}/api/v1"
        async with session.post(f"{base}/projects", json={"id": "bench", "name": "Bench"}) as response:
            assert response.status == 201, await response.text()
        task_ids = []
        for n in range(max(CONCURRENCY)):
            async with session.post(f"{base}/tasks", json={"project": "bench", "title": f"task {n}"}) as response:
                assert response.status == 201, await response.text()
                task_ids.append((await response.json())["id"])
        return [await measure(board, session, task_ids, clients) for clients in CONCURRENCY]


def main() -> None:
    try:
        import uvloop

        uvloop.install()
        client_loop_name = "uvloop"
    except ImportError:
        client_loop_name = "asyncio"
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as folder:
        board = start_board(Path(folder))
        try:
            results = asyncio.run(run(board))
        finally:
            board.stop()
    print(f"command: {COMMAND}")
    print(f"taskd serve (subprocess) ← aiohttp client ({client_loop_name}) in the bench process; keep-alive; "
          f"{SECONDS:.0f} s per row after {WARMUP_SECONDS:.0f} s warm-up; half PATCH title, half move todo↔backlog")
    print()
    load = os.getloadavg()[0]
    print(f"1-minute load average at the end: {load:.1f} on {os.cpu_count()} CPUs (other work slows every figure)")
    print()
    print("| clients | mutations/s | p50 ms | p99 ms | errors | board CPU | board CPU µs/mutation | client CPU |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for result in results:
        cpu_us = result.board_cpu / max(1, len(result.latencies)) * 1e6
        print(f"| {result.clients} | {result.rate:,.0f} | {result.percentile(0.5):.2f} | {result.percentile(0.99):.2f} "
              f"| {result.errors} | {result.board_cpu / result.wall:.0%} | {cpu_us:,.0f} "
              f"| {result.client_cpu / result.wall:.0%} |")
    at_16 = next(r for r in results if r.clients == 16)
    verdict = "met" if at_16.rate >= GOAL_AT_16 else "missed"
    print(f"\ngoal ≥ {GOAL_AT_16:,} mutations/s at 16 clients: {verdict} ({at_16.rate:,.0f})")


if __name__ == "__main__":
    main()
