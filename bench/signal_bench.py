"""Condition signals through the hub: write → ``signal`` record at 50 local followers, against a
direct SSE stream in the same run, and the hub's added latency. ``taskd serve`` and ``taskhub
serve`` run as subprocesses; the writer, the followers and the direct stream run in this process.

The cause is a ``blocks`` relation added and removed in turn on 20 card pairs: each write makes
one ``card_blocked`` or ``card_unblocked`` signal for its target (no project setting needed).

    .venv/bin/python -m bench signal
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.hub_bench import percentile
from bench.support import (
    Service,
    cancel_all,
    follow_board,
    follow_hub,
    isolated_env,
    run_async,
    start_board,
    start_hub,
)

COMMAND = ".venv/bin/python -m bench signal"
FOLLOWERS = 50
PAIRS = 20
RATE = 50  # writes per second
SECONDS = 10.0

#: task id → perf_counter of each signal's arrival, in order, for one consumer.
Arrivals = dict[str, list[float]]


async def follower(port: int, token: str, arrivals: Arrivals, opened: asyncio.Event) -> None:
    def on_message(message: dict[str, Any], chunk_at: float) -> None:
        if message["type"] == "signal":
            arrivals.setdefault(message["signal"]["task_id"], []).append(chunk_at)

    await follow_hub(port, token, opened, on_message)


async def direct(url: str, token: str, arrivals: Arrivals, opened: asyncio.Event) -> None:
    def on_message(event: str | None, data: str, chunk_at: float) -> None:
        if event == "signal":
            arrivals.setdefault(orjson.loads(data)["task_id"], []).append(chunk_at)

    await follow_board(url, token, opened, on_message)


async def run(folder: Path) -> list[tuple[str, str]]:
    env = isolated_env(folder)
    board = start_board(folder, env=env)
    url, token = board.url, board.token
    hub: Service | None = None
    consumers: list[asyncio.Task[None]] = []
    headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}
    try:
        hub, pointer = start_hub(folder, env, url, token)
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.post(f"{url}/api/v1/projects", json={"id": "bench", "name": "Bench"}) as reply:
                assert reply.status == 201, await reply.text()
            pairs = []
            for n in range(PAIRS):
                made = []
                for role in ("blocker", "card"):
                    async with session.post(f"{url}/api/v1/tasks", json={"project": "bench", "title": f"{role} {n}"}) as reply:
                        made.append((await reply.json())["id"])
                pairs.append((made[0], made[1]))
            hub_arrivals: list[Arrivals] = [{} for _ in range(FOLLOWERS)]
            direct_arrivals: Arrivals = {}
            opened = [asyncio.Event() for _ in range(FOLLOWERS + 1)]
            consumers = [asyncio.create_task(follower(pointer["port"], pointer["token"], hub_arrivals[i], opened[i]))
                         for i in range(FOLLOWERS)]
            consumers.append(asyncio.create_task(direct(url, token, direct_arrivals, opened[-1])))
            await asyncio.gather(*(event.wait() for event in opened))

            sent: dict[str, list[float]] = defaultdict(list)
            relations: dict[int, str] = {}
            count = int(RATE * SECONDS)
            start = time.perf_counter()
            cpu_before = hub.cpu_seconds()
            for n in range(count):
                delay = start + n / RATE - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                pair = n % PAIRS
                blocker, card = pairs[pair]
                sent[card].append(time.perf_counter())
                if pair in relations:
                    path = f"{url}/api/v1/tasks/{blocker}/relations/{relations.pop(pair)}"
                    async with session.delete(path) as reply:
                        assert reply.status in (200, 204), await reply.text()
                else:
                    async with session.post(f"{url}/api/v1/tasks/{blocker}/relations",
                                            json={"type": "blocks", "target": card}) as reply:
                        assert reply.status == 201, await reply.text()
                        relations[pair] = (await reply.json())["id"]
            elapsed = time.perf_counter() - start
            deadline = time.monotonic() + 10
            expected = sum(len(times) for times in sent.values())
            while time.monotonic() < deadline and (
                    sum(map(len, direct_arrivals.values())) < expected
                    or any(sum(map(len, a.values())) < expected for a in hub_arrivals)):
                await asyncio.sleep(0.05)
            cpu = hub.cpu_seconds() - cpu_before
    finally:
        await cancel_all(consumers)
        if hub is not None:
            hub.stop()
        board.stop()

    def latencies(arrivals: Arrivals) -> list[float]:
        return [(got - at) * 1000 for card, times in sent.items() for at, got in zip(times, arrivals.get(card, []))]

    via_hub = [value for arrivals in hub_arrivals for value in latencies(arrivals)]
    straight = latencies(direct_arrivals)
    added = [
        (got - seen) * 1000 for arrivals in hub_arrivals for card, times in arrivals.items()
        for got, seen in zip(times, direct_arrivals.get(card, []))
    ]
    missing = expected * FOLLOWERS - len(via_hub)
    return [
        ("signals written", f"{expected} in {elapsed:.1f} s ({RATE}/s), {FOLLOWERS} hub followers + 1 direct stream"),
        ("write → hub follower signal", f"p50 {percentile(via_hub, 0.5):.1f} ms, p99 {percentile(via_hub, 0.99):.1f} ms"),
        ("write → direct SSE signal", f"p50 {percentile(straight, 0.5):.1f} ms, p99 {percentile(straight, 0.99):.1f} ms"),
        ("hub's added latency", f"p50 {percentile(added, 0.5):.1f} ms, p99 {percentile(added, 0.99):.1f} ms"),
        ("signals missing at hub followers", str(missing)),
        ("hub CPU", f"{cpu / elapsed * 100:.0f} % of a core"),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-signal-bench-") as tmp:
        rows = run_async(run(Path(tmp)))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    print(f"\n{COMMAND}")


if __name__ == "__main__":
    main()
    sys.exit(0)
