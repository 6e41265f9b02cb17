"""Live-stream benchmark: the board, the writers and the readers run as separate processes.

    .venv/bin/python -m bench.stream_bench            # the full run (about two minutes)
    .venv/bin/python -m bench.stream_bench --quick    # smaller numbers, a smoke test

Measures, on this machine, in one run (issue 3's targets in brackets):

* write → frame latency, p50/p99, with 100 open streams at 200 writes/s (≤ 5 ms / ≤ 25 ms);
* fan-out: 500 streams receiving every event at 100 events/s, p99 and loss (≤ 250 ms, none);
* replay: frames/s catching one client up from 100,000 revisions back (≥ 50,000/s);
* memory: board RSS cost of 1,000 idle open streams (≤ 100 MB);
* external-writer latency, p50: a second process writing the SQLite file (≤ 150 ms).

Latency runs from the moment a writer sends its write (its wall clock, embedded in the task
title) to the moment a reader has parsed the frame: it includes the HTTP request and the commit,
so it is an upper bound on commit → frame. Readers use the shared ``SSEParser``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from bench.support import Service, start_board

REPO = Path(__file__).resolve().parents[1]
TITLE_PREFIX = "bench "


# -- helpers shared by the roles -------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def install_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# -- role: readers ---------------------------------------------------------------------------------


class CountingStream(asyncio.Protocol):
    """A raw-socket stream client that only counts data frames: cheap enough that hundreds of
    streams in a few processes leave the CPU to the board. (Each chunk the board writes holds whole
    frames, so chunked-encoding lines never split a ``\ndata: `` marker; TCP splits are carried.)"""

    MARKER = b"\ndata: "

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.opened = asyncio.Event()
        self.count = 0
        self.status = 0
        self._head = b""
        self._tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's, whichever loop made it
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.opened.is_set():
            self._head += data
            if b"\r\n\r\n" not in self._head:
                return
            head, _, data = self._head.partition(b"\r\n\r\n")
            self.status = int(head.split(b" ", 2)[1])
            self._head = b""
            self.opened.set()
        text = self._tail + data
        self.count += text.count(self.MARKER)
        self._tail = text[-(len(self.MARKER) - 1):]

    def connection_lost(self, exc: Exception | None) -> None:
        self.opened.set()


async def reader_role(config: dict[str, Any]) -> None:
    """Open streams, report ready, read until told where the writes ended, report what arrived.

    The first ``measured`` streams are real clients (aiohttp + the shared SSEParser) and time every
    frame; the others count frames over a raw socket.
    """
    import urllib.parse

    import aiohttp

    from shared.sse import SSEMessage, SSEParser
    from shared.timestamps import parse_timestamp

    url, token, count = config["url"], config["token"], config["streams"]
    measured = min(count, config.get("measured", count))
    latencies = array("d")  # the writer's send time → frame parsed
    from_commit = array("d")  # the row's created_at (the transaction's clock, ms) → frame parsed
    received = [0] * measured
    last = [0] * measured
    goal = {"final": 1 << 62, "expected": 1 << 62}
    progress = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers={"Authorization": f"Bearer {token}"}) as session:
        responses = [await session.get(f"{url}/api/v1/events") for _ in range(measured)]
        assert all(response.status == 200 for response in responses), [r.status for r in responses]

        async def follow(index: int, response: aiohttp.ClientResponse, opened: asyncio.Event) -> None:
            parser = SSEParser()
            async for chunk in response.content.iter_any():
                now = time.time()
                for item in parser.feed(chunk):
                    if not isinstance(item, SSEMessage):
                        continue
                    if item.retry is not None:
                        opened.set()
                    if item.data is None:
                        continue
                    received[index] += 1
                    last[index] = int(item.id or 0)
                    activity = orjson.loads(item.data)
                    title = activity["changes"].get("after", {}).get("title", "")
                    if isinstance(title, str) and title.startswith(TITLE_PREFIX):
                        latencies.append(now - float(title[len(TITLE_PREFIX):]))
                        from_commit.append(now - parse_timestamp(activity["created_at"]).timestamp())
                progress.set()

        opened = [asyncio.Event() for _ in responses]
        tasks = [asyncio.create_task(follow(n, response, opened[n])) for n, response in enumerate(responses)]

        parts = urllib.parse.urlsplit(url)
        request = (f"GET /api/v1/events HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                   "Accept: text/event-stream\r\n\r\n").encode()
        loop = asyncio.get_running_loop()
        counters: list[CountingStream] = []
        for _ in range(count - measured):
            counter = CountingStream(request)
            await loop.create_connection(lambda c=counter: c, parts.hostname, parts.port)  # type: ignore[misc]
            counters.append(counter)
        await asyncio.gather(*(event.wait() for event in opened), *(counter.opened.wait() for counter in counters))
        assert all(counter.status == 200 for counter in counters), {counter.status for counter in counters}
        emit({"ready": count})

        line = await loop.run_in_executor(None, sys.stdin.readline)
        goal.update(json.loads(line))

        def complete() -> bool:
            return all(value >= goal["final"] for value in last) and all(
                counter.count >= goal["expected"] for counter in counters
            )

        deadline = loop.time() + goal["deadline"]
        while not complete() and loop.time() < deadline:
            progress.clear()
            try:
                async with asyncio.timeout(0.05):
                    await progress.wait()
            except TimeoutError:
                pass
        for task in tasks:
            task.cancel()
        for counter in counters:
            if counter.transport is not None:
                counter.transport.close()
        path = Path(config["out"])
        path.write_bytes(latencies.tobytes())
        Path(f"{path}.commit").write_bytes(from_commit.tobytes())
        emit({
            "received": received + [counter.count for counter in counters],
            "latencies": str(path),
            "reached": sum(value >= goal["final"] for value in last)
            + sum(counter.count >= goal["expected"] for counter in counters),
        })


# -- role: HTTP writer -----------------------------------------------------------------------------


async def writer_role(config: dict[str, Any]) -> None:
    """Write at a fixed rate (title updates carrying the send time) and report the count."""
    import aiohttp

    url, token, rate, duration, tasks = config["url"], config["token"], config["rate"], config["duration"], config["tasks"]
    headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor": "bench", "X-Taskloom-Actor-Kind": "codex"}
    ok = failed = 0
    limit = asyncio.Semaphore(64)
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=64)) as session:

        async def one(task: str) -> None:
            nonlocal ok, failed
            async with limit:
                body = {"title": f"{TITLE_PREFIX}{time.time():.6f}"}
                async with session.patch(f"{url}/api/v1/tasks/{task}", json=body) as reply:
                    await reply.read()
                    if reply.status == 200:
                        ok += 1
                    else:
                        failed += 1

        loop = asyncio.get_running_loop()
        began = loop.time()
        total = int(rate * duration)
        pending = []
        for n in range(total):
            delay = began + n / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(one(tasks[n % len(tasks)])))
        await asyncio.gather(*pending)
    emit({"ok": ok, "failed": failed})


# -- role: a second process writing the SQLite file -------------------------------------------------


def external_role(config: dict[str, Any]) -> None:
    from services.board.commands.tasks import update_task
    from services.board.sqlite_store import SqliteStore
    from services.board.store import Actor

    store = SqliteStore(Path(config["database"]))
    actor = Actor("codex", "external")
    interval = 1 / config["rate"]
    began = time.monotonic()
    try:
        for n in range(int(config["rate"] * config["duration"])):
            delay = began + n * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            store.run_command(update_task, actor, config["task"], title=f"{TITLE_PREFIX}{time.time():.6f}")
    finally:
        store.close()
    emit({"ok": int(config["rate"] * config["duration"])})


def bulk_role(config: dict[str, Any]) -> None:
    from services.board.sqlite_store import SqliteStore
    from services.board.store import Actor
    from shared import events

    def rows(tx: Any, start: int, count: int) -> None:
        for n in range(start, start + count):
            changes = events.task_updated(fields=["meta"], after={"meta": {"n": n}})
            tx.record(events.TASK_UPDATED, changes, task_id=config["task"], project_id="bench")

    store = SqliteStore(Path(config["database"]))
    try:
        for start in range(0, config["count"], 2000):
            store.run_command(rows, Actor("codex", "bulk"), start, min(2000, config["count"] - start))
    finally:
        store.close()
    emit({"ok": config["count"]})


async def replay_role(config: dict[str, Any]) -> None:
    """One client catching up from a cursor: frames per second until the final revision.

    ``raw`` counts frames over a raw socket (what the board can serve); otherwise the client is
    aiohttp + the shared SSEParser (what a Python consumer sees, usually bound by its own parsing).
    """
    import urllib.parse

    import aiohttp

    from shared.sse import SSEMessage, SSEParser

    if config.get("raw"):
        parts = urllib.parse.urlsplit(config["url"])
        request = (f"GET /api/v1/events?after={config['after']} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                   f"Authorization: Bearer {config['token']}\r\n\r\n").encode()
        loop = asyncio.get_running_loop()
        began = time.monotonic()
        counter = CountingStream(request)
        await loop.create_connection(lambda: counter, parts.hostname, parts.port)
        while counter.count < config["expected"]:
            await asyncio.sleep(0.005)
        elapsed = time.monotonic() - began
        assert counter.transport is not None
        counter.transport.close()
        emit({"frames": counter.count, "seconds": elapsed})
        return

    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout, headers={"Authorization": f"Bearer {config['token']}"}) as session:
        began = time.monotonic()
        parser = SSEParser()
        frames = 0
        last = 0
        async with session.get(f"{config['url']}/api/v1/events?after={config['after']}") as response:
            async for chunk in response.content.iter_any():
                for item in parser.feed(chunk):
                    if isinstance(item, SSEMessage) and item.data is not None:
                        frames += 1
                        last = int(item.id or 0)
                if last >= config["final"]:
                    break
        elapsed = time.monotonic() - began
    emit({"frames": frames, "seconds": elapsed})


# -- the orchestrator ------------------------------------------------------------------------------


@dataclass
class Board:
    root: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    token: str = ""
    #: Variables for this board's environment (a knob such as TASKLOOM_BOARD_DURABILITY).
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def start(self) -> None:
        board = start_board(self.root, "--max-streams", "2000", env={**os.environ, **self.extra_env})
        self.process, self.url, self.token = board.process, board.url, board.token

    def rss(self) -> float:
        assert self.process is not None
        return rss_mb(self.process.pid)

    def cpu(self) -> float:
        assert self.process is not None
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process is not None:
            Service(self.process).stop()

    def api(self, method: str, path: str, body: Any = None) -> Any:
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}", "X-Taskloom-Actor": "bench", "Content-Type": "application/json"}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        reply = conn.getresponse()
        payload = json.loads(reply.read() or b"null")
        conn.close()
        if reply.status >= 400:
            raise SystemExit(f"{method} {path} → {reply.status}: {payload}")
        return payload

    def last_activity(self) -> int:
        items = self.api("GET", "/api/v1/activities?order=desc&limit=1")["items"]
        return items[0]["revision"] if items else 0


@dataclass
class Role:
    process: subprocess.Popen[str]
    records: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def spawn(cls, role: str, config: dict[str, Any]) -> Role:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.stream_bench", "--role", role, json.dumps(config)],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        return cls(process)

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a bench process ended early (exit {self.process.wait()})")
        record: dict[str, Any] = json.loads(line)
        return record

    def send(self, record: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(record) + "\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if n < total % parts else 0) for n in range(parts)]


def open_readers(board: Board, tmp: Path, *, streams: int, processes: int, tag: str, measured: int) -> list[Role]:
    readers = [
        Role.spawn("reader", {"url": board.url, "token": board.token, "streams": count, "measured": sample,
                              "out": str(tmp / f"{tag}-{n}.lat")})
        for n, (count, sample) in enumerate(zip(split(streams, processes), split(measured, processes)))
    ]
    for reader in readers:
        reader.read()  # ready: every stream has its retry frame
    return readers


@dataclass
class Received:
    latencies: list[float] = field(default_factory=list)  # send → frame, seconds
    from_commit: list[float] = field(default_factory=list)  # created_at → frame, seconds
    counts: list[int] = field(default_factory=list)  # data frames per stream
    reached: int = 0  # streams that got everything


def close_readers(readers: list[Role], final: int, expected: int, deadline: float) -> Received:
    for reader in readers:
        reader.send({"final": final, "expected": expected, "deadline": deadline})
    got = Received()
    for reader in readers:
        result = reader.read()
        reader.finish()
        for path, into in ((Path(result["latencies"]), got.latencies), (Path(f"{result['latencies']}.commit"), got.from_commit)):
            values = array("d")
            values.frombytes(path.read_bytes())
            into += list(values)
        got.counts += result["received"]
        got.reached += result["reached"]
    return got


def make_tasks(board: Board, count: int) -> list[str]:
    return [board.api("POST", "/api/v1/tasks", {"project": "bench", "title": f"t{n}"})["id"] for n in range(count)]


def latency_phase(board: Board, tmp: Path, tasks: list[str], *, streams: int, processes: int, measured: int,
                  rate: int, duration: float, tag: str) -> dict[str, Any]:
    readers = open_readers(board, tmp, streams=streams, processes=processes, tag=tag, measured=measured)
    cpu_before = board.cpu()
    writer = Role.spawn("writer", {"url": board.url, "token": board.token, "rate": rate, "duration": duration,
                                   "tasks": tasks})
    written = writer.read()
    writer.finish()
    expected = written["ok"]
    got = close_readers(readers, board.last_activity(), expected, deadline=30)
    board_cpu = board.cpu() - cpu_before
    lost = sum(max(0, expected - count) for count in got.counts)
    latencies = got.latencies
    return {
        "streams": streams, "measured": measured, "rate": rate, "writes": expected, "failed_writes": written["failed"],
        "p50_ms": percentile(latencies, 0.50) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies, default=float("nan")) * 1000, "deliveries": len(latencies),
        "commit_p50_ms": percentile(got.from_commit, 0.50) * 1000,
        "commit_p99_ms": percentile(got.from_commit, 0.99) * 1000,
        "lost": lost, "streams_complete": got.reached,
        "board_cpu_s": board_cpu, "board_us_per_delivery": board_cpu * 1e6 / max(1, expected * streams),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small numbers: a smoke test of the bench itself")
    parser.add_argument("--fanout-streams", type=int, default=1000,
                        help="streams in the fan-out phase (default 1000; issue 15: p99 under 4× the 100-stream p99)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("config", nargs="?", help=argparse.SUPPRESS)
    # ``python -m bench`` calls main() with the bench names still in sys.argv: parse only our own.
    args = parser.parse_args(argv or [])
    if args.role:
        install_uvloop()
        config = json.loads(args.config)
        if args.role == "reader":
            asyncio.run(reader_role(config))
        elif args.role == "writer":
            asyncio.run(writer_role(config))
        elif args.role == "replay":
            asyncio.run(replay_role(config))
        elif args.role == "external":
            external_role(config)
        elif args.role == "bulk":
            bulk_role(config)
        return

    scale = 0.1 if args.quick else 1.0
    tmp = Path(tempfile.mkdtemp(prefix="taskloom-bench-"))
    board = Board(tmp)
    results: dict[str, Any] = {"load": os.getloadavg()}
    began = time.monotonic()
    try:
        board.start()
        board.api("POST", "/api/v1/projects", {"id": "bench", "name": "Bench"})
        tasks = make_tasks(board, 20)

        idle = max(10, int(1000 * scale))
        before = board.rss()
        readers = open_readers(board, tmp, streams=idle, processes=2, tag="idle", measured=0)
        time.sleep(1.0)  # let the allocator settle before sampling; a measurement, not synchronisation
        after = board.rss()
        close_readers(readers, 0, 0, deadline=5)  # nothing was written: they stop at once
        results["idle"] = {"streams": idle, "rss_before_mb": before, "rss_after_mb": after,
                           "cost_mb": after - before, "kb_per_stream": (after - before) * 1024 / idle}
        print(f"idle streams: {results['idle']}", file=sys.stderr)

        results["latency"] = latency_phase(board, tmp, tasks, streams=100, processes=1, measured=10, rate=200,
                                           duration=10 * scale, tag="latency")
        print(f"latency: {results['latency']}", file=sys.stderr)
        results["fanout"] = latency_phase(board, tmp, tasks, streams=max(50, int(args.fanout_streams * scale)),
                                          processes=4,
                                          measured=20, rate=100, duration=10 * scale, tag="fanout")
        print(f"fan-out: {results['fanout']}", file=sys.stderr)

        readers = open_readers(board, tmp, streams=1, processes=1, tag="external", measured=1)
        external = Role.spawn("external", {"database": str(board.data_dir / "board.sqlite"), "task": tasks[0],
                                           "rate": 20, "duration": max(2.0, 10 * scale)})
        written = external.read()
        external.finish()
        got = close_readers(readers, board.last_activity(), written["ok"], deadline=10)
        results["external"] = {"writes": written["ok"], "received": sum(got.counts),
                               "p50_ms": percentile(got.latencies, 0.5) * 1000,
                               "p99_ms": percentile(got.latencies, 0.99) * 1000}
        print(f"external writer: {results['external']}", file=sys.stderr)

        backlog = int(100_000 * scale)
        start = board.api("GET", "/api/v1/meta")["revision"]
        bulk = Role.spawn("bulk", {"database": str(board.data_dir / "board.sqlite"), "task": tasks[1], "count": backlog})
        bulk.read()
        bulk.finish()
        final = board.last_activity()
        for kind, raw in (("replay_raw", True), ("replay", False)):
            replay = Role.spawn("replay", {"url": board.url, "token": board.token, "after": start, "final": final,
                                           "expected": backlog, "raw": raw})
            result = replay.read()
            replay.finish()
            results[kind] = {"frames": result["frames"], "seconds": result["seconds"],
                             "frames_per_s": result["frames"] / result["seconds"]}
            print(f"{kind}: {results[kind]}", file=sys.stderr)
    finally:
        board.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["wall_s"] = time.monotonic() - began
    print_table(results)


def print_table(results: dict[str, Any]) -> None:
    latency, fanout, external = results["latency"], results["fanout"], results["external"]
    replay, raw, idle = results["replay"], results["replay_raw"], results["idle"]
    rows = [
        ("write → frame p50", f"{latency['streams']} streams ({latency['measured']} timed), {latency['rate']} writes/s",
         f"{latency['p50_ms']:.1f} ms", "≤ 5 ms"),
        ("write → frame p99", f"lost {latency['lost']} of {latency['writes'] * latency['streams']}",
         f"{latency['p99_ms']:.1f} ms", "≤ 25 ms"),
        ("commit → frame p50/p99", "from the row's created_at (ms clock)",
         f"{latency['commit_p50_ms']:.1f} / {latency['commit_p99_ms']:.1f} ms", "-"),
        ("fan-out p99", f"{fanout['streams']} streams ({fanout['measured']} timed), {fanout['rate']} events/s",
         f"{fanout['p99_ms']:.1f} ms (p50 {fanout['p50_ms']:.1f}; "
         f"{fanout['p99_ms'] / latency['p99_ms']:.1f}× the {latency['streams']}-stream p99)",
         "≤ 250 ms, < 4× the 100-stream p99"),
        ("fan-out loss", f"{fanout['writes'] * fanout['streams']} deliveries", f"{fanout['lost']} lost", "0"),
        ("replay (board)", f"{raw['frames']} frames in {raw['seconds']:.2f} s, raw-socket counter",
         f"{raw['frames_per_s']:,.0f} frames/s", "≥ 75,000/s"),
        ("replay (Python client)", f"{replay['frames']} frames in {replay['seconds']:.2f} s, aiohttp + SSEParser",
         f"{replay['frames_per_s']:,.0f} frames/s", "-"),
        ("idle streams RSS", f"{idle['streams']} streams ({idle['kb_per_stream']:.0f} KB each)",
         f"{idle['cost_mb']:.1f} MB", "≤ 100 MB"),
        ("external writer p50", f"{external['received']}/{external['writes']} received, 20 writes/s",
         f"{external['p50_ms']:.1f} ms (p99 {external['p99_ms']:.1f})", "≤ 150 ms"),
    ]
    widths = [max(len(row[n]) for row in rows) for n in range(4)]
    header = ("measure", "setup", "result", "target")
    widths = [max(width, len(title)) for width, title in zip(widths, header)]
    line = "  ".join(title.ljust(width) for title, width in zip(header, widths))
    print(line)
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    print(f"\nboard CPU per delivered frame: {latency['board_us_per_delivery']:.0f} µs (latency run), "
          f"{fanout['board_us_per_delivery']:.0f} µs (fan-out run), HTTP write handling included")
    print(f"wall time {results['wall_s']:.0f} s; {os.cpu_count()} CPUs; load average before/after "
          f"{results['load'][0]:.1f}/{os.getloadavg()[0]:.1f}; board, writers and readers in separate processes")


if __name__ == "__main__":
    main(sys.argv[1:])
