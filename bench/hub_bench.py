"""The hub's fan-out: write-commit → follower latency with 50 local followers at 200 writes/s,
against a direct SSE stream in the same run; ring replay of 4096 frames to a new follower; the
hub's CPU and RSS. ``taskd serve`` and ``taskhub serve`` run as subprocesses; the writer, the 50
followers and the direct stream run in this process (uvloop).

Goals (issue 4): hub follower p50 ≤ 7 ms, p99 ≤ 30 ms; replay of 4096 frames ≤ 50 ms.

    .venv/bin/python -m bench hub
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from calendar import timegm
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.support import read_json, wait_for
from shared import hub_protocol as hp
from shared.sse import SSEMessage, SSEParser

COMMAND = ".venv/bin/python -m bench hub"
FOLLOWERS = 50
RATE = 200  # writes per second
SECONDS = 10.0
WARMUP_WRITES = 50
REPLAY_FRAMES = hp.RING_SIZE
REPLAY_RUNS = 5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BIN = Path(sys.executable).parent


@dataclass
class Process:
    popen: subprocess.Popen[bytes]

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kib(self) -> dict[str, int]:
        status = Path(f"/proc/{self.popen.pid}/status").read_text().splitlines()
        return {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith(("VmRSS", "VmHWM"))}

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()


def start_board(folder: Path, env: dict[str, str]) -> tuple[Process, str, str]:
    data_dir = folder / "data"
    popen = subprocess.Popen(
        [str(BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir)],
        env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "taskd.log", "wb"), stdin=subprocess.DEVNULL,
    )
    board_json = folder / "run" / "board.json"
    pointer = wait_for("taskd's pointer", lambda: (p := read_json(board_json)) and p.get("pid") == popen.pid and p)
    return Process(popen), pointer["url"], (data_dir / "token").read_text().strip()


def start_hub(folder: Path, env: dict[str, str], url: str, token: str) -> tuple[Process, dict[str, Any]]:
    popen = subprocess.Popen(
        [str(BIN / "taskhub"), "serve", "--board", url, "--idle-exit", "0"],
        env={**env, "TASKLOOM_TOKEN": token}, stdout=subprocess.DEVNULL, stderr=open(folder / "taskhub.err", "wb"),
        stdin=subprocess.DEVNULL,
    )
    pointer_path = folder / "run" / f"hub-{hp.hub_key(url, token)}.json"
    pointer = wait_for("taskhub's pointer", lambda: (p := read_json(pointer_path)) and p.get("pid") == popen.pid and p)
    return Process(popen), pointer


@functools.lru_cache(maxsize=4096)
def commit_epoch(created_at: str) -> float:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` → seconds since the epoch (cached: 51 consumers read each one)."""
    return timegm(time.strptime(created_at[:19], "%Y-%m-%dT%H:%M:%S")) + int(created_at[20:23]) / 1000


@dataclass
class Arrivals:
    """When each revision reached one consumer: perf_counter and wall clock."""

    perf: dict[int, float] = field(default_factory=dict)
    commit_latency: dict[int, float] = field(default_factory=dict)

    def note(self, revision: int, activity: dict[str, Any]) -> None:
        self.perf[revision] = time.perf_counter()
        self.commit_latency[revision] = time.time() - commit_epoch(activity["created_at"])


async def hub_session(port: int, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=4 << 20)
    writer.write(orjson.dumps(hp.hello(token)) + b"\n")
    welcome = orjson.loads(await reader.readline())
    assert welcome["type"] == "welcome", welcome
    return reader, writer


async def follower(port: int, token: str, arrivals: Arrivals, opened: asyncio.Event) -> None:
    reader, writer = await hub_session(port, token)
    writer.write(orjson.dumps(hp.follow(idle_ms=0)) + b"\n")
    tail = b""
    try:
        # Whole chunks split by hand: the bench client must cost less than what it measures.
        while chunk := await reader.read(1 << 16):
            *lines, tail = (tail + chunk).split(b"\n")
            for line in lines:
                message = orjson.loads(line)
                if message["type"] == "event":
                    arrivals.note(message["revision"], message["activity"])
                elif message["type"] == "open":
                    opened.set()
    finally:
        writer.close()


async def direct_stream(session: aiohttp.ClientSession, url: str, token: str, arrivals: Arrivals, opened: asyncio.Event) -> None:
    async with session.get(f"{url}/api/v1/events", headers={"Authorization": f"Bearer {token}"}) as response:
        assert response.status == 200
        opened.set()
        parser = SSEParser()
        async for chunk in response.content.iter_any():
            for item in parser.feed(chunk):
                if isinstance(item, SSEMessage) and item.event is None and item.data:
                    activity = orjson.loads(item.data)
                    arrivals.note(activity["revision"], activity)


async def write_comments(session: aiohttp.ClientSession, url: str, headers: dict[str, str], ref: str, count: int,
                         rate: float | None, concurrency: int = 16) -> list[int]:
    """``count`` comments, paced at ``rate`` per second (None: as fast as ``concurrency`` allows)."""
    gate = asyncio.Semaphore(concurrency)
    revisions: list[int] = []

    async def one(n: int) -> None:
        async with gate, session.post(f"{url}/api/v1/tasks/{ref}/comments", json={"body": f"bench {n}"},
                                      headers=headers) as reply:
            assert reply.status == 201, await reply.text()

    tasks: list[Awaitable[None]] = []
    start = time.perf_counter()
    for n in range(count):
        if rate:
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(n)))
    await asyncio.gather(*tasks)
    return revisions


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(folder: Path) -> list[tuple[str, str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOOM_")}
    env.update(TASKLOOM_RUNTIME_DIR=str(folder / "run"), TASKLOOM_DATA_DIR=str(folder / "data"))
    board, url, token = start_board(folder, env)
    hub, pointer = start_hub(folder, env, url, token)
    rows: list[tuple[str, str, str]] = []
    try:
        headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/api/v1/projects", json={"id": "bench", "name": "Bench"}, headers=headers) as r:
                assert r.status == 201, await r.text()
            async with session.post(f"{url}/api/v1/tasks", json={"project": "bench", "title": "hub bench"}, headers=headers) as r:
                task = await r.json()
            ref = task["id"]

            hub_arrivals = [Arrivals() for _ in range(FOLLOWERS)]
            direct = Arrivals()
            opened = [asyncio.Event() for _ in range(FOLLOWERS + 1)]
            consumers = [asyncio.ensure_future(follower(pointer["port"], pointer["token"], a, e))
                         for a, e in zip(hub_arrivals, opened, strict=False)]
            consumers.append(asyncio.ensure_future(direct_stream(session, url, token, direct, opened[-1])))
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 30)
            idle_memory = hub.memory_kib()

            async def settled(total: int) -> None:
                """Every consumer has seen ``total`` comments (they opened after the task was made)."""
                while len(direct.perf) < total or any(len(a.perf) < len(direct.perf) for a in hub_arrivals):
                    await asyncio.sleep(0.05)

            await write_comments(session, url, headers, ref, WARMUP_WRITES, RATE)
            await asyncio.wait_for(settled(WARMUP_WRITES), 60)
            warm = set(direct.perf)
            cpu0, board_cpu0, own_cpu0, wall0 = hub.cpu_seconds(), board.cpu_seconds(), time.process_time(), time.perf_counter()
            await write_comments(session, url, headers, ref, int(RATE * SECONDS), RATE)
            measured_wall = time.perf_counter() - wall0

            written = WARMUP_WRITES + int(RATE * SECONDS)
            await asyncio.wait_for(settled(written), 60)
            hub_cpu = (hub.cpu_seconds() - cpu0) / measured_wall
            board_cpu = (board.cpu_seconds() - board_cpu0) / measured_wall
            own_cpu = (time.process_time() - own_cpu0) / measured_wall
            busy_memory = hub.memory_kib()
            measured = sorted(set(direct.perf) - warm)
            direct_commit = [direct.commit_latency[r] * 1000 for r in measured]
            hub_commit = [a.commit_latency[r] * 1000 for a in hub_arrivals for r in measured]
            added = [(a.perf[r] - direct.perf[r]) * 1000 for a in hub_arrivals for r in measured]
            rows += [
                ("write-commit → direct SSE (1 stream)", f"p50 {percentile(direct_commit, .5):.1f} ms, "
                 f"p99 {percentile(direct_commit, .99):.1f} ms", "reference"),
                (f"write-commit → hub follower ({FOLLOWERS} followers, {RATE} writes/s)",
                 f"p50 {percentile(hub_commit, .5):.1f} ms, p99 {percentile(hub_commit, .99):.1f} ms",
                 "p50 ≤ 7 ms, p99 ≤ 30 ms"),
                ("hub's added latency over direct SSE, same event",
                 f"p50 {percentile(added, .5):.1f} ms, p99 {percentile(added, .99):.1f} ms", ""),
                ("hub follower / direct SSE, same run",
                 f"p50 {percentile(hub_commit, .5) / percentile(direct_commit, .5):.2f}×, "
                 f"p99 {percentile(hub_commit, .99) / percentile(direct_commit, .99):.2f}× "
                 f"(load {os.getloadavg()[0]:.1f})", "p50 ≤ 1.1×"),
                (f"hub CPU with {FOLLOWERS} followers at {RATE} writes/s", f"{hub_cpu * 100:.1f} % of one core "
                 f"(board {board_cpu * 100:.0f} %, bench client {own_cpu * 100:.0f} %, {os.cpu_count()} cores)", ""),
                (f"hub RSS with {FOLLOWERS} followers", f"idle {idle_memory['VmRSS'] / 1024:.1f} MiB, after the run "
                 f"{busy_memory['VmRSS'] / 1024:.1f} MiB (peak {busy_memory['VmHWM'] / 1024:.1f} MiB)", ""),
            ]

            # Fill the ring, then time a new follower replaying all of it.
            need = max(0, REPLAY_FRAMES + 1 - written)
            await write_comments(session, url, headers, ref, need, None)
            await asyncio.wait_for(settled(written + need), 60)
            revisions = sorted(direct.perf)
            after = revisions[-REPLAY_FRAMES - 1]
            timings = []
            for _ in range(REPLAY_RUNS):
                reader, writer = await hub_session(pointer["port"], pointer["token"])
                started = time.perf_counter()
                writer.write(orjson.dumps(hp.follow(after=after, idle_ms=0)) + b"\n")
                opened_as = orjson.loads(await reader.readline())
                assert opened_as["replay"] == "ring", opened_as
                got = 0
                while got < REPLAY_FRAMES:
                    if orjson.loads(await reader.readline())["type"] == "event":
                        got += 1
                timings.append((time.perf_counter() - started) * 1000)
                writer.close()
            rows.append((f"ring replay of {REPLAY_FRAMES} frames to a new follower",
                         f"median {statistics.median(timings):.1f} ms (min {min(timings):.1f}, max {max(timings):.1f})",
                         "≤ 50 ms"))
            for consumer in consumers:
                consumer.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
    finally:
        hub.stop()
        board.stop()
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-hub-bench-") as folder:
        try:
            import uvloop
        except ImportError:
            rows = asyncio.run(run(Path(folder)))
        else:
            rows = uvloop.run(run(Path(folder)))
    width = max(len(name) for name, _, _ in rows)
    print(f"| {'measure':<{width}} | result | goal |")
    print(f"|{'-' * (width + 2)}|---|---|")
    for name, value, goal in rows:
        print(f"| {name:<{width}} | {value} | {goal} |")
    print(f"\n`{COMMAND}` (hub and board as subprocesses; writer, followers and the direct stream in one process)")


if __name__ == "__main__":
    main()
