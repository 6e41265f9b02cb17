"""Conditions (docs/conditions.md): what they cost and how exactly they fire.

1. CPU per mutation through the store seam: no conditions engine at all, the engine with a
   project that configures nothing, and the engine with every condition configured (WIP limit,
   two monitored lanes, status timeouts, idle, a blocked card) — three boards open at once, taking
   turns a block of 100 moves at a time, compared turn by turn.
2. Timer precision with 10,000 armed temporal conditions: ``status_since`` of 10,000 in-progress
   cards is spread over a window in one UPDATE, then the engine starts and arms them from state,
   as at a board start; fire − deadline is read when each signal reaches the engine's listener
   (after its COMMIT). The board's RSS with them armed, against before.
3. Write → ``card_unblocked`` on an open SSE stream of a real board over loopback (HTTP write,
   raw frame read), p50/p99.
4. ``GET /tasks?ready=true`` in the store at 50,000 tasks (a quarter blocked), p50/p99.

    .venv/bin/python -m bench conditions
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from services.board.app import create_app
from services.board.commands import projects, relations, tasks
from services.board.conditions.signals import Signal
from services.board.conditions.timer import ConditionsEngine
from services.board.queries.tasks import list_tasks
from services.board.settings import BoardSettings
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx, utc_now
from shared.timestamps import format_timestamp, parse_timestamp

COMMAND = ".venv/bin/python -m bench conditions"
ACTOR = Actor("claude", "bench")
#: Moves per mode, taken ``BLOCK`` at a time in turns with the other modes.
MUTATIONS = int(os.environ.get("TASKLOOM_BENCH_MUTATIONS", "10000"))
BLOCK = 100
WARM_UP = 200
ARMED = int(os.environ.get("TASKLOOM_BENCH_ARMED", "10000"))
WINDOW_SECONDS = 8.0
#: Time the engine gets to rebuild (10,000 cards) before the first deadline: what is measured is
#: firing with that many armed, not a start after downtime.
LEAD_SECONDS = float(os.environ.get("TASKLOOM_BENCH_LEAD", "20"))
UNBLOCK_TRIALS = int(os.environ.get("TASKLOOM_BENCH_TRIALS", "200"))
READY_TASKS = int(os.environ.get("TASKLOOM_BENCH_READY_TASKS", "50000"))
READY_QUERIES = 200
CONFIGURED = {
    "wip_limits": {"in_progress": 3, "todo": 100_000},
    "monitors": {"lanes": ["todo", "backlog"], "max_time_in_status": {"todo": 86400, "backlog": 86400},
                 "idle_after": 86400},
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def rss_kb() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# -- 1. CPU per mutation ----------------------------------------------------------------------


def seed(tx: Tx, project: str, settings: dict[str, Any] | None, count: int) -> list[str]:
    projects.create_project(tx, id=project, settings=settings)
    ids = [tasks.create_task(tx, project=project, title=f"card {n}")[0]["id"] for n in range(count)]
    relations.add_relation(tx, ids[0], type="blocks", target=ids[1])
    return ids


MODES = ("no engine", "engine, no settings", "configured")


class Board:
    """One store in one mode, with its cards and where its next move goes."""

    def __init__(self, folder: Path, mode: str) -> None:
        self.mode = mode
        self.store = SqliteStore(folder / f"{mode}.sqlite")
        self.engine: ConditionsEngine | None = None
        self.cards: list[str] = []
        self.moved = 0

    async def open(self) -> None:
        self.store.open()
        if self.mode != "no engine":
            self.engine = ConditionsEngine(self.store, claim_fresh_seconds=600)
            await self.engine.start()
        settings = CONFIGURED if self.mode == "configured" else None
        self.cards = (await self.store.command(seed, ACTOR, "demo", settings, 20))[2:]

    async def moves(self, count: int) -> float:
        """CPU seconds of the whole process for ``count`` moves (the writer thread included)."""
        started = time.process_time()
        for _ in range(count):
            n = self.moved
            to = "backlog" if (n // len(self.cards)) % 2 == 0 else "todo"
            await self.store.command(tasks.move_task, ACTOR, self.cards[n % len(self.cards)], to=to)
            self.moved += 1
        return time.process_time() - started

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
        self.store.close()


async def cpu_per_mutation(folder: Path) -> dict[str, list[float]]:
    """µs per move in each mode, block by block. The three boards are open at once and take turns
    a block of ``BLOCK`` moves at a time (the order rotating), so whatever else the machine does
    falls on every mode alike: compared per block, the modes' difference is the hook's, not the
    minute's."""
    boards = [Board(folder, mode) for mode in MODES]
    for board in boards:
        await board.open()
    try:
        for board in boards:
            await board.moves(WARM_UP)
        blocks: dict[str, list[float]] = {mode: [] for mode in MODES}
        for turn in range(MUTATIONS // BLOCK):
            shift = turn % len(boards)
            for board in boards[shift:] + boards[:shift]:
                blocks[board.mode].append(await board.moves(BLOCK) / BLOCK * 1e6)
        return blocks
    finally:
        for board in boards:
            await board.close()


def paired(blocks: dict[str, list[float]], mode: str, base: str) -> float:
    """The median over turns of (mode ÷ base − 1), each turn's blocks run back to back."""
    return statistics.median(a / b - 1 for a, b in zip(blocks[mode], blocks[base], strict=True))


# -- 2. timer precision ----------------------------------------------------------------------


def arm_many(tx: Tx, count: int, threshold: int) -> None:
    projects.create_project(tx, id="timer", settings={"monitors": {"max_time_in_status": {"in_progress": threshold}}})
    for n in range(count):
        task = tasks.create_task(tx, project="timer", title=f"card {n}")[0]
        tasks.claim_task(tx, task["id"])


def spread(tx: Tx, count: int, start: float, window: float, threshold: int) -> dict[str, float]:
    """Deadlines spread evenly over the window (a bench shortcut: one UPDATE per card)."""
    deadlines: dict[str, float] = {}
    rows = tx.all("SELECT id FROM tasks WHERE project_id = 'timer' ORDER BY rowid")
    for n, row in enumerate(rows):
        deadline = start + window * n / count
        since = format_timestamp_epoch(deadline - threshold)
        tx.execute("UPDATE tasks SET status_since = ? WHERE id = ?", (since, row[0]))
        deadlines[row[0]] = parse_timestamp(since).timestamp() + threshold
    return deadlines


def format_timestamp_epoch(seconds: float) -> str:
    return format_timestamp(datetime.fromtimestamp(seconds, UTC))


async def timer_precision(folder: Path) -> dict[str, float]:
    threshold = 3600
    store = SqliteStore(folder / "timer.sqlite")
    store.open()
    await store.command(arm_many, ACTOR, ARMED, threshold)
    before = rss_kb()
    deadlines = await store.command(spread, ACTOR, ARMED, time.time() + LEAD_SECONDS, WINDOW_SECONDS, threshold)
    lateness: list[float] = []
    done = asyncio.Event()

    def heard(signal: Signal) -> None:
        if signal.type == "status_timeout" and signal.task_id in deadlines:
            lateness.append(time.time() - deadlines[signal.task_id])
            if len(lateness) >= ARMED:
                done.set()

    engine = ConditionsEngine(store, claim_fresh_seconds=600)
    engine.add_signal_listener(heard)
    try:
        rebuild = time.perf_counter()
        await engine.start()
        rebuild = time.perf_counter() - rebuild
        armed = engine.armed
        after = rss_kb()
        await asyncio.wait_for(done.wait(), LEAD_SECONDS + WINDOW_SECONDS + 30)
    finally:
        await engine.stop()
        store.close()
    return {
        "armed": armed, "p50": pct(lateness, 50) * 1e3, "p99": pct(lateness, 99) * 1e3, "max": max(lateness) * 1e3,
        "min": min(lateness) * 1e3, "rss": (after - before) / 1024, "rebuild": rebuild,
    }


# -- 3. write → card_unblocked ---------------------------------------------------------------


async def unblock_latency(folder: Path) -> list[float]:
    app = create_app(BoardSettings(data_dir=folder / "http", port=0))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/api/v1"
    token = (folder / "http" / "token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}", "X-Taskloom-Actor": "bench", "X-Taskloom-Actor-Kind": "human"}
    samples: list[float] = []
    try:
        async with aiohttp.ClientSession(headers=headers) as session:
            async def post(path: str, body: dict[str, Any]) -> Any:
                async with session.post(f"{url}{path}", data=orjson.dumps(body),
                                        headers={"Content-Type": "application/json"}) as reply:
                    assert reply.status in (200, 201), await reply.text()
                    return await reply.json()

            await post("/projects", {"id": "demo"})
            blocker = await post("/tasks", {"project": "demo", "title": "blocker"})
            blocked = await post("/tasks", {"project": "demo", "title": "blocked"})
            await post(f"/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
            async with session.get(f"{url}/events?signals=1") as stream:
                buffer = b""

                async def next_signal(kind: str) -> None:
                    nonlocal buffer
                    while True:
                        while b"\n\n" in buffer:
                            block, buffer = buffer.split(b"\n\n", 1)
                            if block.startswith(b"event: signal") and f'"type":"{kind}"'.encode() in block:
                                return
                        buffer += await stream.content.readany()

                for _ in range(UNBLOCK_TRIALS):
                    started = time.perf_counter()
                    await post(f"/tasks/{blocker['id']}/move", {"to": "canceled"})
                    await next_signal("card_unblocked")
                    samples.append(time.perf_counter() - started)
                    await post(f"/tasks/{blocker['id']}/reopen", {"reason": "bench: block it again"})
                    await next_signal("card_blocked")
    finally:
        await runner.cleanup()
    return samples


# -- 4. ready at 50,000 tasks -----------------------------------------------------------------


def many_tasks(tx: Tx, start: int, count: int) -> None:
    if start == 0:
        projects.create_project(tx, id="big")
    priorities = ("low", "medium", "high", "urgent")
    previous: str | None = None
    for n in range(start, start + count):
        task = tasks.create_task(tx, project="big", title=f"card {n}", priority=priorities[n % 4])[0]
        if n % 4 == 1 and previous is not None:
            relations.add_relation(tx, previous, type="blocks", target=task["id"])
        if n % 10 == 3:
            tasks.move_task(tx, task["id"], to="backlog")
        previous = task["id"]


def ready_latency(folder: Path) -> tuple[list[float], list[float], int]:
    store = SqliteStore(folder / "ready.sqlite")
    store.open()
    try:
        for start in range(0, READY_TASKS, 5000):
            store.run_command(many_tasks, ACTOR, start, 5000)
        timings: dict[str, list[float]] = {"board": [], "project": []}
        count = 0
        for name, query in (("board", {}), ("project", {"project": "big"})):
            for _ in range(READY_QUERIES):
                now = utc_now()
                started = time.perf_counter()
                answer = store.run_query(list_tasks, ready=True, now=now, limit=100, **query)
                timings[name].append(time.perf_counter() - started)
                count = len(answer["items"])
        return timings["board"], timings["project"], count
    finally:
        store.close()


def table(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def main() -> None:
    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="taskloom-bench-conditions-") as tmp:
            folder = Path(tmp)
            cpu = await cpu_per_mutation(folder)
            timer = await timer_precision(folder)
            unblock = await unblock_latency(folder)
        rows = [(f"CPU per move, {mode} (median of {len(values)} blocks of {BLOCK})",
                 f"{statistics.median(values):.0f} µs")
                for mode, values in cpu.items()]
        rows += [(f"  configured ÷ {base} − 1, median of per-turn ratios", f"{paired(cpu, 'configured', base) * 100:+.1f} %")
                 for base in ("engine, no settings", "no engine")]
        rows += [("  engine, no settings ÷ no engine − 1", f"{paired(cpu, 'engine, no settings', 'no engine') * 100:+.1f} %")]
        rows += [
            (f"timer: start (rebuild, {ARMED:,} cards, {timer['armed']:.0f} armed)", f"{timer['rebuild']:.2f} s"),
            (f"timer: {ARMED:,} status_timeout over {WINDOW_SECONDS:.0f} s, fire − deadline p50 / p99 / max",
             f"{timer['p50']:.1f} / {timer['p99']:.1f} / {timer['max']:.1f} ms (min {timer['min']:.1f})"),
            ("timer: RSS for them (armed − before)", f"{timer['rss']:.1f} MB"),
            (f"write → card_unblocked on SSE p50 / p99 ({UNBLOCK_TRIALS} trials)",
             f"{pct(unblock, 50) * 1e3:.1f} / {pct(unblock, 99) * 1e3:.1f} ms"),
        ]
        table(rows)

    asyncio.run(run())
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-ready-") as tmp:
        board, project, count = ready_latency(Path(tmp))
    table([
        (f"ready at {READY_TASKS:,} tasks, board-wide, page of {count} p50 / p99",
         f"{pct(board, 50) * 1e3:.2f} / {pct(board, 99) * 1e3:.2f} ms"),
        ("ready at 50,000 tasks, ?project= p50 / p99", f"{pct(project, 50) * 1e3:.2f} / {pct(project, 99) * 1e3:.2f} ms"),
    ])
    print(f"\n{COMMAND}")


if __name__ == "__main__":
    main()
