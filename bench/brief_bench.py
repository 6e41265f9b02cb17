"""Card briefs: event → brief file updated on disk, with 20 watched cards under 50 writes/s.

``taskd serve`` and ``taskhub serve`` run as subprocesses; 20 detached registrations (one card
each, the worker form) keep ``<dir>/.taskloom/<ID>/card.md`` fresh. A writer in this process
retitles the cards round-robin at 50 writes/s; a poller thread stats the 20 files every 2 ms and
reads each new version's title. A write's latency runs from its HTTP answer (the commit is
before it) to the first version on disk that contains it.

Two runs, because the cadence floors dominate (SPEC §7.4: 300 ms debounce, 2 s maximum wait,
5 s floor between batches): once with the production cadence, once with every floor at 0, which
leaves the pipeline's own cost (board event → hub → render through ``POST /api/v1/export`` →
atomic write). The render cost alone (one export request, one atomic write) is timed too.

    .venv/bin/python -m bench brief
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import support
from bench.support import Service, isolated_env, run_async, start_board
from services.hub.briefs import write_brief
from shared import hub_protocol as hp

COMMAND = ".venv/bin/python -m bench brief"
CARDS = 20
RATE = 50  # writes per second, spread round-robin over the cards
RUNS = (
    # (label, debounce, max wait, floor, seconds of writing)
    ("production cadence (0.3 s / 2 s / 5 s)", hp.REFRESH_DEBOUNCE, hp.REFRESH_MAX_WAIT, hp.REFRESH_FLOOR, 30.0),
    ("floors at 0 (render and pipeline cost)", 0.0, 0.0, 0.0, 10.0),
)
POLL = 0.002
RENDER_SAMPLES = 200


def start_hub(folder: Path, env: dict[str, str], url: str, token: str, cadence: tuple[float, float, float]
              ) -> tuple[Service, dict[str, Any]]:
    debounce, max_wait, floor = cadence
    return support.start_hub(folder, env, url, token, "--refresh-debounce", str(debounce),
                             "--refresh-max-wait", str(max_wait), "--refresh-floor", str(floor))


async def hub_request(port: int, token: str, message: dict[str, Any]) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 << 20)
    try:
        writer.write(orjson.dumps(hp.hello(token)) + b"\n" + orjson.dumps(message) + b"\n")
        assert orjson.loads(await reader.readline())["type"] == "welcome"
        answer: dict[str, Any] = orjson.loads(await reader.readline())
        return answer
    finally:
        writer.close()


@dataclass
class Poller:
    """Stats every brief every ``POLL`` seconds; records when each new title first shows."""

    paths: list[Path]
    seen: list[list[tuple[int, float]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        self.seen = [[] for _ in self.paths]
        stamps: list[tuple[int, int] | None] = [None] * len(self.paths)
        while not self.stop.is_set():
            for index, path in enumerate(self.paths):
                try:
                    info = path.stat()
                except FileNotFoundError:
                    continue
                stamp = (info.st_ino, info.st_mtime_ns)
                if stamp == stamps[index]:
                    continue
                now = time.perf_counter()
                stamps[index] = stamp
                seq = _seq(path)
                if seq is not None and (not self.seen[index] or seq > self.seen[index][-1][0]):
                    self.seen[index].append((seq, now))
            time.sleep(POLL)


def _seq(path: Path) -> int | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith('title: "bench '):
                    return int(line.split()[-1].rstrip('"'))
    except (OSError, ValueError):
        return None
    return None


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(folder: Path, env: dict[str, str], url: str, token: str, tasks: list[dict[str, Any]],
                  run_index: int, cadence: tuple[float, float, float], seconds: float) -> dict[str, Any]:
    hub, pointer = start_hub(folder, env, url, token, cadence)
    work = folder / f"work{run_index}"
    paths = [work / ".taskloom" / task["identifier"] / "card.md" for task in tasks]
    headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}
    try:
        for task in tasks:
            answer = await hub_request(pointer["port"], pointer["token"],
                                       hp.watch(refs=[task["identifier"]], dir=str(work), ttl_ms=0, detach=True))
            assert answer["type"] == "registered" and answer["registration_id"], answer
        poller = Poller(paths)
        thread = threading.Thread(target=poller.run, daemon=True)
        thread.start()
        commits: list[tuple[int, int, float]] = []  # (card index, seq, answered at)
        gate = asyncio.Semaphore(16)
        async with aiohttp.ClientSession(headers=headers) as session:

            async def write(index: int, seq: int) -> None:
                async with gate, session.patch(f"{url}/api/v1/tasks/{tasks[index]['id']}",
                                               json={"title": f"bench {seq}"}) as reply:
                    assert reply.status == 200, await reply.text()
                commits.append((index, seq, time.perf_counter()))

            pending = []
            start = time.perf_counter()
            total = int(RATE * seconds)
            for n in range(total):
                delay = start + n / RATE - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                # Titles keep rising across runs, so a new run's first write is news to the poller.
                pending.append(asyncio.ensure_future(write(n % CARDS, run_index * 1_000_000 + n // CARDS + 1)))
            await asyncio.gather(*pending)
            last = {index: seq for index, seq, _ in commits}

            def settled() -> bool:
                return all(poller.seen[i] and poller.seen[i][-1][0] >= seq for i, seq in last.items())

            deadline = time.monotonic() + 4 * max(cadence) + 30
            while not settled():
                if time.monotonic() > deadline:
                    raise RuntimeError("the briefs did not catch up with the last writes")
                await asyncio.sleep(0.05)
        poller.stop.set()
        thread.join()
        latencies = []
        for index, seq, answered in commits:
            shown = next(t for s, t in poller.seen[index] if s >= seq)
            latencies.append(max(0.0, shown - answered) * 1000)
        versions = sum(len(seen) for seen in poller.seen)
        return {"latencies": latencies, "versions": versions, "writes": len(commits), "seconds": seconds}
    finally:
        hub.stop()


async def render_cost(url: str, token: str, task: dict[str, Any], folder: Path) -> tuple[list[float], list[float], int]:
    headers = {"Authorization": f"Bearer {token}"}
    renders, writes = [], []
    history = 0
    async with aiohttp.ClientSession(headers=headers) as session:
        for n in range(RENDER_SAMPLES):
            started = time.perf_counter()
            async with session.post(f"{url}/api/v1/export", json={"ref": task["id"]}) as reply:
                body = await reply.json()
            renders.append((time.perf_counter() - started) * 1000)
            history = body["markdown"].split("\n## History\n", 1)[1].count("\n- ")
            data = (body["markdown"] + f"\n<!-- {n} -->\n").encode()
            started = time.perf_counter()
            write_brief(str(folder / "render-cost" / "card.md"), data)
            writes.append((time.perf_counter() - started) * 1000)
    return renders, writes, history


async def run(folder: Path) -> list[tuple[str, str]]:
    env = isolated_env(folder)
    board = start_board(folder, env=env)
    url, token = board.url, board.token
    rows: list[tuple[str, str]] = []
    try:
        headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.post(f"{url}/api/v1/projects", json={"id": "bench", "name": "Bench"}) as r:
                assert r.status == 201, await r.text()
            tasks = []
            for _ in range(CARDS):
                async with session.post(f"{url}/api/v1/tasks", json={"project": "bench", "title": "bench 0"}) as r:
                    tasks.append(await r.json())
        for index, (label, debounce, max_wait, floor, seconds) in enumerate(RUNS):
            result = await measure(folder, env, url, token, tasks, index, (debounce, max_wait, floor), seconds)
            values = result["latencies"]
            rows.append((
                f"write → brief on disk, {label}",
                f"p50 {percentile(values, .5):.0f} ms, p99 {percentile(values, .99):.0f} ms, max {max(values):.0f} ms "
                f"({result['writes']} writes in {result['seconds']:.0f} s; {result['versions']} brief versions seen)",
            ))
        renders, writes, history = await render_cost(url, token, tasks[0], folder)
        rows.append((
            f"render cost: one POST /api/v1/export (a card with {history} History lines)",
            f"p50 {statistics.median(renders):.1f} ms, p99 {percentile(renders, .99):.1f} ms",
        ))
        rows.append((
            "write cost: one atomic brief write (temp, fsync, rename, dir fsync)",
            f"p50 {statistics.median(writes):.1f} ms, p99 {percentile(writes, .99):.1f} ms",
        ))
    finally:
        board.stop()
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-brief-bench-") as folder:
        rows = run_async(run(Path(folder)))
    width = max(len(name) for name, _ in rows)
    print(f"| {'measure':<{width}} | result |")
    print(f"|{'-' * (width + 2)}|---|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n`{COMMAND}` ({CARDS} detached registrations of one card each, {RATE} writes/s round-robin; "
          f"poll every {POLL * 1000:.0f} ms, so figures carry up to that much extra; load average {load})")


if __name__ == "__main__":
    main()
