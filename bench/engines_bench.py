"""The two store engines side by side, in one run on one machine.

1. HTTP mutations/s at 16 clients (each alternating ``PATCH /tasks/{id}`` and ``POST
   /tasks/{id}/move`` on its own task, as ``bench/http_bench.py``): ``taskd`` on SQLite; on
   PostgreSQL with one board process; on PostgreSQL with two board processes on one database (8
   clients on each). Goals: two processes ≥ 1.5× one; PostgreSQL single ≥ 0.5× SQLite. Beside
   them, the two processes each on a database of its own: no lock between their writers, so what
   the machine itself allows two processes.
2. Write → frame at 100 open streams: a task created on process A, the time until each of 100
   streams open on process B has its frame (PostgreSQL, LISTEN/NOTIFY between the processes),
   against the same with writer and streams on one SQLite board process. Goal: PostgreSQL p50 ≤ 2×
   the SQLite p50 of the same run.

PostgreSQL is a throwaway cluster started for the run (``tests/support/postgres.py``: initdb in a
temp dir, loopback port, fsync off, as the test suite runs it), with ``pg_stat_statements`` loaded
so each row also says how many statements a mutation cost the server: a count, which does not
move with the machine's load as the rates and the CPU times do.

    .venv/bin/python -m bench engines
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psycopg

from bench.http_bench import client_loop
from bench.support import CLOCK_TICKS, Board, cancel_all, follow_board, start_board

COMMAND = ".venv/bin/python -m bench engines"
CLIENTS = 16
SECONDS = 8.0
WARMUP_SECONDS = 1.0
STREAMS = 100
WRITES = 100
HEADERS = {"X-Taskloom-Actor-Kind": "claude", "X-Taskloom-Actor": "bench"}


@dataclass
class Throughput:
    label: str
    mutations: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    #: CPU seconds over the measured phase: the ``taskd`` processes', the database server's.
    board_cpu: float = 0.0
    server_cpu: float = 0.0
    #: Statements the database server ran over the phase (none counted for SQLite).
    statements: float = 0.0

    @property
    def rate(self) -> float:
        return self.mutations / self.wall

    def per_mutation_us(self, cpu: float) -> float:
        return cpu / self.mutations * 1e6


#: What the bench's cluster loads beside the tests' settings: a count of the statements it runs.
COUNTED = {"shared_preload_libraries": "'pg_stat_statements'", "pg_stat_statements.track": "top"}


def statements_run(cluster: Any) -> float:
    """Statements the cluster has run so far, every database's (``pg_stat_statements``). Not a
    time: the same code gives the same count however busy the machine is."""
    with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements").fetchone()
    return float(row[0]) if row is not None else 0.0


def server_cpu_seconds(data_dir: Path) -> float:
    """user + system CPU of a PostgreSQL cluster so far: the postmaster's own and its finished
    children's (``cutime``/``cstime``), and each live child's (Linux ``/proc``)."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile: its time is in the postmaster's cutime
        pid = int(stat.parent.name)
        if pid == postmaster:
            total += sum(int(value) for value in fields[11:15])
        elif int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


class _Result:
    """What ``http_bench.client_loop`` fills in."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0


async def _bench_tasks(session: aiohttp.ClientSession, base: str, count: int) -> list[str]:
    """The bench's project on the database ``base`` serves, and ``count`` tasks in it."""
    async with session.post(f"{base}/projects", json={"id": "bench", "name": "Bench"}) as response:
        assert response.status == 201, await response.text()
    task_ids = []
    for n in range(count):
        async with session.post(f"{base}/tasks", json={"project": "bench", "title": f"task {n}"}) as response:
            assert response.status == 201, await response.text()
            task_ids.append((await response.json())["id"])
    return task_ids


async def throughput(
    label: str, boards: list[Board], *, one_database: bool = True, server_cpu: Callable[[], float] = lambda: 0.0,
    statements: Callable[[], float] = lambda: 0.0,
) -> Throughput:
    """16 clients, spread evenly over ``boards``: processes serving one database, or (not
    ``one_database``) each its own, with its own token and tasks. ``server_cpu``: the database
    server's CPU seconds so far, ``statements`` the statements it has run (none for SQLite)."""
    sessions = [aiohttp.ClientSession(headers={**HEADERS, "Authorization": f"Bearer {board.token}"},
                                      connector=aiohttp.TCPConnector(limit=CLIENTS))
                for board in (boards[:1] if one_database else boards)]
    try:
        base = [f"{board.url}/api/v1" for board in boards]
        if one_database:
            task_ids = await _bench_tasks(sessions[0], base[0], CLIENTS)
        else:
            made = [await _bench_tasks(session, url, CLIENTS // len(boards)) for session, url in zip(sessions, base)]
            task_ids = [made[n % len(boards)][n // len(boards)] for n in range(CLIENTS)]

        def clients(stop_at: float, result: _Result | None) -> list[Coroutine[Any, Any, None]]:
            return [client_loop(sessions[n % len(sessions)], base[n % len(base)], task_ids[n], stop_at, result)  # type: ignore[arg-type]
                    for n in range(CLIENTS)]

        await asyncio.gather(*clients(time.perf_counter() + WARMUP_SECONDS, None))
        result = _Result()
        board_cpu, database_cpu, ran = sum(board.cpu_seconds() for board in boards), server_cpu(), statements()
        started = time.perf_counter()
        await asyncio.gather(*clients(started + SECONDS, result))
        wall = time.perf_counter() - started
        board_cpu = sum(board.cpu_seconds() for board in boards) - board_cpu
        database_cpu = server_cpu() - database_cpu
        ran = statements() - ran
    finally:
        for session in sessions:
            await session.close()
    return Throughput(label, len(result.latencies), wall, result.latencies, board_cpu, database_cpu, ran)


async def follow(board: Board, arrivals: dict[str, float], opened: asyncio.Event) -> None:
    def on_message(event: str | None, data: str, chunk_at: float) -> None:
        if event is None:
            frame = orjson.loads(data)
            if frame["event"] == "task_created":
                arrivals[frame["task_id"]] = chunk_at

    await follow_board(board.url, board.token, opened, on_message)


async def write_to_frame(writer: Board, reader: Board) -> list[float]:
    """Seconds from a create's request on ``writer`` to its frame on each of 100 streams on ``reader``."""
    headers = {**HEADERS, "Authorization": f"Bearer {writer.token}"}
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=STREAMS + 4)) as session:
        async with session.post(f"{writer.url}/api/v1/projects", json={"id": "lat", "name": "Latency"}) as response:
            assert response.status == 201, await response.text()
        arrivals: list[dict[str, float]] = [{} for _ in range(STREAMS)]
        opened = [asyncio.Event() for _ in range(STREAMS)]
        readers = [asyncio.ensure_future(follow(reader, arrivals[n], opened[n])) for n in range(STREAMS)]
        await asyncio.gather(*(event.wait() for event in opened))
        latencies: list[float] = []
        for n in range(WRITES):
            sent = time.perf_counter()
            async with session.post(f"{writer.url}/api/v1/tasks", json={"project": "lat", "title": f"t{n}"}) as response:
                task_id = (await response.json())["id"]
            deadline = time.monotonic() + 10
            while not all(task_id in seen for seen in arrivals):
                if time.monotonic() > deadline:
                    raise RuntimeError("a stream did not get its frame within 10 s")
                await asyncio.sleep(0.001)
            latencies.extend(seen[task_id] - sent for seen in arrivals)
        await cancel_all(readers)
    return latencies


def pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.postgres import Cluster, find_binaries, fresh_database

    cluster = Cluster(find_binaries(), settings=COUNTED)
    cluster.start()
    with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")

    def server() -> float:
        return server_cpu_seconds(cluster.data_dir)

    def counted() -> float:
        return statements_run(cluster)

    rows: list[Throughput] = []
    latency: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="taskloom-engines-") as folder:
            root = Path(folder)
            sqlite = start_board(root / "sqlite")
            try:
                rows.append(asyncio.run(throughput("SQLite, one process", [sqlite])))
            finally:
                sqlite.stop()
            url = fresh_database(cluster)
            one = start_board(root / "pg1", "--database", url)
            try:
                rows.append(asyncio.run(throughput("PostgreSQL, one process", [one], server_cpu=server, statements=counted)))
            finally:
                one.stop()
            url = fresh_database(cluster)
            a, b = start_board(root / "pg2a", "--database", url), start_board(root / "pg2b", "--database", url)
            try:
                rows.append(asyncio.run(throughput("PostgreSQL, two processes", [a, b], server_cpu=server, statements=counted)))
            finally:
                a.stop()
                b.stop()
            # The same two processes, each on a database of its own: no lock between their writers.
            a = start_board(root / "pg2da", "--database", fresh_database(cluster))
            b = start_board(root / "pg2db", "--database", fresh_database(cluster))
            try:
                rows.append(asyncio.run(throughput("PostgreSQL, two processes on two databases", [a, b], one_database=False,
                                                  server_cpu=server, statements=counted)))
            finally:
                a.stop()
                b.stop()
            sqlite = start_board(root / "sqlite-lat")
            try:
                latency["SQLite, writer and streams in one process"] = asyncio.run(write_to_frame(sqlite, sqlite))
            finally:
                sqlite.stop()
            url = fresh_database(cluster)
            a, b = start_board(root / "lat-a", "--database", url), start_board(root / "lat-b", "--database", url)
            try:
                latency["PostgreSQL, write on A, streams on B"] = asyncio.run(write_to_frame(a, b))
            finally:
                a.stop()
                b.stop()
    finally:
        cluster.stop()

    print(f"{CLIENTS} clients, {SECONDS:.0f} s each after {WARMUP_SECONDS:.0f} s warm-up; `{COMMAND}`\n")
    print("| engine | mutations/s | p50 ms | p99 ms | taskd CPU µs/mutation | server CPU µs/mutation"
          " | statements/mutation |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.label} | {row.rate:,.0f} | {pct(row.latencies, 0.5):.2f} | {pct(row.latencies, 0.99):.2f}"
              f" | {row.per_mutation_us(row.board_cpu):,.0f} | {row.per_mutation_us(row.server_cpu):,.0f}"
              f" | {row.statements / row.mutations:.2f} |")
    sqlite_rate, pg_one, pg_two, apart = (row.rate for row in rows)
    print(f"\nPostgreSQL one / SQLite: {pg_one / sqlite_rate:.2f}× (goal ≥ 0.5×); "
          f"two processes / one: {pg_two / pg_one:.2f}× (goal ≥ 1.5×); two processes on two databases / one: "
          f"{apart / pg_one:.2f}× (no lock between them: what the machine allows)")
    print(f"\nwrite → frame, {STREAMS} streams, {WRITES} writes ({STREAMS * WRITES} frames):\n")
    print("| setup | p50 ms | p99 ms | mean ms |")
    print("|---|---|---|---|")
    for label, values in latency.items():
        print(f"| {label} | {pct(values, 0.5):.2f} | {pct(values, 0.99):.2f} | {statistics.fmean(values) * 1000:.2f} |")
    sqlite_p50, pg_p50 = (pct(values, 0.5) for values in latency.values())
    print(f"\nPostgreSQL cross-process p50 / SQLite in-process p50: {pg_p50 / sqlite_p50:.2f}× (goal ≤ 2×)")


if __name__ == "__main__":
    main()
