"""Text search (``GET /tasks?q=``) on 50,000 tasks: the FTS5 trigram index against the portable
LIKE scan, and the same questions through HTTP.

A board file is filled with 50,000 tasks in one project (titles of 4–9 words, descriptions of
about 400 characters from a 2,000-word vocabulary, and every task's identifier). Each query shape
runs ``ROUNDS`` times through ``queries.tasks.list_tasks`` on a read connection (what the route
calls, minus HTTP), once with the index (migration 0007) and once with the portable path; then
through a real ``taskd`` over loopback with the page's parameters (``project``, ``archived``,
``limit=1000``). p50/p99 per shape and queries per second.

    .venv/bin/python -m bench search
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.support import isolated_env, start_board
from services.board.queries import tasks as task_queries
from services.board.sqlite_store import connect, migrate
from services.board.store import utc_now

COMMAND = ".venv/bin/python -m bench search"
TASKS = 50_000
ROUNDS = 200
HTTP_ROUNDS = 100
SEED = 14

#: (label, q): a rare word, a common one, a word part, two words, a short word (no trigram: the
#: LIKE path answers it), an identifier, and a word no task holds.
SHAPES = [
    ("rare word", "zebracorn"),
    ("common word", "release"),
    ("word part", "boar"),
    ("two words", "release notes"),
    ("two characters", "ci"),
    ("identifier", "BENCH-31337"),
    ("no match", "xylophonequartz"),
]


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(2000)}
    return sorted(words | {"release", "notes", "board", "onboarding", "ci"})


def fill(path: Path) -> None:
    """50,000 tasks written straight into a migrated file (the triggers keep the index)."""
    rng = random.Random(SEED)
    words = vocabulary(rng)
    migrate(path)
    conn = connect(path)
    now = utc_now()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO projects (id, name, prefix, next_number, created_at, updated_at) VALUES ('bench', 'Bench', 'BENCH', ?, ?, ?)",
        (TASKS + 1, now, now),
    )
    rows = []
    for number in range(1, TASKS + 1):
        title = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
        description = " ".join(rng.choice(words) for _ in range(60))
        if number % 997 == 0:
            description += " zebracorn"
        rows.append((str(uuid.UUID(int=rng.getrandbits(128))), number, f"BENCH-{number:04d}", title, description, now, now))
    conn.executemany(
        "INSERT INTO tasks (id, project_id, number, identifier, title, description, created_at, updated_at)"
        " VALUES (?, 'bench', ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    conn.close()


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timed(run: Callable[[], Any], rounds: int) -> tuple[list[float], Any]:
    run()  # warm the page cache and the statement cache
    samples = []
    result = None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        samples.append((time.perf_counter() - started) * 1000)
    return samples, result


def portable_list(conn: Any, q: str) -> dict[str, Any]:
    """``list_tasks`` with the portable LIKE path, as an engine without FTS5 would run it."""
    clause, params, _ = task_queries.portable_text_match(task_queries.search_words(q))
    rows = conn.execute(
        f"SELECT rowid AS _rowid, * FROM tasks WHERE project_id = ? AND {clause} ORDER BY rowid LIMIT 1001",
        ("bench", *params),
    ).fetchall()
    return {"items": rows[:1000]}


def row(label: str, samples: list[float], matches: int) -> str:
    total = sum(samples) / 1000
    return (
        f"| {label} | {matches} | {statistics.median(samples):.2f} | {percentile(samples, 0.99):.2f} |"
        f" {len(samples) / total:,.0f} |"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="taskloom-search-bench-") as tmp:
        folder = Path(tmp)
        path = folder / "data" / "board.sqlite"
        path.parent.mkdir(parents=True, mode=0o700)
        started = time.perf_counter()
        fill(path)
        print(f"{TASKS:,} tasks written and indexed in {time.perf_counter() - started:.1f} s;"
              f" file {path.stat().st_size / 1e6:.0f} MB")
        conn = connect(path)
        print(f"\nIn process, `list_tasks(project=…, q=…, limit=1000)`, {ROUNDS} runs each (ms):\n")
        print("| query | FTS5: matches | p50 | p99 | q/s | LIKE scan: p50 | p99 | q/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, q in SHAPES:
            def fts_query(q: str = q) -> Any:
                return task_queries.list_tasks(conn, project="bench", q=q, limit=1000)

            def scan_query(q: str = q) -> Any:
                return portable_list(conn, q)

            fts, answer = timed(fts_query, ROUNDS)
            scan, scanned = timed(scan_query, max(20, ROUNDS // 10))
            assert len(scanned["items"]) == len(answer["items"]), f"{label}: the two paths disagree"
            like = row("", scan, 0).split("|")[3:6]
            print(row(f"{label} (`{q}`)", fts, len(answer["items"])) + "|".join(like) + "|")
        conn.close()

        board = start_board(folder, env=isolated_env(folder))
        try:
            client = httpx.Client(base_url=board.url, headers={"Authorization": f"Bearer {board.token}"}, timeout=30)
            request = "GET /api/v1/tasks?project=bench&archived=true&limit=1000&q=…"
            print(f"\nThrough `taskd` on loopback, `{request}`, {HTTP_ROUNDS} runs each (ms):\n")
            print("| query | matches | p50 | p99 | q/s |")
            print("|---|---:|---:|---:|---:|")
            for label, q in SHAPES:
                def ask(q: str = q) -> Any:
                    reply = client.get("/api/v1/tasks", params={"project": "bench", "archived": "true", "limit": 1000, "q": q})
                    reply.raise_for_status()
                    return reply.json()

                samples, answer = timed(ask, HTTP_ROUNDS)
                print(row(f"{label} (`{q}`)", samples, len(answer["items"])))
        finally:
            board.stop()
    print(f"\n{COMMAND}")


if __name__ == "__main__":
    main()
